/* GnuTLS pieces shared by tls:// and quic:// (both use TLS 1.3 certificates
 * the same way). */
#ifndef RGPU_TLS_INTERNAL_H
#define RGPU_TLS_INTERNAL_H

#include "rgpu_transport_internal.h"

#include <gnutls/gnutls.h>

#define RGPU_ALPN "rgpu/1"

/* Client credentials: trust = opts->ca_file (a CA bundle or the pinned
 * server certificate), else the system store; client certificate for mutual
 * TLS when cert_file/key_file are set. */
int rgpu_tls_client_creds(const rgpu_transport_opts *o, gnutls_certificate_credentials_t *out,
                          char *err, size_t errlen);
/* Server credentials: cert_file/key_file are required; client_ca_file, when
 * set, becomes the trust list for client certificates. */
int rgpu_tls_server_creds(const rgpu_transport_opts *o, gnutls_certificate_credentials_t *out,
                          char *err, size_t errlen);
/* A sentence for a failed handshake, naming the verification failure when
 * that is what it was.  Returns the RGPU_T_E* code to report. */
int rgpu_tls_describe_failure(gnutls_session_t s, int gerr, const char *what, char *err,
                              size_t errlen);

#endif
