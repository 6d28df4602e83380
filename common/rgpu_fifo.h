/* rgpu_fifo: intrusive singly linked FIFO queues.
 *
 * rgpu's queues (stream operations, server jobs, host-callback calls,
 * transport chunks, bulk slices) hold items that already live in their own
 * allocation and are only ever pushed at the tail and taken from the head,
 * so the queue is two pointers and a link field inside the item: no
 * allocation per push, nothing to fail.  The macros work on any struct
 * with `head` and `tail` members of type T * and take the name of T's link
 * member, so an existing struct adopts them without changing its layout:
 *
 *   struct stream { sg_op *head, *tail; ... };      // or RGPU_FIFO(sg_op) q;
 *   rgpu_fifo_push(s, op, next);
 *   sg_op *op = rgpu_fifo_pop(s, next);             // NULL when empty
 *
 * Not thread-safe: the owner's lock protects the queue. */
#ifndef RGPU_FIFO_H
#define RGPU_FIFO_H

#include <stddef.h>

#define RGPU_FIFO(T) \
  struct {           \
    T *head, *tail;  \
  }

#define rgpu_fifo_init(q) ((q)->head = (q)->tail = NULL)
#define rgpu_fifo_empty(q) ((q)->head == NULL)
#define rgpu_fifo_peek(q) ((q)->head)

/* Appends item (its link is cleared: it becomes the last). */
#define rgpu_fifo_push(q, item, link)      \
  do {                                     \
    __typeof__((q)->head) it_ = (item);    \
    it_->link = NULL;                      \
    if ((q)->tail) (q)->tail->link = it_;  \
    else (q)->head = it_;                  \
    (q)->tail = it_;                       \
  } while (0)

/* Appends a chain first..last already linked through `link` (last's link
 * is cleared). */
#define rgpu_fifo_push_chain(q, first, last, link) \
  do {                                             \
    __typeof__((q)->head) f_ = (first);            \
    __typeof__((q)->head) l_ = (last);             \
    l_->link = NULL;                               \
    if ((q)->tail) (q)->tail->link = f_;           \
    else (q)->head = f_;                           \
    (q)->tail = l_;                                \
  } while (0)

/* Puts item at the head, to be taken next. */
#define rgpu_fifo_push_front(q, item, link) \
  do {                                      \
    __typeof__((q)->head) it_ = (item);     \
    it_->link = (q)->head;                  \
    (q)->head = it_;                        \
    if (!(q)->tail) (q)->tail = it_;        \
  } while (0)

/* Takes the head item, or evaluates to NULL when the queue is empty.  The
 * item's link is left as it was (callers that walk a taken chain need it;
 * push clears it anyway). */
#define rgpu_fifo_pop(q, link)                        \
  __extension__({                                     \
    __typeof__((q)->head) it_ = (q)->head;            \
    if (it_) {                                        \
      (q)->head = it_->link;                          \
      if (!(q)->head) (q)->tail = NULL;               \
    }                                                 \
    it_;                                              \
  })

/* Takes every item at once; evaluates to the old head (a chain through
 * `link`, NULL-terminated) and leaves the queue empty. */
#define rgpu_fifo_take_all(q)                \
  __extension__({                            \
    __typeof__((q)->head) all_ = (q)->head;  \
    (q)->head = (q)->tail = NULL;            \
    all_;                                    \
  })

#endif /* RGPU_FIFO_H */
