/* rgpu_auth: the shared-secret token that guards rgpu-server.
 *
 * The token is the first line of a file (trailing CR/LF/spaces trimmed).
 * Comparison is constant-time in the token's length so that a client cannot
 * learn it byte by byte from reply timing. */
#ifndef RGPU_AUTH_H
#define RGPU_AUTH_H

#include <stddef.h>

#define RGPU_AUTH_TOKEN_MAX 4096

/* Reads the token from path into out (size cap, NUL-terminated).  Returns 0,
 * or -1 with a sentence in err (missing/unreadable file, empty token, token
 * too long). */
int rgpu_auth_load_token(const char *path, char *out, size_t cap, char *err, size_t errlen);

/* 1 if the client's token (len bytes, not NUL-terminated) equals expected.
 * Runs in time independent of where the first difference is. */
int rgpu_auth_token_equal(const char *expected, const void *given, size_t len);

#endif
