/* rgpu-server --config FILE and systemd readiness: see rgpu_server_config.h. */
#define _GNU_SOURCE
#include "rgpu_server_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const struct option *find_opt(const struct option *o, const char *name) {
  for (; o->name; o++)
    if (!strcmp(o->name, name)) return o;
  return NULL;
}

static int is_accumulating(const char *const *acc, const char *name) {
  for (; acc && *acc; acc++)
    if (!strcmp(*acc, name)) return 1;
  return 0;
}

/* Whether the command line names --NAME (as --NAME VALUE or --NAME=VALUE). */
static int cli_has(int argc, char **argv, const char *name) {
  size_t n = strlen(name);
  for (int i = 1; i < argc; i++)
    if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, name, n) &&
        (argv[i][2 + n] == 0 || argv[i][2 + n] == '='))
      return 1;
  return 0;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
  return s;
}

int rgpu_server_config_argv(int argc, char **argv, const struct option *longopts,
                            const char *const *accumulating, int *out_argc, char ***out_argv,
                            char *err, size_t errlen) {
  const char *path = NULL;
  int at = -1, width = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) {
      path = argv[i + 1], at = i, width = 2;
    } else if (!strncmp(argv[i], "--config=", 9)) {
      path = argv[i] + 9, at = i, width = 1;
    } else if (!strcmp(argv[i], "--config")) {
      snprintf(err, errlen, "--config needs a FILE");
      return -1;
    }
  }
  if (!path) {
    *out_argc = argc;
    *out_argv = argv;
    return 0;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "--config %s: %s", path, strerror(errno));
    return -1;
  }
  /* At most two words per line, plus the command line. */
  size_t cap = (size_t)argc + 1, n = 0;
  char **v = malloc(cap * sizeof *v);
  if (!v) {
    fclose(f);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  v[n++] = argv[0];
  char line[4096];
  int lineno = 0, rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (!strchr(line, '\n') && !feof(f)) {
      snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 1);
      rc = -1;
      break;
    }
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *s = trim(line);
    if (!*s) continue;
    char *eq = strchr(s, '='), *key = s, *val = NULL;
    if (eq) {
      *eq = 0;
      key = trim(s);
      val = trim(eq + 1);
    } else {
      /* "key value" also reads as key = value. */
      char *sp = strpbrk(s, " \t");
      if (sp) {
        *sp = 0;
        val = trim(sp + 1);
      }
    }
    const struct option *o = find_opt(longopts, key);
    if (!o || !strcmp(key, "config")) {
      snprintf(err, errlen, "%s:%d: unknown setting '%s' (the settings are rgpu-server's long "
               "options, see rgpu-server --help)", path, lineno, key);
      rc = -1;
      break;
    }
    if (o->has_arg == required_argument && (!val || !*val)) {
      snprintf(err, errlen, "%s:%d: '%s' needs a value", path, lineno, key);
      rc = -1;
      break;
    }
    if (o->has_arg == no_argument && val && *val) {
      snprintf(err, errlen, "%s:%d: '%s' takes no value", path, lineno, key);
      rc = -1;
      break;
    }
    if (is_accumulating(accumulating, key) && cli_has(argc, argv, key)) continue;
    if (n + 2 >= cap) {
      char **nv = realloc(v, (cap *= 2) * sizeof *v);
      if (!nv) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
        break;
      }
      v = nv;
    }
    size_t kl = strlen(key);
    char *opt = malloc(kl + 3);
    char *copy = val ? strdup(val) : NULL;
    if (!opt || (val && !copy)) {
      free(opt);
      free(copy);
      snprintf(err, errlen, "out of memory");
      rc = -1;
      break;
    }
    memcpy(opt, "--", 2);
    memcpy(opt + 2, key, kl + 1);
    v[n++] = opt;
    if (copy) v[n++] = copy;
  }
  fclose(f);
  if (rc) {
    for (size_t i = 1; i < n; i++) free(v[i]); /* the file's strings: all ours */
    free(v);
    return -1;
  }
  if (n + (size_t)argc + 1 > cap) {
    char **nv = realloc(v, (n + (size_t)argc + 1) * sizeof *v);
    if (!nv) {
      free(v);
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    v = nv;
  }
  for (int i = 1; i < argc; i++)
    if (i < at || i >= at + width) v[n++] = argv[i];
  v[n] = NULL;
  *out_argc = (int)n;
  *out_argv = v;
  return 0;
}

int rgpu_server_notify(const char *state) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (!path || !*path) return 0;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t len = strlen(path);
  if (len >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@')) return -1;
  memcpy(sa.sun_path, path, len);
  if (path[0] == '@') sa.sun_path[0] = 0; /* an abstract socket */
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
  close(fd);
  return w < 0 ? -1 : 1;
}
