/* softgpu's cuDNN operations (rgpu_cudnn_cpu.h): oneDNN computes what it
 * implements (rgpu_cudnn_dnnl.c); whatever it refuses, a layout or a
 * combination it has no kernel for, the plain-C reference computes
 * (rgpu_cudnn_cpu_ref.c), with the same result within float rounding.  A
 * refusal leaves the output untouched, so the fallback is always safe.
 *
 * oneDNN is a plugin (librgpu_cudnn_dnnl.so, which links libdnnl), loaded
 * on first use: a GPU server never computes here and must not need oneDNN
 * (~40 MB, absent from GPU images) to start.  Where the plugin or oneDNN is
 * missing, every operation takes the reference, logged once.
 *
 * Set and scale are loops here: memory-bound, a loop is as fast, and set
 * must not read y (it may hold NaN, which oneDNN's linear eltwise would
 * carry through 0 * y). */
#include "rgpu_cudnn_cpu.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpu_cudnn_cpu_ref.h"
#include "rgpu_cudnn_dnnl.h"
#include "rgpu_driver.h"
#include "rgpu_log.h"

/* The plugin's entry points, one per operation oneDNN computes. */
#define RGPU_CUDNN_DNNL_OPS(X)                                                          \
  X(conv_fwd) X(conv_bwd_data) X(conv_bwd_filter) X(add) X(reduce_to) X(activation)     \
  X(activation_bwd) X(pooling) X(pooling_bwd) X(softmax) X(softmax_bwd)                 \
  X(batchnorm_fwd_inference) X(batchnorm_fwd_training) X(batchnorm_bwd) X(op_tensor)

static struct {
#define RGPU_DNNL_FIELD(name) __typeof__(&rgpu_cudnn_dnnl_##name) name;
  RGPU_CUDNN_DNNL_OPS(RGPU_DNNL_FIELD)
#undef RGPU_DNNL_FIELD
} g_dnnl;
static pthread_once_t g_dnnl_once = PTHREAD_ONCE_INIT;

static void plugin_load(void) {
  char path[PATH_MAX + 64];
  rgpu_server_lib_path("RGPU_DNNL_LIB", "librgpu_cudnn_dnnl.so", path, sizeof path);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    RGPU_WARN("softgpu's cuDNN operations run on the plain-C reference: oneDNN's plugin did not "
              "load (%s)", dlerror());
    return;
  }
  /* All or none: a partial table would mix libraries of two builds. */
  int ok = 1;
#define RGPU_DNNL_RESOLVE(name) \
  ok = ok && (*(void **)&g_dnnl.name = dlsym(h, "rgpu_cudnn_dnnl_" #name)) != NULL;
  RGPU_CUDNN_DNNL_OPS(RGPU_DNNL_RESOLVE)
#undef RGPU_DNNL_RESOLVE
  if (!ok) {
    RGPU_WARN("softgpu's cuDNN operations run on the plain-C reference: %s lacks an entry point",
              path);
    memset(&g_dnnl, 0, sizeof g_dnnl);
  }
}

/* The plugin's table (its entries NULL when it is not there). */
static const __typeof__(g_dnnl) *dnnl(void) {
  pthread_once(&g_dnnl_once, plugin_load);
  return &g_dnnl;
}

/* oneDNN's op(args), or the reference when the plugin is missing or
 * refuses. */
#define DNNL_OR_REF(op, ...)                                                   \
  do {                                                                         \
    if (!dnnl()->op || dnnl()->op(__VA_ARGS__)) rgpu_cudnn_ref_##op(__VA_ARGS__); \
  } while (0)

void rgpu_cudnn_cpu_conv_fwd(const rgpu_cudnn_cpu_conv *p) {
  DNNL_OR_REF(conv_fwd, p);
}

void rgpu_cudnn_cpu_conv_bwd_data(const rgpu_cudnn_cpu_conv *p) {
  DNNL_OR_REF(conv_bwd_data, p);
}

void rgpu_cudnn_cpu_conv_bwd_filter(const rgpu_cudnn_cpu_conv *p, float *dw) {
  DNNL_OR_REF(conv_bwd_filter, p, dw);
}

void rgpu_cudnn_cpu_add(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *c,
                        double alpha, double beta) {
  DNNL_OR_REF(add, a, c, alpha, beta);
}

void rgpu_cudnn_cpu_reduce_to(const rgpu_cudnn_cpu_tensor *dy, const rgpu_cudnn_cpu_tensor *db,
                              double alpha, double beta) {
  DNNL_OR_REF(reduce_to, dy, db, alpha, beta);
}

void rgpu_cudnn_cpu_activation(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                               int mode, double coef, double swish_beta, double alpha,
                               double beta) {
  DNNL_OR_REF(activation, x, y, mode, coef, swish_beta, alpha, beta);
}

void rgpu_cudnn_cpu_activation_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                   const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                   int mode, double coef, double swish_beta, double alpha,
                                   double beta) {
  DNNL_OR_REF(activation_bwd, y, dy, x, dx, mode, coef, swish_beta, alpha, beta);
}

void rgpu_cudnn_cpu_pooling(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int mode, const int window[2], const int pad[2], const int stride[2],
                            double alpha, double beta) {
  DNNL_OR_REF(pooling, x, y, mode, window, pad, stride, alpha, beta);
}

void rgpu_cudnn_cpu_pooling_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *dx,
                                int mode, const int window[2], const int pad[2],
                                const int stride[2], double alpha, double beta) {
  DNNL_OR_REF(pooling_bwd, y, dy, x, dx, mode, window, pad, stride, alpha, beta);
}

void rgpu_cudnn_cpu_softmax(const rgpu_cudnn_cpu_tensor *x, const rgpu_cudnn_cpu_tensor *y,
                            int algo, int mode, double alpha, double beta) {
  DNNL_OR_REF(softmax, x, y, algo, mode, alpha, beta);
}

void rgpu_cudnn_cpu_softmax_bwd(const rgpu_cudnn_cpu_tensor *y, const rgpu_cudnn_cpu_tensor *dy,
                                const rgpu_cudnn_cpu_tensor *dx, int algo, int mode,
                                double alpha, double beta) {
  DNNL_OR_REF(softmax_bwd, y, dy, dx, algo, mode, alpha, beta);
}

void rgpu_cudnn_cpu_batchnorm_fwd_inference(const rgpu_cudnn_cpu_batchnorm *p) {
  DNNL_OR_REF(batchnorm_fwd_inference, p);
}

void rgpu_cudnn_cpu_batchnorm_fwd_training(const rgpu_cudnn_cpu_batchnorm *p) {
  DNNL_OR_REF(batchnorm_fwd_training, p);
}

void rgpu_cudnn_cpu_batchnorm_bwd(const rgpu_cudnn_cpu_batchnorm *p) {
  DNNL_OR_REF(batchnorm_bwd, p);
}

void rgpu_cudnn_cpu_op_tensor(const rgpu_cudnn_cpu_tensor *a, const rgpu_cudnn_cpu_tensor *b,
                              const rgpu_cudnn_cpu_tensor *c, int op, double alpha1,
                              double alpha2, double beta) {
  DNNL_OR_REF(op_tensor, a, b, c, op, alpha1, alpha2, beta);
}

void rgpu_cudnn_cpu_set(const rgpu_cudnn_cpu_tensor *y, double value) {
  rgpu_cudnn_ref_set(y, value);
}

void rgpu_cudnn_cpu_scale(const rgpu_cudnn_cpu_tensor *y, double alpha) {
  rgpu_cudnn_ref_scale(y, alpha);
}
