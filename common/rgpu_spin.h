/* rgpu_spin: a bounded busy wait for a readable descriptor, before a
 * blocking wait.
 *
 * Why: a thread that sleeps through a synchronous call (a socket read that
 * waits for a GPU step of a millisecond) wakes up late, while CUDA itself
 * spins in a synchronization by default.  On the H200 host a CUDA graph of
 * 0.74 ms GPU time, replayed and followed by .item(), took 0.75 ms
 * natively and, through rgpu over loopback tcp in the same runs, 0.96 and
 * 0.87 ms with both ends blocking at once, 0.85 and 0.82 ms with these
 * polls.  The waiting threads poll for a while first, yielding the CPU at
 * each round so that a busy machine (softgpu computing on the same cores)
 * loses nothing: the policy of cudaDeviceScheduleYield, bounded. */
#ifndef RGPU_SPIN_H
#define RGPU_SPIN_H

/* Polls fd for input, yielding between polls, for at most budget_us
 * microseconds.  1: readable (or an error or hang-up a read will report);
 * 0: the budget ran out (at once with budget_us 0). */
int rgpu_spin_readable(int fd, unsigned budget_us);

/* The spin budget in microseconds: RGPU_SPIN_US when set (a number from 0,
 * which turns spinning off, to 100000), else dflt.  Read once per call. */
unsigned rgpu_spin_budget_us(unsigned dflt);

#endif
