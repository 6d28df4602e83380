/* One memcpy at a time on a thread of its own: see rgpu_copier.h. */
#include "rgpu_copier.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct rgpu_copier {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  void *dst;
  const void *src;
  size_t n;
  int busy; /* a copy was handed over and is not finished */
  int stop;
};

static void *copier_main(void *arg) {
  rgpu_copier *cp = arg;
  pthread_mutex_lock(&cp->mu);
  for (;;) {
    while (!cp->busy && !cp->stop) pthread_cond_wait(&cp->cv, &cp->mu);
    if (!cp->busy) break;
    void *dst = cp->dst;
    const void *src = cp->src;
    size_t n = cp->n;
    pthread_mutex_unlock(&cp->mu);
    memcpy(dst, src, n);
    pthread_mutex_lock(&cp->mu);
    cp->busy = 0;
    pthread_cond_broadcast(&cp->cv);
  }
  pthread_mutex_unlock(&cp->mu);
  return NULL;
}

rgpu_copier *rgpu_copier_new(void) {
  rgpu_copier *cp = calloc(1, sizeof *cp);
  if (!cp) return NULL;
  pthread_mutex_init(&cp->mu, NULL);
  pthread_cond_init(&cp->cv, NULL);
  if (pthread_create(&cp->th, NULL, copier_main, cp)) {
    pthread_cond_destroy(&cp->cv);
    pthread_mutex_destroy(&cp->mu);
    free(cp);
    return NULL;
  }
  return cp;
}

void rgpu_copier_free(rgpu_copier *cp) {
  if (!cp) return;
  rgpu_copier_wait(cp);
  pthread_mutex_lock(&cp->mu);
  cp->stop = 1;
  pthread_cond_broadcast(&cp->cv);
  pthread_mutex_unlock(&cp->mu);
  pthread_join(cp->th, NULL);
  pthread_cond_destroy(&cp->cv);
  pthread_mutex_destroy(&cp->mu);
  free(cp);
}

void rgpu_copier_start(rgpu_copier *cp, void *dst, const void *src, size_t n) {
  pthread_mutex_lock(&cp->mu);
  while (cp->busy) pthread_cond_wait(&cp->cv, &cp->mu);
  cp->dst = dst;
  cp->src = src;
  cp->n = n;
  cp->busy = 1;
  pthread_cond_broadcast(&cp->cv);
  pthread_mutex_unlock(&cp->mu);
}

void rgpu_copier_wait(rgpu_copier *cp) {
  pthread_mutex_lock(&cp->mu);
  while (cp->busy) pthread_cond_wait(&cp->cv, &cp->mu);
  pthread_mutex_unlock(&cp->mu);
}
