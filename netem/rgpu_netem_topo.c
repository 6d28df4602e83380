#define _GNU_SOURCE
#include "rgpu_netem_topo.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rgpu_array.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- rtnetlink --------------------------------------------------------- */

typedef struct {
  struct nlmsghdr h;
  char body[512];
} nl_req;

static void nl_attr(nl_req *r, unsigned short type, const void *data,
                    unsigned short len) {
  struct rtattr *a = (struct rtattr *)((char *)&r->h + NLMSG_ALIGN(r->h.nlmsg_len));
  a->rta_type = type;
  a->rta_len = (unsigned short)RTA_LENGTH(len);
  memcpy(RTA_DATA(a), data, len);
  r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + RTA_ALIGN(a->rta_len);
}

/* Sends one request and waits for its acknowledgement; returns 0 or -errno. */
static int nl_talk(int fd, nl_req *r) {
  static uint32_t seq;
  r->h.nlmsg_seq = ++seq;
  r->h.nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(fd, r, r->h.nlmsg_len, 0, (struct sockaddr *)&kernel,
             sizeof kernel) < 0)
    return -errno;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq != r->h.nlmsg_seq) continue;
      if (h->nlmsg_type == NLMSG_ERROR) {
        struct nlmsgerr *e = NLMSG_DATA(h);
        return e->error; /* 0 is the acknowledgement */
      }
    }
  }
}

static int nl_link_up(int fd, int ifindex, unsigned mtu, unsigned txqlen) {
  nl_req r;
  memset(&r, 0, sizeof r);
  r.h.nlmsg_type = RTM_NEWLINK;
  r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
  struct ifinfomsg *ifi = NLMSG_DATA(&r.h);
  ifi->ifi_family = AF_UNSPEC;
  ifi->ifi_index = ifindex;
  ifi->ifi_flags = IFF_UP;
  ifi->ifi_change = IFF_UP;
  if (mtu) {
    uint32_t v = mtu;
    nl_attr(&r, IFLA_MTU, &v, sizeof v);
  }
  if (txqlen) {
    uint32_t v = txqlen;
    nl_attr(&r, IFLA_TXQLEN, &v, sizeof v);
  }
  return nl_talk(fd, &r);
}

static int nl_addr_p2p(int fd, int ifindex, struct in_addr local,
                       struct in_addr peer) {
  nl_req r;
  memset(&r, 0, sizeof r);
  r.h.nlmsg_type = RTM_NEWADDR;
  r.h.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifaddrmsg));
  struct ifaddrmsg *ifa = NLMSG_DATA(&r.h);
  ifa->ifa_family = AF_INET;
  ifa->ifa_prefixlen = 32;
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  ifa->ifa_index = (unsigned)ifindex;
  nl_attr(&r, IFA_LOCAL, &local, sizeof local);
  nl_attr(&r, IFA_ADDRESS, &peer, sizeof peer);
  return nl_talk(fd, &r);
}

static int nl_addr_del(int fd, int ifindex, struct in_addr local,
                       struct in_addr peer) {
  nl_req r;
  memset(&r, 0, sizeof r);
  r.h.nlmsg_type = RTM_DELADDR;
  r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifaddrmsg));
  struct ifaddrmsg *ifa = NLMSG_DATA(&r.h);
  ifa->ifa_family = AF_INET;
  ifa->ifa_prefixlen = 32;
  ifa->ifa_index = (unsigned)ifindex;
  nl_attr(&r, IFA_LOCAL, &local, sizeof local);
  nl_attr(&r, IFA_ADDRESS, &peer, sizeof peer);
  return nl_talk(fd, &r);
}

/* A /32 route to dst through the device (no gateway: it is point-to-point). */
static int nl_route_dev(int fd, int ifindex, struct in_addr dst) {
  nl_req r;
  memset(&r, 0, sizeof r);
  r.h.nlmsg_type = RTM_NEWROUTE;
  r.h.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  r.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
  struct rtmsg *rt = NLMSG_DATA(&r.h);
  rt->rtm_family = AF_INET;
  rt->rtm_dst_len = 32;
  rt->rtm_table = RT_TABLE_MAIN;
  rt->rtm_protocol = RTPROT_BOOT;
  rt->rtm_scope = RT_SCOPE_LINK;
  rt->rtm_type = RTN_UNICAST;
  uint32_t oif = (uint32_t)ifindex;
  nl_attr(&r, RTA_DST, &dst, sizeof dst);
  nl_attr(&r, RTA_OIF, &oif, sizeof oif);
  return nl_talk(fd, &r);
}

/* ---- namespace setup --------------------------------------------------- */

static void write_sysctl(const char *path, const char *value) {
  /* Best effort: a kernel without IPv6 has no such file, and the link works
   * without the larger TCP buffers. */
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t w = write(fd, value, strlen(value));
  (void)w;
  close(fd);
}

static int configure_here(rgpu_netem_side *s, const char *ifname,
                          struct in_addr local, struct in_addr peer,
                          unsigned mtu, char *err, size_t errlen) {
  /* IPv6 would make the kernel send its own solicitations over the link,
   * which would draw from the loss RNG and disturb the seeded sequence. */
  write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
  write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
  /* High bandwidth-delay products (satellite-like) need more than the
   * default 4 MB socket buffer maximum. */
  write_sysctl("/proc/sys/net/ipv4/tcp_wmem", "4096 16384 33554432");
  write_sysctl("/proc/sys/net/ipv4/tcp_rmem", "4096 131072 33554432");
  /* --client-readdress adds the new address beside the old one (the kernel
   * makes it secondary: same peer) and then deletes the old one; without
   * promotion the kernel would delete the secondary with it. */
  write_sysctl("/proc/sys/net/ipv4/conf/all/promote_secondaries", "1");

  int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (nl < 0) return fail(err, errlen, "netlink socket: %s", strerror(errno));
  int rc;
  int lo = (int)if_nametoindex("lo");
  if (lo <= 0 || (rc = nl_link_up(nl, lo, 0, 0)) < 0) {
    close(nl);
    return fail(err, errlen, "bringing loopback up: %s",
                lo <= 0 ? "no lo device" : strerror(-rc));
  }

  s->tun_fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (s->tun_fd < 0) {
    int e = errno;
    close(nl);
    return fail(err, errlen, "open /dev/net/tun: %s%s", strerror(e),
                e == ENOENT ? " (load the tun driver or create the device node "
                              "with mknod /dev/net/tun c 10 200)" : "");
  }
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
  if (ioctl(s->tun_fd, TUNSETIFF, &ifr) < 0) {
    int e = errno;
    close(nl);
    return fail(err, errlen, "TUNSETIFF %s: %s", ifname, strerror(e));
  }
  s->ifindex = (int)if_nametoindex(ifr.ifr_name);
  if (s->ifindex <= 0) {
    close(nl);
    return fail(err, errlen, "TUN device %s vanished", ifr.ifr_name);
  }
  if ((rc = nl_addr_p2p(nl, s->ifindex, local, peer)) < 0 ||
      (rc = nl_link_up(nl, s->ifindex, mtu, 10000)) < 0) {
    close(nl);
    return fail(err, errlen, "configuring %s: %s", ifr.ifr_name, strerror(-rc));
  }
  /* Kept: a netlink socket acts on the namespace it was created in, so the
   * emulator can change addresses later without entering the namespace. */
  s->nl_fd = nl;

  s->ns_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (s->ns_fd < 0)
    return fail(err, errlen, "open /proc/self/ns/net: %s", strerror(errno));
  /* These files show the namespace of the opener for as long as they stay
   * open, so the emulator can watch the server's ports from outside. */
  static const char *const names[4] = {"/proc/self/net/tcp", "/proc/self/net/tcp6",
                                       "/proc/self/net/udp", "/proc/self/net/udp6"};
  for (int i = 0; i < 4; i++)
    s->proc_net_fd[i] = open(names[i], O_RDONLY | O_CLOEXEC);
  return 0;
}

int rgpu_netem_side_create(rgpu_netem_side *s, const char *ifname,
                           const char *local, const char *peer, unsigned mtu,
                           char *err, size_t errlen) {
  s->tun_fd = s->ns_fd = s->nl_fd = -1;
  s->ifindex = 0;
  for (int i = 0; i < 4; i++) s->proc_net_fd[i] = -1;
  struct in_addr la, pa;
  if (inet_pton(AF_INET, local, &la) != 1 || inet_pton(AF_INET, peer, &pa) != 1)
    return fail(err, errlen, "bad IPv4 address %s or %s", local, peer);

  int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0)
    return fail(err, errlen, "open /proc/self/ns/net: %s", strerror(errno));
  if (unshare(CLONE_NEWNET) < 0) {
    int e = errno;
    close(home);
    return fail(err, errlen,
                "unshare(CLONE_NEWNET): %s (rgpu-netem needs root or "
                "CAP_SYS_ADMIN + CAP_NET_ADMIN)", strerror(e));
  }
  int rc = configure_here(s, ifname, la, pa, mtu, err, errlen);
  if (setns(home, CLONE_NEWNET) < 0) {
    /* Staying in the new namespace would put the next side inside this one;
     * there is no safe way on. */
    if (rc == 0) rc = fail(err, errlen, "setns back: %s", strerror(errno));
  }
  close(home);
  if (rc) rgpu_netem_side_close(s);
  return rc;
}

void rgpu_netem_side_close(rgpu_netem_side *s) {
  if (s->tun_fd >= 0) close(s->tun_fd);
  if (s->ns_fd >= 0) close(s->ns_fd);
  if (s->nl_fd >= 0) close(s->nl_fd);
  s->nl_fd = -1;
  for (int i = 0; i < 4; i++)
    if (s->proc_net_fd[i] >= 0) close(s->proc_net_fd[i]);
  s->tun_fd = s->ns_fd = -1;
  for (int i = 0; i < 4; i++) s->proc_net_fd[i] = -1;
}

int rgpu_netem_readdress(rgpu_netem_side *client, rgpu_netem_side *server,
                         const char *old_addr, const char *new_addr,
                         const char *peer, char *err, size_t errlen) {
  struct in_addr oa, na, pa;
  if (inet_pton(AF_INET, old_addr, &oa) != 1 || inet_pton(AF_INET, new_addr, &na) != 1 ||
      inet_pton(AF_INET, peer, &pa) != 1)
    return fail(err, errlen, "bad IPv4 address %s, %s or %s", old_addr, new_addr, peer);
  int rc;
  /* The server's way back first, so that the first packet from the new
   * address can be answered. */
  if ((rc = nl_route_dev(server->nl_fd, server->ifindex, na)) < 0 && rc != -EEXIST)
    return fail(err, errlen, "server route to %s: %s", new_addr, strerror(-rc));
  if ((rc = nl_addr_p2p(client->nl_fd, client->ifindex, na, pa)) < 0)
    return fail(err, errlen, "adding client address %s: %s", new_addr, strerror(-rc));
  if ((rc = nl_addr_del(client->nl_fd, client->ifindex, oa, pa)) < 0)
    return fail(err, errlen, "removing client address %s: %s", old_addr, strerror(-rc));
  return 0;
}

/* ---- readiness --------------------------------------------------------- */

static int scan_proc_net(int fd, int tcp, unsigned port) {
  if (lseek(fd, 0, SEEK_SET) < 0) return -1;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  if (!buf) return -1;
  for (;;) {
    if (RGPU_ARRAY_RESERVE(buf, cap, len + 4096, 0)) {
      free(buf);
      return -1;
    }
    ssize_t n = read(fd, buf + len, cap - len - 1);
    if (n < 0) {
      if (errno == EINTR) continue;
      free(buf);
      return -1;
    }
    if (n == 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  int found = 0;
  char *line = strchr(buf, '\n'); /* skip the header */
  while (line && !found) {
    line++;
    char local[128];
    unsigned st;
    /* "  0: 0100007F:1F90 00000000:0000 0A ..." */
    if (sscanf(line, "%*d: %127s %*s %x", local, &st) == 2) {
      char *colon = strrchr(local, ':');
      if (colon) {
        unsigned p = (unsigned)strtoul(colon + 1, NULL, 16);
        if (p == port && (!tcp || st == 0x0A)) found = 1;
      }
    }
    line = strchr(line, '\n');
  }
  free(buf);
  return found;
}

int rgpu_netem_port_bound(const rgpu_netem_side *s, int tcp, unsigned port) {
  int any = 0;
  for (int i = tcp ? 0 : 2; i < (tcp ? 2 : 4); i++) {
    if (s->proc_net_fd[i] < 0) continue;
    int r = scan_proc_net(s->proc_net_fd[i], tcp, port);
    if (r > 0) return 1;
    if (r == 0) any = 1;
  }
  return any ? 0 : -1;
}
