#include "rgpu_session.h"

#include <stdlib.h>
#include <string.h>

#include "rgpu_array.h"
#include "rgpu_interval.h"

/* ---- allocations -------------------------------------------------------- */

/* The sorted interval table of common/ (binary search on dptr). */
RGPU_INTERVAL_TABLE_DEFINE(alloc_tab, rgpu_alloc_table, rgpu_alloc, dptr, size, 16)

void rgpu_alloc_table_init(rgpu_alloc_table *t) { memset(t, 0, sizeof *t); }

void rgpu_alloc_table_free(rgpu_alloc_table *t) {
  uint64_t removals = t->removals;
  alloc_tab_free(t);
  memset(t, 0, sizeof *t);
  t->removals = removals + 1;
}

int rgpu_alloc_table_add(rgpu_alloc_table *t, uint64_t dptr, uint64_t size,
                         rgpu_alloc_kind kind, int device, uint64_t module_id) {
  if (dptr == 0) return RGPU_SESS_EINVAL;
  rgpu_alloc a = {dptr, size, kind, device, module_id};
  switch (alloc_tab_insert(t, &a, NULL)) {
    case RGPU_INTERVAL_OK: break;
    case RGPU_INTERVAL_EOVERLAP: return RGPU_SESS_EEXIST;
    case RGPU_INTERVAL_ENOMEM: return RGPU_SESS_ENOMEM;
    default: return RGPU_SESS_EINVAL; /* empty or wrapping */
  }
  if (kind == RGPU_ALLOC_MALLOC) t->malloc_bytes += size;
  if (kind == RGPU_ALLOC_MODULE_GLOBAL) t->module_bytes += size;
  return 0;
}

const rgpu_alloc *rgpu_alloc_table_find(const rgpu_alloc_table *t, uint64_t dptr) {
  return alloc_tab_find_start(t, dptr);
}

const rgpu_alloc *rgpu_alloc_table_lookup(const rgpu_alloc_table *t, uint64_t ptr, uint64_t len) {
  if (ptr + len < ptr) return NULL;
  return alloc_tab_find_range(t, ptr, len);
}

int rgpu_alloc_table_remove(rgpu_alloc_table *t, uint64_t dptr, rgpu_alloc *out) {
  rgpu_alloc a;
  if (alloc_tab_remove(t, dptr, &a)) return RGPU_SESS_ENOENT;
  t->removals++;
  if (out) *out = a;
  if (a.kind == RGPU_ALLOC_MALLOC) t->malloc_bytes -= a.size;
  if (a.kind == RGPU_ALLOC_MODULE_GLOBAL) t->module_bytes -= a.size;
  return 0;
}

typedef struct {
  rgpu_alloc_table *t;
  int device;
  uint64_t module_id;
  void (*fn)(void *ctx, const rgpu_alloc *a);
  void *ctx;
} alloc_match;

/* remove_if's predicate: a matching entry is reported and uncounted here,
 * before the table drops it. */
static int alloc_matches(void *p, const rgpu_alloc *a) {
  alloc_match *m = p;
  int match = (m->device < 0 || a->device == m->device) &&
              (m->module_id == 0 || a->module_id == m->module_id);
  if (!match) return 0;
  if (m->fn) m->fn(m->ctx, a);
  if (a->kind == RGPU_ALLOC_MALLOC) m->t->malloc_bytes -= a->size;
  if (a->kind == RGPU_ALLOC_MODULE_GLOBAL) m->t->module_bytes -= a->size;
  return 1;
}

void rgpu_alloc_table_remove_matching(rgpu_alloc_table *t, int device, uint64_t module_id,
                                      void (*fn)(void *ctx, const rgpu_alloc *a), void *ctx) {
  alloc_match m = {t, device, module_id, fn, ctx};
  t->removals++;
  alloc_tab_remove_if(t, alloc_matches, &m);
}

/* ---- handles ------------------------------------------------------------ */

void rgpu_handle_map_init(rgpu_handle_map *m) { memset(m, 0, sizeof *m); }

void rgpu_handle_map_free(rgpu_handle_map *m) {
  uint64_t removals = m->removals;
  free(m->v);
  memset(m, 0, sizeof *m);
  m->removals = removals + 1;
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
  if (RGPU_ARRAY_RESERVE(m->v, m->cap, m->n + 1, 16)) return RGPU_SESS_ENOMEM;
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
  m->removals++;
  return 0;
}

void rgpu_handle_map_remove_matching(rgpu_handle_map *m, int device,
                                     void (*fn)(void *ctx, const rgpu_handle_entry *e),
                                     void *ctx) {
  m->removals++;
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

/* Grows one calloc'ed array of n elements of size sz to n + add. */
static int grow(void **v, size_t n, size_t add, size_t sz) {
  void *nv = realloc(*v, (n + add) * sz);
  if (!nv) return -1;
  memset((char *)nv + n * sz, 0, add * sz);
  *v = nv;
  return 0;
}

int rgpu_module_rec_add_func(rgpu_module_rec *m, void *f, uint32_t nparams,
                             const uint32_t *offsets, const uint32_t *sizes, uint32_t *index) {
  if (!m || !f) return -1;
  for (uint32_t i = 0; i < m->nfuncs; i++)
    if (m->funcs[i] == f) {
      *index = i;
      return 0;
    }
  /* LAUNCH names a function by a u32 index and the parameter counts are
   * u32 too: a module asked for billions of names is refused. */
  if (m->nfuncs >= UINT32_MAX - 1 || nparams > UINT32_MAX - m->nparams_total) return -1;
  /* Each array grows on its own; one that fails leaves the others longer
   * than nfuncs, which is harmless (nfuncs is what counts). */
  if (grow((void **)&m->funcs, m->nfuncs, 1, sizeof *m->funcs) ||
      grow((void **)&m->nparams, m->nfuncs, 1, sizeof *m->nparams) ||
      grow((void **)&m->param_first, m->nfuncs, 1, sizeof *m->param_first) ||
      grow((void **)&m->param_offsets, m->nparams_total, nparams ? nparams : 1,
           sizeof *m->param_offsets) ||
      grow((void **)&m->param_sizes, m->nparams_total, nparams ? nparams : 1,
           sizeof *m->param_sizes))
    return -1;
  uint32_t fi = m->nfuncs;
  m->funcs[fi] = f;
  m->nparams[fi] = nparams;
  m->param_first[fi] = m->nparams_total;
  if (nparams) {
    memcpy(m->param_offsets + m->nparams_total, offsets, nparams * sizeof *offsets);
    memcpy(m->param_sizes + m->nparams_total, sizes, nparams * sizeof *sizes);
  }
  m->nparams_total += nparams;
  m->nfuncs = fi + 1;
  *index = fi;
  return 0;
}
