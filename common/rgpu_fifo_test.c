/* rgpu_fifo: order, emptiness, chains and push-front on an intrusive queue
 * embedded in a struct that has other members too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rgpu_fifo.h"

typedef struct item {
  int value;
  struct item *next;
} item;

typedef struct {
  int other;
  item *head, *tail; /* an existing struct's own members */
} owner;

static void test_order_and_empty(void **state) {
  (void)state;
  owner o = {.other = 7};
  rgpu_fifo_init(&o);
  assert_true(rgpu_fifo_empty(&o));
  assert_null(rgpu_fifo_pop(&o, next));
  item it[5];
  for (int i = 0; i < 5; i++) {
    it[i].value = i;
    it[i].next = &it[0]; /* garbage link: push must clear it */
    rgpu_fifo_push(&o, &it[i], next);
  }
  assert_ptr_equal(rgpu_fifo_peek(&o), &it[0]);
  for (int i = 0; i < 5; i++) {
    item *p = rgpu_fifo_pop(&o, next);
    assert_non_null(p);
    assert_int_equal(p->value, i);
  }
  assert_true(rgpu_fifo_empty(&o));
  assert_null(o.tail);
  assert_null(rgpu_fifo_pop(&o, next));
  /* Usable again after emptying. */
  rgpu_fifo_push(&o, &it[3], next);
  assert_ptr_equal(o.tail, &it[3]);
  assert_ptr_equal(rgpu_fifo_pop(&o, next), &it[3]);
  assert_int_equal(o.other, 7);
}

static void test_chain_front_take_all(void **state) {
  (void)state;
  RGPU_FIFO(item) q;
  rgpu_fifo_init(&q);
  item it[6];
  for (int i = 0; i < 6; i++) it[i].value = i;
  rgpu_fifo_push(&q, &it[1], next);
  it[2].next = &it[3];
  it[3].next = &it[4];
  rgpu_fifo_push_chain(&q, &it[2], &it[4], next);
  rgpu_fifo_push_front(&q, &it[0], next);
  rgpu_fifo_push(&q, &it[5], next);
  item *all = rgpu_fifo_take_all(&q);
  assert_true(rgpu_fifo_empty(&q));
  assert_null(q.tail);
  int n = 0;
  for (item *p = all; p; p = p->next) assert_int_equal(p->value, n++);
  assert_int_equal(n, 6);
  /* push_front on an empty queue sets the tail too. */
  rgpu_fifo_push_front(&q, &it[0], next);
  assert_ptr_equal(q.tail, &it[0]);
  assert_null(it[0].next);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_and_empty),
      cmocka_unit_test(test_chain_front_take_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
