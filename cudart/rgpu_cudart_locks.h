/* The locks of the runtime facade and the order they are taken in.
 *
 * Debug builds (no NDEBUG: CMAKE_BUILD_TYPE=Debug, the ASan build) check
 * these rules with rgpu_mutex (common/rgpu_mutex.h): a function that needs a
 * lock asserts rgpu_mutex_held(&lock), and every round trip cudart makes
 * itself asserts rgpu_mutex_held_count() == 0 (no cudart lock held).
 *
 * Rule 1: no cudart lock is held across a network round trip.  A cache
 * filled by a round trip (device count and properties, a module on a
 * device, an arena chunk) marks the fetch as in flight, drops its lock for
 * the request and takes it back for the answer; a thread that needs the
 * same answer meanwhile waits on a condition of that lock, so each answer
 * is still asked for once (same frames, same round trips as when the lock
 * was held).  The one exception is the connection itself: the first call
 * connects inside pthread_once (rgpu_cudart_state.c), and callers wait for
 * the session they all need.
 *
 * Rule 2: locks nest only in this order (a lock may be taken while holding
 * the ones above it, never the other way round).  The nestings that exist
 * are fb->lock -> range-table lock, client lock -> g_lock, and client lock
 * -> client write lock; everything else is taken alone.
 *
 *   1. fb->lock            per registered fatbin (rgpu_cudart_register.c):
 *                          its kernels, variables and per-device modules;
 *                          waiters for a module being loaded use
 *                          fb->load_done.  Held by the launch path
 *                          (rgpu_rt_launch_prepare) while it packs the
 *                          parameters; module_ensure, module_install,
 *                          module_clear and the cubin fallback assert it.
 *   2. client lock         rgpu_client_lock() (client/rgpu_client.c): the
 *                          session's frame order and reply reading.  The
 *                          client core calls cudart hooks with it held:
 *                          on_host_call (takes 3.), rgpu_rt_device_prefetch
 *                          and on_wait (take nothing).  A pthread mutex of
 *                          the client core, so rgpu_mutex_held_count()
 *                          does not count it.
 *   3. g_lock              host callbacks (rgpu_cudart_callbacks.c): the
 *                          registered and the called-but-not-run callbacks.
 *                          The callback thread drops it before it pumps the
 *                          client (rgpu_client_try_pump, which may call
 *                          on_host_call), before it answers (HOST_CALL_DONE)
 *                          and before it runs a callback; both are asserted.
 *   4. leaves, held only for memory work, nothing taken under them:
 *      rgpu_range_table.lock  device/host address ranges (under 1. when a
 *                             module's symbols are added)
 *      g_dev_lock          device count, driver version, device properties
 *                          (rgpu_cudart_device.c); waiters: g_dev_fetch_done
 *      g_arena_lock        the cudaMalloc arena (rgpu_cudart_memory.c);
 *                          waiters: g_arena_fetch_done
 *      g_reg_lock          host stub / variable -> registration maps
 *      rgpu_err_state.lock sticky and pending errors
 *      g_cap_lock          stream capture state (rgpu_cudart_graph_capture.c):
 *                          adding a captured node to its graph is memory
 *                          work only
 *      g_ctx_lock          the driver facade's registry of explicit
 *                          contexts (driver/rgpu_drv_ctx.c)
 *      client write lock   inside the client core, under 2. or alone
 *
 * No lock is held while user code runs (host callbacks, the program's own
 * threads in cudaLaunchHostFunc functions). */
#ifndef RGPU_CUDART_LOCKS_H
#define RGPU_CUDART_LOCKS_H

/* Every cudart file has assert() through rgpu_cudart.h -> here. */
#include <assert.h>

#include "rgpu_mutex.h"

#endif
