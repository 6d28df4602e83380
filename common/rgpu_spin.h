/* rgpu_spin: a bounded busy wait for a readable descriptor, before a
 * blocking wait.
 *
 * Why: a thread that sleeps through a synchronous call (a socket read that
 * waits for a GPU step of a millisecond) wakes up late on server hosts with
 * deep CPU idle states.  On the H200 host a graphed training step whose
 * graph runs 0.74 ms on the GPU took 0.75 ms natively, where CUDA spins in
 * the synchronization, and 0.88 ms through rgpu, whose waiting threads
 * slept.  So the waiting threads poll for a while first, yielding the CPU
 * at each round so that a busy machine (softgpu computing on the same
 * cores) loses nothing: the policy of cudaDeviceScheduleYield, bounded. */
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
