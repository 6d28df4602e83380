/* The per-thread context stack of the driver API (cuCtxPushCurrent,
 * cuCtxPopCurrent, cuCtxSetCurrent), without the thread-local storage so
 * that it can be unit-tested. */
#include "rgpu_drv_internal.h"

int rgpu_ctx_stack_push(rgpu_ctx_stack *s, CUcontext c) {
  if (s->n >= RGPU_CTX_STACK_MAX) return -1;
  s->v[s->n++] = c;
  return 0;
}

CUcontext rgpu_ctx_stack_pop(rgpu_ctx_stack *s) { return s->n ? s->v[--s->n] : NULL; }

CUcontext rgpu_ctx_stack_top(const rgpu_ctx_stack *s) { return s->n ? s->v[s->n - 1] : NULL; }

void rgpu_ctx_stack_set_top(rgpu_ctx_stack *s, CUcontext c) {
  if (!c) {
    if (s->n) s->n--;
  } else if (s->n) {
    s->v[s->n - 1] = c;
  } else {
    s->v[s->n++] = c;
  }
}

void rgpu_ctx_stack_remove(rgpu_ctx_stack *s, CUcontext c) {
  int k = 0;
  for (int i = 0; i < s->n; i++)
    if (s->v[i] != c) s->v[k++] = s->v[i];
  s->n = k;
}
