/* rgpu_netem_topo: the emulator's private topology.
 *
 * Each side of the link is a fresh network namespace holding one TUN device
 * with a point-to-point /32 address (its peer route is the route to the other
 * side) and loopback up.  Everything is configured with rtnetlink and
 * syscalls, so no `ip` command is needed.  Nothing is named in the file
 * system: a namespace lives as long as the emulator holds its fd or a process
 * runs inside it, and a TUN device lives as long as its fd, so a killed
 * emulator leaves nothing behind. */
#ifndef RGPU_NETEM_TOPO_H
#define RGPU_NETEM_TOPO_H

#include <stddef.h>

typedef struct {
  int tun_fd;      /* non-blocking; read/write whole IP packets */
  int ns_fd;       /* the namespace, for setns() in the side's command */
  int ifindex;
  int nl_fd;       /* rtnetlink socket created inside the namespace */
  int proc_net_fd[4]; /* /proc/net/{tcp,tcp6,udp,udp6} of the namespace, -1 if absent */
} rgpu_netem_side;

/* Creates a namespace with TUN device ifname, address local, peer address
 * peer, MTU mtu, and returns to the caller's namespace.  Must be called while
 * the process has a single thread.  Returns 0, or -1 with a message in err. */
int rgpu_netem_side_create(rgpu_netem_side *s, const char *ifname,
                           const char *local, const char *peer, unsigned mtu,
                           char *err, size_t errlen);
void rgpu_netem_side_close(rgpu_netem_side *s);

/* An address change of the client (--client-readdress): the server side gets
 * a route to new_addr, the client's TUN device gets new_addr (peer peer) and
 * loses old_addr, so the kernel promotes new_addr and the route to the peer
 * takes it as source.  Sockets bound or connected from old_addr can no longer
 * send (ENETUNREACH) and receive nothing.  Returns 0, or -1 with a message. */
int rgpu_netem_readdress(rgpu_netem_side *client, rgpu_netem_side *server,
                         const char *old_addr, const char *new_addr,
                         const char *peer, char *err, size_t errlen);

/* 1 when the side's namespace has a TCP socket listening on port (tcp != 0)
 * or a UDP socket bound to port (tcp == 0); 0 when not; -1 when unknown. */
int rgpu_netem_port_bound(const rgpu_netem_side *s, int tcp, unsigned port);

#endif
