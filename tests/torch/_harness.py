"""What every stage script of tests/torch/ shares (issue 18).

The scripts run the same code natively and through rgpu; scripts/gpu-e2e.sh
and scripts/gpu-torch.sh compare the two outputs line by line, after
dropping the lines that carry timings or start with "rgpu-stats:".  So
every result line here is built to be identical where the numbers are:
- digest(): a hash of a tensor's bytes, for results the GPU computes
  deterministically (torch.use_deterministic_algorithms, cuDNN deterministic,
  fixed seeds): the same kernels on the same GPU give the same bits, through
  rgpu or not;
- Checker.close(): the error against a float64 CPU reference with a stated
  tolerance, printed only as "ok"/"FAIL", for results where bits may differ;
- timed(): step times (lines with "ms", dropped by the comparison) and,
  through rgpu, the round trips and bytes per step from rgpu_stats_json, the
  one public function of rgpu's libcudart (absent natively).

A script exits 0 after printing "PASS <name>", 1 after "FAIL <name>", and 3
after "SKIP <name>: why" when it cannot run here (no PyTorch, no GPU)."""
import ctypes
import hashlib
import json
import os
import statistics
import sys
import time

# cuBLAS's deterministic workspace setting must be in the environment before
# the first cuBLAS handle; through rgpu the server's cuBLAS runs one stream
# per handle anyway.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def import_torch(name, cuda_only=None):
    """torch, or None after printing SKIP (no PyTorch, no CUDA device).
    `--device cpu` runs a script on the CPU, to check the script itself on
    a machine without a GPU, unless cuda_only says why it cannot."""
    try:
        import torch
    except ImportError:
        print(f"SKIP {name}: no PyTorch")
        return None, None
    dev = "cpu" if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu" else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print(f"SKIP {name}: no CUDA device")
        return None, None
    if dev != "cuda" and cuda_only:
        print(f"SKIP {name}: {cuda_only}")
        return None, None
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return torch, dev


def digest(t):
    """The first 16 hex digits of the SHA-256 of a tensor's bytes."""
    import torch
    c = t.detach().contiguous().cpu()
    raw = c.flatten().view(torch.uint8) if c.numel() else torch.empty(0, dtype=torch.uint8)
    try:
        data = raw.numpy().tobytes()
    except RuntimeError:  # PyTorch without NumPy
        data = bytes(raw.tolist())
    return hashlib.sha256(data).hexdigest()[:16]


class Checker:
    """Collects ok/FAIL verdicts; prints one line per check."""

    def __init__(self, name):
        self.name = name
        self.ok = True

    def close(self, what, got, ref, tol):
        """Max error of got against ref (float64, CPU), relative to ref's
        largest magnitude, within tol."""
        g = got.detach().double().cpu()
        r = ref.detach().double().cpu()
        if g.shape != r.shape:
            print(f"{what}: shape {tuple(g.shape)} != {tuple(r.shape)} FAIL")
            self.ok = False
            return
        err = ((g - r).abs().max() / (r.abs().max() + 1e-30)).item() if g.numel() else 0.0
        good = err <= tol and g.isfinite().all().item()
        self.ok &= bool(good)
        print(f"{what}: shape {tuple(g.shape)} max-rel-err {'<=' if good else '>'} {tol:g} "
              f"{'ok' if good else 'FAIL'}")

    def true(self, what, cond):
        self.ok &= bool(cond)
        print(f"{what}: {'ok' if cond else 'FAIL'}")

    def same(self, what, t):
        """A line with the tensor's digest: natively and through rgpu the
        two outputs must agree bit for bit."""
        print(f"{what}: digest {digest(t)}")

    def finish(self):
        print(("PASS " if self.ok else "FAIL ") + self.name)
        return 0 if self.ok else 1


def rgpu_stats():
    """rgpu's counters (round_trips, bytes_sent, ...) now, or None natively."""
    try:
        lib = ctypes.CDLL("libcudart.so.13")
        fn = lib.rgpu_stats_json
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(4096)
    n = fn(buf, len(buf))
    return json.loads(buf.value[:n].decode()) if n > 0 else None


def server_op_seconds():
    """{opcode: (calls, seconds)} from the rgpu-server named by
    RGPU_SERVER_METRICS (http://HOST:PORT/metrics), or None when unset or
    unreachable: the session thread's time per request kind."""
    url = os.environ.get("RGPU_SERVER_METRICS")
    if not url:
        return None
    import re
    import urllib.request
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    out = {}
    for m in re.finditer(r'^rgpu_(calls_total|request_seconds_total)\{op="([^"]+)"\} (\S+)$', text, re.M):
        calls, secs = out.get(m.group(2), (0, 0.0))
        if m.group(1) == "calls_total":
            calls = int(m.group(3))
        else:
            secs = float(m.group(3))
        out[m.group(2)] = (calls, secs)
    return out


def print_server_ops(what, before, after, steps):
    """The server's busy time per step and its five costliest request kinds."""
    if before is None or after is None:
        return
    delta = []
    for op, (calls, secs) in after.items():
        c0, s0 = before.get(op, (0, 0.0))
        if calls > c0:
            delta.append(((secs - s0) / steps, (calls - c0) / steps, op))
    delta.sort(reverse=True)
    busy = sum(d[0] for d in delta)
    top = ", ".join(f"{op} {n:.1f}x {t * 1e3:.3f} ms" for t, n, op in delta[:5])
    print(f"rgpu-server: {what}: session thread busy {busy * 1e3:.3f} ms per step; {top}")


def gpu_timed(torch, what, step, steps):
    """Prints the mean GPU time of step() (CUDA events around each call,
    each waited for), i.e. how long the device itself works on it, apart
    from launch and link latency.  Skipped without CUDA."""
    if not torch.cuda.is_available():
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total = 0.0
    for _ in range(steps):
        start.record()
        step()
        end.record()
        end.synchronize()
        total += start.elapsed_time(end)
    print(f"time {what}: {total / steps:.3f} ms per step ({steps} steps)")
    return total / steps


def timed(torch, what, step, steps, syncs_per_step=1, median=False):
    """Runs step() `steps` times after the caller's warm-up and prints the
    mean time per step, and through rgpu the round trips and bytes per
    step next to the synchronizations the step makes.  step() must end in
    its own synchronization (an .item(), a copy to the host) where the
    workload has one; a torch.cuda.synchronize() closes the measurement
    (none with `--device cpu`).  median=True also prints the median step
    as a row of its own ("WHAT, median step"): a mean of 50 sub-millisecond
    steps moves by a tenth when the scheduler takes one of them away for a
    few milliseconds, natively or not, and the median shows the steady
    state beside it.  Only for steps that end in their own synchronization,
    where one step's time is its work's."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    s0 = rgpu_stats()
    m0 = server_op_seconds() if s0 else None
    t0 = time.perf_counter()
    ends = []
    for _ in range(steps):
        step()
        ends.append(time.perf_counter())
    sync()
    dt = (time.perf_counter() - t0) / steps
    s1 = rgpu_stats()
    print(f"time {what}: {dt * 1e3:.3f} ms per step ({steps} steps)")
    if median:
        each = [b - a for a, b in zip([t0] + ends[:-1], ends)]
        print(f"time {what}, median step: {statistics.median(each) * 1e3:.3f} ms per step ({steps} steps)")
    if s0 and s1:
        rt = (s1["round_trips"] - s0["round_trips"]) / steps
        up = (s1["bytes_sent"] - s0["bytes_sent"]) / steps
        down = (s1["bytes_received"] - s0["bytes_received"]) / steps
        wait = (s1.get("wait_s", 0.0) - s0.get("wait_s", 0.0)) / steps
        flushes = (s1.get("flushes", 0) - s0.get("flushes", 0)) / steps
        print(f"rgpu-stats: {what}: {rt:.2f} round trips per step against {syncs_per_step} "
              f"synchronizations; {up:.0f} bytes up, {down:.0f} bytes down per step "
              f"(transport {s1.get('transport')}); waited {wait * 1e3:.3f} ms, {flushes:.1f} writes per step")
        print_server_ops(what, m0, server_op_seconds(), steps)
    return dt
