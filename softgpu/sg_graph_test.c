/* softgpu graphs and stream capture: explicit graphs of kernels, copies
 * (1D/2D/3D, host and device), memsets, host nodes, events and child
 * graphs give the same results as the same work issued to a stream; exec
 * updates; 1000 launches of one exec; capture with fork/join and the
 * capture errors; a faulting kernel node makes the context sticky. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>

#include "rgpu_clock.h"

static CUcontext ctx;
static CUmodule mod;
static CUfunction vecadd, tmpl_i5, faulty;

static void *load(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", SG_TESTDATA, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(b);
    return NULL;
  }
  b[n] = 0;
  fclose(f);
  return b;
}

static int setup(void **state) {
  (void)state;
  if (cuInit(0) != CUDA_SUCCESS) return -1;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) return -1;
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return -1;
  void *img = load("kernels_zstd.fatbin");
  if (!img) return -1;
  CUresult r = cuModuleLoadData(&mod, img);
  free(img);
  if (r) return -1;
  if (cuModuleGetFunction(&vecadd, mod, "_Z6vecaddPKfS0_Pfi")) return -1;
  if (cuModuleGetFunction(&tmpl_i5, mod, "_Z4tmplIiLi5EEvPT_S0_i")) return -1;
  if (cuModuleGetFunction(&faulty, mod, "_Z6faultyPi")) return -1;
  return 0;
}

static CUDA_KERNEL_NODE_PARAMS kparams(CUfunction f, unsigned grid, unsigned block, void **args, void **extra) {
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.func = f;
  p.gridDimX = grid;
  p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = block;
  p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  p.extra = extra;
  return p;
}

static CUDA_MEMCPY3D copy1d_htod(CUdeviceptr d, const void *h, size_t n) {
  CUDA_MEMCPY3D p;
  memset(&p, 0, sizeof p);
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcHost = h;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = d;
  p.WidthInBytes = n;
  p.Height = p.Depth = 1;
  return p;
}

static CUDA_MEMCPY3D copy1d_dtoh(void *h, CUdeviceptr d, size_t n) {
  CUDA_MEMCPY3D p;
  memset(&p, 0, sizeof p);
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = d;
  p.dstMemoryType = CU_MEMORYTYPE_HOST;
  p.dstHost = h;
  p.WidthInBytes = n;
  p.Height = p.Depth = 1;
  return p;
}

/* ---- host-node order log ------------------------------------------------ */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char order[256];
static int norder;
static void mark_fn(void *arg) {
  pthread_mutex_lock(&log_lock);
  if (norder < 255) order[norder++] = *(const char *)arg;
  order[norder] = 0;
  pthread_mutex_unlock(&log_lock);
}
static void log_reset(void) {
  pthread_mutex_lock(&log_lock);
  norder = 0;
  order[0] = 0;
  pthread_mutex_unlock(&log_lock);
}
static int pos(char c) {
  const char *p = strchr(order, c);
  return p ? (int)(p - order) : -1;
}

static CUgraphNode host_node(CUgraph g, const CUgraphNode *deps, size_t n, const char *tag) {
  CUDA_HOST_NODE_PARAMS hp = {mark_fn, (void *)tag};
  CUgraphNode node;
  assert_int_equal(cuGraphAddHostNode(&node, g, deps, n, &hp), CUDA_SUCCESS);
  return node;
}

/* ---- structure ---------------------------------------------------------- */

static void test_structure(void **state) {
  (void)state;
  CUgraph g;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
  CUgraphNode a, b, c, d;
  assert_int_equal(cuGraphAddEmptyNode(&a, g, NULL, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddEmptyNode(&b, g, &a, 1), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddEmptyNode(&c, g, &a, 1), CUDA_SUCCESS);
  CUgraphNode bc[2] = {b, c};
  assert_int_equal(cuGraphAddEmptyNode(&d, g, bc, 2), CUDA_SUCCESS);
  CUgraphNode dup[2] = {b, b};
  CUgraphNode x;
  assert_int_equal(cuGraphAddEmptyNode(&x, g, dup, 2), CUDA_ERROR_INVALID_VALUE);

  size_t n = 0;
  assert_int_equal(cuGraphGetNodes(g, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 4);
  CUgraphNode nodes[6];
  n = 6;
  assert_int_equal(cuGraphGetNodes(g, nodes, &n), CUDA_SUCCESS);
  assert_int_equal(n, 4);
  assert_ptr_equal(nodes[0], a);
  assert_null(nodes[4]);
  n = 0;
  assert_int_equal(cuGraphGetRootNodes(g, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 1);
  n = 0;
  assert_int_equal(cuGraphGetEdges(g, NULL, NULL, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 4);
  CUgraphNode from[4], to[4];
  CUgraphEdgeData ed[4];
  n = 4;
  assert_int_equal(cuGraphGetEdges(g, from, to, ed, &n), CUDA_SUCCESS);
  assert_int_equal(n, 4);
  assert_ptr_equal(from[0], a);
  assert_ptr_equal(to[0], b);
  n = 0;
  assert_int_equal(cuGraphNodeGetDependencies(d, NULL, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 2);
  n = 0;
  assert_int_equal(cuGraphNodeGetDependentNodes(a, NULL, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 2);
  CUgraphNodeType t;
  assert_int_equal(cuGraphNodeGetType(d, &t), CUDA_SUCCESS);
  assert_int_equal(t, CU_GRAPH_NODE_TYPE_EMPTY);

  /* Existing edge, self edge, cycle: refused, graph unchanged. */
  assert_int_equal(cuGraphAddDependencies(g, &a, &b, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphAddDependencies(g, &a, &a, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphAddDependencies(g, &d, &a, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphRemoveDependencies(g, &a, &d, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphRemoveDependencies(g, &b, &d, NULL, 1), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddDependencies(g, &b, &d, NULL, 1), CUDA_SUCCESS);
  n = 0;
  assert_int_equal(cuGraphGetEdges(g, NULL, NULL, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 4);

  /* Clone and find. */
  CUgraph cl;
  assert_int_equal(cuGraphClone(&cl, g), CUDA_SUCCESS);
  CUgraphNode dc;
  assert_int_equal(cuGraphNodeFindInClone(&dc, d, cl), CUDA_SUCCESS);
  assert_ptr_not_equal(dc, d);
  n = 0;
  assert_int_equal(cuGraphNodeGetDependencies(dc, NULL, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 2);

  /* Destroying a node drops its edges. */
  assert_int_equal(cuGraphDestroyNode(b), CUDA_SUCCESS);
  n = 0;
  assert_int_equal(cuGraphGetEdges(g, NULL, NULL, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 2);
  assert_int_equal(cuGraphNodeGetType(b, &t), CUDA_ERROR_INVALID_VALUE);

  char path[] = "/tmp/sg_graph_dotXXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(cuGraphDebugDotPrint(g, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE), CUDA_SUCCESS);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char buf[4096];
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  buf[got] = 0;
  fclose(f);
  unlink(path);
  assert_non_null(strstr(buf, "digraph"));
  assert_non_null(strstr(buf, "EMPTY"));
  assert_non_null(strstr(buf, "->"));

  assert_int_equal(cuGraphDestroy(cl), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
}

/* ---- kernels and copies ------------------------------------------------- */

#define N 1000

static void test_kernel_copy_graph(void **state) {
  (void)state;
  static float a[N], b[N], c[N], ref[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)i;
    b[i] = (float)(2 * i + 1);
  }
  CUdeviceptr da, db, dc;
  assert_int_equal(cuMemAlloc(&da, N * 4), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&db, N * 4), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&dc, N * 4), CUDA_SUCCESS);
  int n = N;

  /* Reference: the same work on a stream. */
  assert_int_equal(cuMemcpyHtoD(da, a, N * 4), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyHtoD(db, b, N * 4), CUDA_SUCCESS);
  void *args[] = {&da, &db, &dc, &n};
  assert_int_equal(cuLaunchKernel(vecadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(ref, dc, N * 4), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32(dc, 0, N), CUDA_SUCCESS);

  /* Graph: two uploads (independent) -> kernel -> download. */
  CUgraph g;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode up[2], k, down;
  CUDA_MEMCPY3D cpa = copy1d_htod(da, a, N * 4), cpb = copy1d_htod(db, b, N * 4);
  assert_int_equal(cuGraphAddMemcpyNode(&up[0], g, NULL, 0, &cpa, ctx), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddMemcpyNode(&up[1], g, NULL, 0, &cpb, ctx), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS kp = kparams(vecadd, (N + 127) / 128, 128, args, NULL);
  assert_int_equal(cuGraphAddKernelNode(&k, g, up, 2, &kp), CUDA_SUCCESS);
  /* The node copied the arguments: changing ours now has no effect. */
  n = 5;
  CUDA_MEMCPY3D cpc = copy1d_dtoh(c, dc, N * 4);
  assert_int_equal(cuGraphAddMemcpyNode(&down, g, &k, 1, &cpc, ctx), CUDA_SUCCESS);

  CUDA_KERNEL_NODE_PARAMS got;
  assert_int_equal(cuGraphKernelNodeGetParams(k, &got), CUDA_SUCCESS);
  assert_ptr_equal(got.func, vecadd);
  assert_int_equal(got.blockDimX, 128);
  assert_int_equal(*(int *)got.kernelParams[3], N);

  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  memset(c, 0, sizeof c);
  assert_int_equal(cuGraphLaunch(x, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_memory_equal(c, ref, sizeof c);

  /* Kernel arguments through `extra` (a packed buffer). */
  struct {
    CUdeviceptr a, b, c;
    int n;
    int pad;
  } packed = {da, da, dc, N, 0};
  size_t psize = 28;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize, CU_LAUNCH_PARAM_END};
  CUDA_KERNEL_NODE_PARAMS kx = kparams(vecadd, (N + 127) / 128, 128, NULL, extra);
  assert_int_equal(cuGraphKernelNodeSetParams(k, &kx), CUDA_SUCCESS);
  CUgraphExec x2;
  assert_int_equal(cuGraphInstantiateWithFlags(&x2, g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x2, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  for (int i = 0; i < N; i++) assert_true(c[i] == 2.0f * a[i]);
  /* The first exec kept its own copy of the old parameters. */
  assert_int_equal(cuGraphLaunch(x, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_memory_equal(c, ref, sizeof c);

  /* Bad parameters are refused when the node is made. */
  CUDA_KERNEL_NODE_PARAMS bad = kparams(vecadd, 1, 2048, args, NULL);
  CUgraphNode bn;
  assert_int_equal(cuGraphAddKernelNode(&bn, g, NULL, 0, &bad), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D badcp = copy1d_htod(da, a, N * 4 + 1024);
  assert_int_equal(cuGraphAddMemcpyNode(&bn, g, NULL, 0, &badcp, ctx), CUDA_ERROR_INVALID_VALUE);

  assert_int_equal(cuGraphExecDestroy(x2), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  cuMemFree(da);
  cuMemFree(db);
  cuMemFree(dc);
}

static void test_copy_2d_3d_memset(void **state) {
  (void)state;
  /* A 3D box of 5 x 4 x 3 bytes at (2,1,1) of a 16 x 8 x 4 host volume goes
   * to (3,2,0) of a device volume with pitch 32, height 6, and back. */
  enum { SW = 16, SH = 8, SD = 4, DP = 32, DH = 6, DD = 3 };
  static unsigned char src[SW * SH * SD], back[SW * SH * SD];
  for (int i = 0; i < SW * SH * SD; i++) src[i] = (unsigned char)(i * 7 + 1);
  CUdeviceptr dv;
  assert_int_equal(cuMemAlloc(&dv, DP * DH * DD), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8(dv, 0, DP * DH * DD), CUDA_SUCCESS);

  CUDA_MEMCPY3D p;
  memset(&p, 0, sizeof p);
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcHost = src;
  p.srcXInBytes = 2;
  p.srcY = 1;
  p.srcZ = 1;
  p.srcPitch = SW;
  p.srcHeight = SH;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = dv;
  p.dstXInBytes = 3;
  p.dstY = 2;
  p.dstPitch = DP;
  p.dstHeight = DH;
  p.WidthInBytes = 5;
  p.Height = 4;
  p.Depth = 3;

  CUDA_MEMCPY3D q;
  memset(&q, 0, sizeof q);
  q.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  q.srcDevice = dv;
  q.srcXInBytes = 3;
  q.srcY = 2;
  q.srcPitch = DP;
  q.srcHeight = DH;
  q.dstMemoryType = CU_MEMORYTYPE_HOST;
  q.dstHost = back;
  q.dstXInBytes = 2;
  q.dstY = 1;
  q.dstZ = 1;
  q.dstPitch = SW;
  q.dstHeight = SH;
  q.WidthInBytes = 5;
  q.Height = 4;
  q.Depth = 3;

  /* Memset nodes: a 2D 16-bit fill of a pitched area, 1D 32-bit. */
  CUdeviceptr m;
  assert_int_equal(cuMemAlloc(&m, 4096), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD8(m, 0xee, 4096), CUDA_SUCCESS);
  CUDA_MEMSET_NODE_PARAMS ms2 = {m, 64, 0xabcd, 2, 10, 3};
  CUDA_MEMSET_NODE_PARAMS ms1 = {m + 1024, 0, 0x01020304u, 4, 100, 1};

  CUgraph g;
  CUgraphNode n1, n2, n3, n4;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddMemcpyNode(&n1, g, NULL, 0, &p, ctx), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddMemcpyNode(&n2, g, &n1, 1, &q, ctx), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddMemsetNode(&n3, g, NULL, 0, &ms2, ctx), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddMemsetNode(&n4, g, &n3, 1, &ms1, ctx), CUDA_SUCCESS);
  CUDA_MEMSET_NODE_PARAMS bad = ms2;
  bad.elementSize = 3;
  CUgraphNode bn;
  assert_int_equal(cuGraphAddMemsetNode(&bn, g, NULL, 0, &bad, ctx), CUDA_ERROR_INVALID_VALUE);
  bad = ms2;
  bad.pitch = 8; /* narrower than a row */
  assert_int_equal(cuGraphAddMemsetNode(&bn, g, NULL, 0, &bad, ctx), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D got;
  assert_int_equal(cuGraphMemcpyNodeGetParams(n1, &got), CUDA_SUCCESS);
  assert_int_equal(got.Depth, 3);
  CUDA_MEMSET_NODE_PARAMS gms;
  assert_int_equal(cuGraphMemsetNodeGetParams(n3, &gms), CUDA_SUCCESS);
  assert_int_equal(gms.value, 0xabcd);

  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  memset(back, 0, sizeof back);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(NULL), CUDA_SUCCESS);

  for (int z = 0; z < SD; z++)
    for (int y = 0; y < SH; y++)
      for (int xx = 0; xx < SW; xx++) {
        int in = z >= 1 && z < 4 && y >= 1 && y < 5 && xx >= 2 && xx < 7;
        int i = (z * SH + y) * SW + xx;
        assert_int_equal(back[i], in ? src[i] : 0);
      }
  static unsigned char dev[DP * DH * DD];
  assert_int_equal(cuMemcpyDtoH(dev, dv, sizeof dev), CUDA_SUCCESS);
  /* Device byte (3+dx, 2+dy, dz) = source (2+dx, 1+dy, 1+dz). */
  assert_int_equal(dev[(0 * DH + 2) * DP + 3], src[(1 * SH + 1) * SW + 2]);
  assert_int_equal(dev[(2 * DH + 5) * DP + 7], src[(3 * SH + 4) * SW + 6]);
  assert_int_equal(dev[(0 * DH + 2) * DP + 2], 0);

  static unsigned char mh[4096];
  assert_int_equal(cuMemcpyDtoH(mh, m, sizeof mh), CUDA_SUCCESS);
  for (int y = 0; y < 4; y++)
    for (int i = 0; i < 64; i += 2) {
      uint16_t v;
      memcpy(&v, mh + y * 64 + i, 2);
      int in = y < 3 && i < 20;
      assert_int_equal(v, in ? 0xabcd : 0xeeee);
    }
  for (int i = 0; i < 100; i++) {
    uint32_t v;
    memcpy(&v, mh + 1024 + 4 * i, 4);
    assert_int_equal(v, 0x01020304u);
  }
  assert_int_equal(mh[1024 + 400], 0xee);

  /* Exec-level memset update. */
  CUDA_MEMSET_NODE_PARAMS ms3 = ms1;
  ms3.value = 7;
  assert_int_equal(cuGraphExecMemsetNodeSetParams(x, n4, &ms3, ctx), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  uint32_t v;
  assert_int_equal(cuMemcpyDtoH(&v, m + 1024 + 396, 4), CUDA_SUCCESS);
  assert_int_equal(v, 7);

  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  cuMemFree(dv);
  cuMemFree(m);
}

/* ---- host nodes, events, child graphs ----------------------------------- */

static void test_host_order(void **state) {
  (void)state;
  /* A -> (B, C) -> D, plus E depending on D through a later edge. */
  CUgraph g;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode e = host_node(g, NULL, 0, "E");
  CUgraphNode a = host_node(g, NULL, 0, "A");
  CUgraphNode b = host_node(g, &a, 1, "B");
  CUgraphNode c = host_node(g, &a, 1, "C");
  CUgraphNode bc[2] = {b, c};
  CUgraphNode d = host_node(g, bc, 2, "D");
  assert_int_equal(cuGraphAddDependencies(g, &d, &e, NULL, 1), CUDA_SUCCESS);
  CUDA_HOST_NODE_PARAMS hp;
  assert_int_equal(cuGraphHostNodeGetParams(b, &hp), CUDA_SUCCESS);
  assert_ptr_equal(hp.fn, mark_fn);

  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  log_reset();
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "0"), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, s), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "9"), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(strlen(order), 7);
  assert_int_equal(pos('0'), 0);
  assert_int_equal(pos('9'), 6);
  assert_true(pos('A') < pos('B') && pos('A') < pos('C'));
  assert_true(pos('B') < pos('D') && pos('C') < pos('D') && pos('D') < pos('E'));

  /* Exec host-node update. */
  CUDA_HOST_NODE_PARAMS hz = {mark_fn, "Z"};
  assert_int_equal(cuGraphExecHostNodeSetParams(x, e, &hz), CUDA_SUCCESS);
  log_reset();
  assert_int_equal(cuGraphLaunch(x, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(pos('E'), -1);
  assert_int_equal(pos('Z'), 4);

  /* Child graph: the node embeds a copy. */
  CUgraph parent;
  assert_int_equal(cuGraphCreate(&parent, 0), CUDA_SUCCESS);
  CUgraphNode p1 = host_node(parent, NULL, 0, "p");
  CUgraphNode ch;
  assert_int_equal(cuGraphAddChildGraphNode(&ch, parent, &p1, 1, g), CUDA_SUCCESS);
  host_node(parent, &ch, 1, "q");
  host_node(g, NULL, 0, "X"); /* not in the copy */
  CUgraph emb;
  assert_int_equal(cuGraphChildGraphNodeGetGraph(ch, &emb), CUDA_SUCCESS);
  size_t nn = 0;
  assert_int_equal(cuGraphGetNodes(emb, NULL, &nn), CUDA_SUCCESS);
  assert_int_equal(nn, 5);
  assert_int_equal(cuGraphDestroy(emb), CUDA_ERROR_INVALID_VALUE); /* owned by the node */
  CUgraphExec px;
  assert_int_equal(cuGraphInstantiate(&px, parent, 0), CUDA_SUCCESS);
  log_reset();
  assert_int_equal(cuGraphLaunch(px, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_string_equal(order[0] == 'p' ? "ok" : order, "ok");
  assert_int_equal(pos('q'), 6);
  assert_int_equal(pos('X'), -1);

  /* Exec child update: same topology, different parameters. */
  CUgraph g2;
  assert_int_equal(cuGraphClone(&g2, emb), CUDA_SUCCESS);
  CUgraphNode e2;
  assert_int_equal(cuGraphNodeFindInClone(&e2, e, g2), CUDA_ERROR_INVALID_VALUE); /* e is not in emb */
  CUgraphNode g2nodes[5];
  nn = 5;
  assert_int_equal(cuGraphGetNodes(g2, g2nodes, &nn), CUDA_SUCCESS);
  assert_int_equal(cuGraphHostNodeSetParams(g2nodes[0], &hz), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecChildGraphNodeSetParams(px, ch, g2), CUDA_SUCCESS);
  log_reset();
  assert_int_equal(cuGraphLaunch(px, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_int_equal(pos('E'), -1);
  assert_int_equal(pos('Z'), 5);
  /* A different topology is refused. */
  assert_int_equal(cuGraphExecChildGraphNodeSetParams(px, ch, g), CUDA_ERROR_INVALID_VALUE);

  assert_int_equal(cuGraphExecDestroy(px), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g2), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(parent), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
}

typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  int open;
} gate;
static gate gt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
static void gate_wait_fn(void *arg) {
  (void)arg;
  pthread_mutex_lock(&gt.m);
  while (!gt.open) pthread_cond_wait(&gt.c, &gt.m);
  pthread_mutex_unlock(&gt.m);
}
static void gate_set(int open) {
  pthread_mutex_lock(&gt.m);
  gt.open = open;
  pthread_cond_broadcast(&gt.c);
  pthread_mutex_unlock(&gt.m);
}

static void test_events(void **state) {
  (void)state;
  CUstream s1, s2;
  assert_int_equal(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent in, out, other;
  assert_int_equal(cuEventCreate(&in, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&out, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&other, 0), CUDA_SUCCESS);

  /* Graph: wait(in) -> host W -> record(out). */
  CUgraph g;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode w, h, r;
  assert_int_equal(cuGraphAddEventWaitNode(&w, g, NULL, 0, in), CUDA_SUCCESS);
  h = host_node(g, &w, 1, "W");
  assert_int_equal(cuGraphAddEventRecordNode(&r, g, &h, 1, out), CUDA_SUCCESS);
  CUevent ge;
  assert_int_equal(cuGraphEventWaitNodeGetEvent(w, &ge), CUDA_SUCCESS);
  assert_ptr_equal(ge, in);
  assert_int_equal(cuGraphEventRecordNodeGetEvent(r, &ge), CUDA_SUCCESS);
  assert_ptr_equal(ge, out);
  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);

  /* s1 holds `in` behind a closed gate; the graph on s2 must wait. */
  gate_set(0);
  log_reset();
  assert_int_equal(cuLaunchHostFunc(s1, gate_wait_fn, NULL), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s1, mark_fn, "I"), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(in, s1), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, s2), CUDA_SUCCESS);
  usleep(20000);
  assert_int_equal(cuEventQuery(out), CUDA_ERROR_NOT_READY);
  assert_int_equal(strlen(order), 0);
  gate_set(1);
  assert_int_equal(cuEventSynchronize(out), CUDA_SUCCESS);
  assert_string_equal(order, "IW");

  /* Exec event updates. */
  assert_int_equal(cuGraphExecEventRecordNodeSetEvent(x, r, other), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecEventWaitNodeSetEvent(x, w, other), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecEventRecordNodeSetEvent(x, w, other), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphLaunch(x, s2), CUDA_SUCCESS);
  assert_int_equal(cuEventSynchronize(other), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s2), CUDA_SUCCESS);
  float ms;
  assert_int_equal(cuEventElapsedTime(&ms, in, other), CUDA_SUCCESS);
  assert_true(ms >= 0.0f);

  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  cuEventDestroy(in);
  cuEventDestroy(out);
  cuEventDestroy(other);
  cuStreamDestroy(s1);
  cuStreamDestroy(s2);
}

/* ---- updates and repeated launches -------------------------------------- */

static void test_exec_update(void **state) {
  (void)state;
  CUdeviceptr d;
  assert_int_equal(cuMemAlloc(&d, 256 * 4), CUDA_SUCCESS);
  int v = 3, n = 256;
  void *args[] = {&d, &v, &n};
  CUgraph g1, g2, g3;
  CUgraphNode k1, k2, m2, k3;
  CUDA_KERNEL_NODE_PARAMS kp = kparams(tmpl_i5, 2, 128, args, NULL);
  assert_int_equal(cuGraphCreate(&g1, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddKernelNode(&k1, g1, NULL, 0, &kp), CUDA_SUCCESS);
  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g1, 0), CUDA_SUCCESS);
  int h[256];
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, d, sizeof h), CUDA_SUCCESS);
  assert_int_equal(h[255], 15);

  /* Same topology, new kernel argument: update succeeds. */
  v = 7;
  assert_int_equal(cuGraphCreate(&g2, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddKernelNode(&k2, g2, NULL, 0, &kp), CUDA_SUCCESS);
  CUgraphExecUpdateResultInfo info;
  assert_int_equal(cuGraphExecUpdate(x, g2, &info), CUDA_SUCCESS);
  assert_int_equal(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, d, sizeof h), CUDA_SUCCESS);
  assert_int_equal(h[0], 35);

  /* Exec kernel-node set params, by the original graph's node or the update's. */
  v = 1;
  assert_int_equal(cuGraphExecKernelNodeSetParams(x, k1, &kp), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, d, sizeof h), CUDA_SUCCESS);
  assert_int_equal(h[7], 5);
  v = 2;
  assert_int_equal(cuGraphExecKernelNodeSetParams(x, k2, &kp), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, d, sizeof h), CUDA_SUCCESS);
  assert_int_equal(h[7], 10);

  /* Disabled node does nothing. */
  assert_int_equal(cuMemsetD32(d, 0, 256), CUDA_SUCCESS);
  assert_int_equal(cuGraphNodeSetEnabled(x, k1, 0), CUDA_SUCCESS);
  unsigned en = 9;
  assert_int_equal(cuGraphNodeGetEnabled(x, k1, &en), CUDA_SUCCESS);
  assert_int_equal(en, 0);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, d, sizeof h), CUDA_SUCCESS);
  assert_int_equal(h[7], 0);
  assert_int_equal(cuGraphNodeSetEnabled(x, k1, 1), CUDA_SUCCESS);

  /* A different topology: refused, and which node says so. */
  CUDA_MEMSET_NODE_PARAMS ms = {d, 0, 0, 4, 256, 1};
  assert_int_equal(cuGraphAddMemsetNode(&m2, g2, &k2, 1, &ms, ctx), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecUpdate(x, g2, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  assert_int_equal(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  /* A different node type. */
  assert_int_equal(cuGraphCreate(&g3, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphAddEmptyNode(&k3, g3, NULL, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecUpdate(x, g3, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  assert_int_equal(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  assert_ptr_equal(info.errorNode, k3);

  cuuint64_t fl = 99;
  assert_int_equal(cuGraphExecGetFlags(x, &fl), CUDA_SUCCESS);
  assert_int_equal(fl, 0);
  assert_int_equal(cuGraphUpload(x, NULL), CUDA_SUCCESS);

  CUDA_GRAPH_INSTANTIATE_PARAMS ip = {CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, NULL, NULL, CUDA_GRAPH_INSTANTIATE_ERROR};
  CUgraphExec x2;
  assert_int_equal(cuGraphInstantiateWithParams(&x2, g2, &ip), CUDA_SUCCESS);
  assert_int_equal(ip.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
  assert_int_equal(cuGraphLaunch(x2, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoH(h, d, sizeof h), CUDA_SUCCESS);
  assert_int_equal(h[100], 0); /* the memset ran after the kernel */
  assert_int_equal(cuGraphExecDestroy(x2), CUDA_SUCCESS);

  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  cuGraphDestroy(g1);
  cuGraphDestroy(g2);
  cuGraphDestroy(g3);
  cuMemFree(d);
}

static atomic_int counter;
static void count_fn(void *arg) {
  (void)arg;
  atomic_fetch_add(&counter, 1);
}

static void test_many_launches(void **state) {
  (void)state;
  CUdeviceptr d;
  assert_int_equal(cuMemAlloc(&d, 64 * 4), CUDA_SUCCESS);
  int v = 1, n = 64;
  void *args[] = {&d, &v, &n};
  CUgraph g;
  CUgraphNode ms, k, h;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUDA_MEMSET_NODE_PARAMS mp = {d, 0, 0, 4, 64, 1};
  assert_int_equal(cuGraphAddMemsetNode(&ms, g, NULL, 0, &mp, ctx), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS kp = kparams(tmpl_i5, 1, 64, args, NULL);
  assert_int_equal(cuGraphAddKernelNode(&k, g, &ms, 1, &kp), CUDA_SUCCESS);
  CUDA_HOST_NODE_PARAMS hp = {count_fn, NULL};
  assert_int_equal(cuGraphAddHostNode(&h, g, &k, 1, &hp), CUDA_SUCCESS);
  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  CUstream s;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  atomic_store(&counter, 0);
  uint64_t t0 = rgpu_clock_ns();
  for (int i = 0; i < 1000; i++) assert_int_equal(cuGraphLaunch(x, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  uint64_t t1 = rgpu_clock_ns();
  assert_int_equal(atomic_load(&counter), 1000);
  int hb[64];
  assert_int_equal(cuMemcpyDtoH(hb, d, sizeof hb), CUDA_SUCCESS);
  assert_int_equal(hb[63], 5);
  double us = (double)(t1 - t0) / 1e3 / 1000;
  printf("1000 launches of a 3-node graph: %.1f us per launch\n", us);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  cuStreamDestroy(s);
  cuMemFree(d);
}

/* ---- stream capture ----------------------------------------------------- */

static void test_capture(void **state) {
  (void)state;
  static float a[N], b[N], c[N], ref[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)(i % 17);
    b[i] = (float)(i % 5);
    ref[i] = a[i] + b[i];
  }
  CUdeviceptr da, db, dc;
  assert_int_equal(cuMemAlloc(&da, N * 4), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&db, N * 4), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&dc, N * 4), CUDA_SUCCESS);
  int n = N;
  void *args[] = {&da, &db, &dc, &n};
  CUstream s, t;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cuStreamCreate(&t, 0), CUDA_SUCCESS);
  CUevent fork, joinev;
  assert_int_equal(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&joinev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);

  CUstreamCaptureStatus st;
  assert_int_equal(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
  assert_int_equal(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  assert_int_equal(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  log_reset();
  /* s: upload a; fork t: upload b; join; kernel; download; host fn. */
  assert_int_equal(cuMemcpyHtoDAsync(da, a, N * 4, s), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(fork, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamWaitEvent(t, fork, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
  assert_int_equal(cuEventSynchronize(fork), CUDA_ERROR_CAPTURED_EVENT);
  assert_int_equal(cuStreamIsCapturing(t, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  assert_int_equal(cuMemcpyHtoDAsync(db, b, N * 4, t), CUDA_SUCCESS);
  assert_int_equal(cuMemsetD32Async(dc, 0x7f, N, t), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(joinev, t), CUDA_SUCCESS);
  assert_int_equal(cuStreamWaitEvent(s, joinev, 0), CUDA_SUCCESS);
  assert_int_equal(cuLaunchKernel(vecadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, args, NULL), CUDA_SUCCESS);
  assert_int_equal(cuMemcpyDtoHAsync(c, dc, N * 4, s), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "H"), CUDA_SUCCESS);
  cuuint64_t id = 0;
  CUgraph cg = NULL;
  const CUgraphNode *deps = NULL;
  size_t nd = 0;
  assert_int_equal(cuStreamGetCaptureInfo(s, &st, &id, &cg, &deps, NULL, &nd), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  assert_true(id != 0);
  assert_non_null(cg);
  assert_int_equal(nd, 1);
  /* Nothing ran. */
  assert_int_equal(strlen(order), 0);
  CUgraph g;
  assert_int_equal(cuStreamEndCapture(t, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  assert_ptr_equal(g, cg);
  assert_int_equal(cuStreamIsCapturing(t, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);
  size_t nn = 0;
  assert_int_equal(cuGraphGetNodes(g, NULL, &nn), CUDA_SUCCESS);
  assert_int_equal(nn, 6);
  nn = 0;
  assert_int_equal(cuGraphGetRootNodes(g, NULL, &nn), CUDA_SUCCESS);
  assert_int_equal(nn, 1);

  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  memset(c, 0, sizeof c);
  assert_int_equal(cuGraphLaunch(x, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_memory_equal(c, ref, sizeof c);
  assert_string_equal(order, "H");
  assert_int_equal(cuEventQuery(fork), CUDA_SUCCESS); /* that capture is over */

  /* A graph launched inside a capture becomes a child node. */
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, s), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "J"), CUDA_SUCCESS);
  CUgraph g2;
  assert_int_equal(cuStreamEndCapture(s, &g2), CUDA_SUCCESS);
  CUgraphNode roots[2];
  nn = 2;
  assert_int_equal(cuGraphGetRootNodes(g2, roots, &nn), CUDA_SUCCESS);
  assert_int_equal(nn, 1);
  CUgraphNodeType ty;
  assert_int_equal(cuGraphNodeGetType(roots[0], &ty), CUDA_SUCCESS);
  assert_int_equal(ty, CU_GRAPH_NODE_TYPE_GRAPH);
  CUgraphExec x2;
  assert_int_equal(cuGraphInstantiate(&x2, g2, 0), CUDA_SUCCESS);
  log_reset();
  assert_int_equal(cuGraphLaunch(x2, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_string_equal(order, "HJ");
  assert_int_equal(cuGraphExecDestroy(x2), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g2), CUDA_SUCCESS);

  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  cuEventDestroy(fork);
  cuEventDestroy(joinev);
  cuStreamDestroy(s);
  cuStreamDestroy(t);
  cuMemFree(da);
  cuMemFree(db);
  cuMemFree(dc);
}

static void test_capture_errors(void **state) {
  (void)state;
  CUstream s, t;
  assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  assert_int_equal(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e, outside;
  assert_int_equal(cuEventCreate(&e, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventCreate(&outside, 0), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(outside, t), CUDA_SUCCESS);
  CUgraph g;
  CUstreamCaptureStatus st;

  /* Synchronising a capturing stream invalidates the capture. */
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "x"), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  assert_int_equal(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "x"), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  assert_null(g);
  assert_int_equal(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);

  /* Legacy-stream work while a blocking stream captures. */
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(NULL, mark_fn, "x"), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  /* Waiting on work outside the capture. */
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(cuStreamWaitEvent(s, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  /* ... unless it is an external wait: an event-wait node. */
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(cuStreamWaitEvent(s, outside, CU_EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);
  assert_int_equal(cuEventRecordWithFlags(e, s, CU_EVENT_RECORD_EXTERNAL), CUDA_SUCCESS);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  CUgraphNode nodes[2];
  size_t nn = 2;
  assert_int_equal(cuGraphGetNodes(g, nodes, &nn), CUDA_SUCCESS);
  assert_int_equal(nn, 2);
  CUgraphNodeType ty;
  assert_int_equal(cuGraphNodeGetType(nodes[0], &ty), CUDA_SUCCESS);
  assert_int_equal(ty, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  assert_int_equal(cuGraphNodeGetType(nodes[1], &ty), CUDA_SUCCESS);
  assert_int_equal(ty, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);

  /* A forked stream that never joins back. */
  assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  assert_int_equal(cuEventRecord(e, s), CUDA_SUCCESS);
  assert_int_equal(cuStreamWaitEvent(t, e, 0), CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(t, mark_fn, "x"), CUDA_SUCCESS);
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  assert_int_equal(cuStreamIsCapturing(t, &st), CUDA_SUCCESS);
  assert_int_equal(st, CU_STREAM_CAPTURE_STATUS_NONE);

  /* Stream callbacks cannot be captured; ending twice is illegal. */
  assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);

  /* Capture into an existing graph after one of its nodes; then reset the
   * stream's dependencies explicitly. */
  CUgraph into;
  CUgraphNode first;
  assert_int_equal(cuGraphCreate(&into, 0), CUDA_SUCCESS);
  first = host_node(into, NULL, 0, "1");
  assert_int_equal(cuStreamBeginCaptureToGraph(s, into, &first, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL),
                   CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "2"), CUDA_SUCCESS);
  assert_int_equal(cuStreamUpdateCaptureDependencies(s, &first, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES),
                   CUDA_SUCCESS);
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "3"), CUDA_SUCCESS);
  CUgraph back;
  assert_int_equal(cuStreamEndCapture(s, &back), CUDA_SUCCESS);
  assert_ptr_equal(back, into);
  nn = 0;
  assert_int_equal(cuGraphGetEdges(into, NULL, NULL, NULL, &nn), CUDA_SUCCESS);
  assert_int_equal(nn, 2); /* 1->2, 1->3 */
  assert_int_equal(cuGraphDestroy(into), CUDA_SUCCESS);

  /* Thread capture mode exchange. */
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  assert_int_equal(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
  assert_int_equal(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
  assert_int_equal(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
  assert_int_equal(m, CU_STREAM_CAPTURE_MODE_RELAXED);

  /* Streams work normally afterwards; nothing captured ever ran. */
  log_reset();
  assert_int_equal(cuLaunchHostFunc(s, mark_fn, "ok"), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
  assert_string_equal(order, "o");
  assert_int_equal(cuStreamSynchronize(NULL), CUDA_SUCCESS);

  cuEventDestroy(e);
  cuEventDestroy(outside);
  cuStreamDestroy(s);
  cuStreamDestroy(t);
}

/* The generic node API, the older ABIs under the unversioned names (as a
 * dlsym() caller finds them) and cuGetProcAddress's per-thread variants. */
/* Conditional nodes (CUDA 12.3+): a WHILE whose body counts down with
 * cudaGraphSetConditional, IF/ELSE chosen by a kernel before it (its value
 * changed through the exec), a SWITCH, a WHILE nested in an IF body with a
 * handle of that body, and the node types a body may not hold. */
static CUgraphNode cond_add(CUgraph g, const CUgraphNode *deps, size_t nd, CUgraphConditionalHandle h,
                            CUgraphConditionalNodeType t, unsigned size, CUgraph *bodies) {
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  np.conditional.handle = h;
  np.conditional.type = t;
  np.conditional.size = size;
  np.conditional.phGraph_out = bodies;
  np.conditional.ctx = ctx;
  CUgraphNode n = NULL;
  assert_int_equal(cuGraphAddNode(&n, g, deps, NULL, nd, &np), CUDA_SUCCESS);
  assert_non_null(np.conditional.phGraph_out);
  for (unsigned b = 0; b < size; b++) bodies[b] = np.conditional.phGraph_out[b];
  return n;
}

static CUgraphNode kadd(CUgraph g, const CUgraphNode *deps, size_t nd, CUfunction f, void **args) {
  CUDA_KERNEL_NODE_PARAMS kp = kparams(f, 1, 1, args, NULL);
  CUgraphNode n = NULL;
  assert_int_equal(cuGraphAddKernelNode(&n, g, deps, nd, &kp), CUDA_SUCCESS);
  return n;
}

static unsigned rd32(CUdeviceptr d) {
  unsigned v = 0;
  assert_int_equal(cuMemcpyDtoH(&v, d, 4), CUDA_SUCCESS);
  return v;
}

static void test_conditionals(void **state) {
  (void)state;
  char *ptx = NULL;
  {
    FILE *f = fopen(SG_COND_PTX, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    ptx = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(ptx, 1, (size_t)n, f), (size_t)n);
    fclose(f);
  }
  CUmodule cm;
  assert_int_equal(cuModuleLoadData(&cm, ptx), CUDA_SUCCESS);
  free(ptx);
  CUfunction countdown, setcond, addk;
  assert_int_equal(cuModuleGetFunction(&countdown, cm, "countdown"), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetFunction(&setcond, cm, "setcond"), CUDA_SUCCESS);
  assert_int_equal(cuModuleGetFunction(&addk, cm, "addk"), CUDA_SUCCESS);
  CUdeviceptr n, iters, acc;
  assert_int_equal(cuMemAlloc(&n, 4), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&iters, 4), CUDA_SUCCESS);
  assert_int_equal(cuMemAlloc(&acc, 4), CUDA_SUCCESS);

  /* WHILE: memset n = 5 and iters = 0, then the loop. */
  CUgraph g;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphConditionalHandle h;
  assert_int_equal(cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT), CUDA_SUCCESS);
  CUDA_MEMSET_NODE_PARAMS ms = {n, 4, 5, 4, 1, 1};
  CUgraphNode m1, m2;
  assert_int_equal(cuGraphAddMemsetNode(&m1, g, NULL, 0, &ms, ctx), CUDA_SUCCESS);
  ms.dst = iters;
  ms.value = 0;
  assert_int_equal(cuGraphAddMemsetNode(&m2, g, &m1, 1, &ms, ctx), CUDA_SUCCESS);
  CUgraph body[3];
  cond_add(g, &m2, 1, h, CU_GRAPH_COND_TYPE_WHILE, 1, body);
  /* A body belongs to its node. */
  assert_int_equal(cuGraphDestroy(body[0]), CUDA_ERROR_INVALID_VALUE);
  void *cargs[] = {&h, &n, &iters};
  kadd(body[0], NULL, 0, countdown, cargs);
  CUgraphExec x;
  assert_int_equal(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  for (int k = 0; k < 3; k++) {
    assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(rd32(n), 0);
    assert_int_equal(rd32(iters), 5);
  }
  /* An exec update cannot take a conditional graph here: refused, not
   * half-applied. */
  CUgraphExecUpdateResultInfo info;
  assert_int_equal(cuGraphExecUpdate(x, g, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  assert_int_equal(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);

  /* IF/ELSE chosen by a kernel; its value changed in the exec. */
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphConditionalHandleCreate(&h, g, ctx, 0, 0), CUDA_SUCCESS);
  unsigned v = 1, ten = 10, one = 1, hundred = 100;
  void *sargs[] = {&h, &v};
  CUgraphNode sn = kadd(g, NULL, 0, setcond, sargs);
  cond_add(g, &sn, 1, h, CU_GRAPH_COND_TYPE_IF, 2, body);
  void *a10[] = {&acc, &ten}, *a1[] = {&acc, &one};
  kadd(body[0], NULL, 0, addk, a10);
  kadd(body[1], NULL, 0, addk, a1);
  assert_int_equal(cuMemsetD32(acc, 0, 1), CUDA_SUCCESS);
  assert_int_equal(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(rd32(acc), 10);
  v = 0;
  CUDA_KERNEL_NODE_PARAMS kp = kparams(setcond, 1, 1, sargs, NULL);
  assert_int_equal(cuGraphExecKernelNodeSetParams(x, sn, &kp), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(rd32(acc), 11);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);

  /* SWITCH: value 2 runs body 2, value 7 runs none.  A handle of another
   * graph is refused. */
  CUgraph other;
  CUgraphConditionalHandle foreign;
  assert_int_equal(cuGraphCreate(&other, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphConditionalHandleCreate(&foreign, other, ctx, 0, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphConditionalHandleCreate(&h, g, ctx, 2, CU_GRAPH_COND_ASSIGN_DEFAULT), CUDA_SUCCESS);
  CUgraphNodeParams bad;
  memset(&bad, 0, sizeof bad);
  bad.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  bad.conditional.handle = foreign;
  bad.conditional.type = CU_GRAPH_COND_TYPE_SWITCH;
  bad.conditional.size = 3;
  bad.conditional.phGraph_out = body;
  CUgraphNode bn;
  assert_int_equal(cuGraphAddNode(&bn, g, NULL, NULL, 0, &bad), CUDA_ERROR_INVALID_VALUE);
  bad.conditional.handle = h;
  bad.conditional.type = CU_GRAPH_COND_TYPE_WHILE; /* WHILE has exactly one body */
  assert_int_equal(cuGraphAddNode(&bn, g, NULL, NULL, 0, &bad), CUDA_ERROR_INVALID_VALUE);
  cond_add(g, NULL, 0, h, CU_GRAPH_COND_TYPE_SWITCH, 3, body);
  void *a100[] = {&acc, &hundred};
  kadd(body[0], NULL, 0, addk, a1);
  kadd(body[1], NULL, 0, addk, a10);
  kadd(body[2], NULL, 0, addk, a100);
  assert_int_equal(cuMemsetD32(acc, 0, 1), CUDA_SUCCESS);
  assert_int_equal(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(rd32(acc), 100);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(other), CUDA_SUCCESS);

  /* A WHILE nested in an IF body, its handle created on that body; the
   * graph destroyed before the exec runs (the exec keeps its handles). */
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphConditionalHandle hi, hw;
  assert_int_equal(cuGraphConditionalHandleCreate(&hi, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT), CUDA_SUCCESS);
  ms.dst = n;
  ms.value = 3;
  assert_int_equal(cuGraphAddMemsetNode(&m1, g, NULL, 0, &ms, ctx), CUDA_SUCCESS);
  ms.dst = iters;
  ms.value = 0;
  assert_int_equal(cuGraphAddMemsetNode(&m2, g, &m1, 1, &ms, ctx), CUDA_SUCCESS);
  CUgraph ifbody[1], wbody[1];
  cond_add(g, &m2, 1, hi, CU_GRAPH_COND_TYPE_IF, 1, ifbody);
  assert_int_equal(cuGraphConditionalHandleCreate(&hw, ifbody[0], ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT),
                   CUDA_SUCCESS);
  cond_add(ifbody[0], NULL, 0, hw, CU_GRAPH_COND_TYPE_WHILE, 1, wbody);
  void *wargs[] = {&hw, &n, &iters};
  kadd(wbody[0], NULL, 0, countdown, wargs);
  assert_int_equal(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
  assert_int_equal(rd32(iters), 3);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);

  /* A host node in a body: CUDA allows none; instantiation refuses. */
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  assert_int_equal(cuGraphConditionalHandleCreate(&h, g, ctx, 1, 0), CUDA_SUCCESS);
  cond_add(g, NULL, 0, h, CU_GRAPH_COND_TYPE_IF, 1, body);
  CUDA_HOST_NODE_PARAMS hp = {mark_fn, "C"};
  CUgraphNode hn;
  assert_int_equal(cuGraphAddHostNode(&hn, body[0], NULL, 0, &hp), CUDA_SUCCESS);
  assert_int_equal(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_ERROR_INVALID_VALUE);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);

  cuMemFree(n);
  cuMemFree(iters);
  cuMemFree(acc);
  assert_int_equal(cuModuleUnload(cm), CUDA_SUCCESS);
}

static void test_compat(void **state) {
  (void)state;
  CUgraph g;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_HOST;
  np.host.fn = mark_fn;
  np.host.userData = "G";
  CUgraphNode a, b;
  assert_int_equal(cuGraphAddNode(&a, g, NULL, NULL, 0, &np), CUDA_SUCCESS);
  memset(&np, 0, sizeof np);
  np.type = CU_GRAPH_NODE_TYPE_EMPTY;
  assert_int_equal(cuGraphAddNode(&b, g, &a, NULL, 1, &np), CUDA_SUCCESS);
  np.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  CUgraphNode c;
  assert_int_equal(cuGraphAddNode(&c, g, NULL, NULL, 0, &np), CUDA_ERROR_NOT_SUPPORTED);

  typedef CUresult (*edges_v1)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *);
  typedef CUresult (*inst_v1)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
  typedef CUresult (*upd_v1)(CUgraphExec, CUgraph, CUgraphNode *, CUgraphExecUpdateResult *);
  typedef CUresult (*cap_v1)(CUstream);
  edges_v1 ge = (edges_v1)dlsym(RTLD_DEFAULT, "cuGraphGetEdges");
  inst_v1 gi = (inst_v1)dlsym(RTLD_DEFAULT, "cuGraphInstantiate");
  upd_v1 gu = (upd_v1)dlsym(RTLD_DEFAULT, "cuGraphExecUpdate");
  cap_v1 bc = (cap_v1)dlsym(RTLD_DEFAULT, "cuStreamBeginCapture");
  assert_non_null(ge);
  assert_non_null(gi);
  assert_non_null(gu);
  assert_non_null(bc);
  size_t n = 0;
  assert_int_equal(ge(g, NULL, NULL, &n), CUDA_SUCCESS);
  assert_int_equal(n, 1);
  CUgraphExec x;
  CUgraphNode err = a;
  char logbuf[64];
  assert_int_equal(gi(&x, g, &err, logbuf, sizeof logbuf), CUDA_SUCCESS);
  assert_null(err);
  CUgraphExecUpdateResult res = CU_GRAPH_EXEC_UPDATE_ERROR;
  assert_int_equal(gu(x, g, &err, &res), CUDA_SUCCESS);
  assert_int_equal(res, CU_GRAPH_EXEC_UPDATE_SUCCESS);

  void *fn = NULL;
  CUdriverProcAddressQueryResult q;
  assert_int_equal(cuGetProcAddress("cuGraphLaunch", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q),
                   CUDA_SUCCESS);
  assert_ptr_equal(fn, dlsym(RTLD_DEFAULT, "cuGraphLaunch_ptsz"));
  log_reset();
  assert_int_equal(((CUresult(*)(CUgraphExec, CUstream))fn)(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  assert_string_equal(order, "G");
  assert_int_equal(cuGetProcAddress("cuStreamGetCaptureInfo", &fn, 13000, 0, &q), CUDA_SUCCESS);
  assert_ptr_equal(fn, dlsym(RTLD_DEFAULT, "cuStreamGetCaptureInfo_v3"));

  CUstream s;
  assert_int_equal(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  assert_int_equal(bc(s), CUDA_SUCCESS);
  CUgraph cg;
  assert_int_equal(cuStreamEndCapture(s, &cg), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(cg), CUDA_SUCCESS);
  assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
  assert_int_equal(cuGraphExecDestroy(x), CUDA_SUCCESS);
  assert_int_equal(cuGraphDestroy(g), CUDA_SUCCESS);
}

/* Runs last: a fault poisons the context until it is reset. */
static void test_fault_is_sticky(void **state) {
  (void)state;
  CUdeviceptr d;
  assert_int_equal(cuMemAlloc(&d, 1024), CUDA_SUCCESS);
  void *args[] = {&d};
  CUgraph g;
  CUgraphNode k, h;
  assert_int_equal(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS kp = kparams(faulty, 1, 32, args, NULL);
  assert_int_equal(cuGraphAddKernelNode(&k, g, NULL, 0, &kp), CUDA_SUCCESS);
  CUDA_HOST_NODE_PARAMS hp = {count_fn, NULL};
  assert_int_equal(cuGraphAddHostNode(&h, g, &k, 1, &hp), CUDA_SUCCESS);
  CUgraphExec x;
  assert_int_equal(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  atomic_store(&counter, 0);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_SUCCESS);
  assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  usleep(20000);
  /* The host node after the fault did not run; later launches fail. */
  assert_int_equal(atomic_load(&counter), 0);
  assert_int_equal(cuGraphLaunch(x, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_int_equal(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  CUcontext c2;
  assert_int_equal(cuDevicePrimaryCtxRetain(&c2, 0), CUDA_SUCCESS);
  assert_int_equal(cuCtxSetCurrent(c2), CUDA_SUCCESS);
}

int main(void) {
#ifndef SG_HAVE_PTX
  printf("softgpu built without the PTX interpreter: graph tests skipped\n");
  return 0;
#endif
  setenv("RGPU_SOFTGPU_THREADS", "2", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_structure),     cmocka_unit_test(test_kernel_copy_graph),
      cmocka_unit_test(test_copy_2d_3d_memset), cmocka_unit_test(test_host_order),
      cmocka_unit_test(test_events),        cmocka_unit_test(test_exec_update),
      cmocka_unit_test(test_many_launches), cmocka_unit_test(test_capture),
      cmocka_unit_test(test_capture_errors), cmocka_unit_test(test_compat),
      cmocka_unit_test(test_conditionals), cmocka_unit_test(test_fault_is_sticky),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
