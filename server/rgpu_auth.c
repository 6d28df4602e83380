#include "rgpu_auth.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int rgpu_auth_load_token(const char *path, char *out, size_t cap, char *err, size_t errlen) {
  if (!path || !out || cap < 2) {
    snprintf(err, errlen, "token file: no path given");
    return -1;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
    return -1;
  }
  char line[RGPU_AUTH_TOKEN_MAX + 2];
  if (!fgets(line, sizeof line, f)) {
    fclose(f);
    snprintf(err, errlen, "token file %s: empty", path);
    return -1;
  }
  fclose(f);
  size_t n = strlen(line);
  int complete = n > 0 && line[n - 1] == '\n';
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                   line[n - 1] == '\t'))
    n--;
  line[n] = 0;
  if (!complete && n > RGPU_AUTH_TOKEN_MAX) {
    snprintf(err, errlen, "token file %s: first line longer than %d bytes", path,
             RGPU_AUTH_TOKEN_MAX);
    return -1;
  }
  if (n == 0) {
    snprintf(err, errlen, "token file %s: first line is empty", path);
    return -1;
  }
  if (n + 1 > cap) {
    snprintf(err, errlen, "token file %s: token too long", path);
    return -1;
  }
  memcpy(out, line, n + 1);
  return 0;
}

int rgpu_auth_token_equal(const char *expected, const void *given, size_t len) {
  size_t elen = strlen(expected);
  const unsigned char *g = given;
  /* Walk the client's bytes whatever happens and fold every difference, the
   * length mismatch included, into one accumulator: no early exit. */
  unsigned diff = (unsigned)(elen != len);
  for (size_t i = 0; i < len; i++) {
    unsigned char e = i < elen ? (unsigned char)expected[i] : 0;
    diff |= (unsigned)(e ^ g[i]);
  }
  /* Compiler barrier so the loop is not turned into an early-exit memcmp. */
  __asm__ __volatile__("" : "+r"(diff));
  return diff == 0;
}
