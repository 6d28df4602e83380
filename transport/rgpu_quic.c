/* quic://: QUIC v1 through ngtcp2 0.12 with GnuTLS, ALPN "rgpu/1".
 *
 * The server listener has one I/O thread for its UDP socket that
 * demultiplexes by connection ID and feeds each connection's socketpair,
 * whose worker end rgpu_listener_accept returns: the worker is another
 * process.  The client drives its connection from the threads that read
 * and write it, with a background I/O thread for the time between calls
 * ("client" below says how); its conns' poll fd is an eventfd.
 *
 * ngtcp2 0.12 facts this file relies on (see shared/notes/quic-netem.md):
 * flow-control limits default to zero and credit must be handed back as the
 * application consumes data; stream data is not copied, so send buffers stay
 * put until acknowledged; the pacer must not be armed before the first RTT
 * sample; GSO and GRO have no helpers. */
#include "rgpu_tls_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "rgpu_array.h"
#include "rgpu_clock.h"
#include "rgpu_fifo.h"
#include "rgpu_log.h"
#include "rgpu_spin.h"
#include "rgpu_thread_name.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* Connection IDs.  Every 1-RTT packet carries its receiver's, and on a
 * 1500-byte link each byte of it is 0.07 % of goodput, where QUIC's
 * per-packet overhead already exceeded TCP's (issue 21: raw bulk 0.6-1.1 %
 * under TCP's under wifi-bad and cellular with 8-byte IDs both ways).
 * - A client's first DCID is 8 random bytes, RFC 9000's minimum.
 * - A server's IDs are 4 random bytes, unique among the connections of its
 *   listener or direct endpoint (server_cid_make), which routes by them:
 *   2^32 values against at most 4096 connections of 16 IDs each.  An
 *   off-path guess that hits one costs a failed decryption, as a guessed
 *   8-byte one would.
 * - A client's is empty (q_client_cid_len): nothing routes by it. */
#define Q_INITIAL_DCID_LEN 8
#define Q_SERVER_CID_LEN 4
#define Q_MAX_PKT 1500
/* Datagram payload toward a loopback peer (issue 21).  The loopback MTU is
 * 64 KiB and nothing on it fragments or loses packets, yet ngtcp2 sized every
 * packet for a 1500-byte Ethernet path: per-packet work (framing, AEAD and
 * header-protection calls, ACK bookkeeping) was half the CPU time of a bulk
 * copy.  One packet per 64 KiB datagram does the same work for 44x fewer
 * packets.  Kept under the IPv4 UDP payload limit (65507). */
#define Q_LOOP_PKT 65000
#define Q_FALLBACK_PKT 1452 /* ngtcp2's default; see q_check_big_datagrams */
/* Largest datagram we build or receive, and the most one GSO send may carry
 * in total (a UDP datagram's length field; the kernel refuses more). */
#define Q_PKT_BUF 65536
#define Q_GSO_BYTES 65000
#define Q_GSO_MAX 64
#define Q_CHUNK (64 * 1024) /* under malloc's mmap threshold */
#define Q_POOL_MAX 64
#define Q_SEND_BUF_MAX (64ull << 20) /* unacknowledged bytes we keep */
#define Q_STREAM_WINDOW (16ull << 20)
#define Q_CONN_WINDOW (24ull << 20)
#define Q_MAX_STREAM_WINDOW (64ull << 20)
#define Q_MAX_CONN_WINDOW (96ull << 20)
#define Q_MAX_CIDS 16
#define Q_RESET_SECRET_LEN 32
/* How long a poller polls before it sleeps.  On the client, the calling
 * thread that waits for its reply, as long as over tcp://
 * (RGPU_CLIENT_SPIN_US), always: it reads the socket itself, so it takes
 * no CPU from a thread that brings its bytes (2-vCPU dev VM, unpinned
 * loopback, rgpu bench_latency p50: 160-172 us sleeping, 76-82 us
 * polling, tcp 28-32 us; wifi-bad 31.8-32.7 ms polling, 33.3-34.0
 * sleeping, tcp 32.3-33.0).  The client's I/O thread after traffic and
 * the relay (as long as a worker waits awake for the next frame) only
 * where there are CPUs to spare (rgpu_spin_spare_cpus).  RGPU_SPIN_US sets
 * them all (0: off). */
#define Q_CLIENT_SPIN_US 2000
#define Q_RELAY_SPIN_US 200
/* The ACK delay each end announces: 5 ms, not ngtcp2's 25 ms default.  The
 * peer's probe timeout includes it, so a lost request or reply is probed
 * 20 ms sooner (fill_settings has the numbers).  A CI run with 5 ms once hung
 * in reliability_migrate_netem; the hang was its tcp run (a TCP client with
 * no keep-alive blocked in read() on a dead path, since fixed in
 * rgpu_tcp.c) and happened with 25 ms as well. */
#define Q_MAX_ACK_DELAY_MS 5

static const char quic_priority[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:%DISABLE_TLS13_COMPAT_MODE";

/* ---- byte queues ----------------------------------------------------------- */

typedef struct qchunk {
  struct qchunk *next;
  uint64_t off; /* stream offset of data[0] (send side) */
  size_t len, pos; /* pos: receive side, bytes already delivered */
  uint8_t data[Q_CHUNK];
} qchunk;

typedef RGPU_FIFO(qchunk) qqueue; /* linked through next */

/* Chunks come and go at line rate; a small cache keeps malloc, page faults
 * and zeroing out of the data path: per thread on the server's relay
 * threads (each drains its own when it ends), one for the process on the
 * client, whose chunks are filled by one thread and emptied by another
 * (a download freed them on the reading thread, and glibc gave the pages
 * back and faulted them in again: 6 % of the client's time). */
static __thread qchunk *chunk_pool;
static __thread int chunk_pool_n;
static __thread int chunk_pool_on; /* set on relay threads only */
static pthread_mutex_t chunk_shared_mu = PTHREAD_MUTEX_INITIALIZER;
static qchunk *chunk_shared;
static int chunk_shared_n;

static void chunk_put(qchunk *c) {
  if (chunk_pool_on) {
    if (chunk_pool_n < Q_POOL_MAX) {
      c->next = chunk_pool;
      chunk_pool = c;
      chunk_pool_n++;
      return;
    }
  } else {
    pthread_mutex_lock(&chunk_shared_mu);
    int kept = chunk_shared_n < Q_POOL_MAX;
    if (kept) {
      c->next = chunk_shared;
      chunk_shared = c;
      chunk_shared_n++;
    }
    pthread_mutex_unlock(&chunk_shared_mu);
    if (kept) return;
  }
  free(c);
}

static void chunk_pool_drain(void) {
  chunk_pool_on = 0;
  while (chunk_pool) {
    qchunk *n = chunk_pool->next;
    free(chunk_pool);
    chunk_pool = n;
  }
  chunk_pool_n = 0;
}

static void qqueue_free(qqueue *q) {
  qchunk *c;
  while ((c = rgpu_fifo_pop(q, next))) chunk_put(c);
}

static qchunk *qqueue_append_chunk(qqueue *q, uint64_t off) {
  qchunk *c;
  if (chunk_pool_on) {
    c = chunk_pool;
    if (c) {
      chunk_pool = c->next;
      chunk_pool_n--;
    }
  } else {
    pthread_mutex_lock(&chunk_shared_mu);
    c = chunk_shared;
    if (c) {
      chunk_shared = c->next;
      chunk_shared_n--;
    }
    pthread_mutex_unlock(&chunk_shared_mu);
  }
  if (!c) c = malloc(sizeof *c);
  if (!c) return NULL;
  c->off = off;
  c->len = c->pos = 0;
  rgpu_fifo_push(q, c, next);
  return c;
}

/* ---- UDP endpoint --------------------------------------------------------- */

typedef struct {
  int fd;
  struct sockaddr_storage local;
  socklen_t locallen;
  int gso, gro;
  /* Bound to 0.0.0.0/::, so every datagram says which address it came to and
   * replies leave from that address: on a multi-homed host the kernel's own
   * choice may differ, and the client's connected socket would drop them. */
  int wildcard;
  /* Set when a send failed in a way that a removed local address gives
   * (Linux: ENETUNREACH, as the route lookup from that source fails; also
   * EADDRNOTAVAIL, EINVAL); the client then tries a fresh socket.  Cleared
   * by the migration. */
  int local_gone;
} qendpoint;

static int sockaddr_is_wildcard(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (ss->ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
  return 0;
}

static void endpoint_tune(qendpoint *e) {
  int big = 16 << 20;
  /* rmem_max is small by default; the FORCE variants need CAP_NET_ADMIN. */
  if (setsockopt(e->fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
    setsockopt(e->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  if (setsockopt(e->fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0)
    setsockopt(e->fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  int one = 1;
  /* Don't-fragment on every datagram, whatever the kernel's path MTU cache
   * says: a PMTUD probe that the kernel fragmented would "succeed" and make
   * every later packet two fragments.  ngtcp2 finds the size itself. */
  int probe = IP_PMTUDISC_PROBE;
  if (e->local.ss_family == AF_INET6) {
    int probe6 = IPV6_PMTUDISC_PROBE;
    setsockopt(e->fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &probe6, sizeof probe6);
  }
  setsockopt(e->fd, IPPROTO_IP, IP_MTU_DISCOVER, &probe, sizeof probe);
  e->gro = setsockopt(e->fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one) == 0;
  e->gso = 1; /* probed on first use: the kernel says EIO/EINVAL if not */
  if (getenv("RGPU_QUIC_NO_GSO")) e->gso = 0;
  e->wildcard = sockaddr_is_wildcard(&e->local);
  if (e->wildcard) {
    if (e->local.ss_family == AF_INET6) {
      setsockopt(e->fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one);
      setsockopt(e->fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one); /* v4-mapped clients */
    } else {
      setsockopt(e->fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one);
    }
  }
}

/* Same-size datagrams between one pair of addresses, sent with one sendmsg. */
typedef struct {
  uint8_t buf[Q_GSO_MAX * Q_MAX_PKT > Q_PKT_BUF ? Q_GSO_MAX * Q_MAX_PKT : Q_PKT_BUF];
  size_t len, seg, n;
  struct sockaddr_storage to, from;
  socklen_t tolen, fromlen;
} qbatch;

/* Control data: the GSO segment size and, on a wildcard socket, the source. */
static size_t batch_control(qendpoint *e, qbatch *b, int gso, char *ctrl, size_t cap) {
  struct msghdr mh = {.msg_control = ctrl, .msg_controllen = cap};
  memset(ctrl, 0, cap);
  size_t used = 0;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  if (gso) {
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t seg = (uint16_t)b->seg;
    memcpy(CMSG_DATA(cm), &seg, sizeof seg);
    used += CMSG_SPACE(sizeof(uint16_t));
    mh.msg_controllen = used + CMSG_SPACE(sizeof(struct in6_pktinfo));
    cm = CMSG_NXTHDR(&mh, cm);
  }
  if (e->wildcard && b->fromlen && cm) {
    if (b->from.ss_family == AF_INET) {
      struct in_pktinfo pi = {0};
      pi.ipi_spec_dst = ((struct sockaddr_in *)&b->from)->sin_addr;
      cm->cmsg_level = IPPROTO_IP;
      cm->cmsg_type = IP_PKTINFO;
      cm->cmsg_len = CMSG_LEN(sizeof pi);
      memcpy(CMSG_DATA(cm), &pi, sizeof pi);
      used += CMSG_SPACE(sizeof pi);
    } else if (b->from.ss_family == AF_INET6) {
      struct in6_pktinfo pi = {0};
      pi.ipi6_addr = ((struct sockaddr_in6 *)&b->from)->sin6_addr;
      cm->cmsg_level = IPPROTO_IPV6;
      cm->cmsg_type = IPV6_PKTINFO;
      cm->cmsg_len = CMSG_LEN(sizeof pi);
      memcpy(CMSG_DATA(cm), &pi, sizeof pi);
      used += CMSG_SPACE(sizeof pi);
    }
  }
  return used;
}

/* Returns 0, or -EAGAIN when the socket is full (batch kept for retry). */
static int batch_flush(qendpoint *e, qbatch *b) {
  if (b->n == 0) return 0;
  char ctrl[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(struct in6_pktinfo))];
  if (e->gso && b->n > 1) {
    struct iovec iov = {b->buf, b->len};
    struct msghdr mh = {.msg_name = &b->to, .msg_namelen = b->tolen, .msg_iov = &iov,
                        .msg_iovlen = 1, .msg_control = ctrl};
    mh.msg_controllen = batch_control(e, b, 1, ctrl, sizeof ctrl);
    for (;;) {
      ssize_t r = sendmsg(e->fd, &mh, MSG_NOSIGNAL);
      if (r >= 0) {
        b->n = b->len = 0;
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return -EAGAIN;
      if (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP) {
        e->gso = 0; /* no GSO here: fall back to one datagram each */
        break;
      }
      if (errno == EMSGSIZE) break; /* too much for one send: one by one */
      if (errno == ENETUNREACH || errno == EADDRNOTAVAIL) e->local_gone = 1;
      b->n = b->len = 0; /* unreachable peer etc.: QUIC recovers or times out */
      return 0;
    }
  }
  /* One by one; on EAGAIN keep what is left at the front of the batch. */
  size_t clen = batch_control(e, b, 0, ctrl, sizeof ctrl);
  size_t off = 0;
  while (off < b->len) {
    size_t l = b->len - off < b->seg ? b->len - off : b->seg;
    struct iovec one = {b->buf + off, l};
    struct msghdr m1 = {.msg_name = &b->to, .msg_namelen = b->tolen, .msg_iov = &one,
                        .msg_iovlen = 1, .msg_control = clen ? ctrl : NULL,
                        .msg_controllen = clen};
    ssize_t r = sendmsg(e->fd, &m1, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == ENETUNREACH || errno == EADDRNOTAVAIL || errno == EINVAL))
      e->local_gone = 1;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
      memmove(b->buf, b->buf + off, b->len - off);
      b->len -= off;
      b->n = (b->len + b->seg - 1) / b->seg;
      return -EAGAIN;
    }
    off += l;
  }
  b->n = b->len = 0;
  return 0;
}

/* ---- connections and streams ------------------------------------------------ */

typedef struct qconn qconn;
typedef struct qserver qserver;

/* One bidirectional QUIC stream and the socketpair end that carries it. */
typedef struct qstream {
  struct qstream *next;
  int64_t sid;
  int index;           /* 0: the connection's first stream (the session) */
  int app_fd;          /* our end of the socketpair */
  qqueue sendq;        /* app -> peer, kept until acknowledged */
  uint64_t write_off;  /* bytes taken from the app */
  uint64_t sent_off;   /* bytes handed to ngtcp2 */
  uint64_t acked_off;  /* bytes acknowledged */
  qchunk *send_cur;    /* chunk containing sent_off */
  int app_eof, fin_sent, blocked;
  qqueue recvq;        /* peer -> app, waiting for room in the socketpair */
  int peer_fin, app_wr_closed, app_gone;
  int closed;          /* ngtcp2 closed it (both directions done, or reset) */
  int reset_sent;
  /* Client (app_fd is -1 there: the app reads recvq and fills sendq itself,
   * see "client" below): */
  int evfd;            /* eventfd, readable while the reader has something */
  int ev_on;           /* evfd's counter is not zero */
  int app_open;        /* the stream's rgpu_conn exists */
  int reading;         /* threads in its read: they see the bytes without evfd */
  /* Direct server (see "direct"): a stream the client opened, waiting for
   * the I/O thread to hand its conn to the application. */
  struct qstream *accept_next;
} qstream;

typedef struct qclient qclient;

struct qconn {
  qconn *next;
  int is_server;
  qserver *server;     /* relayed server side: the listener's relay */
  qclient *driver;     /* direct server side: driven like a client ("direct") */
  qendpoint *ep;
  ngtcp2_conn *conn;
  gnutls_session_t tls;
  ngtcp2_crypto_conn_ref ref;
  ngtcp2_path_storage ps;
  char peer[128];
  uint64_t session_key;
  /* CIDs that route to this connection (server demux). */
  ngtcp2_cid cids[Q_MAX_CIDS];
  int ncids;

  qstream *streams;
  int nstreams;
  int primary_fd;      /* server: relay end made at handshake, for stream 0 */
  int queued;          /* server: the session conn is in the accept queue */
  int primary_done;    /* stream 0 has ended */

  int handshake_done;
  uint64_t created_ns;  /* server: when its first packet came (handshake slots) */
  int hs_confirmed;
  int closing;         /* stop: send CONNECTION_CLOSE and drop */
  int dead;            /* drop without sending */
  uint64_t close_error;

  /* Failure reported to client conns; errcode is written last. */
  char errmsg[256];
  atomic_int errcode;

  qbatch batch;
  uint8_t pkt[Q_PKT_BUF]; /* a packet that does not go straight into the batch */
  int send_blocked;
  int loopback;           /* q_loopback_path: big datagrams, no pacing */
  /* Whether the loopback path really carries Q_LOOP_PKT datagrams (see
   * q_check_big_datagrams): the stream offset that ends the first large
   * packet with stream data, and what came of it. */
  int64_t big_probe_sid;  /* -1: no large packet with stream data sent yet */
  uint64_t big_probe_off;
  uint64_t big_probe_ns;  /* when it was sent */
  int big_verified, big_failed;

  /* Loss probing during outages (issue 21; see q_probe_after_silence). */
  ngtcp2_cc_algo cc;
  uint64_t pto_cap_ns;    /* 0: ngtcp2's own backoff only */
  uint64_t idle_ns;       /* our max_idle_timeout */
  uint64_t ka_quiet_ns;   /* keep-alive of a quiet connection (0 = none) */
  uint64_t ka_applied_ns; /* what ngtcp2 has now (UINT64_MAX: not set yet) */
  uint64_t last_rx_ns;    /* last packet that ngtcp2 accepted */
  uint64_t last_data_ns;  /* last stream byte in either direction */
  uint64_t capped_probes;
  int connect_waited_confirm; /* rgpu_quic_info */
  uint64_t asked_ns; /* server: when stream bytes last went to the worker */
  uint64_t rx_stream_bytes; /* stream bytes received, all streams */
};


static ngtcp2_conn *get_conn_cb(ngtcp2_crypto_conn_ref *ref) {
  return ((qconn *)ref->user_data)->conn;
}

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

/* The length of the connection ID a client asks its server to put on every
 * packet toward it.  Nothing routes by it: the client's socket is its own
 * and connected (one connection per socket), so it is 0 unless
 * RGPU_QUIC_CLIENT_CID_LEN (0-8) says otherwise.  Every byte counts where
 * the link is slow: 8 bytes were 0.55 % of a full packet, and the raw bulk
 * toward the client was within 1 % of TCP's (docs/benchmarks.md).  The
 * server still migrates a client with an empty ID (ngtcp2 binds the empty
 * ID to the new path), and the client's own migration needs only the
 * server's IDs, which the listener routes by (Q_SERVER_CID_LEN). */
static size_t q_client_cid_len(void) {
  const char *e = getenv("RGPU_QUIC_CLIENT_CID_LEN");
  if (e && *e) {
    char *end;
    unsigned long v = strtoul(e, &end, 10);
    if (!*end && v <= Q_INITIAL_DCID_LEN) return v;
  }
  return 0;
}

static int cid_add(qconn *q, const ngtcp2_cid *cid) {
  if (q->ncids >= Q_MAX_CIDS) return -1;
  q->cids[q->ncids++] = *cid;
  return 0;
}

/* Whether dcid is one of q's connection IDs (server demux). */
static int cid_known(const qconn *q, const uint8_t *dcid, size_t dcidlen) {
  for (int i = 0; i < q->ncids; i++)
    if (q->cids[i].datalen == dcidlen && !memcmp(q->cids[i].data, dcid, dcidlen)) return 1;
  return 0;
}

static void cid_remove(qconn *q, const ngtcp2_cid *cid) {
  for (int i = 0; i < q->ncids; i++) {
    if (q->cids[i].datalen == cid->datalen && !memcmp(q->cids[i].data, cid->data, cid->datalen)) {
      q->cids[i] = q->cids[--q->ncids];
      return;
    }
  }
}

struct qserver {
  rgpu_relay_queue rq;
  qendpoint ep;
  rgpu_tls_server_cred cred;  /* replaced by a reload (rgpu_listener_reload) */
  int require_client_cert;
  int max_streams;
  rgpu_transport_opts opts; /* scalar fields only */
  ngtcp2_cc_algo cc;
  int cc_auto; /* no cc_algo given: q_default_cc per client */
  uint8_t reset_secret[Q_RESET_SECRET_LEN];
  qconn *conns;
  int nconns;
  pthread_t th;
  int th_started;
  uint64_t evictions; /* unfinished handshakes evicted so far (logged in bursts) */
};

/* What a server-side connection is made with: the relay's (one listener,
 * many clients) or a direct endpoint's (one session's socket). */
typedef struct {
  qendpoint *ep;
  qserver *server;  /* relayed */
  qclient *driver;  /* direct */
  gnutls_certificate_credentials_t cred;
  int require_client_cert;
  const rgpu_transport_opts *opts;
  ngtcp2_cc_algo cc;
  int cc_auto;
  int max_streams;
  const uint8_t *reset_secret;
} qserver_params;

static qconn *server_conn_new(const qserver_params *sp, const struct sockaddr *local,
                              socklen_t locallen, const struct sockaddr *from, socklen_t fromlen,
                              const uint8_t *pkt, size_t len);

static void q_set_error(qconn *q, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void q_set_error(qconn *q, int code, const char *fmt, ...) {
  if (atomic_load(&q->errcode)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(q->errmsg, sizeof q->errmsg, fmt, ap);
  va_end(ap);
  atomic_store(&q->errcode, code);
}

/* The secret a server side makes its stateless reset tokens with: the
 * relay's, or the direct endpoint's own. */
static const uint8_t *q_reset_secret(const qconn *q);

static qconn *server_find(qserver *sv, const uint8_t *dcid, size_t dcidlen);

/* A new random connection ID for server side q, one that no connection of
 * its listener (relayed) or q itself (direct: the endpoint is q's alone)
 * routes by yet.  Short IDs make a repeat possible; a few draws make it
 * vanish (at 65536 IDs in use a draw repeats one with p = 1.5e-5). */
static void server_cid_make(const qconn *q, ngtcp2_cid *cid, size_t cidlen) {
  uint8_t buf[NGTCP2_MAX_CIDLEN];
  for (int tries = 0;; tries++) {
    gnutls_rnd(GNUTLS_RND_RANDOM, buf, cidlen);
    int taken = q->server ? server_find(q->server, buf, cidlen) != NULL : cid_known(q, buf, cidlen);
    if (!taken || tries >= 16) break;
  }
  ngtcp2_cid_init(cid, buf, cidlen);
}

static int get_new_cid_cb(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t cidlen,
                          void *ud) {
  qconn *q = ud;
  if (q->is_server) {
    server_cid_make(q, cid, cidlen);
    if (ngtcp2_crypto_generate_stateless_reset_token(token, q_reset_secret(q), Q_RESET_SECRET_LEN,
                                                     cid) != 0)
      return NGTCP2_ERR_CALLBACK_FAILURE;
    if (cid_add(q, cid) < 0) return NGTCP2_ERR_CALLBACK_FAILURE;
  } else {
    uint8_t buf[NGTCP2_MAX_CIDLEN];
    gnutls_rnd(GNUTLS_RND_RANDOM, buf, cidlen);
    ngtcp2_cid_init(cid, buf, cidlen);
    gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN);
  }
  return 0;
}

static int remove_cid_cb(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud) {
  qconn *q = ud;
  if (q->is_server) cid_remove(q, cid);
  return 0;
}

/* The socketpair between a QUIC stream and its reader/writer (issue 21).
 * Its default send buffer (about 200 KiB) made a bulk copy wake the other
 * side every few packets' worth of bytes; a few MiB let one wake-up move
 * what one congestion window brought. */
#define Q_PAIR_BUF (4 << 20)
static void q_tune_pair(int a, int b) {
  int sz = Q_PAIR_BUF;
  int fds[2] = {a, b};
  for (int i = 0; i < 2; i++) /* FORCE passes net.core.wmem_max (root only) */
    if (setsockopt(fds[i], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) < 0)
      setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
}

static qstream *qs_new(qconn *q, int64_t sid, int app_fd) {
  qstream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->sid = sid;
  s->app_fd = app_fd;
  s->evfd = -1;
  s->index = (int)(sid >> 2);
  /* Append, so that round-robin order is opening order. */
  qstream **pp = &q->streams;
  while (*pp) pp = &(*pp)->next;
  *pp = s;
  q->nstreams++;
  return s;
}

static void qs_free(qconn *q, qstream *s) {
  qqueue_free(&s->sendq);
  qqueue_free(&s->recvq);
  if (s->app_fd >= 0) {
    if (q->is_server)
      rgpu_relay_close_fd(s->app_fd);
    else
      close(s->app_fd);
  }
  if (s->evfd >= 0) close(s->evfd);
  free(s);
}

/* Hands credit back for bytes the application has taken. */
static void q_consumed(qconn *q, qstream *s, size_t n) {
  if (!n) return;
  if (!s->closed) ngtcp2_conn_extend_max_stream_offset(q->conn, s->sid, n);
  ngtcp2_conn_extend_max_offset(q->conn, n);
}

static void qs_deliver(qconn *q, qstream *s) {
  int delivered = 0;
  while (!rgpu_fifo_empty(&s->recvq) && s->app_fd >= 0 && !s->app_gone) {
    qchunk *c = rgpu_fifo_peek(&s->recvq);
    ssize_t w = send(s->app_fd, c->data + c->pos, c->len - c->pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      s->app_gone = 1;
      break;
    }
    c->pos += (size_t)w;
    q_consumed(q, s, (size_t)w);
    delivered = 1;
    if (c->pos == c->len) chunk_put(rgpu_fifo_pop(&s->recvq, next));
  }
  if (delivered && q->is_server) q->asked_ns = rgpu_clock_ns();
  if (s->app_gone) {
    /* Nobody reads any more: give the credit back so the peer is not stuck. */
    qchunk *c;
    while ((c = rgpu_fifo_pop(&s->recvq, next))) {
      q_consumed(q, s, c->len - c->pos);
      chunk_put(c);
    }
  }
  if (!s->recvq.head && s->peer_fin && !s->app_wr_closed && s->app_fd >= 0) {
    shutdown(s->app_fd, SHUT_WR);
    s->app_wr_closed = 1;
  }
}

static int server_make_session(qserver *sv, qconn *q);
static int direct_stream_open(qconn *q, int64_t sid);

static int stream_open_cb(ngtcp2_conn *conn, int64_t sid, void *ud) {
  qconn *q = ud;
  if (!q->is_server || !ngtcp2_is_bidi_stream(sid)) return 0;
  if (q->driver) return direct_stream_open(q, sid);
  /* Streams can arrive in any order (a later stream's first byte may beat
   * the session stream's), so the index comes from the stream ID. */
  int index = (int)(sid >> 2);
  int fd = -1;
  if (index == 0) {
    /* Normally made right after the handshake; a client that sends stream
     * data in the same flight as its Finished gets here first. */
    if (!q->queued && server_make_session(q->server, q) < 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    fd = q->primary_fd; /* already in the accept queue */
    q->primary_fd = -1;
  } else {
    int wfd;
    if (rgpu_relay_socketpair(&fd, &wfd) < 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    q_tune_pair(fd, wfd);
    rgpu_relay_queue_push(&q->server->rq, wfd, q->peer, q->session_key, index);
  }
  qstream *s = qs_new(q, sid, fd);
  if (!s) return NGTCP2_ERR_CALLBACK_FAILURE;
  ngtcp2_conn_set_stream_user_data(conn, sid, s);
  return 0;
}

#define Q_DELIVER_NOW (16 * 1024)

static int recv_stream_data_cb(ngtcp2_conn *conn, uint32_t flags, int64_t sid, uint64_t offset,
                               const uint8_t *data, size_t len, void *ud, void *sud) {
  qconn *q = ud;
  qstream *s = sud;
  if (!s) return 0;
  if (len) q->last_data_ns = rgpu_clock_ns();
  q->rx_stream_bytes += len;
  if (!s->app_gone && !s->recvq.head && s->app_fd >= 0 && len >= Q_DELIVER_NOW) {
    /* A large piece with nothing queued ahead of it goes to the socketpair
     * straight from ngtcp2's buffer: one memcpy less per byte of a bulk
     * copy over loopback's 64 KiB packets (issue 21).  Small pieces are
     * still gathered and sent once per wake-up. */
    ssize_t w = send(s->app_fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      q_consumed(q, s, (size_t)w);
      data += w;
      len -= (size_t)w;
    } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      s->app_gone = 1;
    }
  }
  if (s->app_gone) {
    q_consumed(q, s, len); /* keep the peer moving; the data has nowhere to go */
  } else {
    /* Queue only: the I/O loop hands everything that arrived in one wake-up
     * to the socketpair at once, instead of one send() per packet. */
    while (len > 0) {
      qchunk *t = s->recvq.tail;
      if (!t || t->len == Q_CHUNK) t = qqueue_append_chunk(&s->recvq, 0);
      if (!t) return NGTCP2_ERR_CALLBACK_FAILURE;
      size_t n = Q_CHUNK - t->len < len ? Q_CHUNK - t->len : len;
      memcpy(t->data + t->len, data, n);
      t->len += n;
      data += n;
      len -= n;
    }
  }
  if (flags & NGTCP2_STREAM_DATA_FLAG_FIN) s->peer_fin = 1;
  return 0;
}

static int acked_cb(ngtcp2_conn *conn, int64_t sid, uint64_t offset, uint64_t len, void *ud,
                    void *sud) {
  qstream *s = sud;
  qconn *q = ud;
  if (!s) return 0;
  if (offset + len > s->acked_off) s->acked_off = offset + len;
  /* ngtcp2 reports acknowledged stream bytes in order, so this covers the
   * whole first large packet. */
  if (q->big_probe_sid == sid && s->acked_off >= q->big_probe_off) q->big_verified = 1;
  /* Free what is acknowledged, but never the chunk being sent or filled. */
  while (s->sendq.head && s->sendq.head->off + s->sendq.head->len <= s->acked_off &&
         s->sendq.head != s->send_cur && s->sendq.head != s->sendq.tail)
    chunk_put(rgpu_fifo_pop(&s->sendq, next));
  return 0;
}

static int extend_stream_cb(ngtcp2_conn *conn, int64_t sid, uint64_t max, void *ud, void *sud) {
  qstream *s = sud;
  if (s) s->blocked = 0;
  return 0;
}

static int stream_close_cb(ngtcp2_conn *conn, uint32_t flags, int64_t sid, uint64_t app_err,
                           void *ud, void *sud) {
  qstream *s = sud;
  if (s) {
    s->closed = 1;
    s->peer_fin = 1; /* reset by the peer: end the app's stream too */
  }
  return 0;
}

static int stream_reset_cb(ngtcp2_conn *conn, int64_t sid, uint64_t final, uint64_t app_err,
                           void *ud, void *sud) {
  qstream *s = sud;
  if (s) s->peer_fin = 1;
  return 0;
}

static int handshake_completed_cb(ngtcp2_conn *conn, void *ud) {
  ((qconn *)ud)->handshake_done = 1;
  return 0;
}

static int handshake_confirmed_cb(ngtcp2_conn *conn, void *ud) {
  ((qconn *)ud)->hs_confirmed = 1;
  return 0;
}

static void fill_callbacks(ngtcp2_callbacks *cb, int server) {
  memset(cb, 0, sizeof *cb);
  if (server) {
    cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
    cb->stream_open = stream_open_cb;
  } else {
    cb->client_initial = ngtcp2_crypto_client_initial_cb;
    cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
  }
  cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb->encrypt = ngtcp2_crypto_encrypt_cb;
  cb->decrypt = ngtcp2_crypto_decrypt_cb;
  cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb->update_key = ngtcp2_crypto_update_key_cb;
  cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb->rand = rand_cb;
  cb->get_new_connection_id = get_new_cid_cb;
  cb->remove_connection_id = remove_cid_cb;
  cb->recv_stream_data = recv_stream_data_cb;
  cb->acked_stream_data_offset = acked_cb;
  cb->extend_max_stream_data = extend_stream_cb;
  cb->stream_close = stream_close_cb;
  cb->stream_reset = stream_reset_cb;
  cb->handshake_completed = handshake_completed_cb;
  cb->handshake_confirmed = handshake_confirmed_cb;
}

/* The default (issue 21) is BBR (v1) toward a network peer and CUBIC
 * toward a loopback one.  Measured through rgpu-netem against the host's
 * TCP (bbr): ngtcp2's CUBIC reads every random or burst loss as congestion
 * and ran at 11-33 % of the link on wifi-bad, cellular and edge-worst (TCP
 * 86-95 %).  BBRv2 ran at 88-93 %, 1-2 points under TCP under wifi-bad and
 * cellular: it lowers its ceiling where a round loses more than 2 %, and
 * wifi-bad's bursts do; BBRv1 ignores loss as Linux's TCP BBR does and
 * matched TCP there (94 % under wifi-bad, 93 % cellular, 92 % edge-worst
 * against TCP's 88 %; docs/benchmarks.md, "BBRv1 against BBRv2").  At a
 * 0.1 ms RTT without a rate limit both ran at the same ~2 Gbit/s (the dev
 * VM's CPUs).  On loopback, with both ends and their relay threads on one
 * CPU, BBRv2's window of two microsecond-RTT BDPs starved the sender
 * (0.7-0.9 Gbit/s against CUBIC's 1.5-2.5), and BBRv1 is poor with GSO at
 * microsecond RTTs (shared/notes/quic-netem.md): a loopback path loses
 * nothing, and CUBIC is best there. */
static int sockaddr_is_loopback(const struct sockaddr *peer) {
  if (peer->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)peer)->sin_addr.s_addr) >> 24) == 127;
  if (peer->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)peer)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
  }
  return 0;
}

/* A loopback path (issue 21) gets 64 KiB datagrams (Q_LOOP_PKT) and no
 * pacing (q_write): the path has no queue to protect and no loss, and with
 * every packet paced the sender slept on a microsecond timer between
 * datagrams (a third of a bulk copy's CPU time went to those timers).
 * RGPU_QUIC_NO_LOOPBACK_TUNING=1 turns both off, for comparisons. */
static int q_loopback_path(const struct sockaddr *peer) {
  return sockaddr_is_loopback(peer) && !getenv("RGPU_QUIC_NO_LOOPBACK_TUNING");
}

static ngtcp2_cc_algo q_default_cc(const struct sockaddr *peer) {
  return sockaddr_is_loopback(peer) ? NGTCP2_CC_ALGO_CUBIC : NGTCP2_CC_ALGO_BBR;
}

/* *automatic: no name given, q_default_cc decides per peer. */
static int parse_cc(const char *name, ngtcp2_cc_algo *out, int *automatic, char *err,
                    size_t errlen) {
  /* RGPU_QUIC_CC (either end) names the controller where the caller left
   * the default, so a benchmark can compare them through unmodified
   * programs and servers (issue 21). */
  const char *env = getenv("RGPU_QUIC_CC");
  if ((!name || !*name) && env && *env) name = env;
  *automatic = !name || !*name;
  if (*automatic)
    *out = NGTCP2_CC_ALGO_BBR; /* q_default_cc decides per peer */
  else if (!strcmp(name, "cubic"))
    *out = NGTCP2_CC_ALGO_CUBIC;
  else if (!strcmp(name, "reno"))
    *out = NGTCP2_CC_ALGO_RENO;
  else if (!strcmp(name, "bbr"))
    *out = NGTCP2_CC_ALGO_BBR;
  else if (!strcmp(name, "bbr2"))
    *out = NGTCP2_CC_ALGO_BBR2;
  else
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL,
                       "QUIC congestion control '%s' unknown (use cubic, reno, bbr or bbr2)", name);
  return 0;
}

static const char *cc_name(ngtcp2_cc_algo cc) {
  switch (cc) {
    case NGTCP2_CC_ALGO_RENO: return "reno";
    case NGTCP2_CC_ALGO_CUBIC: return "cubic";
    case NGTCP2_CC_ALGO_BBR: return "bbr";
    case NGTCP2_CC_ALGO_BBR2: return "bbr2";
  }
  return "?";
}

const char *rgpu_quic_default_cc_name(const struct sockaddr *peer) {
  return cc_name(q_default_cc(peer));
}

/* RGPU_QUIC_TRACE=1: ngtcp2's own event log on stderr (loss detection,
 * PTO, congestion control), for debugging transport behaviour. */
static void q_trace(void *ud, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[quic %p %.6f] ", ud, rgpu_clock_ns() / 1e9);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void fill_settings(ngtcp2_settings *s, ngtcp2_transport_params *p,
                          const rgpu_transport_opts *o, ngtcp2_cc_algo cc, int server,
                          int max_streams, int loopback) {
  ngtcp2_settings_default(s);
  s->initial_ts = rgpu_clock_ns();
  s->cc_algo = cc;
  const char *trace = getenv("RGPU_QUIC_TRACE");
  if (trace && *trace && strcmp(trace, "0") != 0) s->log_printf = q_trace;
  s->max_window = Q_MAX_CONN_WINDOW;
  s->max_stream_window = Q_MAX_STREAM_WINDOW;
  if (loopback) {
    /* See Q_LOOP_PKT.  Without shaping ngtcp2 uses the smallest of this,
     * the buffer we offer and the peer's max_udp_payload_size (65527 by
     * default); PMTUD has nothing to find.  Handshake packets keep their
     * 1200-byte floor. */
    s->max_tx_udp_payload_size = Q_LOOP_PKT;
    s->no_tx_udp_payload_size_shaping = 1;
    s->no_pmtud = 1;
  }
  s->handshake_timeout = (uint64_t)(o->handshake_timeout_ms > 0 ? o->handshake_timeout_ms : 10000) *
                         NGTCP2_MILLISECONDS;
  ngtcp2_transport_params_default(p);
  /* ngtcp2 leaves every flow-control limit at zero.  16 MiB per stream
   * covers a 100 Mbit/s x 100 ms path (1.25 MB) many times over and lets a
   * loopback or LAN bulk copy run without stalls; auto-tuning grows it. */
  p->initial_max_stream_data_bidi_local = Q_STREAM_WINDOW;
  p->initial_max_stream_data_bidi_remote = Q_STREAM_WINDOW;
  p->initial_max_stream_data_uni = 0;
  p->initial_max_data = Q_CONN_WINDOW;
  p->initial_max_streams_bidi = server ? (uint64_t)max_streams : 0;
  p->initial_max_streams_uni = 0;
  p->max_idle_timeout =
      (uint64_t)(o->idle_timeout_ms > 0 ? o->idle_timeout_ms : 30000) * NGTCP2_MILLISECONDS;
  p->active_connection_id_limit = 8;
  /* The peer's probe timeout includes the ACK delay we announce (srtt +
   * 4 rttvar + max_ack_delay), so a lost request or reply is probed
   * sooner with a short one: 64-byte ping p99 through rgpu-netem, the same
   * three seeds each, 25 ms (ngtcp2's default) against 5 ms: wifi-bad
   * 121-129 -> 97-102 ms, edge-worst 243-321 -> 218-287 ms; medians and
   * bulk goodput unchanged (a bulk receiver acknowledges every second
   * packet anyway).  RGPU_QUIC_MAX_ACK_DELAY_MS (1-1000) sets it. */
  uint64_t mad_ms = Q_MAX_ACK_DELAY_MS;
  const char *mad = getenv("RGPU_QUIC_MAX_ACK_DELAY_MS");
  if (mad && *mad) {
    char *end;
    unsigned long v = strtoul(mad, &end, 10);
    if (!*end && v >= 1 && v <= 1000) mad_ms = v;
  }
  p->max_ack_delay = mad_ms * NGTCP2_MILLISECONDS;
}

/* Probing during an outage (issue 21).  ngtcp2 0.12 doubles its probe
 * timeout (PTO) after every unanswered probe and has no cap, so the first
 * probe after a 10 s outage could leave 5-14 s after the link was back.  Two
 * rules bound that to about one cap interval plus a round trip:
 *
 * 1. While a connection is busy (stream data moved within the idle timeout),
 *    its keep-alive is the cap: after that long without sending or
 *    receiving anything, ngtcp2 sends a PING.  In an outage, the side that
 *    is not congestion-window-limited (the receiver of a bulk transfer, the
 *    client waiting for a reply) therefore sends a packet at least once per
 *    cap, and one of them is the first to cross when the link comes back.
 *    Quiet connections keep the configured keep-alive (a third of the idle
 *    timeout), so an idle session costs no more than before.
 * 2. A packet that ends a silence of at least the cap, while our own probes
 *    are backed off, fires the probe timer at once (q_probe_after_silence),
 *    so retransmission starts within a round trip of the link's return
 *    instead of at the next doubled PTO.
 *
 * 3. In an outage (a probe of ours unanswered and nothing received for a
 *    plain PTO, srtt + 4 rttvar + max_ack_delay), the keep-alive is that
 *    plain PTO (at least Q_OUTAGE_PING_MIN_MS) instead of the cap, so the
 *    first PING through after the link's return leaves at most a plain PTO
 *    after it, and its answer fires our probe (rule 2 on our side): the
 *    outage costs about half a PTO plus two round trips instead of half
 *    the cap (0.43-0.52 s at 20 ms RTT with the 1 s cap).  PINGs only: a
 *    few dozen bytes a PTO while nothing gets through.
 *
 * The cap is never shorter than one plain PTO, so a slow path is not
 * probed faster than RFC 9002 would. */
#define Q_MAX_PTO_MS 1000
#define Q_OUTAGE_PING_MIN_MS 20

static void q_fail_liberr(qconn *q, int lib, const char *when);

static uint64_t q_cap_interval(qconn *q) {
  uint64_t pto = ngtcp2_conn_get_pto(q->conn);
  return q->pto_cap_ns > pto ? q->pto_cap_ns : pto;
}

/* Rule 3's keep-alive: the plain PTO while a probe of ours is unanswered
 * and nothing has arrived for that long (0: not in an outage). */
static uint64_t q_outage_ping_interval(qconn *q, uint64_t now) {
  if (!q->pto_cap_ns || !q->last_rx_ns) return 0;
  uint64_t pto = ngtcp2_conn_get_pto(q->conn);
  if (pto < Q_OUTAGE_PING_MIN_MS * NGTCP2_MILLISECONDS) pto = Q_OUTAGE_PING_MIN_MS * NGTCP2_MILLISECONDS;
  if (pto >= q->pto_cap_ns || now - q->last_rx_ns < pto) return 0;
  ngtcp2_conn_stat st;
  ngtcp2_conn_get_conn_stat(q->conn, &st);
  return st.pto_count > 0 ? pto : 0;
}

static void q_tune_keepalive(qconn *q, uint64_t now) {
  uint64_t want = q->ka_quiet_ns;
  if (q->pto_cap_ns && q->last_data_ns && now - q->last_data_ns < q->idle_ns &&
      (!want || q->pto_cap_ns < want))
    want = q->pto_cap_ns;
  uint64_t outage = q_outage_ping_interval(q, now);
  if (outage && (!want || outage < want)) want = outage;
  if (want == q->ka_applied_ns) return;
  /* 0 is ngtcp2 0.12's "off" (UINT64_MAX would overflow its deadline). */
  ngtcp2_conn_set_keep_alive_timeout(q->conn, want);
  q->ka_applied_ns = want;
}

/* Rule 2 above.  ngtcp2 0.12 exports no way to fire its loss-detection
 * timer early, but ngtcp2_conn_handle_expiry(conn, ts) fires whatever is
 * due at ts, so it is called with the PTO deadline itself.  That also
 * treats as due anything else due by then (a delayed ACK, the pacer,
 * retired connection IDs, a PMTUD probe): all harmless.  Not done when a
 * time-threshold loss deadline is pending (that timer is short and runs
 * the congestion controller, which must not see a future time), nor when
 * the deadline lies beyond the idle timeout (handle_expiry would close). */
static void q_probe_after_silence(qconn *q, uint64_t now, uint64_t prev_rx) {
  if (!q->pto_cap_ns || !q->handshake_done || !prev_rx || q->dead || q->closing) return;
  uint64_t interval = q_cap_interval(q);
  if (now - prev_rx < interval) return;
  ngtcp2_conn_stat st;
  ngtcp2_conn_get_conn_stat(q->conn, &st);
  if (st.pto_count == 0 || st.loss_detection_timer == UINT64_MAX) return;
  for (int i = 0; i < NGTCP2_PKTNS_ID_MAX; i++)
    if (st.loss_time[i] != UINT64_MAX) return;
  uint64_t due = st.loss_detection_timer;
  if (due <= now || due - now < ngtcp2_conn_get_pto(q->conn)) return; /* soon anyway */
  uint64_t idle = q->idle_ns;
  const ngtcp2_transport_params *rp = ngtcp2_conn_get_remote_transport_params(q->conn);
  if (rp && rp->max_idle_timeout && rp->max_idle_timeout < idle) idle = rp->max_idle_timeout;
  if (idle && due >= now + idle - NGTCP2_MILLISECONDS) return;
  int rv = ngtcp2_conn_handle_expiry(q->conn, due);
  if (rv != 0) {
    q_fail_liberr(q, rv, "connection");
    return;
  }
  q->capped_probes++;
}

/* A CUDA program may compute on the CPU for minutes between GPU calls; its
 * session must not die of the idle timeout meanwhile, so PINGs are on by
 * default (a third of the idle timeout) and only a negative value turns
 * them off. */
static void q_set_keepalive(qconn *q, const rgpu_transport_opts *o, ngtcp2_cc_algo cc) {
  int idle = o->idle_timeout_ms > 0 ? o->idle_timeout_ms : 30000;
  int ka = rgpu_t_keepalive_ms(o, idle);
  if (ka == 0) ka = 1; /* an idle timeout under 3 ms: still keep alive */
  q->cc = cc;
  q->idle_ns = (uint64_t)idle * NGTCP2_MILLISECONDS;
  q->ka_quiet_ns = ka > 0 ? (uint64_t)ka * NGTCP2_MILLISECONDS : 0;
  int cap_ms = o->quic_max_pto_ms;
  /* RGPU_QUIC_MAX_PTO_MS sets the cap where the caller left the default, so
   * the outage benchmark (bench/outage_cost.py) can weigh probe traffic
   * against recovery time through an unmodified program and server. */
  const char *env_cap = getenv("RGPU_QUIC_MAX_PTO_MS");
  if (cap_ms == 0 && env_cap && *env_cap) cap_ms = atoi(env_cap);
  q->pto_cap_ns = cap_ms < 0 ? 0
                  : (uint64_t)(cap_ms > 0 ? cap_ms : Q_MAX_PTO_MS) * NGTCP2_MILLISECONDS;
  q->ka_applied_ns = UINT64_MAX;
  q_tune_keepalive(q, rgpu_clock_ns());
}

/* Whether a client's connect may return (see rgpu_quic_connect). */
static int q_connect_done(qconn *q) {
  if (q->hs_confirmed) return 1;
  return q->handshake_done && q->tls && !gnutls_certificate_client_get_request_status(q->tls);
}

static void q_free(qconn *q) {
  if (q->conn) ngtcp2_conn_del(q->conn);
  if (q->tls) gnutls_deinit(q->tls);
  while (q->streams) {
    qstream *s = q->streams;
    q->streams = s->next;
    qs_free(q, s);
  }
  if (q->primary_fd >= 0) rgpu_relay_close_fd(q->primary_fd);
  free(q);
}

static int qs_can_read_app(const qstream *s) {
  return s->app_fd >= 0 && !s->app_eof && s->write_off - s->acked_off < Q_SEND_BUF_MAX;
}

/* The send queue's last chunk, with room for at least one byte (a new one
 * when the last is full); NULL when out of memory. */
static qchunk *qs_send_tail(qstream *s) {
  qchunk *t = s->sendq.tail;
  if (!t || t->len == Q_CHUNK) {
    t = qqueue_append_chunk(&s->sendq, s->write_off);
    if (t && !s->send_cur) s->send_cur = t;
  }
  return t;
}

/* Reads what the app wrote, as far as buffer limits allow. */
static void qs_app_read(qstream *s) {
  while (qs_can_read_app(s)) {
    qchunk *t = qs_send_tail(s);
    if (!t) return;
    size_t room = Q_CHUNK - t->len;
    ssize_t r = recv(s->app_fd, t->data + t->len, room, MSG_DONTWAIT);
    if (r > 0) {
      t->len += (size_t)r;
      s->write_off += (size_t)r;
      /* Less than asked for: the socket was empty a moment ago.  Asking
       * again would cost a system call that fails with EAGAIN on every
       * small message (issue 21); what arrives meanwhile wakes the poll. */
      if ((size_t)r < room) return;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    s->app_eof = 1; /* EOF or error: finish the stream */
    return;
  }
}

/* Describes why the peer closed the connection, if it said.  A clean close
 * (NO_ERROR) records nothing: readers then see an orderly EOF. */
static void q_describe_peer_close(qconn *q) {
  ngtcp2_connection_close_error ce;
  ngtcp2_conn_get_connection_close_error(q->conn, &ce);
  if (ce.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_TRANSPORT &&
      (ce.error_code & ~0xffull) == NGTCP2_CRYPTO_ERROR) {
    unsigned alert = (unsigned)(ce.error_code & 0xff);
    const char *name = gnutls_alert_get_name((gnutls_alert_description_t)alert);
    const char *hint = (!q->is_server) && (alert == GNUTLS_A_CERTIFICATE_REQUIRED ||
                                           alert == GNUTLS_A_BAD_CERTIFICATE ||
                                           alert == GNUTLS_A_UNKNOWN_CA)
                           ? " (the server wants a client certificate it trusts)"
                           : "";
    q_set_error(q, RGPU_T_EAUTH, "QUIC peer %s refused the handshake: %s%s", q->peer,
                name ? name : "TLS alert", hint);
  } else if (ce.error_code != 0) {
    q_set_error(q, RGPU_T_ECLOSED, "QUIC peer %s closed the connection (error 0x%llx%s%.*s)",
                q->peer, (unsigned long long)ce.error_code, ce.reasonlen ? ": " : "",
                (int)ce.reasonlen, ce.reason ? (const char *)ce.reason : "");
  } else if (!q->handshake_done) {
    q_set_error(q, RGPU_T_ECLOSED, "QUIC peer %s closed the connection during the handshake",
                q->peer);
  }
}

static void q_fail_liberr(qconn *q, int lib, const char *when) {
  if (lib == NGTCP2_ERR_DRAINING || lib == NGTCP2_ERR_CLOSING) {
    q_describe_peer_close(q);
    q->dead = 1;
    return;
  }
  if (lib == NGTCP2_ERR_IDLE_CLOSE) {
    q_set_error(q, RGPU_T_ETIMEDOUT, "QUIC connection %s: idle timeout (no packets)", q->peer);
    q->dead = 1;
    return;
  }
  if (lib == NGTCP2_ERR_HANDSHAKE_TIMEOUT) {
    q_set_error(q, RGPU_T_ETIMEDOUT, "QUIC connection %s: handshake timed out", q->peer);
    q->dead = 1;
    return;
  }
  unsigned vs = q->tls ? gnutls_session_get_verify_cert_status(q->tls) : 0;
  if (vs && !q->is_server) {
    gnutls_datum_t txt = {0};
    gnutls_certificate_verification_status_print(vs, GNUTLS_CRT_X509, &txt, 0);
    q_set_error(q, RGPU_T_EAUTH,
                "QUIC connect to %s: certificate verification failed: %s (check RGPU_CA / the "
                "server name)", q->peer, txt.data ? (const char *)txt.data : "not trusted");
    gnutls_free(txt.data);
  } else if (lib == NGTCP2_ERR_CRYPTO || lib == NGTCP2_ERR_CALLBACK_FAILURE) {
    uint8_t alert = ngtcp2_conn_get_tls_alert(q->conn);
    q_set_error(q, RGPU_T_EAUTH, "QUIC %s %s: TLS handshake failed (%s)", when, q->peer,
                alert ? gnutls_alert_get_name((gnutls_alert_description_t)alert)
                      : ngtcp2_strerror(lib));
  } else {
    q_set_error(q, RGPU_T_EIO, "QUIC %s %s: %s", when, q->peer, ngtcp2_strerror(lib));
  }
  q->closing = 1;
  q->close_error = 1;
}

/* The batch's packets go over path (one GSO send has one source and one
 * destination). */
static int batch_on_path(const qbatch *b, const ngtcp2_path *path) {
  return b->n && b->tolen == path->remote.addrlen &&
         !memcmp(&b->to, path->remote.addr, path->remote.addrlen) &&
         b->fromlen == path->local.addrlen &&
         !memcmp(&b->from, path->local.addr, path->local.addrlen);
}

static int q_queue_packet(qconn *q, const ngtcp2_path *path, const uint8_t *pkt, size_t len) {
  qbatch *b = &q->batch;
  int same_dest = batch_on_path(b, path);
  /* A batch holds equal-size segments with at most one shorter last one. */
  if (b->n && (!same_dest || len > b->seg || b->len % b->seg != 0 || b->n >= Q_GSO_MAX ||
               b->len + len > Q_GSO_BYTES || !q->ep->gso)) {
    if (batch_flush(q->ep, b) < 0) return -EAGAIN;
  }
  if (b->n == 0) {
    memcpy(&b->to, path->remote.addr, path->remote.addrlen);
    b->tolen = path->remote.addrlen;
    memcpy(&b->from, path->local.addr, path->local.addrlen);
    b->fromlen = path->local.addrlen;
    b->seg = len;
  }
  memcpy(b->buf + b->len, pkt, len);
  b->len += len;
  b->n++;
  return 0;
}

static int qs_has_output(const qstream *s) {
  if (s->blocked || s->fin_sent || s->closed) return 0;
  return s->sent_off < s->write_off || s->app_eof;
}

/* Writes packets until ngtcp2 has nothing more or pacing says wait.
 * Streams take turns, so one busy stream cannot starve the others. */
static void q_write(qconn *q) {
  if (q->dead || q->closing) return;
  if (q->batch.n) {
    if (batch_flush(q->ep, &q->batch) < 0) {
      q->send_blocked = 1;
      return;
    }
  }
  q->send_blocked = 0;
  uint64_t ts = rgpu_clock_ns();
  if (q->handshake_done) q_tune_keepalive(q, ts);
  /* Regular packets are the path's size (1200 until PMTUD raised it); the
   * buffer offered must hold the larger PMTUD probes too (up to 1444 bytes
   * in ngtcp2 0.12), or ngtcp2 never sends one and every packet stays at
   * 1200 bytes: 20 % more packets per byte, and 1.5 points less goodput on
   * a 1500-byte link (issue 21). */
  size_t maxlen = ngtcp2_conn_get_path_max_tx_udp_payload_size(q->conn);
  if (maxlen > Q_PKT_BUF) maxlen = Q_PKT_BUF;
  size_t buflen = ngtcp2_conn_get_max_tx_udp_payload_size(q->conn);
  if (buflen > Q_PKT_BUF) buflen = Q_PKT_BUF;
  if (buflen < maxlen) buflen = maxlen;
  /* Handshake flights stay Ethernet-sized too: ngtcp2 would coalesce a
   * server's whole certificate flight into one large datagram, which a
   * path that cannot carry them (q_check_big_datagrams) would lose every
   * time, before any probe could tell. */
  if (q->big_failed || (q->loopback && !ngtcp2_conn_get_handshake_completed(q->conn)))
    buflen = maxlen = Q_FALLBACK_PKT;
  size_t max_pkts = ngtcp2_conn_get_send_quantum(q->conn) / maxlen;
  if (max_pkts < 1) max_pkts = 1;
  if (max_pkts > Q_GSO_MAX) max_pkts = Q_GSO_MAX;
  /* Unpaced: write until the congestion window (or the data) ends. */
  if (q->loopback) max_pkts = 4096;
  uint8_t *pkt = q->pkt;
  size_t npkts = 0;
  qstream *rr = q->streams;
  for (int guard = 0; npkts < max_pkts && guard < 100000; guard++) {
    /* Next stream with something to send, round robin. */
    qstream *s = NULL;
    for (int k = 0; k < q->nstreams && rr; k++) {
      qstream *cand = rr;
      rr = rr->next ? rr->next : q->streams;
      if (qs_has_output(cand)) {
        s = cand;
        break;
      }
    }
    ngtcp2_vec vec[16];
    size_t nv = 0, vbytes = 0;
    int64_t sid = -1;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
    if (s) {
      uint64_t off = s->sent_off;
      for (qchunk *c = s->send_cur; c && nv < 16; c = c->next) {
        if (off >= c->off + c->len) continue;
        size_t start = (size_t)(off - c->off);
        vec[nv].base = c->data + start;
        vec[nv].len = c->len - start;
        vbytes += vec[nv].len;
        off += vec[nv].len;
        nv++;
      }
      sid = s->sid;
      if (s->app_eof && s->sent_off + vbytes == s->write_off) flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
    }
    ngtcp2_ssize ndatalen = -1;
    ngtcp2_pkt_info pi;
    /* With GSO the packet is built right in the batch (one copy less per
     * byte) while the batch can take it: same size as its segments so far
     * (a shorter one ends it, a longer one is moved out below).  The
     * pointer must not change while ngtcp2 says WRITE_MORE, and it does
     * not: the batch only grows after a finished packet. */
    qbatch *b = &q->batch;
    int direct = q->ep->gso && b->n < Q_GSO_MAX && (b->n == 0 || b->len % b->seg == 0) &&
                 b->len + buflen <= (b->n ? Q_GSO_BYTES : sizeof b->buf);
    uint8_t *dst = direct ? b->buf + b->len : pkt;
    ngtcp2_ssize n = ngtcp2_conn_writev_stream(q->conn, &q->ps.path, &pi, dst, buflen, &ndatalen,
                                               flags, sid, nv ? vec : NULL, nv, ts);
    if (s && ndatalen > 0 && q->big_probe_sid < 0 && q->loopback && n > Q_FALLBACK_PKT) {
      q->big_probe_sid = s->sid;
      q->big_probe_off = s->sent_off + (uint64_t)ndatalen;
      q->big_probe_ns = ts;
    }
    if (s && ndatalen >= 0) {
      s->sent_off += (uint64_t)ndatalen;
      while (s->send_cur && s->sent_off >= s->send_cur->off + s->send_cur->len &&
             s->send_cur->next)
        s->send_cur = s->send_cur->next;
      if ((flags & NGTCP2_WRITE_STREAM_FLAG_FIN) && (size_t)ndatalen == vbytes) s->fin_sent = 1;
    }
    if (n < 0) {
      if (n == NGTCP2_ERR_WRITE_MORE) continue;
      if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED || n == NGTCP2_ERR_STREAM_SHUT_WR ||
          n == NGTCP2_ERR_STREAM_NOT_FOUND) {
        if (s) s->blocked = 1;
        continue;
      }
      q_fail_liberr(q, (int)n, "connection");
      return;
    }
    if (n == 0) break;
    /* Built in place, it joins the batch only on the batch's path: during
     * migration or path validation ngtcp2 writes packets for another path
     * (ps.path says which), and those go through q_queue_packet, which
     * sends the batch first. */
    if (direct && (b->n == 0 || ((size_t)n <= b->seg && batch_on_path(b, &q->ps.path)))) {
      if (b->n == 0) {
        memcpy(&b->to, q->ps.path.remote.addr, q->ps.path.remote.addrlen);
        b->tolen = q->ps.path.remote.addrlen;
        memcpy(&b->from, q->ps.path.local.addr, q->ps.path.local.addrlen);
        b->fromlen = q->ps.path.local.addrlen;
        b->seg = (size_t)n;
      }
      b->len += (size_t)n;
      b->n++;
      npkts++;
      continue;
    }
    if (direct) memcpy(pkt, dst, (size_t)n); /* larger than the batch's segments, or elsewhere */
    if (q_queue_packet(q, &q->ps.path, pkt, (size_t)n) < 0) {
      q->send_blocked = 1;
      /* The packet is built; it must not be lost: it goes first next time. */
      qbatch *b = &q->batch;
      if (b->len + (size_t)n <= sizeof b->buf) {
        memcpy(b->buf + b->len, pkt, (size_t)n);
        b->len += (size_t)n;
        b->n++;
      }
      break;
    }
    npkts++;
  }
  if (batch_flush(q->ep, &q->batch) < 0) q->send_blocked = 1;
  /* ngtcp2 0.12 paces with initial_rtt (333 ms) until it has an RTT
   * sample; arming the pacer before the handshake completes stalls the
   * client's Finished by ~20 ms. */
  if (ngtcp2_conn_get_handshake_completed(q->conn) && !q->loopback)
    ngtcp2_conn_update_pkt_tx_time(q->conn, ts);
}

/* Sends CONNECTION_CLOSE.  It is never retransmitted, so send a few copies:
 * a lost single copy leaves the peer waiting for its idle timeout. */
static void q_send_close(qconn *q) {
  if (q->dead || !q->conn) return;
  if (ngtcp2_conn_is_in_closing_period(q->conn) || ngtcp2_conn_is_in_draining_period(q->conn))
    return;
  ngtcp2_connection_close_error ce;
  ngtcp2_connection_close_error_default(&ce);
  if (q->close_error) ngtcp2_connection_close_error_set_application_error(&ce, 1, NULL, 0);
  if (!ngtcp2_conn_get_handshake_completed(q->conn) && ngtcp2_conn_get_tls_alert(q->conn))
    ngtcp2_connection_close_error_set_transport_error_tls_alert(&ce, ngtcp2_conn_get_tls_alert(q->conn),
                                                                NULL, 0);
  uint8_t pkt[Q_MAX_PKT];
  ngtcp2_pkt_info pi;
  ngtcp2_ssize n = ngtcp2_conn_write_connection_close(q->conn, &q->ps.path, &pi, pkt, sizeof pkt,
                                                      &ce, rgpu_clock_ns());
  if (n <= 0) return;
  q->batch.n = q->batch.len = 0;
  for (int i = 0; i < 3; i++) {
    if (q_queue_packet(q, &q->ps.path, pkt, (size_t)n) < 0) break;
    batch_flush(q->ep, &q->batch);
  }
  q->batch.n = q->batch.len = 0;
}

static void q_read_packet(qconn *q, const struct sockaddr *local, socklen_t locallen,
                          const struct sockaddr *from, socklen_t fromlen, const uint8_t *data,
                          size_t len) {
  if (q->dead || q->closing) return;
  ngtcp2_path path = {
      .local = {(ngtcp2_sockaddr *)local, locallen},
      .remote = {(ngtcp2_sockaddr *)from, fromlen},
  };
  ngtcp2_pkt_info pi = {0};
  uint64_t now = rgpu_clock_ns();
  int rv = ngtcp2_conn_read_pkt(q->conn, &path, &pi, data, len, now);
  if (rv != 0) {
    q_fail_liberr(q, rv, q->is_server ? "client" : "connection to");
  } else {
    uint64_t prev_rx = q->last_rx_ns;
    q->last_rx_ns = now;
    q_probe_after_silence(q, now, prev_rx);
  }
  for (qstream *s = q->streams; s; s = s->next) s->blocked = 0;
}

/* A loopback address does not promise a 64 KiB path: a NAT rule (a
 * container's published port with Docker's userland proxy off, say) can
 * send "127.0.0.1" over a 1500-byte link, where every large datagram is
 * dropped (don't-fragment) while the handshake's 1200-byte packets pass.
 * So the first large packet with stream data is a probe: if its bytes are
 * not acknowledged within four probe timeouts (at least Q_BIG_WAIT_MS),
 * the connection goes back to Ethernet-sized packets for good (QUIC
 * resends lost frames, not packets, so the bytes follow in the smaller
 * ones).  Counted in time, not in probe timeouts: the ACKs of small
 * packets that do pass keep resetting those. */
#define Q_BIG_WAIT_MS 200
static void q_check_big_datagrams(qconn *q, uint64_t now) {
  if (!q->loopback || q->big_verified || q->big_failed || q->big_probe_sid < 0) return;
  uint64_t wait = 4 * ngtcp2_conn_get_pto(q->conn);
  if (wait < Q_BIG_WAIT_MS * NGTCP2_MILLISECONDS) wait = Q_BIG_WAIT_MS * NGTCP2_MILLISECONDS;
  if (now - q->big_probe_ns < wait) return;
  q->big_failed = 1;
  RGPU_WARN("quic: %s: %d-byte datagrams do not arrive on this loopback path; using %d-byte ones",
            q->peer, Q_LOOP_PKT, Q_FALLBACK_PKT);
}

static void q_expiry(qconn *q) {
  if (q->dead || q->closing) return;
  uint64_t now = rgpu_clock_ns();
  if (ngtcp2_conn_get_expiry(q->conn) <= now) {
    int rv = ngtcp2_conn_handle_expiry(q->conn, now);
    if (rv != 0) q_fail_liberr(q, rv, "connection");
  }
  q_check_big_datagrams(q, now);
}

/* Moves data between every stream and its socketpair, and retires streams
 * that are finished both ways.  Returns nothing; stream 0's end is noted. */
static void q_service_streams(qconn *q) {
  qstream **pp = &q->streams;
  while (*pp) {
    qstream *s = *pp;
    qs_deliver(q, s);
    uint64_t before = s->write_off;
    qs_app_read(s);
    if (s->write_off != before) q->last_data_ns = rgpu_clock_ns();
    int done = 0;
    if (s->closed && !s->recvq.head) done = 1;
    if (s->app_gone && !s->closed && !s->reset_sent && !q->dead && !q->closing) {
      s->reset_sent = 1;
      /* The reader went away: stop the peer sending on this stream.  Only
       * that direction: what the worker wrote before it closed (a refused
       * HELLO's reply) still goes out.  A reset of both directions threw
       * it away whenever the client's next bytes came in after the worker
       * had closed, and the client saw the connection fail instead of the
       * refusal (e2e_refused_missing_token_quic, once in a CI run). */
      ngtcp2_conn_shutdown_stream_read(q->conn, s->sid, 1);
    }
    if (done) {
      if (s->index == 0) q->primary_done = 1;
      *pp = s->next;
      q->nstreams--;
      qs_free(q, s);
    } else {
      pp = &s->next;
    }
  }
}

static int q_add_pollfds(qconn *q, struct pollfd *pfd, void **who, size_t n) {
  size_t k = n;
  for (qstream *s = q->streams; s; s = s->next) {
    short ev = 0;
    if (qs_can_read_app(s)) ev |= POLLIN;
    if (s->recvq.head && !s->app_gone) ev |= POLLOUT;
    if (!ev) continue;
    who[k] = s;
    pfd[k++] = (struct pollfd){.fd = s->app_fd, .events = ev};
  }
  return (int)(k - n);
}

/* Splits one recvmsg result (possibly GRO-coalesced) into packets. */
typedef void (*q_pkt_fn)(void *ctx, const struct sockaddr *local, socklen_t locallen,
                         const struct sockaddr *from, socklen_t fromlen, const uint8_t *pkt,
                         size_t len);

/* Datagrams per recvmmsg, each up to 64 KiB (a GRO train or one loopback
 * packet).  One call that returns fewer than this has emptied the socket:
 * the recvmsg loop it replaced ended every wake-up with a call that failed
 * with EAGAIN (issue 21: a 64-byte call paid for two of them). */
#define Q_RX_MSGS 8
#define Q_RX_BUF (Q_RX_MSGS * Q_PKT_BUF)

/* Reads what the socket holds (at most 64 datagrams) and hands each packet
 * to fn.  buf holds Q_RX_BUF bytes. */
static int ep_read_batch(qendpoint *e, uint8_t *buf, q_pkt_fn fn, void *ctx) {
  enum { CTRL = CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct in6_pktinfo)) +
                CMSG_SPACE(sizeof(struct in_pktinfo)) };
  struct mmsghdr mm[Q_RX_MSGS];
  struct iovec iov[Q_RX_MSGS];
  struct sockaddr_storage from[Q_RX_MSGS];
  char ctrl[Q_RX_MSGS][CTRL];
  int got = 0;
  for (int round = 0; round < 64 / Q_RX_MSGS; round++) {
    for (int i = 0; i < Q_RX_MSGS; i++) {
      iov[i] = (struct iovec){buf + (size_t)i * Q_PKT_BUF, Q_PKT_BUF};
      mm[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                      .msg_iov = &iov[i], .msg_iovlen = 1,
                                      .msg_control = ctrl[i], .msg_controllen = CTRL};
      mm[i].msg_len = 0;
    }
    int n = recvmmsg(e->fd, mm, Q_RX_MSGS, MSG_DONTWAIT, NULL);
    if (n < 0) {
      if (errno == EINTR) continue;
      break; /* EAGAIN, or an ICMP error: QUIC handles loss by itself */
    }
    got = 1;
    for (int i = 0; i < n; i++) {
      struct msghdr *mh = &mm[i].msg_hdr;
      size_t r = mm[i].msg_len;
      size_t seg = r;
      struct sockaddr_storage local = e->local;
      socklen_t locallen = e->locallen;
      for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
          int gs;
          memcpy(&gs, CMSG_DATA(cm), sizeof gs);
          if (gs > 0) seg = (size_t)gs;
        } else if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
          struct in_pktinfo pi;
          memcpy(&pi, CMSG_DATA(cm), sizeof pi);
          if (e->local.ss_family == AF_INET) {
            ((struct sockaddr_in *)&local)->sin_addr = pi.ipi_addr;
          } else {
            /* IPv4 client on a dual-stack socket: ::ffff:a.b.c.d */
            struct in6_addr *a6 = &((struct sockaddr_in6 *)&local)->sin6_addr;
            memset(a6, 0, sizeof *a6);
            a6->s6_addr[10] = a6->s6_addr[11] = 0xff;
            memcpy(&a6->s6_addr[12], &pi.ipi_addr, 4);
          }
        } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO &&
                   e->local.ss_family == AF_INET6) {
          struct in6_pktinfo pi;
          memcpy(&pi, CMSG_DATA(cm), sizeof pi);
          ((struct sockaddr_in6 *)&local)->sin6_addr = pi.ipi6_addr;
        }
      }
      if (seg == 0) continue;
      const uint8_t *p = iov[i].iov_base;
      for (size_t off = 0; off < r; off += seg) {
        size_t l = r - off < seg ? r - off : seg;
        fn(ctx, (struct sockaddr *)&local, locallen, (struct sockaddr *)&from[i], mh->msg_namelen,
           p + off, l);
      }
    }
    if (n < Q_RX_MSGS) break;
  }
  return got;
}

static int q_setup_tls(qconn *q, gnutls_certificate_credentials_t cred, int server,
                       int require_client_cert, const char *server_name, char *err,
                       size_t errlen) {
  int g = gnutls_init(&q->tls, server ? (GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET |
                                         GNUTLS_NO_END_OF_EARLY_DATA)
                                      : (GNUTLS_CLIENT | GNUTLS_NO_END_OF_EARLY_DATA));
  if (g < 0) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "GnuTLS: %s", gnutls_strerror(g));
  if ((g = gnutls_priority_set_direct(q->tls, quic_priority, NULL)) < 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "GnuTLS priority: %s", gnutls_strerror(g));
  if (server) {
    if (ngtcp2_crypto_gnutls_configure_server_session(q->tls) != 0)
      return rgpu_t_fail(err, errlen, RGPU_T_EIO, "ngtcp2: cannot configure TLS server session");
    if (require_client_cert) {
      gnutls_certificate_server_set_request(q->tls, GNUTLS_CERT_REQUIRE);
      gnutls_session_set_verify_cert(q->tls, NULL, 0);
    }
  } else {
    if (ngtcp2_crypto_gnutls_configure_client_session(q->tls) != 0)
      return rgpu_t_fail(err, errlen, RGPU_T_EIO, "ngtcp2: cannot configure TLS client session");
    struct in6_addr tmp;
    if (inet_pton(AF_INET, server_name, &tmp) != 1 && inet_pton(AF_INET6, server_name, &tmp) != 1)
      gnutls_server_name_set(q->tls, GNUTLS_NAME_DNS, server_name, strlen(server_name));
    gnutls_session_set_verify_cert(q->tls, server_name, 0);
  }
  gnutls_credentials_set(q->tls, GNUTLS_CRD_CERTIFICATE, cred);
  gnutls_datum_t alpn = {(unsigned char *)RGPU_ALPN, sizeof RGPU_ALPN - 1};
  gnutls_alpn_set_protocols(q->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
  q->ref.get_conn = get_conn_cb;
  q->ref.user_data = q;
  gnutls_session_set_ptr(q->tls, &q->ref);
  return 0;
}

static uint64_t q_next_expiry(qconn *q) {
  if (q->dead || q->closing || !q->conn) return UINT64_MAX;
  return ngtcp2_conn_get_expiry(q->conn);
}



/* ---- client ------------------------------------------------------------------ */

/* The client drives its connection from whichever thread needs it (issue 21).
 *
 * Why: a synchronous call over quic:// used to cross three client threads
 * as well as the server's: the calling thread wrote its request into a
 * socketpair, an I/O thread read it, built the packet and sent it, then
 * read the reply's datagram and wrote its bytes into the socketpair for the
 * calling thread.  Each crossing was a wake-up and two system calls; on the
 * 2-vCPU dev VM a 64-byte ping (every thread on one CPU) took 59 us over
 * quic against 14 us over tcp, a third of the CPU time in the scheduler.
 * Now the thread that writes builds and sends the packets, and the thread
 * that waits for a reply reads the UDP socket and decrypts it itself: the
 * client side of a call crosses no thread, as over tcp://.
 *
 * Rules, all under cl->mu, which guards the ngtcp2 connection, the streams
 * and the fields of qclient below it:
 * - Any thread may call into ngtcp2 while it holds mu (q_write sends).
 * - One thread at a time reads the UDP socket: the poller (cl->poller).  It
 *   drops mu while it sleeps in ppoll, and gives the socket back after one
 *   step (client_step).  An app thread that needs bytes or room becomes the
 *   poller when nobody is; else it waits on cl->cv, which the poller
 *   broadcasts after every step.
 * - The I/O thread polls only when no app thread has for Q_CLIENT_IDLE_NS
 *   (a program computing between calls, or idle: ACKs, keep-alives, the
 *   server's own messages), when a write left bytes that only ACKs can
 *   release, and while closing.  An app thread that then needs the socket
 *   asks for it back through poll_wake: one wake-up after an idle spell.
 * - Timers: whoever holds mu after an expiry handles it (q_expiry); the I/O
 *   thread wakes for the next one whoever polls.
 * - A stream's eventfd (the conn's poll fd) is readable while the stream
 *   has bytes, EOF or an error for its reader (client_notify). */

enum { Q_POLLER_NONE, Q_POLLER_APP, Q_POLLER_IO };
/* How long the socket waits for an app thread before the I/O thread takes
 * it.  Shorter: a tight call loop meets the I/O thread at the socket more
 * often (a hand-back costs a wake-up); longer: data that arrives while no
 * call waits (the rest of a bulk write's ACKs, a host callback's event) is
 * read that much later. */
#define Q_CLIENT_IDLE_NS (1000 * 1000ull)
/* A write copies this much into the send queue before it sends: the first
 * packets leave before a large write has been copied in full. */
#define Q_WRITE_PIECE ((size_t)1 << 20)
/* Read credit handed back without a q_write: ngtcp2 sends the window update
 * with the next packet (or the poller's next step) anyway. */
#define Q_CREDIT_FLUSH (256 * 1024)
/* A step that brought this many stream bytes is a bulk transfer's: the I/O
 * thread goes on reading the socket while the reader copies them out, as
 * two CPUs do more than one (see client_progress). */
#define Q_BULK_RX (256 * 1024)

struct qclient {
  qconn *q;
  qendpoint ep;
  gnutls_certificate_credentials_t cred;
  pthread_t th;
  int th_started;
  int io_wake;   /* eventfd: ends the I/O thread's sleep (stop, the socket is free) */
  int poll_wake; /* eventfd: ends the poller's sleep (someone else wants the socket) */
  atomic_int stop;
  atomic_int refs; /* the session conn plus every stream conn */
  pid_t owner;
  uint64_t spin_ns; /* an app poller's busy poll before it sleeps (0: none) */
  uint8_t *rxbuf;   /* Q_RX_BUF bytes; the poller's */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* Under mu: */
  int exited;     /* the I/O thread has closed the connection */
  int poller;     /* Q_POLLER_*: who reads the UDP socket now */
  int io_wants;   /* the I/O thread waits for the socket (closing) */
  int app_wants;  /* an app thread waits for the socket the I/O thread holds */
  int io_take;    /* a write left unsent bytes: the I/O thread polls at once */
  int waiting;    /* app threads in cv */
  int bulk_rx;    /* the I/O thread polls for a bulk reader (Q_BULK_RX) */
  uint64_t app_poll_ns; /* when an app thread last gave the socket back */
  uint64_t migrate_ns;  /* the last migration after the local address went */
  /* Direct server side (see "direct"): the client's connection terminated
   * in this process.  Streams the client opens after the first wait in
   * accepted (under mu) until the I/O thread hands their conns to
   * stream_cb, outside mu. */
  int server;
  uint8_t reset_secret[Q_RESET_SECRET_LEN];
  qstream *accepted;
  void (*stream_cb)(void *ctx, rgpu_conn *stream);
  void *stream_ctx;
  /* The session stream was aborted (rgpu_conn_abort): closing does not wait
   * for unacknowledged bytes, whose peer has moved on. */
  atomic_int no_linger;
};

static const uint8_t *q_reset_secret(const qconn *q) {
  return q->driver ? q->driver->reset_secret : q->server->reset_secret;
}

/* The rgpu_conn's view: which client, which stream. */
typedef struct {
  qclient *cl;
  qstream *s;
  int primary;
  size_t credit; /* consumed bytes not yet followed by a q_write */
} qhandle;


static void ev_raise(int fd) {
  uint64_t one = 1;
  (void)!write(fd, &one, sizeof one);
}

static void ev_drain(int fd) {
  uint64_t v;
  (void)!read(fd, &v, sizeof v);
}

/* Whether pkt is addressed to one of q's connection IDs.  A direct
 * server's socket is reachable by anyone: packets of other connections
 * (a second client's Initial, junk) are not q's. */
static int q_owns_packet(const qconn *q, const uint8_t *pkt, size_t len) {
  ngtcp2_version_cid vc;
  return ngtcp2_pkt_decode_version_cid(&vc, pkt, len, Q_SERVER_CID_LEN) == 0 &&
         cid_known(q, vc.dcid, vc.dcidlen);
}

static void client_pkt(void *ctx, const struct sockaddr *local, socklen_t locallen,
                       const struct sockaddr *from, socklen_t fromlen, const uint8_t *pkt,
                       size_t len) {
  qconn *q = ctx;
  if (q->driver && !q_owns_packet(q, pkt, len)) return;
  q_read_packet(q, local, locallen, from, fromlen, pkt, len);
}

/* Whether the connection can carry nothing more (its reader then gets what
 * is queued, then EOF or the recorded failure). */
static int client_over(const qclient *cl) {
  const qconn *q = cl->q;
  return cl->exited || q->dead || q->closing;
}

/* Whether a read on s returns without waiting. */
static int client_stream_ready(const qclient *cl, const qstream *s) {
  return s->recvq.head || s->peer_fin || client_over(cl);
}

/* Raises the eventfd of every stream that became readable and wakes the
 * app threads that wait.  mu held. */
static void client_notify(qclient *cl) {
  for (qstream *s = cl->q->streams; s; s = s->next) {
    if (s->evfd >= 0 && !s->ev_on && !s->reading && client_stream_ready(cl, s)) {
      ev_raise(s->evfd);
      s->ev_on = 1;
    }
  }
  if (cl->waiting) pthread_cond_broadcast(&cl->cv);
}

/* A program thread cancelled in its poll (ppoll is a cancellation point)
 * gives the socket back, or every other thread would wait for it. */
static void client_poller_cancelled(void *arg) {
  qclient *cl = arg;
  pthread_mutex_lock(&cl->mu);
  cl->poller = Q_POLLER_NONE;
  if (cl->io_wants) ev_raise(cl->io_wake);
  pthread_cond_broadcast(&cl->cv);
  pthread_mutex_unlock(&cl->mu);
}

/* A program thread cancelled in pthread_cond_wait holds mu again: it
 * stops counting as a waiter and lets go. */
static void client_waiter_cancelled(void *arg) {
  qclient *cl = arg;
  cl->waiting--;
  pthread_mutex_unlock(&cl->mu);
}

/* Waits on cl->cv (mu held). */
static void client_wait(qclient *cl) {
  cl->waiting++;
  pthread_cleanup_push(client_waiter_cancelled, cl);
  pthread_cond_wait(&cl->cv, &cl->mu);
  pthread_cleanup_pop(0);
  cl->waiting--;
}

/* One poll of the UDP socket by the poller: send what is due, sleep until a
 * datagram, a timer or poll_wake (and io_wake for the I/O thread), read
 * what came, send again.  mu held (dropped for the sleep).  Returns what
 * the poll returned.
 *
 * A reader's step (reader: its stream) does not send after it has read
 * what its thread waits for: the thread returns to the program, whose
 * next request then carries the ACK.  Under wifi-bad the ACK sent on its
 * own, 0.1 ms before the next request, cost 7 ms per synchronous call
 * (bench_latency p50 39 ms against 32 ms over tcp): two packets a call
 * each way made each end acknowledge at once (ngtcp2 does after two
 * packets), and the emulator keeps order, so the request waited behind
 * the ACK's jitter.  An ACK the program does not carry goes with the I/O
 * thread's next wake-up (Q_CLIENT_IDLE_NS), inside the 5 ms ACK delay we
 * announce. */
static int client_do_migrate(qclient *cl, char *err, size_t errlen);

/* The host lost the address this socket sends from (the client moved to
 * another network; a send failed, see batch_flush): carry on from a fresh
 * socket, which takes the host's current address; the server follows by
 * connection ID.  Whichever thread polls does it (it owns the socket):
 * a caller waiting for its reply is usually the one whose probes fail.
 * At most every 100 ms, so a host with no address at all is not
 * hammered.  mu held, the socket ours. */
static void client_follow_address(qclient *cl) {
  qconn *q = cl->q;
  /* A server's socket is bound where the client sends: it does not move. */
  if (cl->server || !cl->ep.local_gone || q->dead || q->closing) return;
  uint64_t now = rgpu_clock_ns();
  if (now - cl->migrate_ns < 100000000ull) return;
  cl->migrate_ns = now;
  char merr[200];
  if (client_do_migrate(cl, merr, sizeof merr) == 0)
    RGPU_INFO("QUIC: local address gone; migrated the connection to %s", q->peer);
  else
    RGPU_DEBUG("QUIC: local address gone; %s", merr);
}

static int client_step(qclient *cl, int io, const qstream *reader, uint64_t spin_until,
                       uint64_t deadline, int extra_fd) {
  qconn *q = cl->q;
  q_write(q);
  client_follow_address(cl);
  uint64_t exp = q_next_expiry(q);
  if (exp <= rgpu_clock_ns()) {
    /* A timer that is already due (sending arms some): handled here, not
     * by a ppoll that returns at once and another step. */
    q_expiry(q);
    q_write(q);
    exp = q_next_expiry(q);
  }
  if (deadline < exp) exp = deadline;
  struct pollfd pfd[4];
  int n = 0;
  pfd[n++] = (struct pollfd){.fd = cl->ep.fd, .events = POLLIN | (q->send_blocked ? POLLOUT : 0)};
  pfd[n++] = (struct pollfd){.fd = cl->poll_wake, .events = POLLIN};
  if (io) pfd[n++] = (struct pollfd){.fd = cl->io_wake, .events = POLLIN};
  if (extra_fd >= 0) pfd[n++] = (struct pollfd){.fd = extra_fd, .events = POLLIN};
  pthread_mutex_unlock(&cl->mu);
  int r;
  pthread_cleanup_push(client_poller_cancelled, cl);
  r = rgpu_spin_ppoll(pfd, n, spin_until, exp);
  pthread_cleanup_pop(0);
  pthread_mutex_lock(&cl->mu);
  if (r > 0) {
    if (pfd[1].revents) ev_drain(cl->poll_wake);
    if (io && pfd[2].revents) ev_drain(cl->io_wake);
    if ((pfd[0].revents & (POLLIN | POLLERR)) && !q->dead && !q->closing)
      ep_read_batch(&cl->ep, cl->rxbuf, client_pkt, q);
  }
  q_expiry(q);
  if (!reader || !client_stream_ready(cl, reader)) {
    q_write(q);
    client_follow_address(cl);
  }
  client_notify(cl);
  return r;
}

/* Gives the socket up (mu held). */
static void client_release(qclient *cl) {
  cl->poller = Q_POLLER_NONE;
  if (cl->io_wants) ev_raise(cl->io_wake);
  if (cl->waiting) pthread_cond_broadcast(&cl->cv);
}

/* Progress for an app thread that waits for bytes (reader: its stream) or
 * room (reader NULL): one step as the poller, or one wait for the poller's
 * news.  Returns by `deadline` (CLOCK_MONOTONIC ns; UINT64_MAX: none) and,
 * where extra_fd >= 0, soon after it polls readable (a wait for the
 * poller's news is cut into 50 ms pieces to look at it).  mu held. */
static void client_progress_until(qclient *cl, const qstream *reader, uint64_t deadline,
                                  int extra_fd) {
  if (cl->poller == Q_POLLER_NONE && !cl->io_wants) {
    cl->poller = Q_POLLER_APP;
    uint64_t before = cl->q->rx_stream_bytes;
    client_step(cl, 0, reader, cl->spin_ns ? rgpu_clock_ns() + cl->spin_ns : 0, deadline,
                extra_fd);
    cl->app_poll_ns = rgpu_clock_ns();
    if (cl->q->rx_stream_bytes - before >= Q_BULK_RX && !cl->bulk_rx) {
      /* Bulk bytes come: the I/O thread reads and decrypts the next ones
       * while this thread copies these out (loopback download, one
       * thread doing both: 6.3-7.5 Gbit/s against 7.4-9.8 with the I/O
       * thread's help). */
      cl->bulk_rx = 1;
      cl->io_take = 1;
      ev_raise(cl->io_wake);
    }
    client_release(cl);
    return;
  }
  if (cl->poller == Q_POLLER_IO && !cl->app_wants && !cl->bulk_rx) {
    cl->app_wants = 1;
    ev_raise(cl->poll_wake);
  }
  if (deadline == UINT64_MAX && extra_fd < 0) {
    client_wait(cl);
    return;
  }
  uint64_t now = rgpu_clock_ns();
  uint64_t until = now + 50000000ull;
  if (deadline < until) until = deadline;
  if (until <= now) return;
  /* cv runs on CLOCK_REALTIME (pthread_cond_init's default). */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t abs_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (until - now);
  ts.tv_sec = (time_t)(abs_ns / 1000000000ull);
  ts.tv_nsec = (long)(abs_ns % 1000000000ull);
  cl->waiting++;
  pthread_cleanup_push(client_waiter_cancelled, cl);
  pthread_cond_timedwait(&cl->cv, &cl->mu, &ts);
  pthread_cleanup_pop(0);
  cl->waiting--;
}

static void client_progress(qclient *cl, const qstream *reader) {
  client_progress_until(cl, reader, UINT64_MAX, -1);
}

/* Takes the socket for a command that changes it (migration).  mu held.
 * 0, or RGPU_T_ECLOSED once the connection is over. */
static int client_acquire(qclient *cl) {
  while (cl->poller != Q_POLLER_NONE || cl->io_wants) {
    if (cl->exited) return RGPU_T_ECLOSED;
    if (cl->poller == Q_POLLER_IO) cl->app_wants = 1;
    ev_raise(cl->poll_wake);
    client_wait(cl);
  }
  if (cl->exited) return RGPU_T_ECLOSED;
  cl->poller = Q_POLLER_APP;
  return 0;
}

/* Moves the connection to a fresh UDP socket (a new local port, or a new
 * interface after a network change); the server follows by connection ID.
 * mu held, and the socket ours. */
static int client_do_migrate(qclient *cl, char *err, size_t errlen) {
  qconn *q = cl->q;
  if (q->dead || q->closing)
    return rgpu_t_fail(err, errlen, RGPU_T_ECLOSED, "QUIC connection to %s is closed", q->peer);
  const ngtcp2_path *cur = ngtcp2_conn_get_path(q->conn);
  struct sockaddr_storage remote;
  socklen_t rl = (socklen_t)cur->remote.addrlen;
  memcpy(&remote, cur->remote.addr, rl);
  int fd = socket(remote.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&remote, rl) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "QUIC migrate: new socket: %s", strerror(e));
  }
  struct sockaddr_storage local;
  socklen_t ll = sizeof local;
  getsockname(fd, (struct sockaddr *)&local, &ll);
  ngtcp2_path np = {.local = {(ngtcp2_sockaddr *)&local, ll},
                    .remote = {(ngtcp2_sockaddr *)&remote, rl}};
  int lib = ngtcp2_conn_initiate_immediate_migration(q->conn, &np, rgpu_clock_ns());
  if (lib) {
    close(fd);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "QUIC migrate: %s", ngtcp2_strerror(lib));
  }
  close(cl->ep.fd);
  cl->ep.fd = fd;
  cl->ep.local = local;
  cl->ep.locallen = ll;
  endpoint_tune(&cl->ep);
  cl->ep.local_gone = 0;
  ngtcp2_path_storage_init(&q->ps, (ngtcp2_sockaddr *)&local, ll, (ngtcp2_sockaddr *)&remote, rl,
                           NULL);
  q->batch.n = q->batch.len = 0;
  q_write(q);
  return 0;
}

/* Opens a bidirectional stream with its reader's eventfd.  mu held. */
static int client_open_stream(qclient *cl, qstream **out, char *err, size_t errlen) {
  qconn *q = cl->q;
  if (client_over(cl))
    return rgpu_t_fail(err, errlen, RGPU_T_ECLOSED, "QUIC connection to %s is closed", q->peer);
  int evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (evfd < 0) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "eventfd: %s", strerror(errno));
  int64_t sid;
  int lib = ngtcp2_conn_open_bidi_stream(q->conn, &sid, NULL);
  if (lib) {
    close(evfd);
    if (lib == NGTCP2_ERR_STREAM_ID_BLOCKED)
      return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP,
                         "QUIC server %s allows no more streams on this connection", q->peer);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "QUIC open stream: %s", ngtcp2_strerror(lib));
  }
  qstream *s = qs_new(q, sid, -1);
  if (!s) {
    close(evfd);
    ngtcp2_conn_shutdown_stream(q->conn, sid, 1);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  }
  s->evfd = evfd;
  s->app_open = 1;
  ngtcp2_conn_set_stream_user_data(q->conn, sid, s);
  *out = s;
  return 0;
}

static int client_all_sent(qconn *q) {
  for (qstream *s = q->streams; s; s = s->next)
    if (!(s->app_eof && s->fin_sent && s->acked_off >= s->write_off) && !s->closed) return 0;
  return 1;
}

/* Frees the streams that are over both ways and whose conn is gone, and
 * stops the server sending on a stream nobody reads.  Whether the session
 * (stream 0) has ended.  mu held. */
static int client_service_streams(qconn *q) {
  int session_over = 0;
  qstream **pp = &q->streams;
  while (*pp) {
    qstream *s = *pp;
    if (s->index == 0 && s->closed) session_over = 1;
    if (s->app_gone && !s->closed && !s->reset_sent && !q->dead && !q->closing) {
      /* The reader went away: stop the peer sending (our bytes still go). */
      s->reset_sent = 1;
      ngtcp2_conn_shutdown_stream_read(q->conn, s->sid, 1);
    }
    if (!s->app_open && s->closed) {
      *pp = s->next;
      q->nstreams--;
      qs_free(q, s);
    } else {
      pp = &s->next;
    }
  }
  return session_over;
}

static rgpu_conn *quic_client_conn(qclient *cl, qstream *s, int primary);

/* Direct server: hands the conns of streams the client opened to
 * stream_cb, without mu (the handler may start threads that read them).
 * Kept queued until a handler is set.  mu held on entry and return. */
static void client_hand_streams(qclient *cl) {
  while (cl->accepted && cl->stream_cb) {
    qstream *s = cl->accepted;
    cl->accepted = s->accept_next;
    s->accept_next = NULL;
    rgpu_conn *sc = quic_client_conn(cl, s, 0);
    if (!sc) {
      s->app_open = 0; /* freed once closed */
      s->app_eof = s->app_gone = 1;
      continue;
    }
    atomic_fetch_add(&cl->refs, 1);
    void (*fn)(void *, rgpu_conn *) = cl->stream_cb;
    void *ctx = cl->stream_ctx;
    pthread_mutex_unlock(&cl->mu);
    fn(ctx, sc);
    pthread_mutex_lock(&cl->mu);
  }
}

static void *client_main(void *arg) {
  rgpu_thread_name("rgpu-quic-io");
  qclient *cl = arg;
  qconn *q = cl->q;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL); /* the user's signals belong to the user's threads */
  uint64_t linger = 0;
  rgpu_spin_window spin;
  rgpu_spin_window_init(&spin, Q_CLIENT_SPIN_US);
  pthread_mutex_lock(&cl->mu);
  for (;;) {
    uint64_t now = rgpu_clock_ns();
    if (atomic_load(&cl->stop) && !linger) {
      /* Give data the app wrote before closing a moment to be acknowledged. */
      linger = now + (atomic_load(&cl->no_linger) ? 1 : 1000000000ull);
    }
    if (cl->accepted && cl->stream_cb && !linger) client_hand_streams(cl);
    if (client_service_streams(q) && !q->dead && !q->closing) {
      q->primary_done = 1; /* the peer ended the session */
      q->closing = 1;
    }
    if (q->dead || q->closing) break;
    if (linger && (client_all_sent(q) || now >= linger)) break;
    if (cl->poller == Q_POLLER_NONE &&
        (linger || cl->io_take || cl->ep.local_gone || now - cl->app_poll_ns >= Q_CLIENT_IDLE_NS)) {
      cl->poller = Q_POLLER_IO;
      cl->io_wants = 0;
    }
    cl->io_take = 0;
    if (cl->poller == Q_POLLER_IO) {
      if (cl->app_wants && !linger) {
        /* An app thread waits for the socket: it reads its reply itself. */
        cl->app_wants = 0;
        cl->app_poll_ns = now;
        client_release(cl);
        continue;
      }
      uint64_t before = q->rx_stream_bytes;
      int r = client_step(cl, 1, NULL, spin.until_ns, linger ? linger : UINT64_MAX, -1);
      if (r > 0 && spin.window_ns) spin.until_ns = rgpu_clock_ns() + spin.window_ns;
      if (cl->bulk_rx && q->rx_stream_bytes - before < Q_BULK_RX) {
        /* The bulk transfer ended: a waiting reader takes the socket. */
        cl->bulk_rx = 0;
        if (cl->waiting && !linger) {
          cl->app_poll_ns = rgpu_clock_ns();
          client_release(cl);
        }
      }
      continue;
    }
    /* An app thread polls, or the socket waits for one: sleep until the
     * next timer, or until the socket is ours to take. */
    if (linger && !cl->io_wants) {
      cl->io_wants = 1;
      ev_raise(cl->poll_wake);
    }
    uint64_t exp = q_next_expiry(q);
    if (cl->poller == Q_POLLER_NONE && cl->app_poll_ns + Q_CLIENT_IDLE_NS < exp)
      exp = cl->app_poll_ns + Q_CLIENT_IDLE_NS;
    if (linger && linger < exp) exp = linger;
    struct pollfd p = {.fd = cl->io_wake, .events = POLLIN};
    pthread_mutex_unlock(&cl->mu);
    int r = rgpu_spin_ppoll(&p, 1, 0, exp);
    pthread_mutex_lock(&cl->mu);
    if (r > 0) ev_drain(cl->io_wake);
    q_expiry(q);
    q_write(q);
    client_notify(cl);
  }
  /* Closing: the socket is the I/O thread's from here on. */
  while (cl->poller == Q_POLLER_APP) {
    cl->io_wants = 1;
    ev_raise(cl->poll_wake);
    pthread_mutex_unlock(&cl->mu);
    struct pollfd p = {.fd = cl->io_wake, .events = POLLIN};
    poll(&p, 1, 100);
    pthread_mutex_lock(&cl->mu);
    ev_drain(cl->io_wake);
  }
  cl->poller = Q_POLLER_IO;
  if (!q->dead) q_send_close(q);
  if (!atomic_load(&cl->stop) && !atomic_load(&q->errcode) && !q->primary_done)
    q_set_error(q, RGPU_T_ECLOSED, "QUIC connection to %s ended", q->peer);
  cl->exited = 1;
  client_notify(cl); /* readers see what is queued, then EOF and errcode */
  pthread_cond_broadcast(&cl->cv);
  pthread_mutex_unlock(&cl->mu);
  return NULL;
}

static void qclient_free(qclient *cl) {
  if (cl->q) q_free(cl->q);
  if (cl->ep.fd >= 0) close(cl->ep.fd);
  if (cl->io_wake >= 0) close(cl->io_wake);
  if (cl->poll_wake >= 0) close(cl->poll_wake);
  if (cl->cred) gnutls_certificate_free_credentials(cl->cred);
  free(cl->rxbuf);
  pthread_mutex_destroy(&cl->mu);
  pthread_cond_destroy(&cl->cv);
  free(cl);
}

static void qclient_unref(qclient *cl) {
  if (atomic_fetch_sub(&cl->refs, 1) == 1) qclient_free(cl);
}

/* The failure the connection recorded, for a conn's reader or writer. */
static int client_conn_error(rgpu_conn *c, qclient *cl) {
  int code = atomic_load(&cl->q->errcode);
  if (code) snprintf(c->errmsg, sizeof c->errmsg, "%s", cl->q->errmsg);
  return code;
}

/* A forked child inherited the conn but not its threads (and maybe a
 * locked mu): it must not read or write. */
static int client_not_ours(rgpu_conn *c) {
  snprintf(c->errmsg, sizeof c->errmsg,
           "QUIC connection belongs to the parent process (this is a fork of it)");
  return RGPU_T_ECLOSED;
}

/* Makes s's eventfd say whether a read would return at once (readers in
 * the stream do not raise it: client_notify).  mu held. */
static void client_sync_evfd(qclient *cl, qstream *s) {
  int ready = client_stream_ready(cl, s);
  if (s->ev_on != ready && s->evfd >= 0) {
    if (ready)
      ev_raise(s->evfd);
    else
      ev_drain(s->evfd);
    s->ev_on = ready;
  }
}

static ssize_t quic_client_read(rgpu_conn *c, void *buf, size_t len) {
  qhandle *h = c->impl;
  qclient *cl = h->cl;
  qstream *s = h->s;
  if (len == 0) return 0;
  if (cl->owner != getpid()) return client_not_ours(c);
  pthread_mutex_lock(&cl->mu);
  s->reading++;
  while (!client_stream_ready(cl, s)) client_progress(cl, s);
  s->reading--;
  /* Whole chunks are copied out without the lock (the I/O thread may be
   * decrypting the next packets meanwhile); a chunk read in part stays at
   * the head and is copied under it.  One reader per stream. */
  uint8_t *dst = buf;
  size_t got = 0;
  qchunk *mine = NULL, **tail = &mine;
  while (s->recvq.head && s->recvq.head != s->recvq.tail &&
         got + (s->recvq.head->len - s->recvq.head->pos) <= len) {
    qchunk *ch = rgpu_fifo_pop(&s->recvq, next);
    got += ch->len - ch->pos;
    *tail = ch;
    tail = &ch->next;
  }
  *tail = NULL;
  if (mine) {
    pthread_mutex_unlock(&cl->mu);
    size_t off = 0;
    for (qchunk *ch = mine, *nx; ch; ch = nx) {
      nx = ch->next;
      memcpy(dst + off, ch->data + ch->pos, ch->len - ch->pos);
      off += ch->len - ch->pos;
      chunk_put(ch);
    }
    pthread_mutex_lock(&cl->mu);
  }
  while (got < len && s->recvq.head) {
    qchunk *ch = rgpu_fifo_peek(&s->recvq);
    size_t k = ch->len - ch->pos < len - got ? ch->len - ch->pos : len - got;
    memcpy(dst + got, ch->data + ch->pos, k);
    ch->pos += k;
    got += k;
    if (ch->pos == ch->len) chunk_put(rgpu_fifo_pop(&s->recvq, next));
  }
  if (got && !client_over(cl)) {
    q_consumed(cl->q, s, got);
    h->credit += got;
    if (h->credit >= Q_CREDIT_FLUSH) {
      h->credit = 0;
      q_write(cl->q);
    }
  }
  /* The eventfd tells pollers what is left (the system calls are saved
   * where the reader took everything, as a reply's reader does). */
  client_sync_evfd(cl, s);
  pthread_mutex_unlock(&cl->mu);
  if (got) return (ssize_t)got;
  /* Nothing queued: a clean FIN, or a failure the connection recorded. */
  int code = client_conn_error(c, cl);
  return code ? code : 0;
}

static int quic_client_writev_reading(rgpu_conn *c, const struct iovec *iov, int iovcnt,
                                      int (*on_readable)(void *ctx), void *ctx) {
  qhandle *h = c->impl;
  qclient *cl = h->cl;
  qstream *s = h->s;
  qconn *q = cl->q;
  int rc = 0;
  if (cl->owner != getpid()) return client_not_ours(c);
  /* Bytes copied in since the last q_write.  Packets are built once per
   * piece, not once per iovec: a frame's header and its payload in two
   * iovecs went out as two packets, and under wifi-bad's order-keeping
   * jitter every extra packet can hold the next one back (the direct
   * worker's replies: 64-byte call p50 34-35 ms against 31-32 relayed,
   * whose socketpair had joined them). */
  size_t unsent = 0;
  pthread_mutex_lock(&cl->mu);
  for (int i = 0; i < iovcnt && !rc; i++) {
    const uint8_t *p = iov[i].iov_base;
    size_t left = iov[i].iov_len;
    while (left) {
      if (client_over(cl) || s->app_eof || s->closed) {
        rc = RGPU_T_ECLOSED;
        break;
      }
      size_t piece = left < Q_WRITE_PIECE - unsent ? left : Q_WRITE_PIECE - unsent;
      size_t took = 0;
      while (took < piece && s->write_off - s->acked_off < Q_SEND_BUF_MAX) {
        qchunk *t = qs_send_tail(s);
        if (!t) break;
        size_t k = Q_CHUNK - t->len;
        if (k > piece - took) k = piece - took;
        uint64_t room = Q_SEND_BUF_MAX - (s->write_off - s->acked_off);
        if (k > room) k = (size_t)room;
        memcpy(t->data + t->len, p + took, k);
        t->len += k;
        s->write_off += k;
        took += k;
      }
      if (took) {
        q->last_data_ns = rgpu_clock_ns();
        p += took;
        left -= took;
        unsent += took;
        if (unsent >= Q_WRITE_PIECE) {
          q_write(q);
          unsent = 0;
        }
        continue;
      }
      if (unsent) {
        /* Full: what is in goes out first, and its ACKs make room. */
        q_write(q);
        unsent = 0;
        continue;
      }
      if (s->write_off - s->acked_off < Q_SEND_BUF_MAX) {
        rc = RGPU_T_EIO; /* no memory for a chunk */
        snprintf(c->errmsg, sizeof c->errmsg, "QUIC: out of memory for the send queue");
        break;
      }
      /* The send queue is full until ACKs come.  A reader of our peer's
       * bytes first, if the peer waits for us to read (see
       * rgpu_conn_writev_all_reading). */
      if (on_readable && s->recvq.head) {
        pthread_mutex_unlock(&cl->mu);
        int r = on_readable(ctx);
        pthread_mutex_lock(&cl->mu);
        if (r < 0) rc = r;
        continue;
      }
      client_progress(cl, NULL);
    }
  }
  if (unsent && !client_over(cl)) q_write(q);
  /* Bytes the congestion window holds back leave as ACKs come, and
   * packets a full socket buffer refused (send_blocked) when it drains:
   * the I/O thread polls for them at once if no app thread polls. */
  if (!rc && (s->sent_off < s->write_off || q->send_blocked) && cl->poller == Q_POLLER_NONE &&
      !cl->io_take) {
    cl->io_take = 1;
    ev_raise(cl->io_wake);
  }
  pthread_mutex_unlock(&cl->mu);
  if (rc == RGPU_T_ECLOSED || (rc && !c->errmsg[0])) {
    int code = client_conn_error(c, cl);
    if (code) return code;
  }
  return rc;
}

static int quic_client_writev(rgpu_conn *c, const struct iovec *iov, int iovcnt) {
  return quic_client_writev_reading(c, iov, iovcnt, NULL, NULL);
}

static size_t quic_client_pending(const rgpu_conn *c) {
  const qhandle *h = c->impl;
  if (!h || h->cl->owner != getpid()) return 0;
  pthread_mutex_lock(&h->cl->mu);
  const qchunk *ch = h->s->recvq.head;
  size_t n = ch ? ch->len - ch->pos : 0;
  pthread_mutex_unlock(&h->cl->mu);
  return n;
}

static void quic_client_shutdown(rgpu_conn *c) {
  qhandle *h = c->impl;
  qclient *cl = h->cl;
  if (cl->owner != getpid()) return;
  pthread_mutex_lock(&cl->mu);
  if (!h->s->app_eof) {
    h->s->app_eof = 1; /* FIN after the last byte */
    if (!client_over(cl)) q_write(cl->q);
  }
  pthread_mutex_unlock(&cl->mu);
}

static void quic_client_destroy(rgpu_conn *c) {
  qhandle *h = c->impl;
  if (!h) return;
  qclient *cl = h->cl;
  c->fd = -1; /* the stream's eventfd: qs_free closes it */
  if (cl->owner != getpid()) {
    /* A forked child (a DataLoader worker, say) inherited this conn but not
     * its I/O thread, and maybe a locked mu: drop our descriptor copies and
     * touch nothing else. */
    if (h->primary) {
      close(cl->ep.fd);
      close(cl->io_wake);
      close(cl->poll_wake);
      for (qstream *s = cl->q->streams; s; s = s->next)
        if (s->evfd >= 0) close(s->evfd);
    }
    free(h);
    return;
  }
  pthread_mutex_lock(&cl->mu);
  qstream *s = h->s;
  s->app_eof = 1; /* FIN after the last byte */
  s->app_open = 0;
  s->app_gone = 1;
  qchunk *ch;
  while ((ch = rgpu_fifo_pop(&s->recvq, next))) {
    if (!client_over(cl)) q_consumed(cl->q, s, ch->len - ch->pos);
    chunk_put(ch);
  }
  if (!client_over(cl)) q_write(cl->q);
  pthread_mutex_unlock(&cl->mu);
  if (h->primary && cl->th_started) {
    atomic_store(&cl->stop, 1);
    ev_raise(cl->io_wake);
    pthread_join(cl->th, NULL);
  }
  free(h);
  qclient_unref(cl);
}

/* rgpu_conn_wait_input: the waiting thread polls the UDP socket itself,
 * as a reader does; its poll fd would only say what another thread has
 * already read (after up to Q_CLIENT_IDLE_NS, when nobody polls). */
static int quic_client_wait_input(rgpu_conn *c, int extra_fd, int timeout_ms) {
  qhandle *h = c->impl;
  qclient *cl = h->cl;
  qstream *s = h->s;
  if (cl->owner != getpid()) return 1; /* the read says why */
  uint64_t deadline =
      timeout_ms < 0 ? UINT64_MAX : rgpu_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  int r;
  pthread_mutex_lock(&cl->mu);
  s->reading++;
  for (;;) {
    if (client_stream_ready(cl, s)) {
      r = 1;
      break;
    }
    if (extra_fd >= 0) {
      struct pollfd p = {.fd = extra_fd, .events = POLLIN};
      if (poll(&p, 1, 0) > 0) {
        r = 2;
        break;
      }
    }
    if (rgpu_clock_ns() >= deadline) {
      r = 0;
      break;
    }
    client_progress_until(cl, s, deadline, extra_fd);
  }
  s->reading--;
  client_sync_evfd(cl, s);
  pthread_mutex_unlock(&cl->mu);
  return r;
}

/* rgpu_conn_abort: the stream ends both ways now (the peer gets a reset),
 * and its threads return: readers with what is queued, then EOF. */
static void quic_client_abort(rgpu_conn *c) {
  qhandle *h = c->impl;
  qclient *cl = h->cl;
  qstream *s = h->s;
  if (cl->owner != getpid()) return;
  pthread_mutex_lock(&cl->mu);
  if (!s->closed && !s->reset_sent && !client_over(cl)) {
    s->reset_sent = 1;
    ngtcp2_conn_shutdown_stream(cl->q->conn, s->sid, 1);
    q_write(cl->q);
  }
  s->peer_fin = 1;
  s->app_eof = 1;
  if (h->primary) atomic_store(&cl->no_linger, 1);
  client_notify(cl);
  if (cl->poller == Q_POLLER_APP) ev_raise(cl->poll_wake); /* a reader may be the poller */
  pthread_mutex_unlock(&cl->mu);
}

static const struct rgpu_conn_ops quic_client_ops = {
    .writev_all = quic_client_writev,
    .writev_reading = quic_client_writev_reading,
    .read_some = quic_client_read,
    .pending = quic_client_pending,
    .shutdown = quic_client_shutdown,
    .destroy = quic_client_destroy,
    .wait_input = quic_client_wait_input,
    .abort = quic_client_abort,
};

static rgpu_conn *quic_client_conn(qclient *cl, qstream *s, int primary) {
  rgpu_conn *c = calloc(1, sizeof *c);
  qhandle *h = calloc(1, sizeof *h);
  if (!c || !h) {
    free(c);
    free(h);
    return NULL;
  }
  h->cl = cl;
  h->s = s;
  h->primary = primary;
  c->ops = &quic_client_ops;
  c->fd = s->evfd;
  c->impl = h;
  snprintf(c->name, sizeof c->name, "quic");
  snprintf(c->peer, sizeof c->peer, "%s", cl->q->peer);
  c->session_key = cl->q->session_key;
  c->stream_index = s->index;
  return c;
}
/* A connection's driver with no socket and no connection yet.  0, or
 * RGPU_T_EIO (freed). */
static int qclient_new(qclient **out, char *err, size_t errlen) {
  qclient *cl = calloc(1, sizeof *cl);
  if (!cl) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  cl->ep.fd = cl->io_wake = cl->poll_wake = -1;
  cl->owner = getpid();
  atomic_init(&cl->refs, 1);
  pthread_mutex_init(&cl->mu, NULL);
  pthread_cond_init(&cl->cv, NULL);
  cl->rxbuf = malloc(Q_RX_BUF);
  cl->io_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  cl->poll_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!cl->rxbuf || cl->io_wake < 0 || cl->poll_wake < 0) {
    int rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "%s",
                         cl->rxbuf ? "eventfd failed" : "out of memory");
    qclient_free(cl);
    return rc;
  }
  *out = cl;
  return 0;
}

/* The connection is up: the conn of its first stream, and the I/O thread
 * that drives it between calls.  0, or RGPU_T_EIO (the caller frees cl). */
static int qclient_start(qclient *cl, qstream *s0, rgpu_conn **out, char *err, size_t errlen) {
  rgpu_conn *c = quic_client_conn(cl, s0, 1);
  if (!c) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  cl->app_poll_ns = rgpu_clock_ns();
  if (pthread_create(&cl->th, NULL, client_main, cl) != 0) {
    free(c->impl);
    free(c);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "QUIC: cannot start the connection thread");
  }
  cl->th_started = 1;
  *out = c;
  return 0;
}

int rgpu_quic_connect(const rgpu_uri *u, const rgpu_transport_opts *o, rgpu_conn **out,
                      char *err, size_t errlen) {
  ngtcp2_cc_algo cc;
  int cc_auto;
  int rc = parse_cc(o->cc_algo, &cc, &cc_auto, err, errlen);
  if (rc) return rc;
  if (u->port == 0)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "connect to %s: port 0 is not a server port", u->host);
  int timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000;
  uint64_t deadline = rgpu_clock_ns() + (uint64_t)timeout_ms * 1000000ull;

  qclient *cl = NULL;
  rc = qclient_new(&cl, err, errlen);
  if (rc) return rc;
  cl->spin_ns = (uint64_t)rgpu_spin_budget_us(Q_CLIENT_SPIN_US) * 1000;
  rc = rgpu_tls_client_creds(o, &cl->cred, err, errlen);
  if (rc) goto fail;

  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
  char port[8];
  snprintf(port, sizeof port, "%u", u->port);
  struct addrinfo *res = NULL;
  int g = getaddrinfo(u->host, port, &hints, &res);
  if (g) {
    rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "resolve '%s': %s", u->host, gai_strerror(g));
    goto fail;
  }
  struct sockaddr_storage remote;
  socklen_t remotelen = res->ai_addrlen;
  memcpy(&remote, res->ai_addr, res->ai_addrlen);
  int family = res->ai_family;
  freeaddrinfo(res);
  cl->ep.fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (cl->ep.fd < 0 || connect(cl->ep.fd, (struct sockaddr *)&remote, remotelen) < 0) {
    rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "QUIC connect to %s:%u: %s", u->host, u->port,
                     strerror(errno));
    goto fail;
  }
  cl->ep.locallen = sizeof cl->ep.local;
  getsockname(cl->ep.fd, (struct sockaddr *)&cl->ep.local, &cl->ep.locallen);
  endpoint_tune(&cl->ep);

  qconn *q = calloc(1, sizeof *q);
  if (!q) {
    rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
    goto fail;
  }
  cl->q = q;
  q->ep = &cl->ep;
  q->primary_fd = -1;
  q->big_probe_sid = -1;
  if (cc_auto) cc = q_default_cc((struct sockaddr *)&remote);
  gnutls_rnd(GNUTLS_RND_NONCE, &q->session_key, sizeof q->session_key);
  rgpu_sockaddr_string((struct sockaddr *)&remote, remotelen, q->peer, sizeof q->peer);
  ngtcp2_path_storage_init(&q->ps, (ngtcp2_sockaddr *)&cl->ep.local, cl->ep.locallen,
                           (ngtcp2_sockaddr *)&remote, remotelen, NULL);
  ngtcp2_cid dcid, scid;
  uint8_t cidbuf[Q_INITIAL_DCID_LEN];
  gnutls_rnd(GNUTLS_RND_RANDOM, cidbuf, sizeof cidbuf);
  ngtcp2_cid_init(&dcid, cidbuf, sizeof cidbuf);
  gnutls_rnd(GNUTLS_RND_RANDOM, cidbuf, sizeof cidbuf);
  ngtcp2_cid_init(&scid, cidbuf, q_client_cid_len());
  ngtcp2_callbacks cb;
  fill_callbacks(&cb, 0);
  ngtcp2_settings st;
  ngtcp2_transport_params tp;
  q->loopback = q_loopback_path((struct sockaddr *)&remote);
  fill_settings(&st, &tp, o, cc, 0, 0, q->loopback);
  int lib = ngtcp2_conn_client_new(&q->conn, &dcid, &scid, &q->ps.path, NGTCP2_PROTO_VER_V1, &cb,
                                   &st, &tp, NULL, q);
  if (lib) {
    rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "ngtcp2: %s", ngtcp2_strerror(lib));
    goto fail;
  }
  const char *name = (o->server_name && *o->server_name) ? o->server_name : u->host;
  rc = q_setup_tls(q, cl->cred, 0, 0, name, err, errlen);
  if (rc) goto fail;
  ngtcp2_conn_set_tls_native_handle(q->conn, q->tls);
  q_set_keepalive(q, o, cc);

  /* Handshake on the caller's thread so that failures come back here.  Done
   * once our Finished is out: the session's first request then leaves with
   * it, one round trip earlier than waiting for the server's HANDSHAKE_DONE
   * (`rgpu info` through rgpu-netem at 100 ms RTT: 0.83 s over quic://,
   * 0.82 s over tls://, 0.71 s over tcp://; quic:// 0.72 s now, and every
   * reconnect of a resume gains the same).  Except
   * where the server asked for a client certificate: one it rejects shows
   * only after our Finished, and must fail here, named. */
  while (!q_connect_done(q)) {
    q_write(q);
    if (q->dead || q->closing) break;
    uint64_t now = rgpu_clock_ns();
    if (now >= deadline) {
      q_set_error(q, RGPU_T_ETIMEDOUT,
                  "QUIC connect to %s:%u: no handshake within %d ms (is a quic:// listener there? "
                  "is UDP blocked?)", u->host, u->port, timeout_ms);
      break;
    }
    uint64_t exp = q_next_expiry(q);
    if (exp > deadline) exp = deadline;
    struct timespec ts = rgpu_ns_timespec(rgpu_deadline_left_ns(exp));
    struct pollfd p = {.fd = cl->ep.fd, .events = POLLIN};
    int r = ppoll(&p, 1, &ts, NULL);
    if (r < 0 && errno != EINTR) break;
    if (r > 0) {
      /* A refused connect shows as ECONNREFUSED on the connected socket. */
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      if ((p.revents & POLLERR) && getsockopt(cl->ep.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
          soerr == ECONNREFUSED) {
        q_set_error(q, RGPU_T_ECONNREFUSED,
                    "QUIC connect to %s:%u: connection refused (nothing listens on that UDP port)",
                    u->host, u->port);
        q->dead = 1;
        break;
      }
      ep_read_batch(&cl->ep, cl->rxbuf, client_pkt, q);
    }
    q_expiry(q);
  }
  q->connect_waited_confirm = q->hs_confirmed;
  int connected = q_connect_done(q) && !q->dead && !q->closing;
  if (connected) q_write(q); /* our Finished, now */
  if (!connected || q->dead || q->closing) { /* the write may have failed */
    if (!q->dead) q_send_close(q);
    if (!atomic_load(&q->errcode))
      q_set_error(q, RGPU_T_EIO, "QUIC connect to %s:%u failed", u->host, u->port);
    rc = rgpu_t_fail(err, errlen, atomic_load(&q->errcode), "%s", q->errmsg);
    goto fail;
  }
  qstream *s0;
  rc = client_open_stream(cl, &s0, err, errlen);
  if (rc) goto fail;
  rc = qclient_start(cl, s0, out, err, errlen);
  if (rc) goto fail;
  return 0;
fail:
  qclient_free(cl);
  return rc;
}

int rgpu_conn_migrate(rgpu_conn *c, char *err, size_t errlen) {
  if (!c || c->ops != &quic_client_ops)
    return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP,
                       "connection migration is a quic:// client feature");
  qclient *cl = ((qhandle *)c->impl)->cl;
  if (cl->owner != getpid())
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "QUIC connection belongs to the parent process");
  if (cl->server)
    return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "a QUIC server does not migrate; its client does");
  pthread_mutex_lock(&cl->mu);
  int rc = client_acquire(cl);
  if (rc) {
    rgpu_t_fail(err, errlen, rc, "QUIC connection is closed");
  } else {
    rc = client_do_migrate(cl, err, errlen);
    cl->app_poll_ns = rgpu_clock_ns();
    client_release(cl);
  }
  pthread_mutex_unlock(&cl->mu);
  return rc;
}

int rgpu_conn_open_stream(rgpu_conn *c, rgpu_conn **out, char *err, size_t errlen) {
  if (!out) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "rgpu_conn_open_stream: no output pointer");
  *out = NULL;
  if (!c || c->ops != &quic_client_ops)
    return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP,
                       "extra streams need a quic:// connection (this one is %s)",
                       c ? c->name : "none");
  qclient *cl = ((qhandle *)c->impl)->cl;
  if (cl->owner != getpid())
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "QUIC connection belongs to the parent process");
  if (cl->server)
    return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "streams of a direct QUIC session are opened by its client");
  pthread_mutex_lock(&cl->mu);
  qstream *s;
  int rc = client_open_stream(cl, &s, err, errlen);
  rgpu_conn *sc = rc ? NULL : quic_client_conn(cl, s, 0);
  if (!rc && !sc) {
    s->app_open = 0; /* freed once closed */
    s->app_eof = s->app_gone = 1;
    q_write(cl->q);
    rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  }
  pthread_mutex_unlock(&cl->mu);
  if (rc) return rc;
  atomic_fetch_add(&cl->refs, 1);
  *out = sc;
  return 0;
}

void rgpu_conn_set_poll_us(rgpu_conn *c, unsigned us) {
  if (!c || c->ops != &quic_client_ops) return;
  qclient *cl = ((qhandle *)c->impl)->cl;
  if (cl->owner != getpid()) return;
  pthread_mutex_lock(&cl->mu);
  cl->spin_ns = (uint64_t)us * 1000;
  pthread_mutex_unlock(&cl->mu);
}

static int client_do_info(qclient *cl, rgpu_quic_info *out, char *err, size_t errlen) {
  qconn *q = cl->q;
  if (client_over(cl))
    return rgpu_t_fail(err, errlen, RGPU_T_ECLOSED, "QUIC connection to %s is closed", q->peer);
  ngtcp2_conn_stat st;
  ngtcp2_conn_get_conn_stat(q->conn, &st);
  memset(out, 0, sizeof *out);
  snprintf(out->cc, sizeof out->cc, "%s", cc_name(q->cc));
  out->max_pto_ms = q->pto_cap_ns / NGTCP2_MILLISECONDS;
  uint64_t idle = q->idle_ns;
  const ngtcp2_transport_params *rp = ngtcp2_conn_get_remote_transport_params(q->conn);
  if (rp && rp->max_idle_timeout && rp->max_idle_timeout < idle) idle = rp->max_idle_timeout;
  out->idle_timeout_ms = idle / NGTCP2_MILLISECONDS;
  out->peer_max_ack_delay_ms = rp ? rp->max_ack_delay / NGTCP2_MILLISECONDS : 0;
  out->srtt_us = st.smoothed_rtt / NGTCP2_MICROSECONDS;
  out->min_rtt_us = st.min_rtt == UINT64_MAX ? 0 : st.min_rtt / NGTCP2_MICROSECONDS;
  out->cwnd_bytes = st.cwnd;
  out->bytes_in_flight = st.bytes_in_flight;
  out->pto_count = st.pto_count;
  out->capped_probes = q->capped_probes;
  out->connect_waited_confirm = q->connect_waited_confirm;
  out->max_udp_payload = q->big_failed ? Q_FALLBACK_PKT
                                        : ngtcp2_conn_get_path_max_tx_udp_payload_size(q->conn);
  return 0;
}

int rgpu_conn_quic_info(rgpu_conn *c, rgpu_quic_info *out, char *err, size_t errlen) {
  if (!out) return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "rgpu_conn_quic_info: no output pointer");
  if (!c || c->ops != &quic_client_ops)
    return rgpu_t_fail(err, errlen, RGPU_T_ENOTSUP, "QUIC statistics need a quic:// client conn");
  qclient *cl = ((qhandle *)c->impl)->cl;
  if (cl->owner != getpid())
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "QUIC connection belongs to the parent process");
  pthread_mutex_lock(&cl->mu);
  int rc = client_do_info(cl, out, err, errlen);
  pthread_mutex_unlock(&cl->mu);
  return rc;
}

/* ---- direct ------------------------------------------------------------------ */

/* A session's QUIC connection terminated in the worker (issue 21).
 *
 * Why: the listener's relay terminated every QUIC connection and passed
 * the session's bytes to its worker through a socketpair.  A synchronous
 * call crossed four threads (client, relay, worker, relay) where tcp://
 * crosses two, and every byte was copied into and out of the socketpair;
 * on the H200 host the call took 1.2-1.9x tcp's time and bulk stopped at
 * 1.45 GB/s.  ngtcp2's state cannot move between processes, so the worker
 * does not take over the relay's connection: its client makes a second one
 * to a UDP port of the worker's own and moves the session there with
 * RESUME (server/rgpu_quic_direct.c, client/rgpu_client.c).
 *
 * The worker's side is a qclient with `server` set: the same rules as the
 * client (the thread that waits reads the socket, one poller at a time, an
 * I/O thread between calls), so a request crosses no thread in the worker
 * either.  Its socket is not connected (the client may migrate); packets
 * for other connection IDs are dropped (q_owns_packet).  Streams the
 * client opens later (bulk lanes) go to the handler set with
 * rgpu_conn_set_stream_handler. */

static int direct_stream_open(qconn *q, int64_t sid) {
  qclient *cl = q->driver;
  int evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (evfd < 0) return NGTCP2_ERR_CALLBACK_FAILURE;
  qstream *s = qs_new(q, sid, -1);
  if (!s) {
    close(evfd);
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  s->evfd = evfd;
  s->app_open = 1; /* its conn is made by accept (stream 0) or client_hand_streams */
  ngtcp2_conn_set_stream_user_data(q->conn, sid, s);
  if (s->index > 0) {
    qstream **pp = &cl->accepted;
    while (*pp) pp = &(*pp)->accept_next;
    *pp = s;
    ev_raise(cl->io_wake);
  }
  return 0;
}

int rgpu_quic_direct_socket(const char *host, uint16_t port_lo, uint16_t port_hi, int *fd_out,
                            uint16_t *port, char *err, size_t errlen) {
  *fd_out = -1;
  *port = 0;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int g = getaddrinfo(host && *host ? host : NULL, "0", &hints, &res);
  if (g)
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "resolve '%s': %s", host ? host : "",
                       gai_strerror(g));
  unsigned n = port_lo && port_hi >= port_lo ? (unsigned)(port_hi - port_lo) + 1 : 1;
  unsigned start = 0;
  if (n > 1) {
    gnutls_rnd(GNUTLS_RND_NONCE, &start, sizeof start);
    start %= n;
  }
  int last = 0, fd = -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    for (unsigned i = 0; i < n && fd < 0; i++) {
      uint16_t p = port_lo ? (uint16_t)(port_lo + (start + i) % n) : 0;
      struct sockaddr_storage ss;
      memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
      if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons(p);
      else
        ((struct sockaddr_in *)&ss)->sin_port = htons(p);
      fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) {
        last = errno;
        break;
      }
      if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) != 0) {
        last = errno;
        close(fd);
        fd = -1;
      }
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    return rgpu_t_fail(err, errlen, rgpu_t_errno_code(last), "udp socket on %s: %s",
                       host && *host ? host : "*", strerror(last));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                         : ((struct sockaddr_in *)&ss)->sin_port);
  *fd_out = fd;
  return 0;
}

typedef struct {
  qclient *cl;
  qserver_params sp;
} direct_accept_ctx;

/* A datagram while no handshake has finished: the first acceptable
 * Initial makes the connection; what is not for it is dropped. */
static void direct_pkt(void *ctx, const struct sockaddr *local, socklen_t locallen,
                       const struct sockaddr *from, socklen_t fromlen, const uint8_t *pkt,
                       size_t len) {
  direct_accept_ctx *dc = ctx;
  qclient *cl = dc->cl;
  if (!cl->q) {
    cl->q = server_conn_new(&dc->sp, local, locallen, from, fromlen, pkt, len);
    if (!cl->q) return;
  }
  client_pkt(cl->q, local, locallen, from, fromlen, pkt, len);
}

static qstream *direct_stream0(qconn *q) {
  for (qstream *s = q->streams; s; s = s->next)
    if (s->index == 0) return s;
  return NULL;
}

int rgpu_quic_direct_accept(int fd, const rgpu_transport_opts *o, int stop_fd, int timeout_ms,
                            rgpu_conn **out, char *err, size_t errlen) {
  *out = NULL;
  direct_accept_ctx dc;
  memset(&dc, 0, sizeof dc);
  int rc = parse_cc(o->cc_algo, &dc.sp.cc, &dc.sp.cc_auto, err, errlen);
  if (rc == 0 && (o->quic_max_streams < 0 || o->quic_max_streams > 1024))
    rc = rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "quic_max_streams %d out of range (0-1024)",
                     o->quic_max_streams);
  qclient *cl = NULL;
  if (rc == 0) rc = qclient_new(&cl, err, errlen);
  if (rc) {
    close(fd);
    return rc;
  }
  cl->server = 1;
  cl->ep.fd = fd;
  cl->ep.locallen = sizeof cl->ep.local;
  getsockname(fd, (struct sockaddr *)&cl->ep.local, &cl->ep.locallen);
  endpoint_tune(&cl->ep);
  gnutls_rnd(GNUTLS_RND_RANDOM, cl->reset_secret, sizeof cl->reset_secret);
  rc = rgpu_tls_server_creds(o, &cl->cred, err, errlen);
  if (rc) goto fail;
  rgpu_transport_opts so = *o;
  so.cc_algo = so.ca_file = so.cert_file = so.key_file = so.server_name = so.client_ca_file = NULL;
  dc.cl = cl;
  dc.sp = (qserver_params){.ep = &cl->ep,
                           .driver = cl,
                           .cred = cl->cred,
                           .require_client_cert = o->client_ca_file && *o->client_ca_file,
                           .opts = &so,
                           .cc = dc.sp.cc,
                           .cc_auto = dc.sp.cc_auto,
                           .max_streams = o->quic_max_streams > 0 ? o->quic_max_streams : 1,
                           .reset_secret = cl->reset_secret};
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX
                                     : rgpu_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  qstream *s0 = NULL;
  for (;;) {
    qconn *q = cl->q;
    if (q && !q->dead && !q->closing && q->handshake_done && (s0 = direct_stream0(q))) break;
    if (q && (q->dead || q->closing)) {
      /* A handshake that failed (a stranger, a certificate refused): the
       * socket waits for the next one. */
      RGPU_DEBUG("quic direct: %s", q->errmsg[0] ? q->errmsg : "handshake abandoned");
      if (!q->dead) q_send_close(q);
      q_free(q);
      cl->q = NULL;
    }
    uint64_t now = rgpu_clock_ns();
    if (now >= deadline) {
      rc = rgpu_t_fail(err, errlen, RGPU_T_ETIMEDOUT,
                       "no client finished a QUIC handshake on the direct port within %d ms",
                       timeout_ms);
      goto fail;
    }
    uint64_t exp = cl->q ? q_next_expiry(cl->q) : UINT64_MAX;
    if (exp > deadline) exp = deadline;
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
    struct timespec ts = rgpu_ns_timespec(rgpu_deadline_left_ns(exp));
    int r = ppoll(p, stop_fd >= 0 ? 2 : 1, exp == UINT64_MAX ? NULL : &ts, NULL);
    if (r < 0 && errno != EINTR) {
      rc = rgpu_t_fail(err, errlen, RGPU_T_EIO, "quic direct: poll: %s", strerror(errno));
      goto fail;
    }
    if (r > 0 && stop_fd >= 0 && p[1].revents) {
      rc = rgpu_t_fail(err, errlen, RGPU_T_ECLOSED, "quic direct: stopped");
      goto fail;
    }
    if (r > 0 && p[0].revents) ep_read_batch(&cl->ep, cl->rxbuf, direct_pkt, &dc);
    if (cl->q) {
      q_expiry(cl->q);
      q_write(cl->q);
    }
  }
  rc = qclient_start(cl, s0, out, err, errlen);
  if (rc) goto fail;
  return 0;
fail:
  if (cl->q && !cl->q->dead) q_send_close(cl->q);
  qclient_free(cl); /* closes fd */
  return rc;
}

void rgpu_conn_set_stream_handler(rgpu_conn *c, void (*fn)(void *ctx, rgpu_conn *stream),
                                  void *ctx) {
  if (!c || c->ops != &quic_client_ops) return;
  qclient *cl = ((qhandle *)c->impl)->cl;
  if (cl->owner != getpid() || !cl->server) return;
  pthread_mutex_lock(&cl->mu);
  cl->stream_cb = fn;
  cl->stream_ctx = ctx;
  if (cl->accepted) ev_raise(cl->io_wake);
  pthread_mutex_unlock(&cl->mu);
}

/* ---- server ------------------------------------------------------------------ */

static qconn *server_find(qserver *sv, const uint8_t *dcid, size_t dcidlen) {
  for (qconn *q = sv->conns; q; q = q->next)
    if (cid_known(q, dcid, dcidlen)) return q;
  return NULL;
}

/* A server connection for the client whose Initial is pkt; NULL when pkt
 * is no acceptable Initial or on failure (logged). */
static qconn *server_conn_new(const qserver_params *sp, const struct sockaddr *local,
                              socklen_t locallen, const struct sockaddr *from, socklen_t fromlen,
                              const uint8_t *pkt, size_t len) {
  ngtcp2_pkt_hd hd;
  if (ngtcp2_accept(&hd, pkt, len) != 0) return NULL;
  qconn *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->is_server = 1;
  q->server = sp->server;
  q->driver = sp->driver;
  q->ep = sp->ep;
  q->primary_fd = -1;
  q->big_probe_sid = -1;
  gnutls_rnd(GNUTLS_RND_NONCE, &q->session_key, sizeof q->session_key);
  rgpu_sockaddr_string(from, fromlen, q->peer, sizeof q->peer);
  ngtcp2_path_storage_init(&q->ps, (ngtcp2_sockaddr *)local, locallen, (ngtcp2_sockaddr *)from,
                           fromlen, NULL);
  ngtcp2_cid scid;
  server_cid_make(q, &scid, Q_SERVER_CID_LEN);
  ngtcp2_callbacks cb;
  fill_callbacks(&cb, 1);
  ngtcp2_settings st;
  ngtcp2_transport_params tp;
  ngtcp2_cc_algo cc = sp->cc_auto ? q_default_cc(from) : sp->cc;
  q->loopback = q_loopback_path(from);
  fill_settings(&st, &tp, sp->opts, cc, 1, sp->max_streams, q->loopback);
  /* ngtcp2 does not fill this in for the server; the client checks it. */
  tp.original_dcid = hd.dcid;
  tp.stateless_reset_token_present = 1;
  ngtcp2_crypto_generate_stateless_reset_token(tp.stateless_reset_token, sp->reset_secret,
                                               Q_RESET_SECRET_LEN, &scid);
  int lib = ngtcp2_conn_server_new(&q->conn, &hd.scid, &scid, &q->ps.path, hd.version, &cb, &st,
                                   &tp, NULL, q);
  if (lib) {
    free(q);
    return NULL;
  }
  char err[256];
  if (q_setup_tls(q, sp->cred, 1, sp->require_client_cert, NULL, err, sizeof err)) {
    RGPU_WARN("quic: %s", err);
    q_free(q);
    return NULL;
  }
  ngtcp2_conn_set_tls_native_handle(q->conn, q->tls);
  q_set_keepalive(q, sp->opts, cc);
  cid_add(q, &hd.dcid); /* the client keeps using it until it hears from us */
  cid_add(q, &scid);
  q->created_ns = rgpu_clock_ns();
  return q;
}

static qconn *server_new_conn(qserver *sv, const struct sockaddr *local, socklen_t locallen,
                              const struct sockaddr *from, socklen_t fromlen, const uint8_t *pkt,
                              size_t len) {
  qserver_params sp = {.ep = &sv->ep,
                       .server = sv,
                       .cred = rgpu_tls_server_cred_get(&sv->cred),
                       .require_client_cert = sv->require_client_cert,
                       .opts = &sv->opts,
                       .cc = sv->cc,
                       .cc_auto = sv->cc_auto,
                       .max_streams = sv->max_streams,
                       .reset_secret = sv->reset_secret};
  qconn *q = server_conn_new(&sp, local, locallen, from, fromlen, pkt, len);
  if (!q) return NULL;
  q->next = sv->conns;
  sv->conns = q;
  sv->nconns++;
  return q;
}

/* With every handshake slot taken (RGPU_T_MAX_PENDING_HANDSHAKES
 * connections whose handshake has not finished), drops the oldest one if it
 * is old enough, so that one more client can start.  Peers that send a
 * first flight and then nothing (or whose source address was made up) held
 * a slot for the whole 10 s handshake timeout, and 4,096 of them locked
 * every client out.  Returns 0 when a new connection may be made, -1 when
 * none can: the packet is dropped and the client retransmits. */
static int server_handshake_room(qserver *sv) {
  int pending = 0;
  qconn *oldest = NULL;
  for (qconn *q = sv->conns; q; q = q->next) {
    if (q->handshake_done || q->dead || q->closing) continue;
    pending++;
    if (!oldest || q->created_ns < oldest->created_ns) oldest = q;
  }
  if (pending < RGPU_T_MAX_PENDING_HANDSHAKES) return 0;
  uint64_t now = rgpu_clock_ns();
  if (!oldest || now < oldest->created_ns + (uint64_t)RGPU_T_HS_EVICT_AGE_MS * 1000000ull)
    return -1;
  /* Dropped without a word (q->dead): the relay loop frees it; telling a
   * peer that never answers costs a packet for nothing. */
  oldest->dead = 1;
  if (sv->evictions++ % RGPU_T_MAX_PENDING_HANDSHAKES == 0)
    RGPU_WARN("quic: all %d handshake slots are taken by peers that do not finish their "
              "handshake (%s, %.1f s); the oldest give their slot to new clients (%llu so far)",
              RGPU_T_MAX_PENDING_HANDSHAKES, oldest->peer,
              (double)(now - oldest->created_ns) / 1e9, (unsigned long long)sv->evictions);
  return 0;
}

static void server_pkt(void *ctx, const struct sockaddr *local, socklen_t locallen,
                       const struct sockaddr *from, socklen_t fromlen, const uint8_t *pkt,
                       size_t len) {
  qserver *sv = ctx;
  ngtcp2_version_cid vc;
  if (ngtcp2_pkt_decode_version_cid(&vc, pkt, len, Q_SERVER_CID_LEN) != 0)
    return; /* version negotiation is not offered: v1 only */
  qconn *q = server_find(sv, vc.dcid, vc.dcidlen);
  if (!q) {
    /* Only a well-formed Initial may take (or free) a handshake slot: junk
     * datagrams must not evict real clients' handshakes. */
    ngtcp2_pkt_hd hd;
    if (sv->nconns >= 4096 || ngtcp2_accept(&hd, pkt, len) != 0 || server_handshake_room(sv)) return;
    q = server_new_conn(sv, local, locallen, from, fromlen, pkt, len);
    if (!q) return;
  }
  q_read_packet(q, local, locallen, from, fromlen, pkt, len);
}

/* After the handshake (client certificate checked, if required) the session
 * becomes visible to rgpu_listener_accept; not before. */
static int server_make_session(qserver *sv, qconn *q) {
  int rel, wfd;
  if (rgpu_relay_socketpair(&rel, &wfd) < 0) return -1;
  q_tune_pair(rel, wfd);
  q->primary_fd = rel;
  q->queued = 1;
  rgpu_relay_queue_push(&sv->rq, wfd, q->peer, q->session_key, 0);
  return 0;
}

static void server_after_handshake(qserver *sv, qconn *q) {
  if (!q->handshake_done || q->queued || q->dead || q->closing) return;
  if (server_make_session(sv, q) < 0) q->closing = 1;
}

static int server_conn_finished(qconn *q) {
  if (q->dead || q->closing) return 1;
  /* The session stream ended (both ways, everything acknowledged) or its
   * worker went away: the connection has nothing left to carry. */
  if (q->primary_done) return 1;
  for (qstream *s = q->streams; s; s = s->next) {
    /* Once the worker's last bytes (and FIN) are acknowledged: closing
     * before would lose them too. */
    if (s->index == 0 && s->app_gone &&
        (s->closed ||
         (s->app_eof && s->fin_sent && s->acked_off >= s->write_off))) {
      q->close_error = 1;
      return 1;
    }
  }
  /* The worker closed the session before the client's first byte on it. */
  if (q->primary_fd >= 0) {
    char b;
    ssize_t r = recv(q->primary_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r == 0) return 1;
  }
  return 0;
}

static void *server_main(void *arg) {
  rgpu_thread_name("rgpu-quic-rly");
  qserver *sv = arg;
  chunk_pool_on = 1;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  uint8_t *rx = malloc(Q_RX_BUF);
  if (!rx) {
    RGPU_ERROR("quic relay: out of memory for its receive buffer");
    chunk_pool_drain();
    return NULL;
  }
  struct pollfd *pfd = NULL;
  void **who = NULL;
  size_t pfd_cap = 0, who_cap = 0;
  rgpu_spin_window spin;
  rgpu_spin_window_init(&spin, Q_RELAY_SPIN_US);
  for (;;) {
    size_t need = 2;
    for (qconn *q = sv->conns; q; q = q->next) need += (size_t)q->nstreams;
    /* Out of memory for the poll set ends the relay, as a failed poll does. */
    if (RGPU_ARRAY_RESERVE(pfd, pfd_cap, need, 2 * need) || RGPU_ARRAY_RESERVE(who, who_cap, need, 2 * need))
      break;
    size_t n = 0;
    int any_blocked = 0;
    uint64_t exp = UINT64_MAX;
    for (qconn *q = sv->conns; q; q = q->next) {
      rgpu_spin_window_await(&spin, q->asked_ns);
      if (q->send_blocked) any_blocked = 1;
      uint64_t e = q_next_expiry(q);
      if (e < exp) exp = e;
    }
    pfd[n++] = (struct pollfd){.fd = sv->rq.stop_r, .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = sv->ep.fd, .events = POLLIN | (any_blocked ? POLLOUT : 0)};
    for (qconn *q = sv->conns; q; q = q->next) n += (size_t)q_add_pollfds(q, pfd, who, n);
    /* A session whose stream is not open yet: notice its worker leaving. */
    int waiting_primary = 0;
    for (qconn *q = sv->conns; q; q = q->next)
      if (q->primary_fd >= 0) waiting_primary = 1;
    uint64_t cap_ns = rgpu_clock_ns() + (waiting_primary ? 100000000ull : UINT64_MAX / 2);
    if (cap_ns < exp) exp = cap_ns;
    int r = rgpu_spin_window_ppoll(&spin, pfd, n, exp);
    if (r < 0 && errno != EINTR) {
      RGPU_ERROR("quic relay: poll: %s", strerror(errno));
      break;
    }
    if (pfd[0].revents) break;
    if (pfd[1].revents & POLLIN) ep_read_batch(&sv->ep, rx, server_pkt, sv);
    qconn **pp = &sv->conns;
    while (*pp) {
      qconn *q = *pp;
      q_expiry(q);
      server_after_handshake(sv, q);
      q_service_streams(q);
      q_write(q);
      if (server_conn_finished(q)) {
        int code = atomic_load(&q->errcode);
        if (!q->handshake_done && code)
          RGPU_INFO("%s (refused before any session was created)", q->errmsg);
        else if (code)
          RGPU_DEBUG("quic: %s", q->errmsg);
        q_send_close(q);
        *pp = q->next;
        sv->nconns--;
        q_free(q);
      } else {
        pp = &q->next;
      }
    }
  }
  free(rx);
  free(pfd);
  free(who);
  chunk_pool_drain();
  return NULL;
}

static int quic_accept(rgpu_listener *l, rgpu_conn **out, char *err, size_t errlen) {
  qserver *sv = l->impl;
  return rgpu_relay_queue_pop(&sv->rq, "quic", out, err, errlen);
}

static void quic_server_close(rgpu_listener *l) {
  qserver *sv = l->impl;
  if (rgpu_relay_in_forked_child()) return; /* see tls_server_close */
  if (sv->th_started) {
    char b = 1;
    (void)!write(sv->rq.stop_w, &b, 1);
    pthread_join(sv->th, NULL);
  }
  while (sv->conns) {
    qconn *q = sv->conns;
    sv->conns = q->next;
    q_send_close(q);
    q_free(q);
  }
  rgpu_relay_close_fd(sv->ep.fd);
  rgpu_relay_queue_destroy(&sv->rq);
  rgpu_tls_server_cred_free(&sv->cred);
  free(sv);
}

static int quic_server_reload(rgpu_listener *l, const rgpu_transport_opts *o, char *err,
                              size_t errlen) {
  qserver *sv = l->impl;
  return rgpu_tls_server_cred_reload(&sv->cred, o, err, errlen);
}

static const struct rgpu_listener_ops quic_listener_ops = {.accept = quic_accept,
                                                           .close = quic_server_close,
                                                           .reload = quic_server_reload};

int rgpu_quic_listen(rgpu_listener *l, const rgpu_transport_opts *o, char *err, size_t errlen) {
  qserver *sv = calloc(1, sizeof *sv);
  if (!sv) return rgpu_t_fail(err, errlen, RGPU_T_EIO, "out of memory");
  sv->ep.fd = -1;
  int rc = parse_cc(o->cc_algo, &sv->cc, &sv->cc_auto, err, errlen);
  if (rc) {
    free(sv);
    return rc;
  }
  if (o->quic_max_streams < 0 || o->quic_max_streams > 1024) {
    free(sv);
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "quic_max_streams %d out of range (0-1024)",
                       o->quic_max_streams);
  }
  rc = rgpu_tls_server_cred_init(&sv->cred, o, err, errlen);
  if (rc) {
    free(sv);
    return rc;
  }
  sv->require_client_cert = o->client_ca_file && *o->client_ca_file;
  sv->max_streams = o->quic_max_streams > 0 ? o->quic_max_streams : 1;
  sv->opts = *o;
  sv->opts.cc_algo = sv->opts.ca_file = sv->opts.cert_file = sv->opts.key_file = NULL;
  sv->opts.server_name = sv->opts.client_ca_file = NULL;
  gnutls_rnd(GNUTLS_RND_RANDOM, sv->reset_secret, sizeof sv->reset_secret);

  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  char ps[8];
  snprintf(ps, sizeof ps, "%u", l->uri.port);
  struct addrinfo *res = NULL;
  int g = getaddrinfo(l->uri.host, ps, &hints, &res);
  if (g) {
    rgpu_tls_server_cred_free(&sv->cred);
    free(sv);
    return rgpu_t_fail(err, errlen, RGPU_T_EINVAL, "resolve '%s': %s", l->uri.host, gai_strerror(g));
  }
  int last = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = errno;
      continue;
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sv->ep.fd = fd;
      break;
    }
    last = errno;
    close(fd);
  }
  freeaddrinfo(res);
  if (sv->ep.fd < 0) {
    rgpu_tls_server_cred_free(&sv->cred);
    free(sv);
    return rgpu_t_fail(err, errlen, rgpu_t_errno_code(last), "listen on udp %s:%u: %s",
                       l->uri.host, l->uri.port, strerror(last));
  }
  rgpu_relay_fd_register(sv->ep.fd);
  sv->ep.locallen = sizeof sv->ep.local;
  getsockname(sv->ep.fd, (struct sockaddr *)&sv->ep.local, &sv->ep.locallen);
  endpoint_tune(&sv->ep);
  rgpu_sockaddr_string((struct sockaddr *)&sv->ep.local, sv->ep.locallen, l->address,
                       sizeof l->address);
  l->port = ntohs(sv->ep.local.ss_family == AF_INET6
                      ? ((struct sockaddr_in6 *)&sv->ep.local)->sin6_port
                      : ((struct sockaddr_in *)&sv->ep.local)->sin_port);
  rc = rgpu_relay_queue_init(&sv->rq, err, errlen);
  if (rc) {
    rgpu_relay_close_fd(sv->ep.fd);
    rgpu_tls_server_cred_free(&sv->cred);
    free(sv);
    return rc;
  }
  l->impl = sv;
  l->ops = &quic_listener_ops;
  l->fd = sv->rq.notify_r;
  if (pthread_create(&sv->th, NULL, server_main, sv) != 0) {
    quic_server_close(l);
    return rgpu_t_fail(err, errlen, RGPU_T_EIO, "quic listener: cannot start relay thread");
  }
  sv->th_started = 1;
  return 0;
}
