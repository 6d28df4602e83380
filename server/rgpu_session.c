#include "rgpu_session.h"

#include <stdlib.h>
#include <string.h>

/* ---- allocations -------------------------------------------------------- */

void rgpu_alloc_table_init(rgpu_alloc_table *t) { memset(t, 0, sizeof *t); }

void rgpu_alloc_table_free(rgpu_alloc_table *t) {
  free(t->v);
  memset(t, 0, sizeof *t);
}

/* Index of the first entry with dptr > p (upper bound). */
static size_t alloc_upper(const rgpu_alloc_table *t, uint64_t p) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->v[mid].dptr <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int rgpu_alloc_table_add(rgpu_alloc_table *t, uint64_t dptr, uint64_t size,
                         rgpu_alloc_kind kind, int device, uint64_t module_id) {
  if (size == 0 || dptr == 0 || dptr + size < dptr) return RGPU_SESS_EINVAL;
  size_t i = alloc_upper(t, dptr);
  /* Neighbours: the entry before must end at or before dptr, the one after
   * must start at or after dptr+size. */
  if (i > 0 && t->v[i - 1].dptr + t->v[i - 1].size > dptr) return RGPU_SESS_EEXIST;
  if (i < t->n && t->v[i].dptr < dptr + size) return RGPU_SESS_EEXIST;
  if (t->n == t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 16;
    rgpu_alloc *nv = realloc(t->v, nc * sizeof *nv);
    if (!nv) return RGPU_SESS_ENOMEM;
    t->v = nv;
    t->cap = nc;
  }
  memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
  t->v[i] = (rgpu_alloc){dptr, size, kind, device, module_id};
  t->n++;
  if (kind == RGPU_ALLOC_MALLOC) t->malloc_bytes += size;
  return 0;
}

const rgpu_alloc *rgpu_alloc_table_find(const rgpu_alloc_table *t, uint64_t dptr) {
  size_t i = alloc_upper(t, dptr);
  if (i > 0 && t->v[i - 1].dptr == dptr) return &t->v[i - 1];
  return NULL;
}

const rgpu_alloc *rgpu_alloc_table_lookup(const rgpu_alloc_table *t, uint64_t ptr, uint64_t len) {
  if (ptr + len < ptr) return NULL;
  size_t i = alloc_upper(t, ptr);
  if (i == 0) return NULL;
  const rgpu_alloc *a = &t->v[i - 1];
  uint64_t off = ptr - a->dptr; /* ptr >= a->dptr by construction */
  if (off >= a->size) return NULL;
  if (len > a->size - off) return NULL;
  return a;
}

int rgpu_alloc_table_remove(rgpu_alloc_table *t, uint64_t dptr, rgpu_alloc *out) {
  size_t i = alloc_upper(t, dptr);
  if (i == 0 || t->v[i - 1].dptr != dptr) return RGPU_SESS_ENOENT;
  i--;
  if (out) *out = t->v[i];
  if (t->v[i].kind == RGPU_ALLOC_MALLOC) t->malloc_bytes -= t->v[i].size;
  memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);
  t->n--;
  return 0;
}

void rgpu_alloc_table_remove_matching(rgpu_alloc_table *t, int device, uint64_t module_id,
                                      void (*fn)(void *ctx, const rgpu_alloc *a), void *ctx) {
  size_t w = 0;
  for (size_t r = 0; r < t->n; r++) {
    const rgpu_alloc *a = &t->v[r];
    int match = (device < 0 || a->device == device) && (module_id == 0 || a->module_id == module_id);
    if (match) {
      if (fn) fn(ctx, a);
      if (a->kind == RGPU_ALLOC_MALLOC) t->malloc_bytes -= a->size;
    } else {
      t->v[w++] = *a;
    }
  }
  t->n = w;
}

/* ---- handles ------------------------------------------------------------ */

void rgpu_handle_map_init(rgpu_handle_map *m) { memset(m, 0, sizeof *m); }

void rgpu_handle_map_free(rgpu_handle_map *m) {
  free(m->v);
  memset(m, 0, sizeof *m);
}

/* Index of the first entry with id >= key (lower bound). */
static size_t handle_lower(const rgpu_handle_map *m, uint64_t key) {
  size_t lo = 0, hi = m->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (m->v[mid].id < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int rgpu_handle_map_put(rgpu_handle_map *m, uint64_t id, void *ptr, int device) {
  if (id == 0) return RGPU_SESS_EINVAL;
  size_t i = handle_lower(m, id);
  if (i < m->n && m->v[i].id == id) return RGPU_SESS_EEXIST;
  if (m->n == m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 16;
    rgpu_handle_entry *nv = realloc(m->v, nc * sizeof *nv);
    if (!nv) return RGPU_SESS_ENOMEM;
    m->v = nv;
    m->cap = nc;
  }
  memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof *m->v);
  m->v[i] = (rgpu_handle_entry){id, ptr, device};
  m->n++;
  return 0;
}

const rgpu_handle_entry *rgpu_handle_map_get(const rgpu_handle_map *m, uint64_t id) {
  size_t i = handle_lower(m, id);
  if (i < m->n && m->v[i].id == id) return &m->v[i];
  return NULL;
}

int rgpu_handle_map_remove(rgpu_handle_map *m, uint64_t id, rgpu_handle_entry *out) {
  size_t i = handle_lower(m, id);
  if (i >= m->n || m->v[i].id != id) return RGPU_SESS_ENOENT;
  if (out) *out = m->v[i];
  memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof *m->v);
  m->n--;
  return 0;
}

void rgpu_handle_map_remove_matching(rgpu_handle_map *m, int device,
                                     void (*fn)(void *ctx, const rgpu_handle_entry *e),
                                     void *ctx) {
  size_t w = 0;
  for (size_t r = 0; r < m->n; r++) {
    if (device < 0 || m->v[r].device == device) {
      if (fn) fn(ctx, &m->v[r]);
    } else {
      m->v[w++] = m->v[r];
    }
  }
  m->n = w;
}

/* ---- module records ----------------------------------------------------- */

rgpu_module_rec *rgpu_module_rec_new(uint32_t nfuncs, uint32_t nparams_total) {
  rgpu_module_rec *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->nfuncs = nfuncs;
  m->nparams_total = nparams_total;
  /* calloc(0) may return NULL; ask for at least one element so that NULL
   * always means out of memory. */
  m->funcs = calloc(nfuncs ? nfuncs : 1, sizeof *m->funcs);
  m->nparams = calloc(nfuncs ? nfuncs : 1, sizeof *m->nparams);
  m->param_first = calloc(nfuncs ? nfuncs : 1, sizeof *m->param_first);
  m->param_offsets = calloc(nparams_total ? nparams_total : 1, sizeof *m->param_offsets);
  m->param_sizes = calloc(nparams_total ? nparams_total : 1, sizeof *m->param_sizes);
  if (!m->funcs || !m->nparams || !m->param_first || !m->param_offsets || !m->param_sizes) {
    rgpu_module_rec_free(m);
    return NULL;
  }
  return m;
}

void rgpu_module_rec_free(rgpu_module_rec *m) {
  if (!m) return;
  free(m->funcs);
  free(m->nparams);
  free(m->param_first);
  free(m->param_offsets);
  free(m->param_sizes);
  free(m);
}

uint64_t rgpu_module_rec_param_extent(const rgpu_module_rec *m, uint32_t fi) {
  if (!m || fi >= m->nfuncs) return 0;
  uint64_t end = 0;
  for (uint32_t k = 0; k < m->nparams[fi]; k++) {
    uint32_t j = m->param_first[fi] + k;
    uint64_t e = (uint64_t)m->param_offsets[j] + m->param_sizes[j];
    if (e > end) end = e;
  }
  return end;
}
