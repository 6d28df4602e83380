/* URI parsing for the transport layer.  Strict on purpose: a typo in
 * RGPU_SERVER should fail at start-up with a sentence saying what is wrong,
 * not surface later as a confusing connect error. */
#include "rgpu_transport_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

const char *rgpu_uri_scheme_name(rgpu_uri_scheme s) {
  switch (s) {
  case RGPU_URI_TCP: return "tcp";
  case RGPU_URI_UNIX: return "unix";
  case RGPU_URI_TLS: return "tls";
  case RGPU_URI_QUIC: return "quic";
  }
  return "unknown";
}

static int parse_port(const char *text, const char *p, uint16_t *port, char *err,
                      size_t errlen) {
  if (!*p)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "URI '%s': missing port after ':'", text);
  unsigned long v = 0;
  for (const char *q = p; *q; q++) {
    if (!isdigit((unsigned char)*q))
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "URI '%s': port '%s' is not a number", text, p);
    v = v * 10 + (unsigned long)(*q - '0');
    if (v > 65535)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "URI '%s': port %s out of range (0-65535)", text, p);
  }
  *port = (uint16_t)v;
  return 0;
}

static int parse_hostport(const char *text, const char *rest, rgpu_uri *out,
                          char *err, size_t errlen) {
  const char *port_part;
  size_t hlen;
  if (*rest == '[') {
    const char *close = strchr(rest, ']');
    if (!close)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "URI '%s': missing ']' after IPv6 address", text);
    hlen = (size_t)(close - rest - 1);
    if (hlen == 0)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "URI '%s': empty IPv6 address", text);
    if (hlen >= sizeof out->host)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "URI '%s': host too long", text);
    memcpy(out->host, rest + 1, hlen);
    out->host[hlen] = 0;
    if (close[1] != ':')
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "URI '%s': missing port (expected [ADDR]:PORT)", text);
    port_part = close + 2;
  } else {
    const char *colon = strrchr(rest, ':');
    if (!colon)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "URI '%s': missing port (expected %s://HOST:PORT)", text,
                         rgpu_uri_scheme_name(out->scheme));
    if (memchr(rest, ':', (size_t)(colon - rest)))
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "URI '%s': IPv6 addresses must be written in brackets, e.g. [::1]:7000", text);
    hlen = (size_t)(colon - rest);
    if (hlen == 0)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "URI '%s': missing host", text);
    if (hlen >= sizeof out->host)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "URI '%s': host too long", text);
    memcpy(out->host, rest, hlen);
    out->host[hlen] = 0;
    port_part = colon + 1;
  }
  for (const char *q = out->host; *q; q++) {
    unsigned char ch = (unsigned char)*q;
    if (!(isalnum(ch) || ch == '.' || ch == '-' || ch == '_' || ch == ':' || ch == '%'))
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "URI '%s': invalid character '%c' in host", text, ch);
  }
  return parse_port(text, port_part, &out->port, err, errlen);
}

int rgpu_uri_parse(const char *text, rgpu_uri *out, char *err, size_t errlen) {
  if (!text || !out) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "no URI given");
  memset(out, 0, sizeof *out);
  const char *sep = strstr(text, "://");
  if (!sep)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "URI '%s': expected SCHEME://ADDRESS (tcp, tls, quic or unix)", text);
  size_t slen = (size_t)(sep - text);
  static const struct { const char *name; rgpu_uri_scheme s; } schemes[] = {
      {"tcp", RGPU_URI_TCP}, {"unix", RGPU_URI_UNIX}, {"tls", RGPU_URI_TLS}, {"quic", RGPU_URI_QUIC}};
  int found = 0;
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
    if (strlen(schemes[i].name) == slen && !strncmp(text, schemes[i].name, slen)) {
      out->scheme = schemes[i].s;
      found = 1;
    }
  }
  if (!found)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "URI '%s': unknown scheme '%.*s' (use tcp, tls, quic or unix)", text,
                       (int)(slen > 32 ? 32 : slen), text);
  const char *rest = sep + 3;
  if (out->scheme == RGPU_URI_UNIX) {
    if (rest[0] != '/')
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "URI '%s': unix socket path must be absolute (unix:///path/to/socket)", text);
    size_t plen = strlen(rest);
    if (plen >= sizeof out->path)
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                         "unix socket path in URI is %zu bytes, the limit is %zu", plen,
                         sizeof out->path - 1);
    if (rest[plen - 1] == '/')
      return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "URI '%s': unix socket path names a directory", text);
    memcpy(out->path, rest, plen + 1);
    return 0;
  }
  if (strchr(rest, '/') || strchr(rest, '?'))
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "URI '%s': unexpected path or query after HOST:PORT", text);
  return parse_hostport(text, rest, out, err, errlen);
}

int rgpu_uri_is_clear_text_network(const char *uri) {
  rgpu_uri u;
  char err[256];
  if (!uri || rgpu_uri_parse(uri, &u, err, sizeof err) || u.scheme != RGPU_URI_TCP) return 0;
  /* The loopback never leaves the machine: nobody on a network can read it. */
  if (strcmp(u.host, "localhost") == 0 || strcmp(u.host, "::1") == 0 ||
      strncmp(u.host, "127.", 4) == 0 || strcmp(u.host, "::ffff:127.0.0.1") == 0)
    return 0;
  return 1;
}
