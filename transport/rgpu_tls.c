/* tls:// — placeholder until the GnuTLS implementation lands. */
#include "rgpu_transport_internal.h"

int rgpu_tls_connect(const rgpu_uri *u, const rgpu_transport_opts *o, rgpu_conn **out,
                     char *err, size_t errlen) {
  return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "tls:// is not implemented yet in this build");
}
int rgpu_tls_listen(rgpu_listener *l, const rgpu_transport_opts *o, char *err, size_t errlen) {
  return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "tls:// is not implemented yet in this build");
}
int rgpu_tls_generate_self_signed(const char *dir, const char *hostnames, char *err,
                                  size_t errlen) {
  return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "certificate generation is not implemented yet");
}
