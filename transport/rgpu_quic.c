/* quic:// — placeholder until the ngtcp2 implementation lands. */
#include "rgpu_transport_internal.h"

int rgpu_quic_connect(const rgpu_uri *u, const rgpu_transport_opts *o, rgpu_conn **out,
                      char *err, size_t errlen) {
  return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "quic:// is not implemented yet in this build");
}
int rgpu_quic_listen(rgpu_listener *l, const rgpu_transport_opts *o, char *err, size_t errlen) {
  return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "quic:// is not implemented yet in this build");
}
