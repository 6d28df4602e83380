/* The backend API's calls whose answer lives on the server: finalizing an
 * engine heuristics descriptor (CUDNN_BACKEND_HEUR) or an execution plan
 * (CUDNN_BACKEND_PLAN), one round trip each, cached here by the serialized
 * content of the descriptor graph (and the device), so a framework that
 * rebuilds the same graph every step pays once; and cudnnBackendExecute
 * (CUDNN_BACKEND_EXECUTE), one message without a reply.
 *
 * The wire form of a graph is in proto/rgpu_messages.def (the block of
 * CUDNN_BACKEND_HEUR). */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_op.h"
#include "rgpu_cudnn_backend.h"
#include "rgpu_cudnn_call.h"
#include "rgpu_cudnn_graph_wire.h"
#include "rgpu_hash.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

#define GRAPH_NODES_MAX 4096 /* descriptors in one serialized graph */
#define CACHE_SLOTS 256      /* graphs remembered, replaced round-robin */
#define ENGINES_MAX 256      /* engine configs of one heuristics answer */
#define PACK_MAX 256         /* unique ids of one variant pack */

#define REFUSE(...)                                          \
  do {                                                       \
    static int logged_;                                      \
    if (!__atomic_exchange_n(&logged_, 1, __ATOMIC_RELAXED)) \
      RGPU_WARN(__VA_ARGS__);                                \
  } while (0)

/* ---- serialization ------------------------------------------------------- */

typedef struct {
  struct rgpu_cudnn_bdesc **node;
  int n, cap;
  rgpu_buf out;
} graph_writer;

static int index_of(const graph_writer *g, const struct rgpu_cudnn_bdesc *d) {
  for (int i = 0; i < g->n; i++)
    if (g->node[i] == d) return i;
  return -1;
}

/* Orders the graph depth-first, referenced descriptors first (a shared
 * one once).  depth bounds a cycle a program could make by filling a
 * referenced descriptor in again. */
static int visit(graph_writer *g, struct rgpu_cudnn_bdesc *d, int depth) {
  if (depth > 64) return -1;
  if (index_of(g, d) >= 0) return 0;
  for (int i = 0; i < d->nattr; i++) {
    const struct rgpu_cudnn_battr *a = &d->attr[i];
    if (a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR) continue;
    for (int64_t k = 0; k < a->count; k++)
      if (visit(g, ((struct rgpu_cudnn_bdesc **)a->data)[k], depth + 1) < 0) return -1;
  }
  if (g->n == GRAPH_NODES_MAX) return -1;
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    struct rgpu_cudnn_bdesc **grown = realloc(g->node, (size_t)cap * sizeof *grown);
    if (!grown) return -1;
    g->node = grown;
    g->cap = cap;
  }
  g->node[g->n++] = d;
  return 0;
}

/* The wire form of the graph rooted at root (its bytes owned by *out), or
 * -1. */
static int serialize(struct rgpu_cudnn_bdesc *root, rgpu_buf *out) {
  graph_writer g = {0};
  rgpu_buf_init(&g.out);
  int rc = visit(&g, root, 0);
  if (rc == 0) {
    rgpu_buf_put_u32(&g.out, (uint32_t)g.n);
    for (int i = 0; i < g.n; i++) {
      const struct rgpu_cudnn_bdesc *d = g.node[i];
      rgpu_buf_put_u32(&g.out, (uint32_t)d->type);
      rgpu_buf_put_u32(&g.out, (uint32_t)d->nattr);
      for (int j = 0; j < d->nattr; j++) {
        const struct rgpu_cudnn_battr *a = &d->attr[j];
        rgpu_buf_put_u64(&g.out, (uint64_t)a->name);
        rgpu_buf_put_u32(&g.out, (uint32_t)a->type);
        rgpu_buf_put_u32(&g.out, (uint32_t)a->count);
        if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
          for (int64_t k = 0; k < a->count; k++)
            rgpu_buf_put_u32(&g.out,
                             (uint32_t)index_of(&g, ((struct rgpu_cudnn_bdesc **)a->data)[k]));
        } else if (a->type != CUDNN_TYPE_HANDLE && a->type != CUDNN_TYPE_VOID_PTR) {
          /* Handles and device pointers never travel in a graph: the
           * server uses its own handle; pointers vary per step and would
           * defeat the cache. */
          rgpu_buf_put(&g.out, a->data, (size_t)a->count * rgpu_cudnn_battr_elem_size(a->type));
        }
      }
    }
    if (g.out.err) rc = -1;
  }
  free(g.node);
  if (rc) {
    rgpu_buf_free(&g.out);
    return -1;
  }
  *out = g.out;
  return 0;
}


/* ---- the cache of answers ------------------------------------------------- */

typedef struct {
  int device, kind; /* kind: the message's opcode */
  uint64_t hash;
  uint8_t *graph;
  size_t graph_len;
  /* HEUR: per engine config; PLAN: workspace only. */
  int n;
  uint64_t engine[ENGINES_MAX];
  uint32_t knob_count[ENGINES_MAX], numerical_count[ENGINES_MAX], behavior_count[ENGINES_MAX];
  uint64_t *knob_type, *knob_value;
  uint32_t *numerical, *behavior;
  uint64_t cfg_workspace[ENGINES_MAX], cfg_shared_memory[ENGINES_MAX];
  uint64_t workspace; /* PLAN; INFO: the config's (with shared_memory) */
  uint64_t shared_memory;
} answer;

static struct {
  pthread_mutex_t lock; /* a leaf: lookups and inserts only */
  answer *slot[CACHE_SLOTS];
  unsigned next;
} g_cache = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

/* A new cache entry of kind for the serialized graph (len bytes, owned by
 * the entry once it is made) on device; NULL out of memory. */
static answer *answer_new(int device, int kind, uint64_t hash, uint8_t *graph, size_t len) {
  answer *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->device = device;
  a->kind = kind;
  a->hash = hash;
  a->graph = graph;
  a->graph_len = len;
  return a;
}

static void answer_free(answer *a) {
  if (!a) return;
  free(a->graph);
  free(a->knob_type);
  free(a->knob_value);
  free(a->numerical);
  free(a->behavior);
  free(a);
}

/* The cached answer for (device, kind, graph), or NULL; the entry stays
 * valid while the backend lock is held (inserts happen under it too). */
static const answer *cache_find(int device, int kind, const rgpu_buf *g, uint64_t hash) {
  const answer *hit = NULL;
  pthread_mutex_lock(&g_cache.lock);
  for (unsigned i = 0; i < CACHE_SLOTS && !hit; i++) {
    answer *a = g_cache.slot[i];
    if (a && a->device == device && a->kind == kind && a->hash == hash &&
        a->graph_len == g->len && !memcmp(a->graph, g->data, g->len))
      hit = a;
  }
  pthread_mutex_unlock(&g_cache.lock);
  return hit;
}

static void cache_insert(answer *a) {
  pthread_mutex_lock(&g_cache.lock);
  unsigned i = g_cache.next++ % CACHE_SLOTS;
  answer_free(g_cache.slot[i]);
  g_cache.slot[i] = a;
  pthread_mutex_unlock(&g_cache.lock);
}

static void *dup_array(const rgpu_array *a, size_t elem) {
  void *p = malloc(a->count ? a->count * elem : 1);
  if (p && a->count) memcpy(p, a->data, a->count * elem);
  return p;
}

/* ---- the handle a graph names --------------------------------------------- */

/* The rgpu handle set as attribute name of d (a graph's handle), or NULL. */
static struct cudnnContext *handle_attr(const struct rgpu_cudnn_bdesc *d, int64_t name) {
  const struct rgpu_cudnn_battr *a = rgpu_cudnn_bdesc_find(d, name);
  if (!a || a->type != CUDNN_TYPE_HANDLE || a->count != 1) return NULL;
  return rgpu_cudnn_handle(*(cudnnHandle_t *)a->data);
}

static struct rgpu_cudnn_bdesc *ref_attr(const struct rgpu_cudnn_bdesc *d, int64_t name) {
  const struct rgpu_cudnn_battr *a = rgpu_cudnn_bdesc_find(d, name);
  if (!a || a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || a->count != 1) return NULL;
  return *(struct rgpu_cudnn_bdesc **)a->data;
}

/* ---- engine heuristics ----------------------------------------------------- */

static cudnnStatus_t store_i64(struct rgpu_cudnn_bdesc *d, int64_t name, int64_t v) {
  return rgpu_cudnn_bdesc_store(d, name, CUDNN_TYPE_INT64, 1, &v);
}

/* Engine config i of answer a, as finalized client records (engine, knob
 * choices, config) over the heuristics' operation graph. */
static struct rgpu_cudnn_bdesc *make_config(const answer *a, int i, size_t knob0, size_t num0,
                                            size_t beh0, struct rgpu_cudnn_bdesc *graph,
                                            int64_t mode) {
  struct rgpu_cudnn_bdesc *eng = rgpu_cudnn_bdesc_new(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  struct rgpu_cudnn_bdesc *cfg = rgpu_cudnn_bdesc_new(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  uint32_t nk = a->knob_count[i];
  struct rgpu_cudnn_bdesc **knobs = calloc(nk ? nk : 1, sizeof *knobs);
  int ok = eng && cfg && knobs;
  int notes[4096];
  if (ok) {
    ok = !rgpu_cudnn_bdesc_store(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) &&
         !store_i64(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, (int64_t)a->engine[i]);
    for (uint32_t k = 0; ok && k < a->numerical_count[i]; k++) notes[k] = (int)a->numerical[num0 + k];
    ok = ok && !rgpu_cudnn_bdesc_store(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, a->numerical_count[i], notes);
    for (uint32_t k = 0; ok && k < a->behavior_count[i]; k++) notes[k] = (int)a->behavior[beh0 + k];
    ok = ok && !rgpu_cudnn_bdesc_store(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                                       CUDNN_TYPE_BEHAVIOR_NOTE, a->behavior_count[i], notes);
  }
  if (eng) eng->finalized = 1;
  for (uint32_t k = 0; ok && k < nk; k++) {
    knobs[k] = rgpu_cudnn_bdesc_new(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    int type = (int)a->knob_type[knob0 + k];
    ok = knobs[k] &&
         !rgpu_cudnn_bdesc_store(knobs[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE,
                                 1, &type) &&
         !store_i64(knobs[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, (int64_t)a->knob_value[knob0 + k]);
    if (knobs[k]) knobs[k]->finalized = 1;
  }
  ok = ok &&
       !rgpu_cudnn_bdesc_store(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &eng) &&
       !rgpu_cudnn_bdesc_store(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, nk, knobs);
  /* Where the config came from, so the server can run cuDNN's own config
   * object (proto/rgpu_cudnn_graph_wire.h says why). */
  int64_t origin[3] = {mode, i, (int64_t)a->engine[i]};
  ok = ok && !rgpu_cudnn_bdesc_store(cfg, RGPU_CUDNN_ATTR_HEUR_ORIGIN, CUDNN_TYPE_INT64, 3, origin);
  int32_t shm = (int32_t)a->cfg_shared_memory[i];
  ok = ok && !store_i64(cfg, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, (int64_t)a->cfg_workspace[i]) &&
       !rgpu_cudnn_bdesc_store(cfg, CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1,
                               &shm);
  if (cfg) cfg->finalized = 1;
  /* The config holds its engine and knobs; drop the creation references. */
  rgpu_cudnn_bdesc_unref(eng);
  for (uint32_t k = 0; knobs && k < nk; k++) rgpu_cudnn_bdesc_unref(knobs[k]);
  free(knobs);
  if (!ok) {
    rgpu_cudnn_bdesc_unref(cfg);
    return NULL;
  }
  return cfg;
}

static cudnnStatus_t results_into(struct rgpu_cudnn_bdesc *heur, const answer *a,
                                  struct rgpu_cudnn_bdesc *graph) {
  struct rgpu_cudnn_bdesc *cfg[ENGINES_MAX];
  size_t knob0 = 0, num0 = 0, beh0 = 0;
  int made = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const struct rgpu_cudnn_battr *m = rgpu_cudnn_bdesc_find(heur, CUDNN_ATTR_ENGINEHEUR_MODE);
  int64_t mode = m && m->count == 1 ? *(int *)m->data : 0;
  for (int i = 0; i < a->n; i++) {
    if (!(cfg[i] = make_config(a, i, knob0, num0, beh0, graph, mode))) {
      st = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
      break;
    }
    made++;
    knob0 += a->knob_count[i];
    num0 += a->numerical_count[i];
    beh0 += a->behavior_count[i];
  }
  if (!st)
    st = rgpu_cudnn_bdesc_store(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                made, cfg);
  for (int i = 0; i < made; i++) rgpu_cudnn_bdesc_unref(cfg[i]);
  return st;
}

/* The reply's arrays agree with each other and with the limits. */
static int heur_reply_ok(const rgpu_msg_cudnn_backend_heur_rep *r) {
  uint32_t n = r->engine.count;
  if (n > ENGINES_MAX || r->knob_count.count != n || r->numerical_count.count != n ||
      r->behavior_count.count != n || r->knob_type.count != r->knob_value.count ||
      r->workspace.count != n || r->shared_memory.count != n)
    return 0;
  uint64_t k = 0, nu = 0, b = 0;
  for (uint32_t i = 0; i < n; i++) {
    k += rgpu_array_u32(&r->knob_count, i);
    nu += rgpu_array_u32(&r->numerical_count, i);
    b += rgpu_array_u32(&r->behavior_count, i);
    if (rgpu_array_u32(&r->numerical_count, i) > 4096 || rgpu_array_u32(&r->behavior_count, i) > 4096)
      return 0;
  }
  return k == r->knob_type.count && nu == r->numerical.count && b == r->behavior.count;
}

static cudnnStatus_t finalize_heur(struct rgpu_cudnn_bdesc *d, int *entered) {
  const char *api = "cudnnBackendFinalize(engine heuristics)";
  struct rgpu_cudnn_bdesc *graph = ref_attr(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
  if (!graph || !rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_ENGINEHEUR_MODE))
    return CUDNN_STATUS_BAD_PARAM;
  struct cudnnContext *h = handle_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  rgpu_buf g;
  if (serialize(d, &g)) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  uint64_t hash = rgpu_fnv1a64(g.data, g.len);
  const answer *hit = cache_find(h->device, RGPU_OP_CUDNN_BACKEND_HEUR, &g, hash);
  if (hit) {
    rgpu_buf_free(&g);
    return results_into(d, hit, graph);
  }
  rgpu_client *c;
  *entered = 1; /* rgpu_rt_enter counts the call */
  if (rgpu_rt_enter(&c) != cudaSuccess) {
    rgpu_buf_free(&g);
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  rgpu_msg_cudnn_backend_heur_req q = {.handle = h->id, .graph = {g.data, g.len}};
  rgpu_msg_cudnn_backend_heur_rep rep;
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_status rc = rgpu_call_cudnn_backend_heur(c, h->device, 0, &q, &rep, &rr);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  answer *a = NULL;
  if (rc) {
    st = rgpu_cudnn_reply_status(c, rc, api, rr.msg);
  } else if (!heur_reply_ok(&rep) ||
             !(a = answer_new(h->device, RGPU_OP_CUDNN_BACKEND_HEUR, hash, g.data, g.len))) {
    RGPU_ERROR("%s: the server's reply is inconsistent", api);
    st = CUDNN_STATUS_INTERNAL_ERROR;
  } else {
    g.data = NULL;
    a->n = (int)rep.engine.count;
    for (int i = 0; i < a->n; i++) {
      a->engine[i] = rgpu_array_u64(&rep.engine, (uint32_t)i);
      a->knob_count[i] = rgpu_array_u32(&rep.knob_count, (uint32_t)i);
      a->numerical_count[i] = rgpu_array_u32(&rep.numerical_count, (uint32_t)i);
      a->behavior_count[i] = rgpu_array_u32(&rep.behavior_count, (uint32_t)i);
      a->cfg_workspace[i] = rgpu_array_u64(&rep.workspace, (uint32_t)i);
      a->cfg_shared_memory[i] = rgpu_array_u64(&rep.shared_memory, (uint32_t)i);
    }
    a->knob_type = dup_array(&rep.knob_type, 8);
    a->knob_value = dup_array(&rep.knob_value, 8);
    a->numerical = dup_array(&rep.numerical, 4);
    a->behavior = dup_array(&rep.behavior, 4);
    if (!a->knob_type || !a->knob_value || !a->numerical || !a->behavior) {
      answer_free(a);
      st = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    } else {
      st = results_into(d, a, graph);
      cache_insert(a);
    }
  }
  rgpu_buf_free(&pay);
  if (g.data) rgpu_buf_free(&g);
  return st;
}

/* ---- one number per graph: a plan's workspace, a graph's engine count ------- */

/* The server's one-number answer of kind (CUDNN_BACKEND_PLAN or
 * CUDNN_BACKEND_ENGINE_COUNT) for serialized graph g, from the cache or one
 * round trip (remembered). */
static cudnnStatus_t ask_u64(int kind, const struct cudnnContext *h, const rgpu_buf *g,
                             uint64_t hash, const char *api, uint64_t *out, int *entered) {
  const answer *hit = cache_find(h->device, kind, g, hash);
  if (hit) {
    *out = hit->workspace;
    return CUDNN_STATUS_SUCCESS;
  }
  rgpu_client *c;
  *entered = 1; /* rgpu_rt_enter counts the call */
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_status rc;
  if (kind == RGPU_OP_CUDNN_BACKEND_PLAN) {
    rgpu_msg_cudnn_backend_plan_req q = {.handle = h->id, .graph = {g->data, g->len}};
    rgpu_msg_cudnn_backend_plan_rep rep;
    rc = rgpu_call_cudnn_backend_plan(c, h->device, 0, &q, &rep, &rr);
    *out = rep.workspace_size;
  } else {
    rgpu_msg_cudnn_backend_engine_count_req q = {.handle = h->id, .graph = {g->data, g->len}};
    rgpu_msg_cudnn_backend_engine_count_rep rep;
    rc = rgpu_call_cudnn_backend_engine_count(c, h->device, 0, &q, &rep, &rr);
    *out = rep.count;
  }
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  if (rc) {
    st = rgpu_cudnn_reply_status(c, rc, api, rr.msg);
  } else {
    uint8_t *copy = malloc(g->len);
    answer *a = copy ? answer_new(h->device, kind, hash, copy, g->len) : NULL;
    if (a) {
      memcpy(copy, g->data, g->len);
      a->workspace = *out;
      cache_insert(a);
    } else {
      free(copy); /* not remembered: the next one asks again */
    }
  }
  rgpu_buf_free(&pay);
  return st;
}

/* ---- by-value tensors ------------------------------------------------------ */

#define BY_VALUE_MAX 4096 /* bytes of by-value tensors in one execute */

/* The bytes a by-value tensor record spans (CUDNN_ATTR_TENSOR_IS_BY_VALUE:
 * its variant pack entry is a host pointer, whose value must travel), or 0
 * for any other record. */
static uint64_t by_value_bytes(const struct rgpu_cudnn_bdesc *d) {
  if (d->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return 0;
  const struct rgpu_cudnn_battr *id = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_TENSOR_UNIQUE_ID);
  const struct rgpu_cudnn_battr *bv = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
  const struct rgpu_cudnn_battr *dims = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
  const struct rgpu_cudnn_battr *str = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_TENSOR_STRIDES);
  const struct rgpu_cudnn_battr *dt = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_TENSOR_DATA_TYPE);
  if (!id || id->count != 1 || !bv || bv->count != 1 || !*(bool *)bv->data || !dims || !str ||
      !dt || dims->count != str->count)
    return 0;
  uint64_t last = 0;
  for (int64_t i = 0; i < dims->count; i++) {
    int64_t n = ((int64_t *)dims->data)[i], st = ((int64_t *)str->data)[i];
    if (n < 1 || st < 0 || n > BY_VALUE_MAX || st > BY_VALUE_MAX) return 0;
    last += (uint64_t)(n - 1) * (uint64_t)st;
  }
  return (last + 1) * rgpu_cudnn_type_size(*(int *)dt->data);
}

/* The plan's by-value tensors (unique id and bytes), found once when it is
 * finalized: cudnnBackendExecute, the hot path, only looks them up.  Its
 * graph is the depth-first list serialize() made, so each record is seen
 * once.  Returns 0, or -1 out of memory. */
static int by_value_collect(struct rgpu_cudnn_bdesc *plan) {
  graph_writer g = {0};
  rgpu_buf_init(&g.out);
  int rc = visit(&g, plan, 0);
  for (int i = 0; rc == 0 && i < g.n; i++) {
    uint64_t b = by_value_bytes(g.node[i]);
    if (!b) continue;
    struct rgpu_cudnn_by_value *grown =
        realloc(plan->by_value, (size_t)(plan->n_by_value + 1) * sizeof *grown);
    if (!grown) {
      rc = -1;
      break;
    }
    plan->by_value = grown;
    plan->by_value[plan->n_by_value++] = (struct rgpu_cudnn_by_value){
        *(int64_t *)rgpu_cudnn_bdesc_find(g.node[i], CUDNN_ATTR_TENSOR_UNIQUE_ID)->data, b};
  }
  free(g.node);
  rgpu_buf_free(&g.out);
  return rc;
}

/* The bytes of the plan's by-value tensor uid, 0 when uid is not one. */
static uint64_t by_value_of(const struct rgpu_cudnn_bdesc *plan, int64_t uid) {
  for (int i = 0; i < plan->n_by_value; i++)
    if (plan->by_value[i].uid == uid) return plan->by_value[i].bytes;
  return 0;
}

/* The operation graph under an engine config or an engine, or NULL. */
static struct rgpu_cudnn_bdesc *graph_under(struct rgpu_cudnn_bdesc *d) {
  if (d && d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) d = ref_attr(d, CUDNN_ATTR_ENGINECFG_ENGINE);
  return d && d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR
             ? ref_attr(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH)
             : NULL;
}

/* The handle a request about d travels with: d's own where it names one
 * (CUDNN_ATTR_EXECUTION_PLAN_HANDLE), else its operation graph's (cuDNN 9
 * lets a plan go without a handle, and cuDNN's frontend sets none). */
static struct cudnnContext *handle_of(struct rgpu_cudnn_bdesc *d) {
  struct rgpu_cudnn_bdesc *og = NULL;
  if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
    const struct rgpu_cudnn_battr *a = rgpu_cudnn_bdesc_find(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
    if (a) return handle_attr(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE); /* NULL: a bad one */
    og = graph_under(ref_attr(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG));
  } else {
    og = graph_under(d);
  }
  return og ? handle_attr(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE) : NULL;
}

static cudnnStatus_t finalize_plan(struct rgpu_cudnn_bdesc *d, int *entered) {
  const char *api = "cudnnBackendFinalize(execution plan)";
  struct cudnnContext *h = handle_of(d);
  if (!h || !ref_attr(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)) return CUDNN_STATUS_BAD_PARAM;
  rgpu_buf g;
  if (serialize(d, &g)) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  uint64_t hash = rgpu_fnv1a64(g.data, g.len);
  uint64_t workspace = 0;
  cudnnStatus_t st = ask_u64(RGPU_OP_CUDNN_BACKEND_PLAN, h, &g, hash, api, &workspace, entered);
  if (!st) st = store_i64(d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, (int64_t)workspace);
  if (st) {
    rgpu_buf_free(&g);
    return st;
  }
  free(d->graph);
  d->graph = g.data;
  d->graph_len = g.len;
  d->hash = hash;
  free(d->by_value);
  d->by_value = NULL;
  d->n_by_value = 0;
  return by_value_collect(d) ? CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED
                             : CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t rgpu_cudnn_backend_engine_count(struct rgpu_cudnn_bdesc *graph, int64_t *count,
                                              int *entered) {
  const char *api = "cudnnBackendGetAttribute(CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT)";
  struct cudnnContext *h = handle_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  rgpu_buf g;
  if (serialize(graph, &g)) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  uint64_t n = 0;
  cudnnStatus_t st = ask_u64(RGPU_OP_CUDNN_BACKEND_ENGINE_COUNT, h, &g,
                             rgpu_fnv1a64(g.data, g.len), api, &n, entered);
  rgpu_buf_free(&g);
  if (!st) *count = (int64_t)n;
  return st;
}

cudnnStatus_t rgpu_cudnn_backend_finalize_remote(struct rgpu_cudnn_bdesc *d) {
  int entered = 0;
  cudnnStatus_t st = d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR ? finalize_heur(d, &entered)
                                                                    : finalize_plan(d, &entered);
  /* One call either way: answered here (the cache, a bad argument) or
   * counted by the session entry of the round trip. */
  if (!entered) rgpu_rt_count_call();
  return st;
}

/* ---- cuDNN's answers about an engine the program made --------------------- */

static int notes_into(struct rgpu_cudnn_bdesc *eng, const answer *a) {
  int notes[64];
  for (uint32_t k = 0; k < a->numerical_count[0]; k++) notes[k] = (int)a->numerical[k];
  if (rgpu_cudnn_bdesc_store(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                             a->numerical_count[0], notes))
    return -1;
  for (uint32_t k = 0; k < a->behavior_count[0]; k++) notes[k] = (int)a->behavior[k];
  return rgpu_cudnn_bdesc_store(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                a->behavior_count[0], notes)
             ? -1
             : 0;
}

/* Stores the answers of a (CUDNN_BACKEND_INFO) on d: an engine's notes, or
 * a config's workspace and shared memory and its engine's notes. */
static cudnnStatus_t info_into(struct rgpu_cudnn_bdesc *d, const answer *a) {
  struct rgpu_cudnn_bdesc *eng =
      d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR ? ref_attr(d, CUDNN_ATTR_ENGINECFG_ENGINE) : d;
  if (eng && !rgpu_cudnn_bdesc_find(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) && notes_into(eng, a))
    return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) {
    int32_t shm = (int32_t)a->shared_memory;
    if (store_i64(d, CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, (int64_t)a->workspace) ||
        rgpu_cudnn_bdesc_store(d, CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1, &shm))
      return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t rgpu_cudnn_backend_info(struct rgpu_cudnn_bdesc *d, int *entered) {
  const char *api = "cudnnBackendGetAttribute(engine or engine config)";
  struct cudnnContext *h = handle_of(d);
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  rgpu_buf g;
  if (serialize(d, &g)) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  uint64_t hash = rgpu_fnv1a64(g.data, g.len);
  const answer *hit = cache_find(h->device, RGPU_OP_CUDNN_BACKEND_INFO, &g, hash);
  if (hit) {
    rgpu_buf_free(&g);
    return info_into(d, hit);
  }
  rgpu_client *c;
  *entered = 1; /* rgpu_rt_enter counts the call */
  if (rgpu_rt_enter(&c) != cudaSuccess) {
    rgpu_buf_free(&g);
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  rgpu_msg_cudnn_backend_info_req q = {.handle = h->id, .graph = {g.data, g.len}};
  rgpu_msg_cudnn_backend_info_rep rep;
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_status rc = rgpu_call_cudnn_backend_info(c, h->device, 0, &q, &rep, &rr);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  answer *a = NULL;
  if (rc) {
    st = rgpu_cudnn_reply_status(c, rc, api, rr.msg);
  } else if (rep.numerical.count > 64 || rep.behavior.count > 64 ||
             !(a = answer_new(h->device, RGPU_OP_CUDNN_BACKEND_INFO, hash, g.data, g.len))) {
    RGPU_ERROR("%s: the server's reply is inconsistent", api);
    st = CUDNN_STATUS_INTERNAL_ERROR;
  } else {
    g.data = NULL;
    a->n = 1;
    a->numerical_count[0] = rep.numerical.count;
    a->behavior_count[0] = rep.behavior.count;
    a->numerical = dup_array(&rep.numerical, 4);
    a->behavior = dup_array(&rep.behavior, 4);
    a->workspace = rep.workspace;
    a->shared_memory = rep.shared_memory;
    if (!a->numerical || !a->behavior) {
      answer_free(a);
      st = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    } else {
      st = info_into(d, a);
      cache_insert(a);
    }
  }
  rgpu_buf_free(&pay);
  if (g.data) rgpu_buf_free(&g);
  return st;
}

/* ---- execute --------------------------------------------------------------- */

RGPU_CUDNN cudnnStatus_t rgpu_cudnn_cudnnBackendExecute(cudnnHandle_t handle,
                                                        cudnnBackendDescriptor_t plan,
                                                        cudnnBackendDescriptor_t pack) {
  struct cudnnContext *h = rgpu_cudnn_handle(handle);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  uint64_t uid[PACK_MAX], ptr[PACK_MAX], workspace = 0;
  uint8_t values[BY_VALUE_MAX];
  size_t nvalues = 0;
  uint32_t n = 0;
  uint8_t *graph = NULL;
  size_t graph_len = 0;
  uint64_t hash = 0;
  rgpu_cudnn_backend_lock();
  struct rgpu_cudnn_bdesc *p = rgpu_cudnn_bdesc_of(plan), *v = rgpu_cudnn_bdesc_of(pack);
  if (!h || !p || !v || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || !p->finalized || !v->finalized ||
      !p->graph) {
    st = CUDNN_STATUS_BAD_PARAM;
  } else {
    const struct rgpu_cudnn_battr *ids = rgpu_cudnn_bdesc_find(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const struct rgpu_cudnn_battr *ptrs =
        rgpu_cudnn_bdesc_find(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    const struct rgpu_cudnn_battr *ws = rgpu_cudnn_bdesc_find(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
    if (ids->type != CUDNN_TYPE_INT64 || ptrs->type != CUDNN_TYPE_VOID_PTR ||
        (ws && (ws->type != CUDNN_TYPE_VOID_PTR || ws->count != 1))) {
      st = CUDNN_STATUS_BAD_PARAM;
    } else if (ids->count > PACK_MAX) {
      REFUSE("cudnnBackendExecute: a variant pack of %lld tensors is more than rgpu carries "
             "(%d); it returns CUDNN_STATUS_NOT_SUPPORTED",
             (long long)ids->count, PACK_MAX);
      st = CUDNN_STATUS_NOT_SUPPORTED;
    } else {
      n = (uint32_t)ids->count;
      for (uint32_t i = 0; i < n && !st; i++) {
        uid[i] = (uint64_t)((int64_t *)ids->data)[i];
        ptr[i] = (uint64_t)(uintptr_t)((void **)ptrs->data)[i];
        /* A by-value tensor: its value travels, read now, as cuDNN reads
         * it during the call. */
        uint64_t b = by_value_of(p, (int64_t)uid[i]);
        if (!b) continue;
        if (!ptr[i] || nvalues + b > sizeof values) {
          st = CUDNN_STATUS_BAD_PARAM;
          break;
        }
        memcpy(values + nvalues, (const void *)(uintptr_t)ptr[i], b);
        nvalues += b;
        ptr[i] = 0;
      }
      if (ws) workspace = (uint64_t)(uintptr_t) * (void **)ws->data;
      /* The plan's graph travels with it (a server that lost its cache
       * rebuilds); copied, as the program may destroy the plan at once. */
      if (!st) {
        graph = malloc(p->graph_len);
        if (!graph) st = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        else memcpy(graph, p->graph, graph_len = p->graph_len);
      }
      hash = p->hash;
    }
  }
  rgpu_cudnn_backend_unlock();
  if (st) {
    rgpu_rt_count_call();
    free(graph);
    return st;
  }
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = rgpu_cudnn_enter_stream(h, &c, &wire, &device))) {
    free(graph);
    return st;
  }
  rgpu_msg_cudnn_backend_execute_req q = {.handle = h->id, .stream = wire, .plan_hash = hash,
                                          .graph = {graph, graph_len}, .uid = {uid, n},
                                          .ptr = {ptr, n}, .workspace = workspace,
                                          .by_value = {values, nvalues}};
  rgpu_buf b;
  rgpu_buf_init(&b);
  int enc = rgpu_msg_cudnn_backend_execute_req_encode(&b, &q);
  free(graph);
  return rgpu_cudnn_submit(c, device, wire, RGPU_OP_CUDNN_BACKEND_EXECUTE, enc, &b);
}
