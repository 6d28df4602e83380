/* CUDA user objects (cudaUserObjectCreate/Retain/Release,
 * cudaGraphRetainUserObject/ReleaseUserObject): a reference-counted
 * destructor that graphs can own, so a resource a graph uses lives as long
 * as the graph, its clones and the executable graphs made from it.
 *
 * Entirely client-side: the server never sees user objects.  What holds
 * references:
 * - the program (create, retain, release);
 * - a graph (rgpu_user_refs inside struct CUgraph_st): released when the
 *   graph is destroyed; a clone, a child-graph node's copy and an
 *   executable graph take references of their own;
 * - an executable graph (rgpu_cudart_graph_exec.c): its references go
 *   only once the work of its launches is done, by a host function queued
 *   behind its last launch on each stream it was launched on, as CUDA
 *   keeps them until the launches complete.
 *
 * Destructors run on a thread of their own, never inside the call that
 * dropped the last reference: CUDA runs them "by a shared internal
 * thread", and a program may release while holding a lock its destructor
 * takes. */
#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "rgpu_array.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_graph_internal.h"
#include "rgpu_fifo.h"
#include "rgpu_log.h"
#include "rgpu_mutex.h"
#include "rgpu_thread_name.h"

#define USER_OBJECT_MAGIC 0x424f5355u /* "USOB" */

struct CUuserObject_st {
  uint32_t magic;
  unsigned refs; /* atomic */
  void *ptr;
  cudaHostFn_t destroy;
  struct CUuserObject_st *next; /* the destructor queue's link */
};

/* ---- the destructor thread ------------------------------------------------- */

static rgpu_mutex g_dlock = RGPU_MUTEX_INITIALIZER;
static pthread_cond_t g_dcond = PTHREAD_COND_INITIALIZER;
static RGPU_FIFO(struct CUuserObject_st) g_dead;
static int g_dthread_started;

static void *destructor_main(void *arg) {
  (void)arg;
  rgpu_thread_name("rgpu-userobj");
  rgpu_mutex_lock(&g_dlock);
  for (;;) {
    struct CUuserObject_st *o = rgpu_fifo_pop(&g_dead, next);
    if (!o) {
      rgpu_mutex_cond_wait(&g_dcond, &g_dlock);
      continue;
    }
    rgpu_mutex_unlock(&g_dlock);
    o->destroy(o->ptr);
    /* The handle is dead: a program that still passes it gets
     * cudaErrorInvalidValue, not a use after free.  (The husk is a few
     * bytes; CUDA calls such use undefined.) */
    rgpu_mutex_lock(&g_dlock);
  }
  return NULL;
}

/* Queues o's destructor; the thread starts with the first. */
static void destructor_queue(struct CUuserObject_st *o) {
  o->magic = 0;
  rgpu_mutex_lock(&g_dlock);
  rgpu_fifo_push(&g_dead, o, next);
  int start = !g_dthread_started;
  if (start) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, destructor_main, NULL) == 0) {
      g_dthread_started = 1;
    } else {
      /* No thread: run it here rather than never. */
      RGPU_WARN("user objects: cannot start the destructor thread; running it inline");
      (void)rgpu_fifo_pop(&g_dead, next);
      rgpu_mutex_unlock(&g_dlock);
      pthread_attr_destroy(&a);
      o->destroy(o->ptr);
      return;
    }
    pthread_attr_destroy(&a);
  }
  pthread_cond_signal(&g_dcond);
  rgpu_mutex_unlock(&g_dlock);
}

static int valid_object(cudaUserObject_t o) {
  return o && __atomic_load_n(&o->magic, __ATOMIC_RELAXED) == USER_OBJECT_MAGIC;
}

static void object_retain(cudaUserObject_t o, unsigned n) {
  __atomic_add_fetch(&o->refs, n, __ATOMIC_RELAXED);
}

static void object_release(cudaUserObject_t o, unsigned n) {
  if (__atomic_sub_fetch(&o->refs, n, __ATOMIC_ACQ_REL) == 0) destructor_queue(o);
}

/* ---- references a graph or an executable graph holds -------------------- */

/* Adds n references of o to r (taking them over: the caller has counted
 * them on the object already). */
static cudaError_t refs_add(rgpu_user_refs *r, cudaUserObject_t o, unsigned n) {
  for (size_t i = 0; i < r->n; i++)
    if (r->v[i].obj == o) {
      r->v[i].count += n;
      return cudaSuccess;
    }
  if (RGPU_ARRAY_RESERVE(r->v, r->cap, r->n + 1, 4)) return cudaErrorMemoryAllocation;
  r->v[r->n].obj = o;
  r->v[r->n].count = n;
  r->n++;
  return cudaSuccess;
}

cudaError_t rgpu_user_refs_copy(rgpu_user_refs *dst, const rgpu_user_refs *src) {
  for (size_t i = 0; i < src->n; i++) {
    cudaError_t e = refs_add(dst, src->v[i].obj, src->v[i].count);
    if (e != cudaSuccess) return e;
    object_retain(src->v[i].obj, src->v[i].count);
  }
  return cudaSuccess;
}

void rgpu_user_refs_release(rgpu_user_refs *r) {
  for (size_t i = 0; i < r->n; i++) object_release(r->v[i].obj, r->v[i].count);
  free(r->v);
  *r = (rgpu_user_refs){0};
}

/* ---- public API ------------------------------------------------------------ */

RGPU_API cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr,
                                          cudaHostFn_t destroy, unsigned int initialRefcount,
                                          unsigned int flags) {
  rgpu_rt_count_call();
  if (!object_out || !destroy || !initialRefcount || initialRefcount > INT_MAX ||
      flags != cudaUserObjectNoDestructorSync)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  struct CUuserObject_st *o = calloc(1, sizeof *o);
  if (!o) return rgpu_rt_ret(cudaErrorMemoryAllocation);
  o->magic = USER_OBJECT_MAGIC;
  o->refs = initialRefcount;
  o->ptr = ptr;
  o->destroy = destroy;
  *object_out = o;
  return cudaSuccess;
}

RGPU_API cudaError_t cudaUserObjectRetain(cudaUserObject_t object, unsigned int count) {
  rgpu_rt_count_call();
  if (!valid_object(object) || !count || count > INT_MAX)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  object_retain(object, count);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count) {
  rgpu_rt_count_call();
  if (!valid_object(object) || !count || count > INT_MAX ||
      count > __atomic_load_n(&object->refs, __ATOMIC_RELAXED))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  object_release(object, count);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                               unsigned int count, unsigned int flags) {
  rgpu_rt_count_call();
  if (!valid_graph(graph) || !valid_object(object) || !count || count > INT_MAX ||
      (flags & ~(unsigned)cudaGraphUserObjectMove))
    return rgpu_rt_ret(cudaErrorInvalidValue);
  cudaError_t e = refs_add(&graph->user_refs, object, count);
  if (e != cudaSuccess) return rgpu_rt_ret(e);
  /* A move hands over references the caller holds: the count stays. */
  if (!(flags & cudaGraphUserObjectMove)) object_retain(object, count);
  return cudaSuccess;
}

RGPU_API cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                                unsigned int count) {
  rgpu_rt_count_call();
  if (!valid_graph(graph) || !valid_object(object) || !count || count > INT_MAX)
    return rgpu_rt_ret(cudaErrorInvalidValue);
  rgpu_user_refs *r = &graph->user_refs;
  for (size_t i = 0; i < r->n; i++) {
    if (r->v[i].obj != object) continue;
    /* More than the graph holds is undefined in CUDA; NVIDIA's runtime
     * answers cudaSuccess (H200, CUDA 13.0), so it is taken from the
     * object and the graph keeps none. */
    r->v[i].count = count > r->v[i].count ? 0 : r->v[i].count - count;
    if (!r->v[i].count) r->v[i] = r->v[--r->n];
    object_release(object, count);
    return cudaSuccess;
  }
  return rgpu_rt_ret(cudaErrorInvalidValue);
}
