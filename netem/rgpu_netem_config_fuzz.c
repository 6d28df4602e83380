/* libFuzzer target for the command-line parser: any words must give either a
 * parse or an error message, never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_netem_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0;
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  /* Words are separated by newlines (and NULs end the input early). */
  char *argv[130];
  int argc = 0;
  argv[argc++] = "rgpu-netem";
  for (char *w = buf; argc < 129;) {
    argv[argc++] = w;
    char *nl = strchr(w, '\n');
    if (!nl) break;
    *nl = 0;
    w = nl + 1;
  }
  argv[argc] = NULL;
  FILE *out = fopen("/dev/null", "w");
  rgpu_netem_options o;
  char err[512];
  if (out) {
    int rc = rgpu_netem_parse_args(argc, argv, &o, out, err, sizeof err);
    if (rc == 0) {
      char d[320];
      rgpu_netem_describe_dir(&o.dir[0], d, sizeof d);
      if (!o.client_argv || !o.client_argv[0]) abort();
    } else if (rc < 0 && !err[0]) {
      abort(); /* every error must say what is wrong */
    }
    fclose(out);
  }
  free(buf);
  return 0;
}
