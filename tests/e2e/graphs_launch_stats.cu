// A graph launch is one message whatever the graph's size: the program runs
// itself twice through rgpu (10 and 1010 launches of an 8-kernel graph,
// RGPU_STATS on) and checks that the extra 1000 launches cost exactly 1000
// frames and no round trip, where issuing the same kernels directly costs
// 8 frames per step.
#include "rgpu_check.h"
#include <string>
#include <sys/wait.h>
#include <unistd.h>

__global__ void bump(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

static const int kKernels = 8;

static int child(int launches, int use_graph) {
  int *d;
  const int n = 64;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMemset(d, 0, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  if (use_graph) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < kKernels; k++) bump<<<1, 64, 0, s>>>(d, n);
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ex;
    CHECK(cudaGraphInstantiate(&ex, g, 0));
    for (int i = 0; i < launches; i++) CHECK(cudaGraphLaunch(ex, s));
  } else {
    for (int i = 0; i < launches; i++)
      for (int k = 0; k < kKernels; k++) bump<<<1, 64, 0, s>>>(d, n);
  }
  CHECK(cudaStreamSynchronize(s));
  int h[n];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) EXPECT(h[i] == launches * kKernels);
  return 0;
}

static int run(int launches, int use_graph, long *frames, long *rts) {
  char path[] = "/tmp/rgpu-graph-stats-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  close(fd);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("RGPU_STATS", path, 1);
    std::string a = std::to_string(launches), b = std::to_string(use_graph);
    execl("/proc/self/exe", "graphs_launch_stats", "--child", a.c_str(), b.c_str(), (char *)nullptr);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  *frames = rgpu_stat_of(path, "frames_sent");
  *rts = rgpu_stat_of(path, "round_trips");
  unlink(path);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return child(std::atoi(argv[2]), std::atoi(argv[3]));
  long f10, r10, f1010, r1010, p10, q10, p110, q110;
  EXPECT(run(10, 1, &f10, &r10) == 0);
  if (f10 < 0) {
    // Run natively (no rgpu, so no RGPU_STATS file): nothing to count.
    std::printf("rgpu-stats: not running through rgpu, frames not counted\n");
    pass("graphs_launch_stats");
    return 0;
  }
  // Counted again now that the server holds the kernel image: a server
  // with an image cache answers the first run's MODULE_LOAD with "send the
  // image" (one frame and one round trip more), later runs hit the cache.
  EXPECT(run(10, 1, &f10, &r10) == 0);
  EXPECT(run(1010, 1, &f1010, &r1010) == 0);
  EXPECT(run(10, 0, &p10, &q10) == 0);
  EXPECT(run(110, 0, &p110, &q110) == 0);
  std::printf("rgpu-stats: graph: 10 launches %ld frames %ld round trips; 1010 launches %ld frames %ld round trips\n",
              f10, r10, f1010, r1010);
  std::printf("rgpu-stats: direct: 10 steps %ld frames; 110 steps %ld frames\n", p10, p110);
  EXPECT(f10 > 0 && f1010 - f10 == 1000);
  // In sync-every-call mode each launch waits for its reply: one round trip.
  const char *sec = std::getenv("RGPU_SYNC_EVERY_CALL");
  if (sec && std::strcmp(sec, "1") == 0)
    EXPECT(r1010 - r10 == 1000);
  else
    EXPECT(r1010 == r10);
  EXPECT(p110 - p10 == 100 * kKernels);
  pass("graphs_launch_stats");
  return 0;
}
