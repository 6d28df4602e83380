/* CUDA's error log (cudaLogsRegisterCallback, cudaLogsCurrent,
 * cudaLogsDumpToMemory/ToFile, CUDA 12.9): where a program reads why a call
 * failed.  Through rgpu the reason is usually the server's (its driver's
 * verdict, a quota, a refused module) and arrives with the failed reply or
 * the asynchronous error; a local GPU's driver writes its own text here.
 * So the log holds:
 * - every server reason, as it arrives (the client core's failure tap,
 *   client/rgpu_client.h), as "[rgpu-server] cudaErrorX: reason";
 * - every error and warning rgpu itself reports (rgpu_log's tap, whatever
 *   RGPU_LOG prints), as "[rgpu] text": the unsupported functions named
 *   once, refusals of features a remote GPU cannot offer.
 * Messages are numbered from 0 (a cudaLogIterator is the number of the
 * next one); at most 25600 bytes are kept, CUDA's documented size, the
 * oldest dropped first, and a dump that starts before what is kept says
 * how many were lost.
 *
 * Callbacks see each message once, on a thread that is returning an error
 * from a runtime call and holds no rgpu lock (rgpu_rt_logs_deliver, from
 * rgpu_rt_ret), never on the client's receiving path, where the lock held
 * would deadlock a callback that calls CUDA. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudart.h"
#include "rgpu_cudart_errors.h"
#include "rgpu_log.h"

#define LOG_BYTES 25600u
#define LOGS_CALLBACK_MAGIC 0x43474f4cu /* "LOGC" */

typedef struct {
  char *text;
  size_t len;
  cudaLogLevel level;
} log_entry;

struct CUlogsCallbackEntry_st {
  uint32_t magic;
  cudaLogsCallback_t fn;
  void *data;
  struct CUlogsCallbackEntry_st *next;
};

/* g_logs_lock guards everything below: a leaf (the taps take it under the
 * client's lock; nothing is called while it is held). */
static rgpu_mutex g_logs_lock = RGPU_MUTEX_INITIALIZER;
static log_entry *g_ring; /* g_cap slots; message i lives at i % g_cap */
static size_t g_cap;
static uint32_t g_first, g_next; /* kept messages: [g_first, g_next) */
static size_t g_bytes;
static uint32_t g_delivered; /* callbacks have seen [.., g_delivered) */
static struct CUlogsCallbackEntry_st *g_callbacks;
static int g_pending; /* messages not yet delivered (atomic, read without the lock) */

static void drop_oldest_locked(void) {
  log_entry *e = &g_ring[g_first % g_cap];
  g_bytes -= e->len + 1;
  free(e->text);
  e->text = NULL;
  g_first++;
  if ((int32_t)(g_delivered - g_first) < 0) g_delivered = g_first;
}

static void logs_add(cudaLogLevel level, const char *text) {
  size_t len = strlen(text);
  if (len > LOG_BYTES / 4) len = LOG_BYTES / 4;
  char *copy = malloc(len + 1);
  if (!copy) return;
  memcpy(copy, text, len);
  copy[len] = 0;
  rgpu_mutex_lock(&g_logs_lock);
  if (g_next - g_first == g_cap) {
    size_t cap = g_cap ? g_cap * 2 : 64;
    log_entry *ring = calloc(cap, sizeof *ring);
    if (!ring) {
      if (!g_cap) {
        rgpu_mutex_unlock(&g_logs_lock);
        free(copy);
        return;
      }
      drop_oldest_locked(); /* no room to grow: the oldest makes room */
    } else {
      for (uint32_t i = g_first; i != g_next; i++) ring[i % cap] = g_ring[i % g_cap];
      free(g_ring);
      g_ring = ring;
      g_cap = cap;
    }
  }
  while (g_next != g_first && g_bytes + len + 1 > LOG_BYTES) drop_oldest_locked();
  g_ring[g_next % g_cap] = (log_entry){copy, len, level};
  g_next++;
  g_bytes += len + 1;
  if (g_callbacks) __atomic_store_n(&g_pending, 1, __ATOMIC_RELEASE);
  rgpu_mutex_unlock(&g_logs_lock);
}

static void failure_tap(uint32_t status, const char *msg) {
  char line[512];
  snprintf(line, sizeof line, "[rgpu-server] %s: %s",
           rgpu_cudart_error_name(rgpu_cudart_from_cu((int)status)), msg);
  logs_add(cudaLogLevelError, line);
}

static void log_tap(rgpu_log_level level, const char *msg) {
  char line[1100];
  snprintf(line, sizeof line, "[rgpu] %s", msg);
  logs_add(level == RGPU_LOG_ERROR ? cudaLogLevelError : cudaLogLevelWarning, line);
}

__attribute__((constructor)) static void rgpu_rt_logs_init(void) {
  rgpu_client_set_failure_tap(failure_tap);
  rgpu_log_set_tap(log_tap);
}

/* ---- callbacks ------------------------------------------------------------ */

static __thread int tl_delivering;

void rgpu_rt_logs_deliver(void) {
  if (!__atomic_load_n(&g_pending, __ATOMIC_ACQUIRE) || tl_delivering ||
      rgpu_mutex_held_count() != 0)
    return;
  tl_delivering = 1;
  for (;;) {
    rgpu_mutex_lock(&g_logs_lock);
    if (g_delivered == g_next || !g_callbacks) {
      g_delivered = g_next;
      __atomic_store_n(&g_pending, 0, __ATOMIC_RELEASE);
      rgpu_mutex_unlock(&g_logs_lock);
      break;
    }
    log_entry *e = &g_ring[g_delivered % g_cap];
    cudaLogLevel level = e->level;
    char *copy = strdup(e->text);
    size_t len = e->len;
    g_delivered++;
    /* The list as it is now; a callback unregistered meanwhile stays
     * allocated (a husk), so walking it after the unlock is safe. */
    struct CUlogsCallbackEntry_st *cbs = g_callbacks;
    rgpu_mutex_unlock(&g_logs_lock);
    for (struct CUlogsCallbackEntry_st *cb = cbs; copy && cb; cb = cb->next)
      if (__atomic_load_n(&cb->magic, __ATOMIC_ACQUIRE) == LOGS_CALLBACK_MAGIC)
        cb->fn(cb->data, level, copy, len);
    free(copy);
  }
  tl_delivering = 0;
}

RGPU_API cudaError_t cudaLogsRegisterCallback(cudaLogsCallback_t callbackFunc, void *userData,
                                              cudaLogsCallbackHandle *callback_out) {
  rgpu_rt_count_call();
  if (!callbackFunc) return rgpu_rt_ret(cudaErrorInvalidValue);
  struct CUlogsCallbackEntry_st *cb = calloc(1, sizeof *cb);
  if (!cb) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  cb->fn = callbackFunc;
  cb->data = userData;
  cb->magic = LOGS_CALLBACK_MAGIC;
  rgpu_mutex_lock(&g_logs_lock);
  cb->next = g_callbacks;
  g_callbacks = cb;
  /* Messages logged before the registration are not delivered to it. */
  if (g_delivered != g_next) g_delivered = g_next;
  rgpu_mutex_unlock(&g_logs_lock);
  if (callback_out) *callback_out = cb;
  return cudaSuccess;
}

/* The entry stays in the list as a husk (magic cleared): a delivery may be
 * walking it right now, and a program may pass the handle again. */
RGPU_API cudaError_t cudaLogsUnregisterCallback(cudaLogsCallbackHandle callback) {
  rgpu_rt_count_call();
  rgpu_mutex_lock(&g_logs_lock);
  int found = 0;
  for (struct CUlogsCallbackEntry_st *cb = g_callbacks; cb; cb = cb->next)
    if (cb == callback && cb->magic == LOGS_CALLBACK_MAGIC) {
      __atomic_store_n(&cb->magic, 0, __ATOMIC_RELEASE);
      found = 1;
    }
  rgpu_mutex_unlock(&g_logs_lock);
  return found ? cudaSuccess : rgpu_rt_ret(cudaErrorInvalidValue);
}

/* ---- iterators and dumps -------------------------------------------------- */

RGPU_API cudaError_t cudaLogsCurrent(cudaLogIterator *iterator_out, unsigned int flags) {
  rgpu_rt_count_call();
  /* flags are reserved; CUDA ignores them (cudaLogsCurrent(&it, 1) succeeds
   * on the H100), so rgpu does too. */
  (void)flags;
  if (!iterator_out) return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_mutex_lock(&g_logs_lock);
  *iterator_out = g_next;
  rgpu_mutex_unlock(&g_logs_lock);
  return cudaSuccess;
}

/* The messages from *iterator on (all kept ones for NULL) as lines: a note
 * first when some of them were dropped, or (cap > 0) did not fit in cap
 * bytes with the terminating NUL, then the most recent ones that fit.
 * *out is malloc'd and NUL-terminated; its length in *len; the iterator
 * moves past the last message.  -1: out of memory. */
static int logs_text(cudaLogIterator *iterator, size_t cap, char **out, size_t *len) {
  enum { NOTE_ROOM = 64 }; /* "[rgpu] 4294967295 earlier log messages not shown\n" */
  rgpu_mutex_lock(&g_logs_lock);
  uint32_t start = iterator ? *iterator : g_first;
  if ((int32_t)(g_next - start) < 0) start = g_next; /* an iterator from the future */
  uint32_t lost = (int32_t)(g_first - start) > 0 ? g_first - start : 0;
  if (lost) start = g_first;
  size_t all = 0;
  for (uint32_t i = start; i != g_next; i++) all += g_ring[i % g_cap].len + 1;
  size_t budget = SIZE_MAX;
  if (cap && all + (lost ? NOTE_ROOM : 0) + 1 > cap)
    budget = cap > NOTE_ROOM + 1 ? cap - 1 - NOTE_ROOM : 0;
  /* From the newest backwards, as many as fit. */
  size_t need = 0;
  uint32_t from = g_next;
  while (from != start && need + g_ring[(from - 1) % g_cap].len + 1 <= budget) {
    need += g_ring[(from - 1) % g_cap].len + 1;
    from--;
  }
  if (from == g_next && g_next != start) { /* not even the newest message fits */
    rgpu_mutex_unlock(&g_logs_lock);
    *out = NULL;
    *len = 0;
    return 1;
  }
  char note[NOTE_ROOM] = "";
  uint32_t skipped = from - start + lost;
  if (skipped) snprintf(note, sizeof note, "[rgpu] %u earlier log messages not shown\n", skipped);
  size_t off = strlen(note);
  char *buf = malloc(off + need + 1);
  if (!buf) {
    rgpu_mutex_unlock(&g_logs_lock);
    return -1;
  }
  memcpy(buf, note, off);
  for (uint32_t i = from; i != g_next; i++) {
    const log_entry *e = &g_ring[i % g_cap];
    memcpy(buf + off, e->text, e->len);
    off += e->len;
    buf[off++] = '\n';
  }
  /* A newline between entries, none after the last (CUDA's format). */
  if (need) off--;
  buf[off] = 0;
  if (iterator) *iterator = g_next;
  rgpu_mutex_unlock(&g_logs_lock);
  *out = buf;
  *len = off;
  return 0;
}

RGPU_API cudaError_t cudaLogsDumpToMemory(cudaLogIterator *iterator, char *buffer, size_t *size,
                                          unsigned int flags) {
  rgpu_rt_count_call();
  if (!buffer || !size || *size == 0 || flags) return rgpu_rt_ret(cudaErrorInvalidValue);
  char *text = NULL;
  size_t len = 0;
  int rc = logs_text(iterator, *size, &text, &len);
  if (rc < 0) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  if (rc > 0) {
    *size = 0;
    buffer[0] = 0;
    return rgpu_rt_ret(cudaErrorInvalidValue);
  }
  memcpy(buffer, text, len + 1);
  *size = len;
  free(text);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaLogsDumpToFile(cudaLogIterator *iterator, const char *pathToFile,
                                        unsigned int flags) {
  rgpu_rt_count_call();
  if (!pathToFile || flags) return rgpu_rt_ret(cudaErrorInvalidValue);
  FILE *f = fopen(pathToFile, "w");
  if (!f) return rgpu_rt_ret(cudaErrorInvalidValue);
  char *text = NULL;
  size_t len = 0;
  int rc = logs_text(iterator, 0, &text, &len);
  int bad = rc != 0 || (len && fwrite(text, 1, len, f) != len) || (len && fputc('\n', f) == EOF);
  free(text);
  if (fclose(f) != 0) bad = 1;
  return bad ? rgpu_rt_ret(rc < 0 ? cudaErrorMemoryAllocation : cudaErrorInvalidValue)
             : cudaSuccess;
}
