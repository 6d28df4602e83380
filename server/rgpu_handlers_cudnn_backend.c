/* cuDNN backend (graph) API requests (issue 17): CUDNN_BACKEND_HEUR,
 * CUDNN_BACKEND_PLAN, CUDNN_BACKEND_ENGINE_COUNT, CUDNN_BACKEND_INFO (one
 * reply each) and
 * CUDNN_BACKEND_EXECUTE (none).
 *
 * Each carries a descriptor graph serialized by the client (its form is in
 * proto/rgpu_messages.def), decoded and checked here before use.  On a GPU
 * the graph is rebuilt with NVIDIA's own backend descriptors (the library
 * rgpu_handlers_cudnn.c opens) and finalized by cuDNN; a finalized plan is
 * kept under the graph's content hash so an execute, which has no reply,
 * finds it (or rebuilds it from the graph it also carries).  On softgpu the
 * graphs rgpu_cudnn_backend_soft.c plans (convolutions forward and backward
 * with pointwise epilogues) are answered with one engine (global index 0,
 * no knobs, workspace 0) and run in a host function on the stream; anything
 * else is NOT_SUPPORTED with the reason. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "rgpu_cudnn_backend_soft.h"
#include "rgpu_cudnn_graph.h"
#include "rgpu_cudnn_graph_wire.h"
#include "rgpu_dispatch.h"
#include "rgpu_handlers_cudnn.h"
#include "rgpu_log.h"
#include "rgpu_worker_internal.h"

#define D (&w->drv)
#define FAIL(status, ...) rgpu_worker_fail(w, (status), __VA_ARGS__)

#define PLANS_MAX 64    /* plans kept per session, replaced round-robin */
#define ENGINES_MAX 256 /* engine configs answered */
#define VARIANT_MAX 256 /* tensors in a variant pack */

/* Short names inside this file for the decoded graph's types. */
typedef rgpu_cudnn_wattr wattr;
typedef rgpu_cudnn_wnode wnode;
typedef rgpu_cudnn_wgraph wgraph;
#define find rgpu_cudnn_graph_attr
#define ref rgpu_cudnn_graph_ref
#define i64s rgpu_cudnn_graph_i64s
#define graph_free rgpu_cudnn_graph_free
#define wire_size rgpu_cudnn_wire_size

/* The decoded graph of a request, or the worker's error. */
static CUresult graph_decode(rgpu_worker *w, const char *api, const rgpu_bytes *b, wgraph *g) {
  int rc = rgpu_cudnn_graph_decode(b->data, b->len, g);
  if (rc == -2) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", api);
  if (rc) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the descriptor graph is malformed", api);
  return CUDA_SUCCESS;
}

/* ---- a real GPU: the graph rebuilt with NVIDIA's backend ---------------------- */

static struct {
  int state;
  __typeof__(&cudnnBackendCreateDescriptor) create;
  __typeof__(&cudnnBackendDestroyDescriptor) destroy;
  __typeof__(&cudnnBackendSetAttribute) set;
  __typeof__(&cudnnBackendGetAttribute) get;
  __typeof__(&cudnnBackendFinalize) finalize;
  __typeof__(&cudnnBackendExecute) execute;
} g_be;

static int be_load(void) {
  if (g_be.state) return g_be.state;
  *(void **)&g_be.create = rgpu_cudnn_server_sym("cudnnBackendCreateDescriptor");
  *(void **)&g_be.destroy = rgpu_cudnn_server_sym("cudnnBackendDestroyDescriptor");
  *(void **)&g_be.set = rgpu_cudnn_server_sym("cudnnBackendSetAttribute");
  *(void **)&g_be.get = rgpu_cudnn_server_sym("cudnnBackendGetAttribute");
  *(void **)&g_be.finalize = rgpu_cudnn_server_sym("cudnnBackendFinalize");
  *(void **)&g_be.execute = rgpu_cudnn_server_sym("cudnnBackendExecute");
  g_be.state = g_be.create && g_be.destroy && g_be.set && g_be.get && g_be.finalize &&
                       g_be.execute
                   ? 1
                   : -1;
  return g_be.state;
}

/* Attributes that are cuDNN's answers, which the client's records carry
 * (the engines of a heuristics answer hold their notes) but cuDNN does not
 * let a program set. */
static int answer_attr(int64_t name) {
  switch (name) {
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
    case CUDNN_ATTR_ENGINE_KNOB_INFO: case CUDNN_ATTR_ENGINE_LAYOUT_INFO:
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: case CUDNN_ATTR_ENGINEHEUR_RESULTS:
    case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT:
    case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE: case CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED:
    case RGPU_CUDNN_ATTR_HEUR_ORIGIN:
      return 1;
    default: return 0;
  }
}

/* cuDNN's own engine config for a config that came from a heuristics
 * answer (RGPU_CUDNN_ATTR_HEUR_ORIGIN: mode, position, engine): a
 * heuristics run of that mode on the real operation graph under it, its
 * config at that position when it is still that engine.  NULL when it
 * cannot be had (the caller then rebuilds the config from its attributes,
 * which runs, with cuDNN's default knobs). */
static cudnnBackendDescriptor_t heur_config(const wgraph *g, const wnode *cfg,
                                            cudnnBackendDescriptor_t *real) {
  int64_t origin[3];
  if (rgpu_cudnn_graph_i64s(cfg, RGPU_CUDNN_ATTR_HEUR_ORIGIN, origin, 3) != 3) return NULL;
  const wnode *eng = ref(g, cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  const wnode *og = eng ? ref(g, eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                              CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
                        : NULL;
  if (!og || origin[1] < 0 || origin[1] >= ENGINES_MAX) return NULL;
  cudnnBackendDescriptor_t graph = real[og - g->node], heur = NULL, got = NULL;
  cudnnBackendDescriptor_t cfgs[ENGINES_MAX] = {0};
  int mode = (int)origin[0];
  int64_t count = 0, n = 0, want = origin[1] + 1;
  if (!graph || g_be.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur)) return NULL;
  if (!g_be.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &graph) &&
      !g_be.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) &&
      !g_be.finalize(heur) &&
      !g_be.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                NULL) &&
      count >= want) {
    int ok = 1;
    for (int64_t i = 0; i < want && ok; i++)
      ok = !g_be.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]);
    if (ok && !g_be.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want,
                        &n, cfgs) &&
        n == want) {
      cudnnBackendDescriptor_t e = NULL;
      int64_t index = -1, c = 0;
      if (!g_be.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) &&
          !g_be.get(cfgs[origin[1]], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                    &c, &e) &&
          !g_be.get(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &c, &index) &&
          index == origin[2]) {
        got = cfgs[origin[1]];
        cfgs[origin[1]] = NULL;
      }
      if (e) g_be.destroy(e);
    }
  }
  for (int64_t i = 0; i < want && i < ENGINES_MAX; i++)
    if (cfgs[i]) g_be.destroy(cfgs[i]);
  g_be.destroy(heur);
  if (!got) RGPU_DEBUG("cudnn: heuristics no longer give engine %lld at %lld: the config is rebuilt",
                       (long long)origin[2], (long long)origin[1]);
  return got;
}

/* NVIDIA's descriptors for every node of g, finalized, into real[] (NULL
 * where not made; the caller destroys them).  On a refusal, where says
 * which node (its type) and which step (the attribute cuDNN refused, or
 * its finalize): the one line a user needs to tell rgpu's fault from a
 * graph cuDNN does not take. */
static cudnnStatus_t real_build(const wgraph *g, cudnnHandle_t h, cudnnBackendDescriptor_t *real,
                                char *where, size_t wcap) {
  for (uint32_t i = 0; i < g->n; i++) {
    const wnode *d = &g->node[i];
    if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && (real[i] = heur_config(g, d, real)))
      continue; /* cuDNN's own, finalized */
    cudnnStatus_t st = g_be.create((cudnnBackendDescriptorType_t)d->type, &real[i]);
    if (st) {
      snprintf(where, wcap, "creating node %u (descriptor type %d)", i, (int)d->type);
      return st;
    }
    for (uint32_t j = 0; j < d->nattr; j++) {
      const wattr *a = &d->attr[j];
      void *elems = NULL;
      /* An empty descriptor list (a config without knob choices) is the
       * attribute's default: not set, as cuDNN's own copies leave it. */
      if (answer_attr(a->name) || (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && !a->count))
        continue;
      if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        cudnnBackendDescriptor_t *refs = malloc(sizeof *refs * (a->count ? a->count : 1));
        if (!refs) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        for (uint32_t k = 0; k < a->count; k++) {
          uint32_t idx;
          memcpy(&idx, a->data + 4 * k, 4);
          refs[k] = real[idx];
        }
        elems = refs;
      } else if (a->type == CUDNN_TYPE_HANDLE) {
        elems = malloc(sizeof h);
        if (elems) memcpy(elems, &h, sizeof h);
      } else if (a->type == CUDNN_TYPE_VOID_PTR) {
        continue; /* never in a graph */
      } else {
        /* Aligned for cuDNN's reads. */
        size_t bytes = (size_t)a->count * (size_t)wire_size(a->type);
        elems = malloc(bytes ? bytes : 1);
        if (elems) memcpy(elems, a->data, bytes);
      }
      if (!elems) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
      int64_t count = a->type == CUDNN_TYPE_HANDLE ? 1 : a->count;
      st = g_be.set(real[i], (cudnnBackendAttributeName_t)a->name,
                    (cudnnBackendAttributeType_t)a->type, count, elems);
      free(elems);
      if (st) {
        snprintf(where, wcap, "setting attribute %lld (type %d, %u elements) of node %u (descriptor type %d)",
                 (long long)a->name, (int)a->type, (unsigned)a->count, i, (int)d->type);
        return st;
      }
    }
    if ((st = g_be.finalize(real[i]))) {
      snprintf(where, wcap, "finalizing node %u of %u (descriptor type %d)", i, g->n, (int)d->type);
      return st;
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

static void real_free(cudnnBackendDescriptor_t *real, uint32_t n) {
  if (!real) return;
  for (uint32_t i = n; i-- > 0;)
    if (real[i]) g_be.destroy(real[i]);
  free(real);
}

/* NVIDIA's finalized descriptors for every node of g (*real; the caller
 * frees it with real_free), built with the session's cuDNN handle.
 * Returns the failure of what is not cuDNN's answer (no backend API, no
 * handle), its message written; else CUDA_SUCCESS with cuDNN's status in
 * *st and, on a refusal, where it refused in where. */
static CUresult real_graph(rgpu_worker *w, const char *api, const wgraph *g,
                           cudnnBackendDescriptor_t **real, cudnnStatus_t *st, char *where,
                           size_t wcap) {
  *real = NULL;
  if (be_load() < 0)
    return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: NVIDIA's libcudnn.so.9 backend API is missing", api);
  cudnnHandle_t h;
  CUresult r = rgpu_cudnn_server_handle(w, api, NULL, &h);
  if (r) return r;
  *real = calloc(g->n, sizeof **real);
  *st = *real ? real_build(g, h, *real, where, wcap)
              : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  return CUDA_SUCCESS;
}

static CUresult status_cu(cudnnStatus_t st) {
  return st >= CUDNN_STATUS_NOT_SUPPORTED && st < CUDNN_STATUS_INTERNAL_ERROR
             ? CUDA_ERROR_NOT_SUPPORTED
         : st >= CUDNN_STATUS_BAD_PARAM && st < CUDNN_STATUS_NOT_SUPPORTED
             ? CUDA_ERROR_INVALID_VALUE
             : CUDA_ERROR_LAUNCH_FAILED;
}

/* ---- the session's plans ------------------------------------------------------ */

typedef struct {
  uint64_t hash;
  int device; /* a plan is built for one device's context */
  uint8_t *graph_bytes;
  size_t graph_len;
  wgraph g; /* decoded, pointing into graph_bytes */
  rgpu_cudnn_soft_plan *soft;     /* softgpu */
  cudnnBackendDescriptor_t *real; /* a GPU: every node's, the plan last */
  uint64_t workspace;
} plan_entry;

static struct {
  pthread_mutex_t lock;
  plan_entry *slot[PLANS_MAX];
  unsigned next;
} g_plans = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void plan_free(plan_entry *e) {
  if (!e) return;
  if (e->real) real_free(e->real, e->g.n);
  rgpu_cudnn_soft_plan_free(e->soft);
  graph_free(&e->g);
  free(e->graph_bytes);
  free(e);
}

/* Builds the plan of graph b (the root an execution plan): softgpu's
 * convolution or NVIDIA's finalized plan. */
static CUresult plan_build(rgpu_worker *w, const char *api, const rgpu_bytes *b, plan_entry **out) {
  plan_entry *e = calloc(1, sizeof *e);
  if (!e || !(e->graph_bytes = malloc(b->len ? b->len : 1))) {
    free(e);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", api);
  }
  memcpy(e->graph_bytes, b->data, b->len);
  e->graph_len = b->len;
  e->hash = rgpu_cudnn_graph_hash(e->graph_bytes, e->graph_len);
  rgpu_bytes own = {e->graph_bytes, e->graph_len};
  CUresult r = graph_decode(w, api, &own, &e->g);
  if (r) {
    plan_free(e);
    return r;
  }
  const wnode *root = &e->g.node[e->g.n - 1];
  if (root->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
    plan_free(e);
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the graph's root is no execution plan", api);
  }
  if (D->is_softgpu) {
    const wnode *cfg = ref(&e->g, root, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                           CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    const wnode *eng = cfg ? ref(&e->g, cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                 CUDNN_BACKEND_ENGINE_DESCRIPTOR)
                           : NULL;
    int64_t index = -1;
    const wnode *og = eng ? ref(&e->g, eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
                          : NULL;
    if (!eng || i64s(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &index, 1) != 1 || index != 0) {
      plan_free(e);
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: only engine 0 (softgpu's one engine)",
                  api);
    }
    char why[160];
    int rc = rgpu_cudnn_soft_plan_build(&e->g, og, &e->soft, why, sizeof why);
    if (rc) {
      plan_free(e);
      if (rc == -2) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", api);
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: %s", api, why);
    }
    *out = e;
    return CUDA_SUCCESS;
  }
  char where[160] = "reading the plan's workspace size";
  cudnnStatus_t st;
  if ((r = real_graph(w, api, &e->g, &e->real, &st, where, sizeof where))) {
    plan_free(e);
    return r;
  }
  int64_t ws = 0, got = 0;
  if (!st)
    st = g_be.get(e->real[e->g.n - 1], CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                  1, &got, &ws);
  if (st) {
    plan_free(e);
    return FAIL(status_cu(st), "%s: cuDNN status %d %s", api, (int)st, where);
  }
  e->workspace = (uint64_t)ws;
  *out = e;
  return CUDA_SUCCESS;
}

/* The session's plan for graph b, built (and kept) when not there yet. */
static CUresult plan_get(rgpu_worker *w, const char *api, const rgpu_bytes *b, plan_entry **out) {
  uint64_t hash = rgpu_cudnn_graph_hash(b->data, b->len);
  int dev = w->cur_dev < 0 ? 0 : w->cur_dev;
  pthread_mutex_lock(&g_plans.lock);
  for (unsigned i = 0; i < PLANS_MAX; i++) {
    plan_entry *e = g_plans.slot[i];
    if (e && e->hash == hash && e->device == dev && e->graph_len == b->len &&
        !memcmp(e->graph_bytes, b->data, b->len)) {
      *out = e;
      pthread_mutex_unlock(&g_plans.lock);
      return CUDA_SUCCESS;
    }
  }
  plan_entry *e = NULL;
  CUresult r = plan_build(w, api, b, &e);
  if (!r) {
    e->device = dev;
    unsigned i = g_plans.next++ % PLANS_MAX;
    plan_free(g_plans.slot[i]);
    g_plans.slot[i] = e;
    *out = e;
  }
  pthread_mutex_unlock(&g_plans.lock);
  return r;
}

/* ---- the handlers ------------------------------------------------------------ */

CUresult rgpu_h_cudnn_backend_heur(rgpu_req *rq, const rgpu_msg_cudnn_backend_heur_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnBackendFinalize(engine heuristics)";
  wgraph g;
  CUresult r = graph_decode(w, api, &q->graph, &g);
  if (r) return r;
  const wnode *root = &g.node[g.n - 1];
  const wnode *og = ref(&g, root, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                        CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (root->type != CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR || !og) {
    graph_free(&g);
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the graph's root is no engine heuristics", api);
  }
  /* The answer's arrays (~100 KB): on the heap, as handlers may run on
   * small job-thread stacks that cuDNN's heuristics use too. */
  struct heur_answer {
    uint64_t engine[ENGINES_MAX], knob_type[4096], knob_value[4096];
    uint32_t knob_count[ENGINES_MAX], num_count[ENGINES_MAX], beh_count[ENGINES_MAX];
    uint32_t num[4096], beh[4096];
    uint64_t workspace[ENGINES_MAX], shmem[ENGINES_MAX];
  } *ans = calloc(1, sizeof *ans);
  if (!ans) {
    graph_free(&g);
    return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", api);
  }
  uint64_t *engine = ans->engine, *knob_type = ans->knob_type, *knob_value = ans->knob_value;
  uint32_t *knob_count = ans->knob_count, *num_count = ans->num_count, *beh_count = ans->beh_count;
  uint32_t *num = ans->num, *beh = ans->beh;
  uint32_t n = 0, nk = 0, nn = 0, nb = 0;
  if (D->is_softgpu) {
    rgpu_cudnn_soft_plan *sp = NULL;
    char why[160];
    int rc = rgpu_cudnn_soft_plan_build(&g, og, &sp, why, sizeof why);
    rgpu_cudnn_soft_plan_free(sp);
    graph_free(&g);
    if (rc) {
      free(ans);
      if (rc == -2) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", api);
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: %s", api, why);
    }
    engine[0] = 0;
    knob_count[0] = num_count[0] = beh_count[0] = 0;
    n = 1;
  } else {
    cudnnBackendDescriptor_t *real;
    cudnnStatus_t st;
    char where[160] = "reading cuDNN's answer";
    if ((r = real_graph(w, api, &g, &real, &st, where, sizeof where))) {
      graph_free(&g);
      free(ans);
      return r;
    }
    int64_t count = 0;
    cudnnBackendDescriptor_t heur = real ? real[g.n - 1] : NULL;
    if (!st)
      st = g_be.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                    NULL);
    if (count > ENGINES_MAX) count = ENGINES_MAX;
    cudnnBackendDescriptor_t cfgs[ENGINES_MAX] = {0};
    for (int64_t i = 0; !st && i < count; i++)
      st = g_be.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]);
    int64_t got = 0;
    if (!st && count)
      st = g_be.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                    &got, cfgs);
    if (got < count) count = got;
    for (int64_t i = 0; !st && i < count; i++) {
      cudnnBackendDescriptor_t eng = NULL, knobs[64] = {0};
      int64_t idx = 0, k = 0, c1 = 0;
      int notes[64];
      st = g_be.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
      if (!st)
        st = g_be.get(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c1,
                      &eng);
      if (!st)
        st = g_be.get(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &c1, &idx);
      if (!st) {
        engine[n] = (uint64_t)idx;
        c1 = 0;
        /* Notes are optional answers: none when cuDNN has none. */
        if (g_be.get(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 64, &c1,
                     notes))
          c1 = 0;
        if (c1 > 64) c1 = 64;
        if (nn + c1 > 4096) c1 = 0;
        for (int64_t j = 0; j < c1; j++) num[nn++] = (uint32_t)notes[j];
        num_count[n] = (uint32_t)c1;
        c1 = 0;
        if (g_be.get(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 64, &c1,
                     notes))
          c1 = 0;
        if (c1 > 64) c1 = 64;
        if (nb + c1 > 4096) c1 = 0;
        for (int64_t j = 0; j < c1; j++) beh[nb++] = (uint32_t)notes[j];
        beh_count[n] = (uint32_t)c1;
        /* Knob choices: create as many as cuDNN says, then read them. */
        if (g_be.get(cfgs[i], CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                     &k, NULL))
          k = 0;
        if (k > 64 || nk + k > 4096) k = 0;
        for (int64_t j = 0; !st && j < k; j++)
          st = g_be.create(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[j]);
        if (!st && k)
          st = g_be.get(cfgs[i], CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                        k, &c1, knobs);
        for (int64_t j = 0; !st && j < k; j++) {
          int kt = 0;
          int64_t kv = 0, c2;
          st = g_be.get(knobs[j], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &c2, &kt);
          if (!st)
            st = g_be.get(knobs[j], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c2, &kv);
          knob_type[nk + j] = (uint64_t)kt;
          knob_value[nk + j] = (uint64_t)kv;
        }
        /* The config's own answers (optional: an older cuDNN has none). */
        int64_t ws = 0;
        int32_t shm = 0;
        if (!st && !g_be.get(cfgs[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                             &c1, &ws))
          ans->workspace[n] = (uint64_t)ws;
        if (!st && !g_be.get(cfgs[i], CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1,
                             &c1, &shm))
          ans->shmem[n] = (uint64_t)(uint32_t)shm;
        if (!st) {
          knob_count[n] = (uint32_t)k;
          nk += (uint32_t)k;
          n++;
        }
      }
      for (int j = 0; j < 64; j++)
        if (knobs[j]) g_be.destroy(knobs[j]);
      if (eng) g_be.destroy(eng);
    }
    for (int64_t i = 0; i < ENGINES_MAX; i++)
      if (cfgs[i]) g_be.destroy(cfgs[i]);
    real_free(real, g.n);
    graph_free(&g);
    if (st) {
      free(ans);
      return FAIL(status_cu(st), "%s: cuDNN status %d %s", api, (int)st, where);
    }
  }
  rgpu_msg_cudnn_backend_heur_rep rep = {
      .engine = {engine, n}, .knob_count = {knob_count, n}, .knob_type = {knob_type, nk},
      .knob_value = {knob_value, nk}, .numerical_count = {num_count, n},
      .numerical = {num, nn}, .behavior_count = {beh_count, n}, .behavior = {beh, nb},
      .workspace = {ans->workspace, n}, .shared_memory = {ans->shmem, n}};
  rgpu_msg_cudnn_backend_heur_rep_encode(rq->rep, &rep);
  free(ans);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_backend_info(rgpu_req *rq, const rgpu_msg_cudnn_backend_info_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnBackendGetAttribute(engine or engine config)";
  wgraph g;
  CUresult r = graph_decode(w, api, &q->graph, &g);
  if (r) return r;
  const wnode *root = &g.node[g.n - 1];
  int is_cfg = root->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
  if (!is_cfg && root->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
    graph_free(&g);
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the graph's root is no engine or engine config", api);
  }
  rgpu_msg_cudnn_backend_info_rep rep = {0};
  uint32_t num[64], beh[64];
  if (D->is_softgpu) {
    /* softgpu's one engine: no workspace, no notes. */
    const wnode *eng = is_cfg ? ref(&g, root, CUDNN_ATTR_ENGINECFG_ENGINE,
                                    CUDNN_BACKEND_ENGINE_DESCRIPTOR)
                              : root;
    int64_t index = -1;
    int known = eng && i64s(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &index, 1) == 1 && index == 0;
    graph_free(&g);
    if (!known)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: only engine 0 (softgpu's one engine)",
                  api);
    rgpu_msg_cudnn_backend_info_rep_encode(rq->rep, &rep);
    return CUDA_SUCCESS;
  }
  cudnnBackendDescriptor_t *real;
  cudnnStatus_t st;
  char where[160] = "reading cuDNN's answer";
  if ((r = real_graph(w, api, &g, &real, &st, where, sizeof where))) {
    graph_free(&g);
    return r;
  }
  cudnnBackendDescriptor_t eng = NULL;
  int64_t c = 0;
  if (!st && is_cfg) {
    int64_t ws = 0;
    int32_t shm = 0;
    if (!g_be.get(real[g.n - 1], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &c, &ws))
      rep.workspace = (uint64_t)ws;
    if (!g_be.get(real[g.n - 1], CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1, &c,
                  &shm))
      rep.shared_memory = (uint64_t)(uint32_t)shm;
    st = g_be.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
    if (!st)
      st = g_be.get(real[g.n - 1], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                    &c, &eng);
  }
  if (!st) {
    cudnnBackendDescriptor_t e = is_cfg ? eng : real[g.n - 1];
    int notes[64];
    /* Notes are optional answers: none when cuDNN has none. */
    c = 0;
    if (g_be.get(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 64, &c, notes)) c = 0;
    for (int64_t j = 0; j < c && j < 64; j++) num[j] = (uint32_t)notes[j];
    rep.numerical = (rgpu_array){num, (uint32_t)(c < 64 ? c : 64)};
    c = 0;
    if (g_be.get(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 64, &c, notes)) c = 0;
    for (int64_t j = 0; j < c && j < 64; j++) beh[j] = (uint32_t)notes[j];
    rep.behavior = (rgpu_array){beh, (uint32_t)(c < 64 ? c : 64)};
  }
  if (eng) g_be.destroy(eng);
  real_free(real, g.n);
  graph_free(&g);
  if (st) return FAIL(status_cu(st), "%s: cuDNN status %d %s", api, (int)st, where);
  rgpu_msg_cudnn_backend_info_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_backend_engine_count(rgpu_req *rq,
                                           const rgpu_msg_cudnn_backend_engine_count_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnBackendGetAttribute(CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT)";
  wgraph g;
  CUresult r = graph_decode(w, api, &q->graph, &g);
  if (r) return r;
  const wnode *og = &g.node[g.n - 1];
  if (og->type != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
    graph_free(&g);
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the graph's root is no operation graph", api);
  }
  int64_t count = 0;
  if (D->is_softgpu) {
    /* softgpu's one engine, where its planner takes the graph. */
    rgpu_cudnn_soft_plan *sp = NULL;
    char why[160];
    int rc = rgpu_cudnn_soft_plan_build(&g, og, &sp, why, sizeof why);
    rgpu_cudnn_soft_plan_free(sp);
    graph_free(&g);
    if (rc == -2) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", api);
    count = rc == 0;
  } else {
    cudnnBackendDescriptor_t *real;
    cudnnStatus_t st;
    char where[160] = "reading cuDNN's answer";
    if ((r = real_graph(w, api, &g, &real, &st, where, sizeof where))) {
      graph_free(&g);
      return r;
    }
    int64_t got = 0;
    if (!st)
      st = g_be.get(real[g.n - 1], CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64,
                    1, &got, &count);
    real_free(real, g.n);
    graph_free(&g);
    if (st) return FAIL(status_cu(st), "%s: cuDNN status %d %s", api, (int)st, where);
  }
  rgpu_msg_cudnn_backend_engine_count_rep rep = {.count = (uint64_t)count};
  rgpu_msg_cudnn_backend_engine_count_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_backend_plan(rgpu_req *rq, const rgpu_msg_cudnn_backend_plan_req *q) {
  rgpu_worker *w = rq->w;
  plan_entry *e;
  CUresult r = plan_get(w, "cudnnBackendFinalize(execution plan)", &q->graph, &e);
  if (r) return r;
  rgpu_msg_cudnn_backend_plan_rep rep = {.workspace_size = e->workspace};
  rgpu_msg_cudnn_backend_plan_rep_encode(rq->rep, &rep);
  return CUDA_SUCCESS;
}

CUresult rgpu_h_cudnn_backend_execute(rgpu_req *rq, const rgpu_msg_cudnn_backend_execute_req *q) {
  rgpu_worker *w = rq->w;
  const char *api = "cudnnBackendExecute";
  if (q->uid.count != q->ptr.count)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %u unique ids for %u pointers", api, q->uid.count,
                q->ptr.count);
  if (q->uid.count > VARIANT_MAX)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: a variant pack of %u tensors (at most %d)", api,
                q->uid.count, VARIANT_MAX);
  CUstream st = NULL;
  if (q->stream) {
    const rgpu_handle_entry *he = rgpu_handle_map_get(&w->streams, q->stream);
    if (!he)
      return FAIL(CUDA_ERROR_INVALID_HANDLE, "%s: unknown stream id %llu", api,
                  (unsigned long long)q->stream);
    st = (CUstream)he->ptr;
  }
  plan_entry *e;
  CUresult r = plan_get(w, api, &q->graph, &e);
  if (r) return r;
  /* Every pointer in the session, over the extent of the tensor it is for;
   * a by-value tensor's value came with the request (aligned copies here:
   * cuDNN reads them while it enqueues, before this returns). */
  _Alignas(16) uint8_t values[4096];
  size_t used = 0, from = 0; /* bytes of values and of by_value taken */
  void *by_value_ptr[VARIANT_MAX] = {0};
  for (uint32_t i = 0; i < q->uid.count; i++) {
    int64_t uid = (int64_t)rgpu_array_u64(&q->uid, i);
    uint64_t ptr = rgpu_array_u64(&q->ptr, i);
    const wnode *t = rgpu_cudnn_graph_tensor(&e->g, uid);
    uint64_t bytes = t ? rgpu_cudnn_graph_tensor_extent(t) : 0;
    if (!bytes)
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: unique id %lld names no tensor of the plan", api,
                  (long long)uid);
    if (rgpu_cudnn_graph_tensor_by_value(t)) {
      size_t at = (used + 15) & ~(size_t)15;
      if (from + bytes > q->by_value.len || at + bytes > sizeof values)
        return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the value of by-value tensor %lld (%llu bytes) "
                    "is missing from the request", api, (long long)uid, (unsigned long long)bytes);
      memcpy(values + at, (const uint8_t *)q->by_value.data + from, bytes);
      by_value_ptr[i] = values + at;
      used = at + bytes;
      from += bytes;
      continue;
    }
    if (!rgpu_alloc_table_lookup(&w->allocs, ptr, bytes))
      return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: tensor %lld (%llu bytes at 0x%llx) is not inside "
                  "a device allocation of this session", api, (long long)uid,
                  (unsigned long long)bytes, (unsigned long long)ptr);
  }
  if (from != q->by_value.len)
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %zu bytes of by-value tensors, %zu sent", api, from,
                (size_t)q->by_value.len);
  if (e->workspace && !rgpu_alloc_table_lookup(&w->allocs, q->workspace, e->workspace))
    return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: the workspace (%llu bytes at 0x%llx) is not inside "
                "a device allocation of this session", api, (unsigned long long)e->workspace,
                (unsigned long long)q->workspace);
  if (e->soft) {
    if (used)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s on softgpu: tensors passed by value", api);
    if (!D->cuLaunchHostFunc)
      return FAIL(CUDA_ERROR_NOT_SUPPORTED, "%s: this softgpu has no cuLaunchHostFunc", api);
    int64_t uids[VARIANT_MAX];
    uint64_t ptrs[VARIANT_MAX];
    uint32_t n = q->uid.count;
    for (uint32_t i = 0; i < n; i++) {
      uids[i] = (int64_t)rgpu_array_u64(&q->uid, i);
      ptrs[i] = rgpu_array_u64(&q->ptr, i);
    }
    void *job;
    char why[160];
    int rc = rgpu_cudnn_soft_job_make(e->soft, uids, ptrs, n, &job, why, sizeof why);
    if (rc == -2) return FAIL(CUDA_ERROR_OUT_OF_MEMORY, "%s: server out of memory", api);
    if (rc) return FAIL(CUDA_ERROR_INVALID_VALUE, "%s: %s", api, why);
    r = D->cuLaunchHostFunc(st, rgpu_cudnn_soft_job_run, job);
    if (r) {
      rgpu_cudnn_soft_job_free(job);
      return FAIL(r, "%s: cuLaunchHostFunc: %s", api, rgpu_driver_error_name(D, r));
    }
    return CUDA_SUCCESS;
  }
  cudnnHandle_t h;
  if ((r = rgpu_cudnn_server_handle(w, api, st, &h))) return r;
  cudnnBackendDescriptor_t pack = NULL;
  int64_t uids[VARIANT_MAX];
  void *ptrs[VARIANT_MAX];
  uint32_t n = q->uid.count;
  for (uint32_t i = 0; i < n; i++) {
    uids[i] = (int64_t)rgpu_array_u64(&q->uid, i);
    ptrs[i] = by_value_ptr[i] ? by_value_ptr[i] : (void *)(uintptr_t)rgpu_array_u64(&q->ptr, i);
  }
  void *ws = (void *)(uintptr_t)q->workspace;
  cudnnStatus_t s = g_be.create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (!s)
    s = g_be.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  if (!s)
    s = g_be.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  if (!s) s = g_be.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (!s) s = g_be.finalize(pack);
  if (!s) s = g_be.execute(h, e->real[e->g.n - 1], pack);
  if (pack) g_be.destroy(pack);
  return s ? FAIL(status_cu(s), "%s: cuDNN status %d", api, (int)s) : CUDA_SUCCESS;
}
