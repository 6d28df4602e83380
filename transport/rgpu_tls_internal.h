/* GnuTLS pieces shared by tls:// and quic:// (both use TLS 1.3 certificates
 * the same way). */
#ifndef RGPU_TLS_INTERNAL_H
#define RGPU_TLS_INTERNAL_H

#include "rgpu_transport_internal.h"

#include <gnutls/gnutls.h>
#include <stdatomic.h>

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

/* A TLS/QUIC listener's server credentials, replaceable while it runs
 * (rgpu_listener_reload, SIGHUP in rgpu-server).  The relay thread takes
 * `current` for each new handshake; a reload swaps in a new set.  GnuTLS
 * sessions keep a pointer to the set they started with, so a replaced set
 * is kept (retired) until the listener closes: reloads are rare, and no
 * connection ever sees its credentials freed under it. */
typedef struct {
  _Atomic(gnutls_certificate_credentials_t) current;
  gnutls_certificate_credentials_t *retired;
  size_t nretired, retired_cap;
} rgpu_tls_server_cred;

/* Loads the first set (rgpu_tls_server_creds).  0, or RGPU_T_E* with err. */
int rgpu_tls_server_cred_init(rgpu_tls_server_cred *c, const rgpu_transport_opts *o, char *err,
                              size_t errlen);
/* The set for a handshake starting now (any thread). */
gnutls_certificate_credentials_t rgpu_tls_server_cred_get(rgpu_tls_server_cred *c);
/* Re-reads the files named in o into a new set and makes it current; on any
 * failure the current set stays and err says why.  One thread at a time. */
int rgpu_tls_server_cred_reload(rgpu_tls_server_cred *c, const rgpu_transport_opts *o, char *err,
                                size_t errlen);
/* Frees every set, once no session can use them (relay thread joined). */
void rgpu_tls_server_cred_free(rgpu_tls_server_cred *c);

#endif
