/* rgpu-server --config FILE (issue 20): a file of the command line's long
 * options, one per line, so a service has its settings in /etc and the
 * command line stays short:
 *
 *   # comment
 *   listen = quic://0.0.0.0:7000
 *   listen = tcp://127.0.0.1:7001
 *   cert = /etc/rgpu/cert.pem
 *   max-sessions = 8
 *   foreground                       (an option without a value)
 *
 * Every key is a long option's name (checked against the option table: an
 * unknown key, a value where none is taken or none where one is needed
 * fails with the file's name and line).  The file is read first and the
 * command line after it, so the command line wins; options that accumulate
 * (--listen) are taken from the command line alone when it gives any. */
#ifndef RGPU_SERVER_CONFIG_H
#define RGPU_SERVER_CONFIG_H

#include <getopt.h>
#include <stddef.h>

/* The argument vector to parse: argv[0], the file's options, then argv[1] on
 * without --config FILE (and without the file's `accumulating` options when
 * the command line has one).  Returns 0 with *out_argv and *out_argc set (kept
 * for the process's life), or -1 with a sentence in err.  Without --config
 * the result is argv itself. */
int rgpu_server_config_argv(int argc, char **argv, const struct option *longopts,
                            const char *const *accumulating, int *out_argc, char ***out_argv,
                            char *err, size_t errlen);

/* sd_notify(3)'s protocol without libsystemd: sends state ("READY=1",
 * "RELOADING=1", ...) to $NOTIFY_SOCKET when systemd started us with one.
 * Returns 1 if sent, 0 if there is no socket, -1 on an error. */
int rgpu_server_notify(const char *state);

#endif
