/* cublasLtMatmul (one CUBLASLT_MATMUL request without a reply) and
 * cublasLtMatmulAlgoGetHeuristic (one CUBLASLT_HEURISTIC round trip,
 * cached on the client per descriptor, layout and preference content and
 * device, so a program that asks again for a shape it asked before costs
 * nothing).
 *
 * The descriptors are client records (rgpu_cublaslt_desc.c); the checks
 * here are cuBLASLt's (a bad call fails at once with its status) plus
 * rgpu's limits (what the wire carries and softgpu computes: refused with
 * CUBLAS_STATUS_NOT_SUPPORTED, logged once).  What only the server can
 * check (that A, B, C, D, bias and workspace lie in allocations of the
 * session) fails there and comes back as a deferred error, like a bad
 * kernel launch. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_calls.h"
#include "rgpu_cublaslt_internal.h"
#include "rgpu_cublaslt_shape.h"
#include "rgpu_cudart.h"
#include "rgpu_cudart_graph.h"
#include "rgpu_cudart_op.h"
#include "rgpu_half.h"
#include "rgpu_log.h"
#include "rgpu_messages.h"

/* A refusal of something rgpu does not carry: logged once per site. */
#define REFUSE(...)                                                 \
  do {                                                              \
    static int logged_;                                             \
    if (!__atomic_exchange_n(&logged_, 1, __ATOMIC_RELAXED))        \
      RGPU_WARN(__VA_ARGS__);                                       \
    return CUBLAS_STATUS_NOT_SUPPORTED;                             \
  } while (0)

/* One matmul's shape, from its descriptor and layouts (A, B, C, D). */
typedef struct {
  const rgpu_cublaslt_matmul_desc_values *op;
  const rgpu_cublaslt_layout_values *l[4];
  uint64_t m, n, k;
  int scale; /* cudaDataType of alpha and beta */
} lt_shape;

static const char k_names[4] = {'A', 'B', 'C', 'D'};

static cublasStatus_t layout_check(const char *api, int which, const rgpu_cublaslt_layout_values *l) {
  if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
    REFUSE("%s: %c's order %d is not supported by rgpu (column- and row-major only); it returns "
           "CUBLAS_STATUS_NOT_SUPPORTED", api, k_names[which], (int)l->order);
  if (l->batch_mode != CUBLASLT_BATCH_MODE_STRIDED || l->plane_offset != 0)
    REFUSE("%s: %c's pointer-array batch or planar-complex layout is not supported by rgpu; it "
           "returns CUBLAS_STATUS_NOT_SUPPORTED", api, k_names[which]);
  if (l->rows > INT64_MAX || l->cols > INT64_MAX || l->ld < 0 ||
      (uint64_t)l->ld < rgpu_cublaslt_min_ld((uint32_t)l->order, l->rows, l->cols) ||
      l->batch_count < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (l->strided_batch_offset < 0)
    REFUSE("%s: %c's negative batch stride is not supported by rgpu; it returns "
           "CUBLAS_STATUS_NOT_SUPPORTED", api, k_names[which]);
  return CUBLAS_STATUS_SUCCESS;
}

/* The checks every matmul and heuristic query makes. */
static cublasStatus_t shape_check(const char *api, cublasLtMatmulDesc_t desc,
                                  cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                  cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                  lt_shape *s) {
  rgpu_cublaslt_desc_rec *d = rgpu_cublaslt_desc(desc);
  rgpu_cublaslt_layout_rec *L[4] = {rgpu_cublaslt_layout(Adesc), rgpu_cublaslt_layout(Bdesc),
                                    rgpu_cublaslt_layout(Cdesc), rgpu_cublaslt_layout(Ddesc)};
  if (!d || !L[0] || !L[1] || !L[2] || !L[3]) return CUBLAS_STATUS_INVALID_VALUE;
  const rgpu_cublaslt_matmul_desc_values *op = &d->v;
  s->op = op;
  for (int i = 0; i < 4; i++) {
    s->l[i] = &L[i]->v;
    cublasStatus_t st = layout_check(api, i, s->l[i]);
    if (st) return st;
  }
  const rgpu_cublaslt_layout_values *A = s->l[0], *B = s->l[1], *C = s->l[2], *D = s->l[3];
  if ((op->transa != CUBLAS_OP_N && op->transa != CUBLAS_OP_T && op->transa != CUBLAS_OP_C) ||
      (op->transb != CUBLAS_OP_N && op->transb != CUBLAS_OP_T && op->transb != CUBLAS_OP_C))
    return CUBLAS_STATUS_INVALID_VALUE;
  /* op(A) is m x k, op(B) k x n, C and D m x n. */
  s->m = D->rows;
  s->n = D->cols;
  s->k = op->transa == CUBLAS_OP_N ? A->cols : A->rows;
  uint64_t am = op->transa == CUBLAS_OP_N ? A->rows : A->cols;
  uint64_t bk = op->transb == CUBLAS_OP_N ? B->rows : B->cols;
  uint64_t bn = op->transb == CUBLAS_OP_N ? B->cols : B->rows;
  if (am != s->m || bk != s->k || bn != s->n || C->rows != s->m || C->cols != s->n)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (A->batch_count != D->batch_count || B->batch_count != D->batch_count ||
      C->batch_count != D->batch_count)
    return CUBLAS_STATUS_INVALID_VALUE;
  int scale = A->type == B->type && C->type == D->type && op->compute_type != 0
                  ? rgpu_cublas_gemm_scale_type(A->type, B->type, C->type, (uint32_t)op->compute_type)
                  : -1;
  if (scale < 0 || scale != op->scale_type)
    REFUSE("%s: types A %u, B %u, C %u, D %u with compute type %d and scale type %d are not "
           "supported by rgpu; it returns CUBLAS_STATUS_NOT_SUPPORTED", api, A->type, B->type,
           C->type, D->type, (int)op->compute_type, (int)op->scale_type);
  s->scale = scale;
  if (!rgpu_cublaslt_epilogue_ok(op->epilogue))
    REFUSE("%s: epilogue %u is not supported by rgpu (DEFAULT, RELU, BIAS, RELU_BIAS, GELU, "
           "GELU_BIAS); it returns CUBLAS_STATUS_NOT_SUPPORTED", api, op->epilogue);
  if (op->bias_data_type != -1 && op->bias_data_type != (int32_t)D->type)
    REFUSE("%s: a bias of type %d with D of type %u is not supported by rgpu; it returns "
           "CUBLAS_STATUS_NOT_SUPPORTED", api, (int)op->bias_data_type, D->type);
  if (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST &&
      op->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
    REFUSE("%s: pointer mode %d is not supported by rgpu (host and device scalars only); it "
           "returns CUBLAS_STATUS_NOT_SUPPORTED", api, (int)op->pointer_mode);
  if (op->transc != CUBLAS_OP_N || op->fill_mode != CUBLAS_FILL_MODE_FULL ||
      op->epilogue_aux_pointer || op->a_scale_pointer || op->b_scale_pointer ||
      op->c_scale_pointer || op->d_scale_pointer || op->amax_d_pointer ||
      op->epilogue_aux_scale_pointer || op->epilogue_aux_amax_pointer || op->d_out_scale_pointer ||
      op->a_scale_mode || op->b_scale_mode || op->c_scale_mode || op->d_scale_mode ||
      op->epilogue_aux_scale_mode || op->d_out_scale_mode || op->emulation_descriptor ||
      op->alpha_vector_batch_stride)
    REFUSE("%s: scaling factors, amax, auxiliary outputs, emulation, a transposed C or a fill "
           "mode are not supported by rgpu; it returns CUBLAS_STATUS_NOT_SUPPORTED", api);
  return CUBLAS_STATUS_SUCCESS;
}

/* The descriptor and layout fields CUBLASLT_MATMUL and CUBLASLT_HEURISTIC
 * share (same names in both generated structs). */
#define LT_LAYOUT_FIELDS(q, x, L)          \
  (q).x##_type = (L)->type;                \
  (q).x##_order = (uint32_t)(L)->order;    \
  (q).x##_rows = (L)->rows;                \
  (q).x##_cols = (L)->cols;                \
  (q).x##_ld = (L)->ld;                    \
  (q).x##_batch = (L)->batch_count;        \
  (q).x##_stride = (L)->strided_batch_offset
#define LT_SHAPE_FIELDS(q, s)                                       \
  do {                                                              \
    (q).compute = (uint32_t)(s)->op->compute_type;                  \
    (q).scale = (uint32_t)(s)->scale;                               \
    (q).pointer_mode = (uint32_t)(s)->op->pointer_mode;             \
    (q).transa = (uint32_t)(s)->op->transa;                         \
    (q).transb = (uint32_t)(s)->op->transb;                         \
    (q).epilogue = (s)->op->epilogue;                               \
    (q).bias_type = (s)->op->bias_data_type;                        \
    (q).bias = (uint64_t)(uintptr_t)(s)->op->bias_pointer;          \
    (q).bias_stride = (s)->op->bias_batch_stride;                   \
    LT_LAYOUT_FIELDS(q, a, (s)->l[0]);                              \
    LT_LAYOUT_FIELDS(q, b, (s)->l[1]);                              \
    LT_LAYOUT_FIELDS(q, c, (s)->l[2]);                              \
    LT_LAYOUT_FIELDS(q, d, (s)->l[3]);                              \
  } while (0)

/* A host-mode scalar of type t, as f64 (exact for every scale type). */
static double scalar_value(int t, const void *p) {
  switch (t) {
    case CUDA_R_16F: return rgpu_half_to_float(*(const uint16_t *)p);
    case CUDA_R_32F: return *(const float *)p;
    default: return *(const double *)p;
  }
}

/* The session and the stream's wire id and device. */
static cublasStatus_t enter(cudaStream_t stream, rgpu_client **c, uint64_t *wire, int *device) {
  if (rgpu_rt_enter(c) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (rgpu_rt_stream_resolve(*c, stream, 0, wire, device) != cudaSuccess)
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmul(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
    const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
    const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
    size_t workspaceSizeInBytes, cudaStream_t stream) {
  struct cublasLtContext hv, *h = &hv;
  if (!rgpu_cublaslt_handle_use(lightHandle, &hv)) {
    rgpu_rt_count_call();
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  lt_shape s;
  cublasStatus_t st = shape_check("cublasLtMatmul", computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &s);
  if (st == CUBLAS_STATUS_SUCCESS && (!alpha || !beta || (workspaceSizeInBytes && !workspace) ||
                                      (rgpu_cublaslt_epilogue_has_bias(s.op->epilogue) &&
                                       !s.op->bias_pointer)))
    st = CUBLAS_STATUS_INVALID_VALUE;
  if (st != CUBLAS_STATUS_SUCCESS || s.m == 0 || s.n == 0) {
    rgpu_rt_count_call();
    return st;
  }
  rgpu_client *c;
  uint64_t wire;
  int device;
  if ((st = enter(stream, &c, &wire, &device)) != CUBLAS_STATUS_SUCCESS) return st;
  /* Host mode: the values, read now (cuBLASLt reads them at the call too).
   * Device mode: the addresses; the server reads them in stream order. */
  int dev_scalars = s.op->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  rgpu_msg_cublaslt_matmul_req q = {.handle = h->id,
                                    .stream = wire,
                                    .alpha = dev_scalars ? 0 : scalar_value(s.scale, alpha),
                                    .beta = dev_scalars ? 0 : scalar_value(s.scale, beta),
                                    .alpha_dev = dev_scalars ? (uint64_t)(uintptr_t)alpha : 0,
                                    .beta_dev = dev_scalars ? (uint64_t)(uintptr_t)beta : 0,
                                    .a = (uint64_t)(uintptr_t)A,
                                    .b = (uint64_t)(uintptr_t)B,
                                    .c = (uint64_t)(uintptr_t)C,
                                    .d = (uint64_t)(uintptr_t)D,
                                    .workspace = (uint64_t)(uintptr_t)workspace,
                                    .workspace_size = workspace ? workspaceSizeInBytes : 0,
                                    .algo = {algo, algo ? sizeof *algo : 0}};
  LT_SHAPE_FIELDS(q, &s);
  /* Sent as a library call operation, so that a capturing stream makes it
   * a graph node (the server captures it into the graph: the kernels
   * cuBLASLt runs natively inside a capture); otherwise one CUBLASLT_MATMUL
   * without a reply, behind the stream's backpressure. */
  rgpu_buf req;
  rgpu_buf_init(&req);
  int enc = rgpu_msg_cublaslt_matmul_req_encode(&req, &q);
  if (enc || req.err) {
    rgpu_buf_free(&req);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  /* The stream field follows the u64 handle. */
  cudaError_t e = rgpu_rt_submit_request(c, device, wire, RGPU_OP_CUBLASLT_MATMUL, 8, &req);
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* ---- cublasLtMatmulAlgoGetHeuristic and its cache ------------------------ */

#define HEUR_MAX 64          /* results per query (the message's limit) */
#define HEUR_CACHE_SLOTS 128 /* shapes remembered, replaced round-robin */

/* What a heuristic answer depends on: the device, the count asked for and
 * the records' contents, pointers reduced to their alignment (cuBLASLt
 * looks at the bias pointer only for that).  Built in zeroed memory and
 * filled by memcpy, so memcmp compares it. */
typedef struct {
  int device;
  int requested;
  rgpu_cublaslt_matmul_desc_values op;
  rgpu_cublaslt_layout_values l[4];
  rgpu_cublaslt_preference_values pref;
} heur_key;

typedef struct {
  heur_key key;
  int count;
  cublasLtMatmulHeuristicResult_t results[];
} heur_entry;

static struct {
  pthread_mutex_t lock; /* a leaf: held for lookups and inserts only */
  heur_entry *slot[HEUR_CACHE_SLOTS];
  unsigned next;
} g_heur = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void key_make(heur_key *k, int device, int requested, const lt_shape *s,
                     const rgpu_cublaslt_preference_values *pref) {
  memset(k, 0, sizeof *k);
  k->device = device;
  k->requested = requested;
  memcpy(&k->op, s->op, sizeof k->op);
  k->op.bias_pointer = (const void *)((uintptr_t)s->op->bias_pointer & 255u);
  for (int i = 0; i < 4; i++) memcpy(&k->l[i], s->l[i], sizeof k->l[i]);
  memcpy(&k->pref, pref, sizeof k->pref);
}

static int heur_lookup(const heur_key *k, cublasLtMatmulHeuristicResult_t *out, int *count) {
  int hit = 0;
  pthread_mutex_lock(&g_heur.lock);
  for (unsigned i = 0; i < HEUR_CACHE_SLOTS && !hit; i++) {
    heur_entry *e = g_heur.slot[i];
    if (e && !memcmp(&e->key, k, sizeof *k)) {
      memcpy(out, e->results, sizeof *out * (size_t)e->count);
      *count = e->count;
      hit = 1;
    }
  }
  pthread_mutex_unlock(&g_heur.lock);
  return hit;
}

static void heur_insert(const heur_key *k, const cublasLtMatmulHeuristicResult_t *res, int count) {
  heur_entry *e = malloc(sizeof *e + sizeof *res * (size_t)count);
  if (!e) return; /* not remembered: the next query asks again */
  memcpy(&e->key, k, sizeof *k);
  e->count = count;
  memcpy(e->results, res, sizeof *res * (size_t)count);
  pthread_mutex_lock(&g_heur.lock);
  unsigned i = g_heur.next++ % HEUR_CACHE_SLOTS;
  free(g_heur.slot[i]);
  g_heur.slot[i] = e;
  pthread_mutex_unlock(&g_heur.lock);
}

/* CUBLASLT_HEURISTIC: the server's answer for the shape, into out. */
static cublasStatus_t heur_ask(rgpu_client *c, int device, const struct cublasLtContext *h,
                               const lt_shape *s, const rgpu_cublaslt_preference_values *p,
                               int requested, cublasLtMatmulHeuristicResult_t *out, int *count) {
  uint32_t waves_bits;
  memcpy(&waves_bits, &p->max_waves_count, sizeof waves_bits);
  rgpu_msg_cublaslt_heuristic_req q = {.handle = h->id,
                                       .pref_search_mode = p->search_mode,
                                       .pref_max_workspace = p->max_workspace_bytes,
                                       .pref_reduction_mask = p->reduction_scheme_mask,
                                       .pref_align_a = p->min_alignment_a_bytes,
                                       .pref_align_b = p->min_alignment_b_bytes,
                                       .pref_align_c = p->min_alignment_c_bytes,
                                       .pref_align_d = p->min_alignment_d_bytes,
                                       .pref_max_waves = waves_bits,
                                       .pref_impl_mask = p->impl_mask,
                                       .requested = (uint32_t)requested};
  LT_SHAPE_FIELDS(q, s);
  rgpu_buf pay;
  rgpu_buf_init(&pay);
  rgpu_client_reply rr = {.payload = &pay};
  rgpu_msg_cublaslt_heuristic_rep rep;
  rgpu_status rc = rgpu_call_cublaslt_heuristic(c, device, 0, &q, &rep, &rr);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (rc < 0) {
    /* The connection failed: the runtime's rules (a sticky error). */
    rgpu_rt_sync_ret(c, rc);
    st = CUBLAS_STATUS_EXECUTION_FAILED;
  } else if (rc > 0) {
    /* The server's answer (a cuBLASLt status turned CUresult, or its
     * refusal): a status of this call, not the runtime's last error. */
    st = rc == CUDA_ERROR_NOT_SUPPORTED ? CUBLAS_STATUS_NOT_SUPPORTED
         : rc == CUDA_ERROR_INVALID_VALUE ? CUBLAS_STATUS_INVALID_VALUE
                                          : CUBLAS_STATUS_EXECUTION_FAILED;
    RGPU_WARN("cublasLtMatmulAlgoGetHeuristic: the server answered %d: %s", (int)rc, rr.msg);
  } else {
    uint32_t n = rep.workspace.count;
    if (rep.algo.count != 8 * n || rep.state.count != n || rep.waves.count != n ||
        n > (uint32_t)requested) {
      RGPU_ERROR("cublasLtMatmulAlgoGetHeuristic: the server's reply is inconsistent");
      st = CUBLAS_STATUS_INTERNAL_ERROR;
    } else {
      for (uint32_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        for (uint32_t j = 0; j < 8; j++) out[i].algo.data[j] = rgpu_array_u64(&rep.algo, 8 * i + j);
        out[i].workspaceSize = rgpu_array_u64(&rep.workspace, i);
        out[i].state = (cublasStatus_t)rgpu_array_u32(&rep.state, i);
        uint32_t w = rgpu_array_u32(&rep.waves, i);
        memcpy(&out[i].wavesCount, &w, sizeof w);
      }
      *count = (int)n;
    }
  }
  rgpu_buf_free(&pay);
  return st;
}

RGPU_CUBLASLT cublasStatus_t rgpu_cublaslt_cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount) {
  struct cublasLtContext hv, *h = rgpu_cublaslt_handle_use(lightHandle, &hv) ? &hv : NULL;
  rgpu_cublaslt_pref_rec *pref = rgpu_cublaslt_pref(preference);
  lt_shape s;
  cublasStatus_t st = !h ? CUBLAS_STATUS_NOT_INITIALIZED
                      : !pref || requestedAlgoCount <= 0 || !heuristicResultsArray ||
                              !returnAlgoCount
                          ? CUBLAS_STATUS_INVALID_VALUE
                          : shape_check("cublasLtMatmulAlgoGetHeuristic", operationDesc, Adesc,
                                        Bdesc, Cdesc, Ddesc, &s);
  if (st != CUBLAS_STATUS_SUCCESS) {
    rgpu_rt_count_call();
    return st;
  }
  int requested = requestedAlgoCount < HEUR_MAX ? requestedAlgoCount : HEUR_MAX;
  heur_key key;
  key_make(&key, h->device, requested, &s, &pref->v);
  int count = 0;
  if (heur_lookup(&key, heuristicResultsArray, &count)) {
    rgpu_rt_count_call();
    *returnAlgoCount = count;
    return CUBLAS_STATUS_SUCCESS;
  }
  rgpu_client *c;
  if (rgpu_rt_enter(&c) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  cublasLtMatmulHeuristicResult_t res[HEUR_MAX];
  st = heur_ask(c, h->device, h, &s, &pref->v, requested, res, &count);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  heur_insert(&key, res, count);
  memcpy(heuristicResultsArray, res, sizeof res[0] * (size_t)count);
  *returnAlgoCount = count;
  return CUBLAS_STATUS_SUCCESS;
}
