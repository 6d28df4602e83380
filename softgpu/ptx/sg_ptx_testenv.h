/* sg_ptx_testenv: a tiny "driver" for the tests and the benchmark: device
 * allocations are malloc'd host buffers whose device address is a fake
 * address far from the host heap, so that a kernel using a raw host pointer
 * faults instead of silently working. */
#ifndef SG_PTX_TESTENV_H
#define SG_PTX_TESTENV_H

#include "sg_ptx.h"

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TE_MAX_ALLOCS 1024

typedef struct {
  sg_ptx_range r[TE_MAX_ALLOCS];
  int n;
  uint64_t next;
  uint64_t gaddr[TE_MAX_ALLOCS];
  char printed[65536];
  size_t nprinted;
  pthread_mutex_t mu;
  sg_ptx_env env;
} testenv;

static __attribute__((unused)) int te_lookup(void *ctx, uint64_t addr, sg_ptx_range *out) {
  testenv *t = ctx;
  for (int i = 0; i < t->n; i++)
    if (addr >= t->r[i].base && addr - t->r[i].base < t->r[i].size) { *out = t->r[i]; return 0; }
  return -1;
}

static __attribute__((unused)) void te_print(void *ctx, const char *text, size_t len) {
  testenv *t = ctx;
  pthread_mutex_lock(&t->mu);
  if (t->nprinted + len < sizeof t->printed) {
    memcpy(t->printed + t->nprinted, text, len);
    t->nprinted += len;
    t->printed[t->nprinted] = 0;
  }
  pthread_mutex_unlock(&t->mu);
}

static __attribute__((unused)) void te_init(testenv *t, int nworkers) {
  memset(t, 0, sizeof *t);
  t->next = 0x7000000000ull;
  pthread_mutex_init(&t->mu, NULL);
  t->env.lookup = te_lookup;
  t->env.print = te_print;
  t->env.ctx = t;
  t->env.nworkers = nworkers;
}

/* Returns the device address of a new zeroed allocation. */
static __attribute__((unused)) uint64_t te_alloc(testenv *t, size_t size) {
  if (t->n >= TE_MAX_ALLOCS) return 0;
  void *h = calloc(1, size ? size : 1);
  if (!h) return 0;
  uint64_t base = t->next;
  t->next += (size + 0xffff) & ~(uint64_t)0xffff;
  t->next += 0x10000; /* guard gap: off-by-one accesses fault */
  t->r[t->n++] = (sg_ptx_range){base, size, h};
  return base;
}

static __attribute__((unused)) void *te_host(testenv *t, uint64_t dev) {
  for (int i = 0; i < t->n; i++)
    if (dev >= t->r[i].base && dev - t->r[i].base < t->r[i].size) return (char *)t->r[i].host + (dev - t->r[i].base);
  return NULL;
}

static __attribute__((unused)) void te_free(testenv *t) {
  for (int i = 0; i < t->n; i++) free(t->r[i].host);
  t->n = 0;
}

/* Allocates the module's .global/.const variables like the driver does. */
static __attribute__((unused)) void te_load_globals(testenv *t, sg_ptx_module *m) {
  for (int i = 0; i < sg_ptx_module_global_count(m); i++) {
    sg_ptx_global_info g;
    sg_ptx_module_global(m, i, &g);
    uint64_t d = te_alloc(t, g.size);
    if (g.init) memcpy(te_host(t, d), g.init, g.size);
    sg_ptx_module_set_global_addr(m, i, d);
    if (i < TE_MAX_ALLOCS) t->gaddr[i] = d;
  }
}

static __attribute__((unused)) uint64_t te_global_addr(testenv *t, sg_ptx_module *m, const char *name) {
  for (int i = 0; i < sg_ptx_module_global_count(m) && i < TE_MAX_ALLOCS; i++) {
    sg_ptx_global_info g;
    sg_ptx_module_global(m, i, &g);
    if (!strcmp(g.name, name)) return t->gaddr[i];
  }
  return 0;
}

/* Packs kernel arguments per the kernel's parameter layout. */
typedef struct {
  unsigned char buf[4096];
  size_t size;
} te_params;

static __attribute__((unused)) void te_params_init(te_params *p, const sg_ptx_kernel *k) {
  memset(p, 0, sizeof *p);
  p->size = sg_ptx_kernel_param_bytes(k);
}
static __attribute__((unused)) void te_param(te_params *p, const sg_ptx_kernel *k, int index, const void *v, size_t size) {
  size_t off, sz;
  if (sg_ptx_kernel_param_info(k, index, &off, &sz) == 0 && off + size <= sizeof p->buf) memcpy(p->buf + off, v, size < sz ? size : sz);
}

static __attribute__((unused)) int te_launch(testenv *t, const sg_ptx_kernel *k, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                     unsigned bz, size_t dyn, te_params *p, sg_ptx_fault *fault) {
  sg_ptx_launch_cfg cfg = {{gx, gy, gz}, {bx, by, bz}, dyn, p->buf, p->size};
  return sg_ptx_launch(k, &cfg, &t->env, fault);
}

#endif
