/* rgpu_spin: a bounded busy wait for a readable descriptor, before a
 * blocking wait.
 *
 * Why: a thread that sleeps through a synchronous call (a socket read that
 * waits for a GPU step of a millisecond) wakes up late, while CUDA itself
 * spins in a synchronization by default.  On the H200 host a CUDA graph of
 * 0.74 ms GPU time, replayed and followed by .item(), took 0.75 ms
 * natively and, through rgpu over loopback tcp in the same runs, 0.96 and
 * 0.87 ms with both ends blocking at once, 0.85 and 0.82 ms with these
 * polls.  The waiting threads poll for a while first.  Where the process
 * has fewer than RGPU_SPIN_MIN_SPARE_CPUS CPUs they yield the CPU at each
 * round, so that a busy machine (softgpu computing on the same cores) loses
 * nothing: the policy of cudaDeviceScheduleYield, bounded.  Elsewhere they
 * keep it (rgpu_spin_keeps_cpu), as CUDA's default policy does on such a
 * host (cudaDeviceScheduleSpin while contexts are fewer than CPUs): a
 * thread that yields to another that spins (an OpenMP pool after its
 * parallel region, PyTorch's after a CPU operator) waits out the spinner's
 * whole scheduler slice, about 3 ms on a 16-CPU host, where the poll was
 * to save microseconds (docs/pytorch.md, "The pose frame"). */
#ifndef RGPU_SPIN_H
#define RGPU_SPIN_H

#include <stdint.h>

/* Polls fd for input, as rgpu_spin_ppoll, for at most budget_us
 * microseconds.  1: readable (or an error or hang-up a read will report);
 * 0: the budget ran out (at once with budget_us 0). */
int rgpu_spin_readable(int fd, unsigned budget_us);

/* The spin budget in microseconds: RGPU_SPIN_US when set (a number from 0,
 * which turns spinning off, to 100000), else dflt.  Read once per call. */
unsigned rgpu_spin_budget_us(unsigned dflt);

/* Whether there are CPUs to spare for polling beyond the plain case.  Used
 * for: whether a thread whose bytes another thread of the same pipeline brings
 * (quic://: the client's QUIC I/O thread, the listener's relay; tls:// in
 * the worker) may poll too, and whether those I/O threads may poll: only
 * where this process may run on at least RGPU_SPIN_MIN_SPARE_CPUS CPUs
 * (sched_getaffinity), so that the pollers never take the CPU the thread
 * they wait for needs.  Why the bound: on the 2-vCPU dev VM under wifi-bad
 * a synchronous call over quic took 37.7-40.1 ms with a polling reader
 * against 33.0-33.5 ms without; on a 16-core host a synchronous call over
 * quic crosses six threads, each a wake-up when it sleeps (issue 21).
 * Also whether a worker stays awake while a reply of a job thread is
 * pending (server/rgpu_worker.c, await_frame_awake).  RGPU_SPIN_RELAYED=0/1
 * overrides the count (tests, comparisons). */
#define RGPU_SPIN_MIN_SPARE_CPUS 4
int rgpu_spin_spare_cpus(void);

/* Whether a polling thread keeps its CPU between polls (spin-wait hints)
 * rather than yielding it: where this process may run on at least
 * RGPU_SPIN_MIN_SPARE_CPUS CPUs.  RGPU_SPIN_KEEP_CPU=0/1 overrides it
 * (comparisons). */
int rgpu_spin_keeps_cpu(void);

/* Polls fds like ppoll, but without sleeping until spin_until_ns
 * (rgpu_clock_ns; 0 or past: not at all) or deadline_ns, whichever comes
 * first, yielding the CPU between polls or not (rgpu_spin_keeps_cpu); then sleeps in ppoll until
 * deadline_ns (UINT64_MAX: no deadline).  Returns what ppoll returns. */
struct pollfd;
int rgpu_spin_ppoll(struct pollfd *fds, unsigned long nfds, uint64_t spin_until_ns,
                    uint64_t deadline_ns);

/* An I/O thread that stays awake for a while after traffic (a reply
 * follows a request, the next request a reply): the client's QUIC I/O
 * thread, the listener's QUIC and TLS relays.  The window is dflt_us
 * (RGPU_SPIN_US where set) where rgpu_spin_spare_cpus(), else 0: such a
 * thread then always sleeps in ppoll. */
typedef struct {
  uint64_t window_ns; /* 0: never polls */
  uint64_t until_ns;  /* polls without sleeping until then */
} rgpu_spin_window;
void rgpu_spin_window_init(rgpu_spin_window *s, unsigned dflt_us);
/* rgpu_spin_ppoll within the window; a ready descriptor (r > 0) starts the
 * window again from now. */
int rgpu_spin_window_ppoll(rgpu_spin_window *s, struct pollfd *fds, unsigned long nfds,
                           uint64_t deadline_ns);

/* A relay thread (the listener's QUIC and TLS relays) that handed a
 * worker a request stays awake for RGPU_SPIN_ANSWER_US after it, and the
 * worker stays awake as long while a reply of a job thread is pending
 * (server/rgpu_worker.c, await_frame_awake): a synchronization whose reply waits for the GPU
 * outlasts the plain window, and the reply then found the relay asleep.
 * Not "until the worker answers": a worker writes before its reply (the
 * answer to a checkpoint, an async error), and stopping there measured
 * worse.  bench_step on the H200 host, p50 of a 0.70 ms kernel and an
 * 8-byte read of its result, above the GPU's own time: quic 87-108 us
 * with the plain 200 us window, 66-79 us awake after each request, 52-62
 * us with every server window at 20 ms; tcp 38-52 us, native 6-13 us.
 * asked_ns: when the last request went to the worker (0: never). */
#define RGPU_SPIN_ANSWER_US 2000
void rgpu_spin_window_await(rgpu_spin_window *s, uint64_t asked_ns);

#endif
