/* rgpu_netem_config: command line, named profiles and their parameters.
 *
 * Kept apart from the emulator itself so that the parser and the profile
 * table can be tested without root. */
#ifndef RGPU_NETEM_CONFIG_H
#define RGPU_NETEM_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "rgpu_netem_pipe.h"

/* Addresses inside the two namespaces (documented in docs/netem.md). */
#define RGPU_NETEM_CLIENT_ADDR "10.77.0.1"
#define RGPU_NETEM_SERVER_ADDR "10.77.0.2"
/* The client's address after --client-readdress. */
#define RGPU_NETEM_CLIENT_ADDR2 "10.77.0.3"

enum { RGPU_NETEM_C2S = 0, RGPU_NETEM_S2C = 1 };

typedef enum {
  RGPU_NETEM_READY_NONE = 0,
  RGPU_NETEM_READY_DELAY, /* wait a fixed time */
  RGPU_NETEM_READY_TCP,   /* wait until a TCP socket listens on the port */
  RGPU_NETEM_READY_UDP    /* wait until a UDP socket is bound to the port */
} rgpu_netem_ready_kind;

/* One named profile; one-way values are half the documented RTT. */
typedef struct {
  const char *name;
  const char *summary;
  rgpu_netem_dir_config dir; /* the same in both directions */
} rgpu_netem_profile;

typedef struct {
  const char *profile;                /* NULL: none */
  rgpu_netem_dir_config dir[2];       /* [RGPU_NETEM_C2S], [RGPU_NETEM_S2C] */
  rgpu_netem_schedule outages;
  uint64_t readdress_ns;              /* 0: the client keeps its address */
  uint64_t seed;
  unsigned mtu;
  const char *stats_path;             /* NULL: no stats file */
  rgpu_netem_ready_kind ready;
  unsigned ready_port;
  uint64_t ready_delay_ns;
  uint64_t ready_timeout_ns;
  uint64_t grace_ns;                  /* SIGTERM -> SIGKILL for the server */
  int verbose;                        /* 0 quiet, 1 normal, 2 debug */
  char **server_argv;                 /* NULL-terminated, points into argv; may be NULL */
  char **client_argv;                 /* NULL-terminated, points into argv */
} rgpu_netem_options;

/* The built-in profile table and its length. */
const rgpu_netem_profile *rgpu_netem_profiles(size_t *count);
const rgpu_netem_profile *rgpu_netem_profile_find(const char *name);

/* Fills o from argv.  argv is modified (the ":::" separator becomes NULL) and
 * o keeps pointers into it.  Returns 0 on success, 1 when only help or the
 * profile list was requested (printed to out), -1 with a message in err. */
int rgpu_netem_parse_args(int argc, char **argv, rgpu_netem_options *o,
                          FILE *out, char *err, size_t errlen);

void rgpu_netem_print_usage(FILE *out);
void rgpu_netem_print_profiles(FILE *out);

/* Writes a one-line human summary of one direction into buf. */
void rgpu_netem_describe_dir(const rgpu_netem_dir_config *d, char *buf,
                             size_t len);

#endif
