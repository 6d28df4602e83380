#!/usr/bin/env python3
"""rgpu benchmark suite: rgpu next to the network's floor, the raw transport,
the local GPU and its own baselines, in one run.  See docs/benchmarks.md.

    python3 bench/rgpu_bench.py [--quick|--full|--smoke] [--device softgpu|cuda]
        [--transports tcp,tls,quic] [--profiles none,lan,...] [--modes async,sync]
        [--workloads latency,launch,...] [--repeat N] [--out DIR]
        [--bin DIR] [--progs DIR] [--budget-s S] [--strict]

Writes DIR/results.csv, DIR/results.md, DIR/raw.jsonl (every run) and PNG
plots (when matplotlib is installed).  Profile "none" is loopback without the
emulator; every other profile runs server and client under rgpu-netem.

Internal entry points (used through rgpu-netem, not by people):
    --serve SPEC.json    start rgpu-server + rgpu-transport-perf per transport
    --worker PLAN.json   run a list of points, one JSON line per run
Standard library only; matplotlib only for the plots.
"""
import argparse
import csv
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# Link parameters of rgpu-netem's profiles (netem/rgpu_netem_profiles.c and
# docs/netem.md): RTT in seconds, rate per direction in bytes/s, mean loss per
# direction.  The floor uses RTT and rate; loss only explains the ratio.
PROFILES = {
    "lan": (0.001, 1000e6 / 8, 0.0),
    "wifi-good": (0.010, 100e6 / 8, 0.001),
    "wifi-bad": (0.030, 20e6 / 8, 0.02),
    "cellular": (0.060, 10e6 / 8, 0.01),
    "satellite-like": (0.300, 10e6 / 8, 0.005),
    "edge-worst": (0.100, 5e6 / 8, 0.05),
}
ALL_PROFILES = ["none"] + list(PROFILES)
TRANSPORTS = ["tcp", "tls", "quic"]
MODES = ["async", "sync"]
NETEM_SERVER = "10.77.0.2"
BASE_PORT = {"tcp": 7000, "tls": 7001, "quic": 7002}
PERF_PORT = {"tcp": 7100, "tls": 7101, "quic": 7102}
MARK = "@@rgpu-bench "
EXIT_UNSUPPORTED = 3

# Headline goals stated by issue 8.
GOAL_PIPELINE_SPEEDUP = 6.7   # quic+async vs tcp+sync-every-call, wifi-bad
GOAL_BW_FRACTION = 0.90       # rgpu bandwidth / raw transport bandwidth
GOAL_RT_SETUP = 2             # round trips beyond the sync points: HELLO + module


def log(msg):
    print(msg, flush=True)


def fmt_dur(s):
    if s is None or s != s:
        return "?"
    s = int(round(s))
    return "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s


def human_size(n):
    n = int(n)
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip(), re.I)
    if not m:
        raise ValueError("bad size '%s'" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


# ---- the workload sets --------------------------------------------------

def link_of(profile):
    """(rtt_s, rate_Bps) used to scale a workload to a profile; loopback is
    treated as a fast LAN so that sizes stay sensible."""
    if profile == "none":
        return 50e-6, 2e9
    rtt, rate, _ = PROFILES[profile]
    return rtt, rate


def clamp(x, lo, hi):
    return max(lo, min(hi, int(x)))


def point_budget(setname, profile):
    """Seconds one run should take at most, by set and profile: what makes
    --full fit one 10-minute call.  The profiles beside loopback and wifi-bad
    (the headline) get a lighter share."""
    if setname == "smoke":
        return 0.3
    if setname == "full" and secondary(setname, profile):
        return 0.4
    return 1.0


def secondary(setname, profile):
    return setname == "full" and profile not in ("none", "wifi-bad")


SECONDARY_TRANSPORTS = ["tcp", "quic"]


def cases_for(setname, profile, device, wanted):
    """The workload invocations for one profile: list of (workload, prog,
    args, modes or None, transports or None).  Sizes shrink with the link so
    that every point stays within its time budget; async and sync-every-call
    use the same sizes so that their times compare."""
    rtt, rate = link_of(profile)
    soft = device == "softgpu"
    fast = profile in ("none", "lan")
    budget = point_budget(setname, profile)
    second = secondary(setname, profile)
    st = SECONDARY_TRANSPORTS if second else None
    out = []

    def add(w, prog, args, modes=None, transports=None):
        if w in wanted:
            out.append((w, prog, [str(a) for a in args], modes, transports or st))

    # Synchronous latency: one round trip per iteration.
    iters = {"smoke": 50, "quick": 300, "full": 2000}[setname]
    # Every iteration waits for its reply in both modes: sync-every-call is run
    # on loopback only, as a check that it costs nothing here.
    add("latency", "bench_latency", ["--iters", clamp(budget / rtt, 10 if second else 20, iters),
                                     "--size", 64],
        None if profile == "none" else ["async"])
    # Per-call cost: the client's CPU, so loopback only.  sync-every-call pays
    # a round trip per launch; the same count runs in both modes so that their
    # times compare, and the 100k launches run async.
    if profile == "none":
        n = {"smoke": 200, "quick": 20000, "full": 20000}[setname]
        add("launch", "bench_launch", ["--launches", n])
        if setname == "full":
            add("launch", "bench_launch", ["--launches", 100000], ["async"])
    # Bandwidth: sizes up to what the link moves in the budget (a run makes
    # about 8 copies of each size).
    sizes = {"smoke": ["4K", "1M"], "quick": ["4K", "64K", "1M", "16M"],
             "full": ["4K", "64K", "1M", "16M"]}[setname]
    cap = rate * budget / 8
    sz = [x for x in sizes if parse_size(x) <= max(cap, 65536)]
    if second:
        sz, reps = ["16K"], 3
    reps = 3 if setname != "full" else 5
    mems = ["pinned", "pageable"] if profile == "none" and setname != "smoke" else ["pinned"]
    for mem in mems:
        args = ["--sizes", ",".join(sz), "--mem", mem, "--reps", reps]
        if fast:
            args += ["--min-bytes", "4M" if setname != "full" else "32M"]
        # Copies are synchronous already; sync-every-call only changes how the
        # H2D ones are acknowledged, which matters on fast links.
        add("bandwidth", "bench_bandwidth", args,
            None if fast and not (setname == "full" and mem == "pageable") else ["async"])
    # The largest copies on loopback only, once per repeat, async: 1 GiB
    # through QUIC at a few hundred MB/s would take the whole budget.
    if setname == "full" and profile == "none":
        add("bandwidth", "bench_bandwidth", ["--sizes", "256M,1G", "--mem", "pinned", "--reps", 1],
            ["async"], ["tcp", "tls"])
    # Matmul with its transfers.
    if not second:
        if soft:
            ns = {"smoke": [16], "quick": [64, 256], "full": [64, 256, 512]}[setname]
        else:
            ns = {"smoke": [64], "quick": [256, 1024], "full": [256, 1024, 4096]}[setname]
        for n in ns:
            if 12 * n * n / rate <= budget * 2 or n == ns[0]:
                add("matmul", "bench_matmul", ["--n", n, "--check", 32])
        if setname == "full" and profile == "none" and not soft:
            add("matmul", "bench_matmul", ["--n", 8192, "--check", 32], ["async"], ["tcp"])
    # cuBLAS gemms (bench_cublas: SGEMM, DGEMM, HGEMM, BF16; one-off with
    # the transfers, and resident steady state), one run over a list of N.
    # A one-off point of every type moves about 48 N^2 bytes: the larger N
    # are kept where that fits the link like matmul's, the smallest always.
    # Opt-in (--workloads cublas) beside the smoke set: see SETS.
    if not second:
        if soft:
            ns = {"smoke": [32], "quick": [64], "full": [64, 128]}[setname]
        else:
            ns = {"smoke": [64], "quick": [256, 1024], "full": [256, 512, 1024, 2048]}[setname]
        keep = [n for n in ns if 48 * n * n / rate <= budget * 2 or n == ns[0]]
        add("cublas", "bench_cublas", ["--n", ",".join(str(n) for n in keep),
                                       "--reps", 1 if setname == "smoke" else 3, "--check", 16])
        if setname == "full" and profile == "none" and not soft:
            add("cublas", "bench_cublas", ["--n", "4096,8192", "--reps", 2, "--check", 16],
                ["async"], ["tcp"])
    # Async-heavy pipeline and the same step as a graph.  At least 10 steps
    # where the headline is measured: on a lossy link fewer make the median a
    # lottery.
    kernels, elems = 8, 4096
    per_step_sync = (kernels + 3) * rtt + 2 * 4 * elems / rate
    steps = {"smoke": 5, "quick": 40, "full": 100}[setname]
    steps = clamp(budget / per_step_sync, 4 if second or setname == "smoke" else 10, steps)
    pargs = ["--steps", steps, "--kernels", kernels, "--elems", elems]
    add("pipeline", "bench_pipeline", pargs)
    # A graph launch is one call either way: in --full its sync-every-call run
    # is only made on loopback.
    add("graph", "bench_pipeline", pargs + ["--graph"],
        ["async"] if setname == "full" and profile != "none" else None)
    # Small calls beside a copying thread (issue 21, bench_threads): thread
    # A's copies take about a quarter second of the link each way (at least
    # the 256 KiB a quic:// bulk lane needs), thread B makes 64-byte
    # synchronous calls meanwhile; the row is B's p99.  Over tcp:// each of
    # B's calls can wait behind a whole copy, so the count stays small.
    # Opt-in (--workloads threads), like cublas.
    copy = max(256 << 10, min(4 << 20, int(rate * 0.25)))
    ncalls = {"smoke": 20, "quick": 40, "full": 60}[setname]
    # A GPU step and the small read that ends it (issue 18): what a
    # synchronization costs beyond the GPU's own time (bench_step prints
    # both).  Loopback only, opt-in (--workloads step).
    if profile == "none":
        add("step", "bench_step", ["--work", 2000 if soft else 300000,
                                   "--steps", {"smoke": 20, "quick": 200, "full": 400}[setname]],
            ["async"])
    add("threads", "bench_threads", ["--copy", copy, "--calls", ncalls], ["async"])
    # PyTorch: loopback only; n/a until PyTorch runs through rgpu.
    if profile == "none" and setname != "smoke":
        add("torch_infer", "torch_cnn.py", ["--mode", "infer", "--iters", 10])
        add("torch_train", "torch_cnn.py", ["--mode", "train", "--iters", 5])
    return out


SETS = {
    "smoke": dict(profiles=["none"], transports=["tcp"], modes=["async"], repeat=1,
                  budget=25, timeout=20, raw_bytes=8 << 20, raw_iters=200,
                  workloads=["latency", "launch", "bandwidth", "pipeline", "graph", "cublas"]),
    "quick": dict(profiles=["none", "wifi-bad"], transports=["tcp", "quic"],
                  modes=["async", "sync"], repeat=3, budget=280, timeout=45,
                  raw_bytes=64 << 20, raw_iters=1000,
                  workloads=["latency", "launch", "bandwidth", "matmul", "pipeline", "graph"]),
    # wifi-bad right after loopback: it carries the headline goal, so it must
    # not be what a tight time budget cuts.
    "full": dict(profiles=["none", "wifi-bad", "lan", "wifi-good", "cellular", "edge-worst"],
                 transports=TRANSPORTS, modes=MODES, repeat=3, budget=540, timeout=90,
                 raw_bytes=512 << 20, raw_iters=5000,
                 workloads=["latency", "launch", "bandwidth", "matmul", "pipeline", "graph",
                            "torch_infer", "torch_train"]),
}
# cuBLAS is measured on request (--workloads cublas, docs/benchmarks.md): it
# would not fit --full's one 10-minute call beside the rest.
ALL_WORKLOADS = SETS["full"]["workloads"] + ["cublas", "threads", "step"]


# ---- servers ------------------------------------------------------------

def make_cert(d, bindir):
    """A self-signed certificate for 127.0.0.1, localhost and the emulator's
    server address (clients pin it through RGPU_CA).  openssl when present;
    rgpu-server --gen-cert otherwise (that one covers loopback only)."""
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    if os.path.exists(cert) and os.path.exists(key):
        return cert, key, None
    if shutil.which("openssl"):
        r = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", cert, "-days", "7", "-subj", "/CN=rgpu-bench",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:" + NETEM_SERVER,
             "-addext", "basicConstraints=critical,CA:TRUE"],
            capture_output=True, text=True)
        if r.returncode == 0:
            return cert, key, None
    srv = os.path.join(bindir, "rgpu-server")
    if os.access(srv, os.X_OK):
        r = subprocess.run([srv, "--gen-cert", d], capture_output=True, text=True)
        if r.returncode == 0:
            return cert, key, None
        return None, None, "certificate: " + (r.stderr.strip().splitlines() or ["failed"])[-1]
    return None, None, "no openssl and no rgpu-server to make a certificate"


def wait_for_line(path, regex, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    m = re.search(regex, line)
                    if m:
                        return m.group(1), None
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    tail = ""
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if l.strip()]
            tail = lines[-1] if lines else ""
    except FileNotFoundError:
        pass
    why = "exited with %s" % proc.returncode if proc.poll() is not None else "no ready line"
    return None, "%s%s" % (why, ": " + tail if tail else "")


def serve(spec, procs):
    """Starts one rgpu-server and one rgpu-transport-perf server per
    transport.  Returns {transport: {"uri", "perf_uri", "error", "perf_error"}}.
    Started processes are appended to procs (the caller stops them)."""
    status = {}
    host = spec["host"]
    os.makedirs(spec["logdir"], exist_ok=True)
    for i, t in enumerate(spec["transports"]):
        st = {"uri": None, "perf_uri": None, "error": None, "perf_error": None}
        status[t] = st
        secure = t in ("tls", "quic")
        if secure and not spec.get("cert"):
            st["error"] = st["perf_error"] = spec.get("cert_error") or "no certificate"
            continue
        tls = ["--cert", spec["cert"], "--key", spec["key"]] if secure else []
        port = BASE_PORT[t] if spec["fixed_ports"] else 0
        pport = PERF_PORT[t] if spec["fixed_ports"] else 0
        srv = os.path.join(spec["bin"], "rgpu-server")
        if not os.access(srv, os.X_OK):
            st["error"] = "rgpu-server not built"
        else:
            errf = os.path.join(spec["logdir"], "server-%s.log" % t)
            cmd = [srv, "--listen", "%s://%s:%d" % (t, host, port), "--device", spec["device"]] + tls
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(errf + ".out", "w"),
                                 stderr=open(errf, "w"), start_new_session=True)
            procs.append(p)
            st["uri"], st["error"] = wait_for_line(
                errf, r"listening on (\S+)", p, 15)
        perf = os.path.join(spec["bin"], "rgpu-transport-perf")
        if not os.access(perf, os.X_OK):
            st["perf_error"] = "rgpu-transport-perf not built"
        else:
            outf = os.path.join(spec["logdir"], "perf-%s.log" % t)
            cmd = [perf, "--server", "%s://%s:%d" % (t, host, pport)] + tls
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(outf, "w"),
                                 stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(p)
            addr, st["perf_error"] = wait_for_line(outf, r"listening on (\S+)", p, 15)
            if addr:
                st["perf_uri"] = addr if "://" in addr else "%s://%s" % (t, addr)
    return status


def stop(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + 3
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def serve_main(spec_path):
    """--serve: inside the server namespace; writes the status file the
    worker waits for, then stays until rgpu-netem stops it."""
    with open(spec_path) as f:
        spec = json.load(f)
    procs = []
    stopping = []
    signal.signal(signal.SIGTERM, lambda *a: stopping.append(1))
    try:
        status = serve(spec, procs)
        tmp = spec["ready_file"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(status, f)
        os.rename(tmp, spec["ready_file"])
        while not stopping:
            time.sleep(0.2)
    finally:
        stop(procs)
    return 0


# ---- running points -----------------------------------------------------

def parse_kv(text):
    d = {}
    for tok in text.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            try:
                d[k] = int(v)
            except ValueError:
                try:
                    d[k] = float(v)
                except ValueError:
                    d[k] = v
    return d


def parse_results(stdout):
    return [parse_kv(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")]


def last_line(text):
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    for l in reversed(lines):
        if l.startswith("FAIL") or "error" in l.lower() or "cannot" in l.lower():
            return l[:300]
    return lines[-1][:300] if lines else ""


def run_one(pt, ctx):
    """Runs one point once; returns its record (status ok|na|fail|timeout)."""
    rec = {k: pt[k] for k in ("id", "kind", "workload", "prog", "args", "transport", "mode",
                              "profile", "rep")}
    rec.update(status="fail", reason="", results=[], stats=None, wall_s=None)
    env = dict(os.environ)
    env.update(pt.get("env", {}))
    if pt["kind"] == "raw":
        st = ctx["status"].get(pt["transport"], {})
        if not st.get("perf_uri"):
            rec.update(status="na", reason=st.get("perf_error") or "no raw transport server")
            return rec
        cmd = [os.path.join(ctx["bin"], "rgpu-transport-perf"), "--client", st["perf_uri"],
               "--json"] + pt["args"]
        if pt["transport"] in ("tls", "quic"):
            cmd += ["--ca", ctx["cert"]]
    else:
        prog = os.path.join(ctx["progs"], pt["prog"])
        if not os.path.exists(prog):
            rec.update(status="na", reason="%s not built" % pt["prog"])
            return rec
        base = [sys.executable, prog] if prog.endswith(".py") else [prog]
        if pt["kind"] == "native":
            cmd = base + pt["args"]
            if ctx.get("cuda_lib"):
                env["LD_LIBRARY_PATH"] = ctx["cuda_lib"] + (
                    ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        else:
            st = ctx["status"].get(pt["transport"], {})
            if not st.get("uri"):
                rec.update(status="na", reason="server: " + (st.get("error") or "not started"))
                return rec
            rgpu = os.path.join(ctx["bin"], "rgpu")
            libdir = ctx.get("lib") or os.path.join(os.path.dirname(ctx["bin"]), "lib")
            direct = not os.access(rgpu, os.X_OK)
            if direct and not os.path.exists(os.path.join(libdir, "libcudart.so.13")):
                rec.update(status="na", reason="neither rgpu nor libcudart.so.13 built")
                return rec
            stats = os.path.join(ctx["tmp"], "stats-%d.json" % pt["id"])
            if os.path.exists(stats):
                os.unlink(stats)
            env["RGPU_STATS"] = stats
            if pt["transport"] in ("tls", "quic"):
                env["RGPU_CA"] = ctx["cert"]
            if pt["mode"] == "sync":
                env["RGPU_SYNC_EVERY_CALL"] = "1"
            if direct:
                # What `rgpu run` does, by hand, until the command is built:
                # the program finds rgpu's libcudart.so.13 first.
                env["RGPU_SERVER"] = st["uri"]
                env["LD_LIBRARY_PATH"] = libdir + (
                    ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
                cmd = base + pt["args"]
            else:
                if ctx.get("lib"):
                    env["RGPU_LIBDIR"] = ctx["lib"]
                cmd = [rgpu, "run", "--server", st["uri"]]
                if pt["mode"] == "sync":
                    cmd.append("--sync-every-call")
                cmd += ["--"] + base + pt["args"]
    t0 = time.time()
    try:
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as e:
        rec.update(status="na", reason="cannot run %s: %s" % (cmd[0], e.strerror))
        return rec
    try:
        out, err = p.communicate(timeout=pt["timeout"])
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rec.update(status="timeout", reason="no result after %d s" % pt["timeout"],
                   wall_s=time.time() - t0)
        return rec
    rec["wall_s"] = time.time() - t0
    rec["rc"] = p.returncode
    if pt["kind"] == "raw":
        for l in out.splitlines():
            try:
                if l.startswith("{"):
                    rec["results"].append(json.loads(l))
            except ValueError:
                pass
    else:
        rec["results"] = parse_results(out)
        if pt["kind"] == "rgpu":
            try:
                with open(env["RGPU_STATS"]) as f:
                    rec["stats"] = json.load(f)
            except (OSError, ValueError):
                rec["stats"] = None
    unsupported = any(r.get("status") == "unsupported" for r in rec["results"] if
                      isinstance(r, dict))
    through = pt["kind"] != "rgpu" or (rec.get("stats") or {}).get("calls", 0) > 0
    if p.returncode == 0 and rec["results"] and not unsupported and not through:
        # On a machine with a GPU a program (PyTorch with its own libcudart)
        # can run on the local GPU behind rgpu's back: never report that as
        # rgpu's number.
        rec.update(status="fail", reason="the program made no call through rgpu "
                   "(RGPU_STATS missing or calls=0): it did not use the remote GPU",
                   results=[])
    elif p.returncode == 0 and rec["results"] and not unsupported:
        rec["status"] = "ok"
    elif p.returncode == EXIT_UNSUPPORTED or unsupported:
        rec.update(status="na", reason="not supported: " + (last_line(err) or "exit 3"))
        rec["results"] = []
    else:
        rec.update(status="fail", reason="exit %d: %s" % (p.returncode, last_line(err + out)))
        rec["results"] = []
    return rec


# Workloads whose every run costs seconds before it can fail (importing
# PyTorch): after one failure through rgpu, the rest of that workload in
# the same group is reported with that failure instead of run again (on
# the H200, 36 failing PyTorch runs took 173 s of a 10-minute call).
COSTLY_TO_FAIL = ("torch_infer", "torch_train")


def run_points(points, ctx, emit, deadline):
    failed = {}
    for pt in points:
        key = (pt["workload"], pt["kind"])
        if time.time() > deadline or key in failed:
            rec = {k: pt[k] for k in ("id", "kind", "workload", "prog", "args", "transport",
                                      "mode", "profile", "rep")}
            why = "time budget spent" if key not in failed else \
                "not run: an earlier run of it failed (%s)" % failed[key]
            rec.update(status="skipped" if key not in failed else "fail", reason=why,
                       results=[], stats=None, wall_s=None)
        else:
            rec = run_one(pt, ctx)
            if rec.get("status") == "fail" and pt["workload"] in COSTLY_TO_FAIL and \
                    pt["kind"] != "native":
                failed[key] = rec.get("reason", "")[:200]
        emit(rec)


def worker_main(plan_path):
    """--worker: inside the client namespace.  Waits for the server side's
    status file, runs the points, prints one marked JSON line per run."""
    with open(plan_path) as f:
        plan = json.load(f)
    ctx = plan["ctx"]
    deadline = time.time() + 30
    while not os.path.exists(plan["ready_file"]) and time.time() < deadline:
        time.sleep(0.05)
    try:
        with open(plan["ready_file"]) as f:
            ctx["status"] = json.load(f)
    except (OSError, ValueError):
        ctx["status"] = {t: {"error": "server side did not start", "perf_error":
                             "server side did not start"} for t in TRANSPORTS}
    # The server-side status names 10.77.0.2; every server can take a moment
    # after printing its address before the emulated link carries packets.
    def emit(rec):
        print(MARK + json.dumps(rec), flush=True)
    run_points(plan["points"], ctx, emit, plan["deadline"])
    return 0


# ---- planning and the run -----------------------------------------------

def raw_points(setname, profile, transports, cfg, repeat):
    rtt, rate = link_of(profile)
    budget = point_budget(setname, profile)
    iters = clamp(budget / rtt, 10 if secondary(setname, profile) else 20, cfg["raw_iters"])
    nbytes = int(min(cfg["raw_bytes"], max(256 << 10 if secondary(setname, profile) else 1 << 20,
                                           rate * budget)))
    if secondary(setname, profile):
        transports = [t for t in transports if t in SECONDARY_TRANSPORTS]
    pts = []
    for t in transports:
        for rep in range(repeat):
            pts.append(dict(kind="raw", workload="raw_ping", prog="rgpu-transport-perf",
                            args=["--mode", "ping", "-n", str(iters), "--size", "64"],
                            transport=t, mode="raw", profile=profile, rep=rep))
            for m in ("bulk", "down"):
                pts.append(dict(kind="raw", workload="raw_" + m, prog="rgpu-transport-perf",
                                args=["--mode", m, "--bytes", str(nbytes)],
                                transport=t, mode="raw", profile=profile, rep=rep))
    return pts


def plan_all(a, cfg):
    groups = []
    for prof in a.profiles:
        cases = cases_for(a.set, prof, a.device, a.workloads)
        pts = raw_points(a.set, prof, a.transports, cfg, a.repeat)
        # Repeats outermost so that a drifting machine spreads over every
        # configuration instead of biasing one.
        for rep in range(a.repeat):
            for (w, prog, args, cmodes, ctrans) in cases:
                for t in a.transports:
                    if ctrans and t not in ctrans:
                        continue
                    for m in a.modes:
                        if cmodes and m not in cmodes:
                            continue
                        pts.append(dict(kind="rgpu", workload=w, prog=prog, args=args,
                                        transport=t, mode=m, profile=prof, rep=rep))
                if prof == "none" and a.device == "cuda":
                    pts.append(dict(kind="native", workload=w, prog=prog, args=args,
                                    transport="local", mode="native", profile="none", rep=rep))
        groups.append((prof, pts))
    n = 0
    for _, pts in groups:
        for p in pts:
            p["id"] = n
            p["timeout"] = cfg["timeout"]
            n += 1
    return groups


def estimate_s(pt):
    """A priori seconds one run takes, from the link and the arguments; the
    ETA scales the remaining estimates by how far off the finished ones were."""
    rtt, rate = link_of(pt["profile"])
    args = pt["args"]

    def arg(name, default=0):
        return args[args.index(name) + 1] if name in args else default
    sync = pt["mode"] == "sync"
    t = 0.3 + 10 * rtt
    w = pt["workload"]
    if w == "raw_ping":
        t = int(arg("-n")) * rtt
    elif w in ("raw_bulk", "raw_down"):
        t = int(arg("--bytes")) / rate + 20 * rtt
    elif w == "latency":
        t += int(arg("--iters")) * rtt
    elif w == "launch":
        t += int(arg("--launches")) * (rtt if sync else 2e-6)
    elif w == "bandwidth":
        sizes = [parse_size(x) for x in arg("--sizes", "4K").split(",")]
        reps = int(arg("--reps", 3)) + 3
        t += sum(reps * 2 * (n / rate + rtt) for n in sizes)
    elif w == "matmul":
        n = int(arg("--n", 256))
        t += 12 * n * n / rate + 5 * rtt
    elif w == "threads":
        # B's calls, each a round trip and, over tcp://, up to a copy's wait.
        t += int(arg("--calls", 100)) * (rtt + int(arg("--copy", 1 << 20)) / rate)
    elif w == "cublas":
        # Per N: reps + 1 one-off transfers of the four types (48 N^2 bytes
        # each), the resident result read back, cuBLAS's start-up.
        reps = int(arg("--reps", 3))
        t += 1.0 + sum((48 * (reps + 1) + 16) * n * n / rate + 12 * rtt
                       for n in (int(x) for x in arg("--n", "256").split(",")))
    elif w in ("pipeline", "graph"):
        t += int(arg("--steps", 10)) * ((11 if sync else 2) * rtt + 2e-3)
    return t


class Progress:
    def __init__(self, points, budget):
        self.total, self.done, self.t0, self.budget = len(points), 0, time.time(), budget
        self.est_left = sum(estimate_s(p) for p in points)
        self.est_done = 0.0

    def show(self, rec):
        self.done += 1
        el = time.time() - self.t0
        e = estimate_s(rec)
        self.est_done += e
        self.est_left -= e
        eta = self.est_left * (el / self.est_done if self.est_done > 0 else 1.0)
        eta = min(eta, max(0, self.budget - el))
        if rec["status"] == "ok":
            # The measurement, not the quic_info record quic:// runs add after it.
            measured = [x for x in rec["results"] if x.get("test") != "quic_info"]
            r = measured[-1] if measured else {}
            if rec["kind"] == "raw":
                what = ("%.1f us" % r["median_us"] if "median_us" in r else
                        "%.3f Gbit/s" % r.get("gbit_s", 0))
            else:
                what = "%.4g s" % r.get("time_s", float("nan"))
        else:
            what = "%s%s" % (rec["status"], ": " + rec["reason"][:90] if rec["reason"] else "")
        log("[%4d/%d %6s ETA %6s] %-9s %-4s %-6s %-12s %-28s rep %d  %s" % (
            self.done, self.total, fmt_dur(el), fmt_dur(eta), rec["profile"], rec["transport"],
            rec["mode"], rec["workload"], " ".join(rec["args"])[:28], rec["rep"] + 1, what))


EMIT_LOCK = threading.Lock()
NETEM_PROCS = []   # running rgpu-netem sessions, stopped on Ctrl-C


def run_group(prof, pts, a, cfg, ctx, progress, records, rawf, deadline):
    def emit(rec):
        with EMIT_LOCK:
            records.append(rec)
            rawf.write(json.dumps(rec) + "\n")
            rawf.flush()
            progress.show(rec)

    spec = dict(transports=a.transports, device=a.device, bin=a.bin, cert=ctx["cert"],
                key=ctx["key"], cert_error=ctx["cert_error"], logdir=os.path.join(a.out, "logs",
                                                                                  prof))
    if prof == "none":
        spec.update(host="127.0.0.1", fixed_ports=False)
        procs = []
        try:
            ctx["status"] = serve(spec, procs)
            run_points(pts, ctx, emit, deadline)
        finally:
            stop(procs)
        return
    netem = os.path.join(a.bin, "rgpu-netem")
    why = None
    if not os.access(netem, os.X_OK):
        why = "rgpu-netem not built"
    elif os.geteuid() != 0:
        why = "rgpu-netem needs root"
    elif not os.path.exists("/dev/net/tun"):
        why = "no /dev/net/tun"
    if why:
        for pt in pts:
            rec = {k: pt[k] for k in ("id", "kind", "workload", "prog", "args", "transport",
                                      "mode", "profile", "rep")}
            rec.update(status="na", reason=why, results=[], stats=None, wall_s=None)
            emit(rec)
        return
    gdir = os.path.join(ctx["tmp"], prof)
    os.makedirs(gdir, exist_ok=True)
    ready = os.path.join(gdir, "ready.json")
    spec.update(host=NETEM_SERVER, fixed_ports=True, ready_file=ready)
    with open(os.path.join(gdir, "serve.json"), "w") as f:
        json.dump(spec, f)
    wctx = {k: ctx[k] for k in ("bin", "lib", "progs", "cert", "tmp", "cuda_lib")}
    with open(os.path.join(gdir, "plan.json"), "w") as f:
        json.dump(dict(ctx=wctx, points=pts, ready_file=ready, deadline=deadline), f)
    me = os.path.abspath(__file__)
    cmd = [netem, "-q", "--profile", prof, "--server-ready-timeout", "30", "--",
           sys.executable, me, "--serve", os.path.join(gdir, "serve.json"), ":::",
           sys.executable, me, "--worker", os.path.join(gdir, "plan.json")]
    logf = open(os.path.join(a.out, "logs", "netem-%s.log" % prof), "w")
    seen = set()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=logf, text=True, start_new_session=True)
    NETEM_PROCS.append(p)
    for line in p.stdout:
        if line.startswith(MARK):
            try:
                rec = json.loads(line[len(MARK):])
            except ValueError:
                logf.write(line)
                continue
            seen.add(rec["id"])
            emit(rec)
        else:
            logf.write(line)
    p.wait()
    for pt in pts:
        if pt["id"] not in seen:
            rec = {k: pt[k] for k in ("id", "kind", "workload", "prog", "args", "transport",
                                      "mode", "profile", "rep")}
            rec.update(status="fail", reason="rgpu-netem exited %s before this point (see "
                       "logs/netem-%s.log)" % (p.returncode, prof), results=[], stats=None,
                       wall_s=None)
            emit(rec)


# ---- aggregation --------------------------------------------------------

def med(v):
    return statistics.median(v) if v else None


def row_key(rec, r):
    variant = str(r.get("variant", ""))
    if "size" in r and rec["workload"] == "bandwidth":
        variant = "%s_%s" % (r.get("dir", ""), r.get("mem", "")) + " " + human_size(r["size"])
    return (rec["workload"], variant, rec["transport"], rec["mode"], rec["profile"])


PRIMARY = {  # workload -> (metric key, unit, higher is better)
    "latency": ("p50_us", "us p50", False),
    "launch": ("launches_per_s", "launch/s", True),
    "bandwidth": ("mbps", "MB/s", True),
    "matmul": ("gflops", "GFLOP/s", True),
    "pipeline": ("step_ms", "ms/step", False),
    "graph": ("step_ms", "ms/step", False),
    "torch_infer": ("time_s", "s/iter", False),
    "torch_train": ("time_s", "s/iter", False),
    "cublas": ("gflops", "GFLOP/s", True),
    "threads": ("p99_us", "us p99", False),
}
EXTRA = {"threads": "p50_us", "latency": "p99_us", "launch": "cpu_us_per_launch", "matmul": "time_s", "cublas": "time_s",
         "bandwidth": "time_s", "pipeline": "time_s", "graph": "time_s"}


def raw_baselines(records):
    """{(profile, transport): {"rtt_s", "up_Bps", "down_Bps"}} from the raw
    transport runs (medians over repeats)."""
    acc = {}
    for rec in records:
        if rec["kind"] != "raw" or rec["status"] != "ok":
            continue
        d = acc.setdefault((rec["profile"], rec["transport"]), {"rtt": [], "up": [], "down": [],
                                                                "p99": []})
        for r in rec["results"]:
            if r.get("test") == "ping":
                d["rtt"].append(r["median_us"] * 1e-6)
                d["p99"].append(r.get("p99_us", float("nan")) * 1e-6)
            elif r.get("test") == "bulk":
                d["up"].append(r["bytes"] / r["seconds"])
            elif r.get("test") == "down":
                d["down"].append(r["bytes"] / r["seconds"])
    return {k: {"rtt_s": med(v["rtt"]), "p99_s": med(v["p99"]), "up_Bps": med(v["up"]),
                "down_Bps": med(v["down"])} for k, v in acc.items()}


def floor_s(r, rtt, up, down):
    """bytes / rate + synchronization points x RTT, for one measured unit."""
    if rtt is None or not up or not down:
        return None
    h2d = r.get("bytes_h2d")
    d2h = r.get("bytes_d2h")
    if h2d is None or d2h is None:
        total = r.get("bytes", 0)
        h2d = d2h = total / 2
    return h2d / up + d2h / down + r.get("syncs", 0) * rtt


def ratio(a, b):
    return a / b if a is not None and b else None


def aggregate(records):
    raw = raw_baselines(records)
    rows = {}
    for rec in records:
        if rec["kind"] == "raw":
            continue
        if rec["status"] != "ok":
            row = rows.setdefault(
                (rec["workload"], "(" + " ".join(rec["args"])[:40] + ")", rec["transport"],
                 rec["mode"], rec["profile"]), {"runs": [], "bad": []})
            row["bad"].append(rec)
            continue
        for r in rec["results"]:
            row = rows.setdefault(row_key(rec, r), {"runs": [], "bad": []})
            row["runs"].append((rec, r))
    # A run that produced nothing is keyed by its arguments (it printed no
    # variant), so it shows as its own row next to the measured ones.
    out = []
    for key, row in rows.items():
        w, variant, t, m, prof = key
        o = dict(workload=w, variant=variant, transport=t, mode=m, profile=prof,
                 n_ok=len(row["runs"]), n_bad=len(row["bad"]))
        if not row["runs"]:
            bad = row["bad"]
            o["status"] = "n/a" if all(b["status"] in ("na", "skipped") for b in bad) else "FAIL"
            o["note"] = bad[0]["reason"]
            out.append(o)
            continue
        o["status"] = "ok" if not row["bad"] else "partial"
        o["note"] = row["bad"][0]["reason"] if row["bad"] else ""
        rs = [r for _, r in row["runs"]]
        times = [r["time_s"] for r in rs]
        o["time_s"], o["time_min"], o["time_max"] = med(times), min(times), max(times)
        mk, unit, _ = PRIMARY.get(w, ("time_s", "s", False))
        for r in rs:
            if "gbps" in r:
                r["mbps"] = r["gbps"] * 1e3
        vals = [r[mk] for r in rs if mk in r]
        o["metric"], o["unit"] = mk, unit
        if vals:
            o["value"], o["value_min"], o["value_max"] = med(vals), min(vals), max(vals)
        ek = EXTRA.get(w)
        if ek:
            ev = [r[ek] for r in rs if ek in r]
            o["extra_name"], o["extra"] = ek, med(ev)
        r0 = rs[0]
        o["bytes"], o["syncs"] = r0.get("bytes"), r0.get("syncs")
        rts = [rec["stats"]["round_trips"] for rec, _ in row["runs"]
               if rec.get("stats") and "round_trips" in rec["stats"]]
        # RGPU_STATS covers the whole process, so it is compared with the
        # process's final count (the last RESULT line of a run has it).
        st = [max(x.get("syncs_total", 0) for x in rec["results"]) for rec, _ in row["runs"]
              if any("syncs_total" in x for x in rec["results"])]
        o["round_trips"] = med(rts)
        o["syncs_total"] = med(st)
        if o["round_trips"] is not None and o["syncs_total"] is not None:
            o["rt_extra"] = o["round_trips"] - o["syncs_total"]
        if prof in PROFILES:
            rtt, rate, _ = PROFILES[prof]
            o["floor_profile"] = floor_s(r0, rtt, rate, rate)
            o["x_floor_profile"] = ratio(o["time_s"], o["floor_profile"])
        b = raw.get((prof, t)) or raw.get((prof, "tcp") if t == "local" else None)
        if b and t != "local":
            o["floor_raw"] = floor_s(r0, b["rtt_s"], b["up_Bps"], b["down_Bps"])
            o["x_floor_raw"] = ratio(o["time_s"], o["floor_raw"])
            if w == "bandwidth" and "gbps" in r0:
                bw = b["up_Bps"] if r0.get("dir") == "h2d" else b["down_Bps"]
                o["x_raw_bw"] = ratio(o.get("value", 0) * 1e6, bw)
        out.append(o)
    index = {(o["workload"], o["variant"], o["transport"], o["mode"], o["profile"]): o
             for o in out}
    for o in out:
        if o.get("time_s") is None:
            continue
        loc = index.get((o["workload"], o["variant"], "local", "native", "none"))
        if loc and loc.get("time_s") and o["transport"] != "local":
            o["local_s"] = loc["time_s"]
            o["x_local"] = ratio(o["time_s"], loc["time_s"])
        if o["mode"] == "async":
            s = index.get((o["workload"], o["variant"], o["transport"], "sync", o["profile"]))
            if s and s.get("time_s"):
                o["async_speedup"] = ratio(s["time_s"], o["time_s"])
        if o["transport"] == "quic":
            tc = index.get((o["workload"], o["variant"], "tcp", o["mode"], o["profile"]))
            if tc and tc.get("time_s"):
                o["quic_speedup"] = ratio(tc["time_s"], o["time_s"])
    order = {w: i for i, w in enumerate(ALL_WORKLOADS)}
    porder = {p: i for i, p in enumerate(ALL_PROFILES)}
    torder = {t: i for i, t in enumerate(TRANSPORTS + ["local"])}
    out.sort(key=lambda o: (order.get(o["workload"], 99), porder.get(o["profile"], 99),
                            o["variant"], torder.get(o["transport"], 9), o["mode"]))
    return out, raw


def goals(rows, records):
    """The three headline goals of issue 8, each (name, measured, target, verdict)."""
    res = []
    idx = {(o["workload"], o["variant"], o["transport"], o["mode"], o["profile"]): o
           for o in rows}
    found = False
    for o in rows:
        if o["workload"] == "pipeline" and o["profile"] == "wifi-bad" and \
                o["transport"] == "quic" and o["mode"] == "async" and o.get("time_s"):
            base = idx.get(("pipeline", o["variant"], "tcp", "sync", "wifi-bad"))
            if base and base.get("time_s"):
                x = base["time_s"] / o["time_s"]
                res.append(("async-heavy pipeline, wifi-bad: quic+async vs tcp+sync-every-call",
                            "%.2fx" % x, ">= %.1fx" % GOAL_PIPELINE_SPEEDUP,
                            "met" if x >= GOAL_PIPELINE_SPEEDUP else "NOT met"))
                found = True
    if not found:
        res.append(("async-heavy pipeline, wifi-bad: quic+async vs tcp+sync-every-call",
                    "n/a", ">= %.1fx" % GOAL_PIPELINE_SPEEDUP, "not measured"))
    bw = {}
    for o in rows:
        if o["workload"] == "bandwidth" and o.get("x_raw_bw") and o["mode"] == "async" and \
                "pinned" in o["variant"] and o["profile"] == "none":
            size = parse_size(o["variant"].split()[-1])
            k = (o["transport"], o["variant"].split("_")[0])
            if k not in bw or size > bw[k][0]:
                bw[k] = (size, o["x_raw_bw"], o["variant"])
    for (t, d), (size, x, v) in sorted(bw.items()):
        res.append(("bandwidth %s %s pinned %s, loopback: rgpu / raw %s" % (t, d, human_size(size), t),
                    "%.0f%%" % (100 * x), ">= %.0f%%" % (100 * GOAL_BW_FRACTION),
                    "met" if x >= GOAL_BW_FRACTION else "NOT met"))
    if not bw:
        res.append(("bandwidth: rgpu / raw transport", "n/a", ">= 90%", "not measured"))
    ex = [o for o in rows if o.get("rt_extra") is not None and o["mode"] == "async"]
    if ex:
        w = max(ex, key=lambda o: o["rt_extra"])
        res.append(("round trips - synchronization points (async rows, worst)",
                    "%+d (%s %s %s %s: %d round trips, %d sync points)" % (
                        w["rt_extra"], w["workload"], w["variant"], w["profile"], w["transport"],
                        w["round_trips"], w["syncs_total"]),
                    "<= %d (HELLO + module load)" % GOAL_RT_SETUP,
                    "met" if w["rt_extra"] <= GOAL_RT_SETUP else "NOT met"))
    else:
        res.append(("round trips = synchronization points", "n/a", "equal", "not measured"))
    return res


# ---- output -------------------------------------------------------------

CSV_COLS = ["workload", "variant", "transport", "mode", "profile", "status", "n_ok", "n_bad",
            "metric", "unit", "value", "value_min", "value_max", "extra_name", "extra",
            "time_s", "time_min", "time_max", "bytes", "syncs", "floor_profile",
            "x_floor_profile", "floor_raw", "x_floor_raw", "x_raw_bw", "local_s", "x_local",
            "async_speedup", "quic_speedup", "round_trips", "syncs_total", "rt_extra", "note"]


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLS, extrasaction="ignore")
        w.writeheader()
        for o in rows:
            w.writerow({k: ("%.6g" % v if isinstance(v, float) else v) for k, v in o.items()})


def g(v, fmt="%.3g"):
    if v is None:
        return "–"
    if isinstance(v, float):
        if v != v:
            return "–"
        if fmt == "%.3g" and 1e3 <= abs(v) < 1e7:
            return "%.0f" % v
        return fmt % v
    return str(v)


def spread(o):
    if o.get("value") is None:
        return "–"
    return "%s [%s–%s]" % (g(o["value"]), g(o["value_min"]), g(o["value_max"]))


def xf(v):
    return "–" if v is None else "%.2f×" % v


def summaries(rows, raw):
    """Compact tables for the questions the issues ask; the full tables follow."""
    L = []
    idx = {(o["workload"], o["variant"], o["transport"], o["mode"], o["profile"]): o
           for o in rows if o.get("value") is not None}

    def val(w, t, m, p, field="value", variant=None):
        for (w2, v2, t2, m2, p2), o in idx.items():
            if (w2, t2, m2, p2) == (w, t, m, p) and (variant is None or v2 == variant):
                return o.get(field)
        return None
    ts = [t for t in TRANSPORTS if any(k[2] == t for k in idx)]
    # Issue 4: per transport on loopback, rgpu next to the raw transport.
    big = {}
    for (w, v, t, m, p), o in idx.items():
        if w == "bandwidth" and m in ("async", "native") and p == "none" and "pinned" in v:
            d = v.split("_")[0]
            n = parse_size(v.split()[-1])
            if n >= big.get((t, d), (0, None))[0]:
                big[(t, d)] = (n, o)
    if ts:
        L += ["### Summary: transports on loopback (64-byte call, largest pinned copy)", "",
              "| transport | rgpu call p50 / p99 µs | raw ping p50 / p99 µs | ×raw | "
              "rgpu H2D MB/s | raw up MB/s | % | rgpu D2H MB/s | raw down MB/s | % |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for t in ts + (["local"] if any(k[2] == "local" for k in idx) else []):
            b = raw.get(("none", t), {})
            lat = val("latency", t, "async" if t != "local" else "native", "none")
            p99 = val("latency", t, "async" if t != "local" else "native", "none", "extra")
            rtt = b.get("rtt_s")
            cells = ["%s / %s" % (g(lat), g(p99)),
                     "%s / %s" % (g(rtt and rtt * 1e6), g(b.get("p99_s") and b["p99_s"] * 1e6)),
                     xf(ratio(lat, rtt and rtt * 1e6))]
            for d, rk in (("h2d", "up_Bps"), ("d2h", "down_Bps")):
                n_o = big.get((t, d))
                mine = n_o[1]["value"] if n_o else None
                rv = b.get(rk) and b[rk] / 1e6
                cells += ["%s%s" % (g(mine, "%.0f"), " (%s)" % human_size(n_o[0]) if n_o else ""),
                          g(rv, "%.0f"), "%.0f%%" % (100 * mine / rv) if mine and rv else "–"]
            L.append("| %s | %s |" % (t, " | ".join(cells)))
        L.append("")
    # Issues 6, 7, 8: the async-heavy step, every profile.
    profs = [p for p in ALL_PROFILES if any(k[0] == "pipeline" and k[4] == p for k in idx)]
    if profs:
        L += ["### Summary: async-heavy step (ms per step: 8 kernels, 2 copies, 1 sync)", "",
              "| profile | tcp sync | tcp async | quic sync | quic async | graph tcp async | "
              "graph quic async | async × (tcp / quic) | quic × (async) | quic+async vs tcp+sync | "
              "graph tcp sync | graph × (tcp sync / tcp async) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in profs:
            c = {(w, t, m): val(w, t, m, p) for w in ("pipeline", "graph") for t in ("tcp", "quic")
                 for m in ("sync", "async")}
            ts_ = c[("pipeline", "tcp", "sync")]
            # Graphs against the same step without them (the thesis measured
            # up to 44x on a sync-per-call system): sync-every-call and async.
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s / %s |" % (
                p, g(ts_), g(c[("pipeline", "tcp", "async")]), g(c[("pipeline", "quic", "sync")]),
                g(c[("pipeline", "quic", "async")]), g(c[("graph", "tcp", "async")]),
                g(c[("graph", "quic", "async")]),
                xf(ratio(ts_, c[("pipeline", "tcp", "async")])),
                xf(ratio(c[("pipeline", "quic", "sync")], c[("pipeline", "quic", "async")])),
                xf(ratio(c[("pipeline", "tcp", "async")], c[("pipeline", "quic", "async")])),
                xf(ratio(ts_, c[("pipeline", "quic", "async")])),
                g(c[("graph", "tcp", "sync")]),
                xf(ratio(ts_, c[("graph", "tcp", "sync")])),
                xf(ratio(c[("pipeline", "tcp", "async")], c[("graph", "tcp", "async")]))))
        L.append("")
    # Issue 6: what one queued launch costs the client.
    lts = [t for t in ts + ["local"] if val("launch", t, "async" if t != "local" else "native",
                                           "none") is not None]
    if lts:
        L += ["### Summary: per-call cost (near-empty launches, loopback)", "",
              "| transport | launches/s async | launches/s sync-every-call | client CPU µs/launch "
              "async | client CPU µs/launch sync |", "|---|---|---|---|---|"]
        for t in lts:
            a_m, s_m = ("async", "sync") if t != "local" else ("native", "-")
            L.append("| %s | %s | %s | %s | %s |" % (
                t, g(val("launch", t, a_m, "none"), "%.0f"), g(val("launch", t, s_m, "none"), "%.0f"),
                g(val("launch", t, a_m, "none", "extra")), g(val("launch", t, s_m, "none", "extra"))))
        L.append("")
    L += cublas_summary(rows)
    return L


CUBLAS_VARIANT = re.compile(r"([a-z0-9]+)_(oneoff|resident)_n(\d+)$")
CUBLAS_TYPES = ["sgemm", "dgemm", "hgemm", "bf16gemm"]


def cublas_order(variant):
    m = CUBLAS_VARIANT.match(variant)
    if not m:
        return (9, variant, 0)
    t, mode, n = m.groups()
    return (CUBLAS_TYPES.index(t) if t in CUBLAS_TYPES else 8, mode != "resident", int(n))


def cublas_summary(rows):
    """The cuBLAS gemms on loopback: GFLOP/s natively and through rgpu (async),
    per type, mode and N."""
    cb = {}
    for o in rows:
        if o["workload"] == "cublas" and o["profile"] == "none" and o.get("value") is not None \
                and o["mode"] in ("async", "native"):
            cb.setdefault(o["variant"], {})[o["transport"]] = o["value"]
    if not cb:
        return []
    ts = [t for t in TRANSPORTS if any(t in v for v in cb.values())]
    L = ["### Summary: cuBLAS gemms on loopback (GFLOP/s; one-off includes copying A, B in "
         "and C out, resident is K gemms on device data and one sync)", "",
         "| type | mode | N | local GPU | %s | rgpu %s / local |" % (
             " | ".join("rgpu %s async" % t for t in ts), ts[0] if ts else "–"),
         "|---|---|---|---|%s---|" % ("---|" * len(ts))]
    for v in sorted(cb, key=cublas_order):
        m = CUBLAS_VARIANT.match(v)
        t, mode, n = m.groups() if m else (v, "", "")
        c = cb[v]
        loc = c.get("local")
        first = c.get(ts[0]) if ts else None
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            t, mode, n, g(loc, "%.1f"), " | ".join(g(c.get(x), "%.1f") for x in ts),
            "%.0f%%" % (100 * first / loc) if first and loc else "–"))
    L.append("")
    return L


def write_md(path, rows, raw, gl, meta):
    L = []
    L.append("## Results: %s set, device %s" % (meta["set"], meta["device"]))
    L.append("")
    L.append("- date: %s; rgpu commit: `%s`; host: %s" % (meta["date"], meta["commit"],
                                                          meta["host"]))
    L.append("- transports %s; modes %s; profiles %s; %d repeats per point; wall time %s" % (
        ",".join(meta["transports"]), ",".join(meta["modes"]), ",".join(meta["profiles"]),
        meta["repeat"], fmt_dur(meta["wall_s"])))
    if meta["repeat"] < 3:
        L.append("- **%d repeat(s) only**: the ranges are not a spread; publish runs with "
                 "--repeat 3 or more" % meta["repeat"])
    if meta["device"] == "softgpu":
        L.append("- **device softgpu**: kernels run in the CPU PTX interpreter, and client, "
                 "server and emulator share this host's %d cores; these numbers show rgpu's "
                 "protocol behaviour (round trips, bytes, ratios to the floor), not GPU speed."
                 % (os.cpu_count() or 0))
    L.append("")
    L.append("### Headline goals")
    L.append("")
    L.append("| goal | measured | target | verdict |")
    L.append("|---|---|---|---|")
    for name, m, t, v in gl:
        L.append("| %s | %s | %s | %s |" % (name, m, t, v))
    L.append("")
    L += summaries(rows, raw)
    L.append("### Raw transport (rgpu-transport-perf, same run)")
    L.append("")
    L.append("| profile | transport | ping 64 B median | p99 | up | down |")
    L.append("|---|---|---|---|---|---|")
    for (p, t), b in sorted(raw.items(), key=lambda kv: (ALL_PROFILES.index(kv[0][0])
                                                       if kv[0][0] in ALL_PROFILES else 99,
                                                       kv[0][1])):
        L.append("| %s | %s | %s us | %s us | %s MB/s | %s MB/s |" % (
            p, t, g(b["rtt_s"] and b["rtt_s"] * 1e6), g(b["p99_s"] and b["p99_s"] * 1e6),
            g(b["up_Bps"] and b["up_Bps"] / 1e6, "%.1f"),
            g(b["down_Bps"] and b["down_Bps"] / 1e6, "%.1f")))
    if not raw:
        L.append("| – | – | n/a | | | |")
    L.append("")
    cur = None
    # Rows that are n/a for the same reason in every transport and mode of a
    # profile collapse into one line.
    merged, seen = [], {}
    for o in rows:
        if o["status"] == "n/a":
            k = (o["workload"], o["profile"], o.get("note", ""))
            if k in seen:
                m = seen[k]
                for f in ("transport", "mode"):
                    if o[f] not in m[f].split(","):
                        m[f] += "," + o[f]
                continue
            o = dict(o)
            seen[k] = o
        merged.append(o)
    for o in merged:
        if o["workload"] != cur:
            if cur is not None:
                L.append("")
            cur = o["workload"]
            unit = PRIMARY.get(cur, ("", "", False))[1]
            ek = EXTRA.get(cur, "")
            L.append("### %s" % cur)
            L.append("")
            L.append("| profile | variant | transport | mode | %s median [min–max] | %s | "
                     "floor profile | ×floor | floor raw | ×raw floor | ×local | async ×| "
                     "quic ×| round trips / syncs | note |" % (unit, ek or "extra"))
            L.append("|" + "---|" * 15)
        rt = "–"
        if o.get("round_trips") is not None:
            rt = "%s / %s" % (g(o["round_trips"], "%.0f"), g(o.get("syncs_total"), "%.0f"))
        note = o.get("note", "")
        if o["status"] not in ("ok",):
            note = ("**%s** " % o["status"]) + note
        if o.get("x_raw_bw") is not None:
            note = ("%.0f%% of raw bandwidth. " % (100 * o["x_raw_bw"])) + note
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            o["profile"], o["variant"], o["transport"], o["mode"], spread(o),
            g(o.get("extra")), g(o.get("floor_profile") and o["floor_profile"], "%.3g s"),
            xf(o.get("x_floor_profile")), g(o.get("floor_raw"), "%.3g s"),
            xf(o.get("x_floor_raw")), xf(o.get("x_local")), xf(o.get("async_speedup")),
            xf(o.get("quic_speedup")), rt, note.replace("|", "/")[:160]))
    L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def plots(outdir, rows, raw):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed: no plots (pip install matplotlib)")
        return []
    made = []
    # Bandwidth vs size, loopback, pinned, per transport and direction.
    bw = [o for o in rows if o["workload"] == "bandwidth" and o.get("value") and
          o["profile"] == "none" and o["mode"] == "async" and "pinned" in o["variant"]]
    if bw:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for t in TRANSPORTS + ["local"]:
            for d, style in (("h2d", "-o"), ("d2h", "--s")):
                pts = sorted((parse_size(o["variant"].split()[-1]), o["value"]) for o in bw
                             if o["transport"] == t and o["variant"].startswith(d))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label="%s %s" % (t, d))
            b = raw.get(("none", t))
            if b and b.get("up_Bps"):
                ax.axhline(b["up_Bps"] / 1e6, linestyle=":", linewidth=1, color="gray")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("copy size (bytes)")
        ax.set_ylabel("MB/s")
        ax.set_title("H2D/D2H bandwidth, pinned, loopback (dotted: raw transport up)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "bandwidth.png"), dpi=110)
        plt.close(fig)
        made.append("bandwidth.png")
    # Pipeline and graph step time per profile.
    pl = [o for o in rows if o["workload"] in ("pipeline", "graph") and o.get("value")]
    if pl:
        profs = [p for p in ALL_PROFILES if any(o["profile"] == p for o in pl)]
        combos = sorted({(o["workload"], o["transport"], o["mode"]) for o in pl},
                        key=lambda c: (c[0] != "pipeline", TRANSPORTS.index(c[1]) if c[1] in
                                       TRANSPORTS else 9, c[2]))
        fig, ax = plt.subplots(figsize=(max(7, 1.8 * len(profs)), 4.5))
        wdt = 0.8 / max(1, len(combos))
        for i, c in enumerate(combos):
            ys = []
            for p in profs:
                m = [o["value"] for o in pl if (o["workload"], o["transport"], o["mode"]) == c
                     and o["profile"] == p]
                ys.append(m[0] if m else 0)
            ax.bar([k + i * wdt for k in range(len(profs))], ys, wdt, label="%s %s %s" % c)
        ax.set_xticks([k + 0.4 - wdt / 2 for k in range(len(profs))])
        ax.set_xticklabels(profs)
        vals = [o["value"] for o in pl]
        if max(vals) > 20 * min(vals):
            ax.set_yscale("log")
        ax.set_ylabel("ms per step")
        ax.set_title("async-heavy step: 8 kernels + 2 copies + 1 sync")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "pipeline.png"), dpi=110)
        plt.close(fig)
        made.append("pipeline.png")
    # Latency per profile and transport, with the raw ping.
    la = [o for o in rows if o["workload"] == "latency" and o.get("value") and
          o["mode"] in ("async", "native")]
    if la:
        profs = [p for p in ALL_PROFILES if any(o["profile"] == p for o in la)]
        ts = [t for t in TRANSPORTS + ["local"] if any(o["transport"] == t for o in la)]
        fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(profs)), 4.5))
        wdt = 0.8 / max(1, 2 * len(ts))
        k = 0
        for t in ts:
            ys = [next((o["value"] for o in la if o["transport"] == t and o["profile"] == p), 0)
                  for p in profs]
            ax.bar([j + k * wdt for j in range(len(profs))], ys, wdt,
                   label="local GPU" if t == "local" else "rgpu " + t)
            k += 1
            rs = [(raw.get((p, t)) or {}).get("rtt_s") or 0 for p in profs]
            if any(rs):
                ax.bar([j + k * wdt for j in range(len(profs))], [r * 1e6 for r in rs], wdt,
                       label="raw " + t, alpha=0.5)
                k += 1
        ax.set_xticks([j + 0.4 for j in range(len(profs))])
        ax.set_xticklabels(profs)
        ax.set_yscale("log")
        ax.set_ylabel("us, median (log)")
        ax.set_title("64-byte synchronous call vs raw ping-pong")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "latency.png"), dpi=110)
        plt.close(fig)
        made.append("latency.png")
    mm = [o for o in rows if o["workload"] == "matmul" and o.get("value") and
          o["profile"] == "none"]
    if mm:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for t in TRANSPORTS + ["local"]:
            for m in ("async", "sync", "native"):
                pts = sorted((int(re.sub(r"\D", "", o["variant"])), o["value"]) for o in mm
                             if o["transport"] == t and o["mode"] == m)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", label="%s %s" % (t, m))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N")
        ax.set_ylabel("GFLOP/s incl. transfers")
        ax.set_title("tiled SGEMM N×N, loopback")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "matmul.png"), dpi=110)
        plt.close(fig)
        made.append("matmul.png")
    # cuBLAS: GFLOP/s against N per type, local GPU and rgpu tcp async.
    cb = [o for o in rows if o["workload"] == "cublas" and o.get("value") and
          o["profile"] == "none" and (o["transport"], o["mode"]) in (("local", "native"),
                                                                    ("tcp", "async"))]
    if cb:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
        for ax, mode in zip(axes, ("resident", "oneoff")):
            for t in CUBLAS_TYPES:
                for tr, style in (("local", "-o"), ("tcp", "--s")):
                    pts = sorted((int(m.group(3)), o["value"]) for o in cb
                                 for m in [CUBLAS_VARIANT.match(o["variant"])]
                                 if m and m.group(1) == t and m.group(2) == mode and
                                 o["transport"] == tr)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                                label="%s %s" % (t, "local" if tr == "local" else "rgpu tcp"))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("N")
            ax.set_title("cuBLAS %s, loopback" % mode)
            ax.legend(fontsize=7)
        axes[0].set_ylabel("GFLOP/s")
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "cublas.png"), dpi=110)
        plt.close(fig)
        made.append("cublas.png")
    return made


DOC_BEGIN = "<!-- rgpu-bench results: begin (generated by bench/rgpu_bench.py --doc) -->"
DOC_END = "<!-- rgpu-bench results: end -->"


def update_doc(doc, results_md):
    """Replaces the generated part of docs/benchmarks.md with results.md."""
    with open(doc) as f:
        text = f.read()
    with open(results_md) as f:
        res = f.read().rstrip() + "\n"
    if DOC_BEGIN in text and DOC_END in text:
        head, rest = text.split(DOC_BEGIN, 1)
        tail = rest.split(DOC_END, 1)[1]
    else:
        head, tail = text.rstrip() + "\n\n", "\n"
    with open(doc, "w") as f:
        f.write(head + DOC_BEGIN + "\n\n" + res + "\n" + DOC_END + tail)
    log("updated %s" % doc)


# ---- self-test ----------------------------------------------------------

def self_test():
    """Checks parsing, floors, ratios and goal verdicts on fixed records, so
    the smoke test catches a broken harness even where nothing else is built."""
    assert parse_kv("workload=x time_s=0.5 n=3 v=a_b") == \
        {"workload": "x", "time_s": 0.5, "n": 3, "v": "a_b"}
    assert parse_size("64K") == 65536 and human_size(1 << 30) == "1G"
    assert parse_results("junk\nRESULT workload=w time_s=1\n") == [{"workload": "w", "time_s": 1}]
    base = dict(kind="rgpu", prog="p", args=[], rep=0, status="ok", reason="", wall_s=1)

    def rec(w, t, m, prof, time_s, **kw):
        r = dict(base, id=0, workload=w, transport=t, mode=m, profile=prof,
                 stats={"round_trips": 12})
        r["results"] = [dict(variant="v", time_s=time_s, bytes=2_500_000, syncs=10,
                             syncs_total=10, step_ms=time_s * 1e3, **kw)]
        return r
    raws = [dict(base, id=1, kind="raw", workload="raw", transport="tcp", mode="raw",
                 profile="wifi-bad", results=[
                     {"test": "ping", "median_us": 31000.0, "p99_us": 40000.0},
                     {"test": "bulk", "bytes": 2_000_000, "seconds": 1.0},
                     {"test": "down", "bytes": 2_000_000, "seconds": 1.0}])]
    recs = raws + [rec("pipeline", "tcp", "sync", "wifi-bad", 4.0),
                   rec("pipeline", "quic", "async", "wifi-bad", 0.5),
                   rec("pipeline", "tcp", "async", "wifi-bad", 1.0)]
    rows, raw = aggregate(recs)
    by = {(o["transport"], o["mode"]): o for o in rows}
    # profile floor: 2.5 MB / 2.5 MB/s + 10 x 30 ms = 1.3 s
    assert abs(by[("tcp", "sync")]["floor_profile"] - 1.3) < 1e-9, by[("tcp", "sync")]
    # raw floor: 1.25 MB / 2 MB/s each way + 10 x 31 ms = 1.56 s
    assert abs(by[("tcp", "async")]["floor_raw"] - 1.56) < 1e-9
    assert abs(by[("tcp", "async")]["async_speedup"] - 4.0) < 1e-9
    assert abs(by[("quic", "async")]["quic_speedup"] - 2.0) < 1e-9
    assert by[("tcp", "async")]["rt_extra"] == 2
    gl = goals(rows, recs)
    assert gl[0][1] == "8.00x" and gl[0][3] == "met", gl
    assert gl[-1][3] == "met"
    na = dict(base, id=2, workload="graph", transport="tcp", mode="async", profile="none",
              status="na", reason="not supported", results=[])
    rows, _ = aggregate([na])
    assert rows[0]["status"] == "n/a"
    # The sets keep their promises on paper: --quick under 5 minutes, --full
    # within one 10-minute call (estimates, with loopback alone and the
    # emulated profiles three at a time).
    class Args:
        pass
    for setname, dev, limit in (("quick", "softgpu", 240), ("full", "cuda", 480)):
        a = Args()
        c = SETS[setname]
        a.set, a.device, a.profiles, a.transports = setname, dev, c["profiles"], c["transports"]
        a.modes, a.workloads, a.repeat = c["modes"], c["workloads"], c["repeat"]
        groups = plan_all(a, dict(c))
        est = {p: sum(estimate_s(x) for x in pts) for p, pts in groups}
        jobs = 3 if setname == "full" else 1
        wall = est.pop("none", 0) + sum(est.values()) / jobs
        assert wall < limit, (setname, wall, est)
        assert all(len(pts) for _, pts in groups)
    # cuBLAS on request: --full --workloads cublas fits one 10-minute call too.
    a = Args()
    c = SETS["full"]
    a.set, a.device, a.profiles, a.transports = "full", "cuda", c["profiles"], c["transports"]
    a.modes, a.workloads, a.repeat = c["modes"], ["cublas"], c["repeat"]
    groups = plan_all(a, dict(c))
    est = {p: sum(estimate_s(x) for x in pts) for p, pts in groups}
    wall = est.pop("none", 0) + sum(est.values()) / 3
    assert wall < 480, ("cublas", wall, est)
    assert any(x["workload"] == "cublas" and x["kind"] == "native"
               for _, pts in groups for x in pts)
    cb = [dict(base, id=3, workload="cublas", transport=t, mode=m, profile="none",
               stats={"round_trips": 40},
               results=[dict(variant="sgemm_resident_n1024", type="sgemm", time_s=ts,
                             gflops=2 * 1024 ** 3 / ts / 1e9, bytes=0, syncs=0.01,
                             syncs_total=40)])
          for t, m, ts in (("local", "native", 0.001), ("tcp", "async", 0.002))]
    rows, _ = aggregate(cb)
    by = {o["transport"]: o for o in rows}
    assert abs(by["tcp"]["x_local"] - 2.0) < 1e-9 and by["tcp"]["unit"] == "GFLOP/s"
    assert any("| sgemm | resident | 1024 |" in l and "50%" in l for l in cublas_summary(rows))
    log("self-test: ok")


# ---- main ---------------------------------------------------------------

def default_bin():
    for d in ("build", "build-bench"):
        p = os.path.join(REPO, d, "bin")
        if os.access(os.path.join(p, "rgpu"), os.X_OK):
            return p
    return os.path.join(REPO, "build", "bin")


def git_commit():
    # A copy of the tree on the GPU machine may have no .git: the caller names
    # the commit there (scripts/gpu-bench.sh passes it on).
    if os.environ.get("RGPU_COMMIT"):
        return os.environ["RGPU_COMMIT"]
    try:
        r = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or os.environ.get("RGPU_COMMIT", "unknown")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("RGPU_COMMIT", "unknown")


def host_desc(device):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    s = "%s, %d cores" % (cpu, os.cpu_count() or 0)
    if device == "cuda":
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=10)
            if r.returncode == 0 and r.stdout.strip():
                s += "; GPU " + r.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    else:
        s += "; device softgpu (CPU PTX interpreter, no GPU)"
    return s


def write_outputs(out, records, meta, doc):
    rows, raw = aggregate(records)
    gl = goals(rows, records)
    write_csv(os.path.join(out, "results.csv"), rows)
    write_md(os.path.join(out, "results.md"), rows, raw, gl, meta)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    made = plots(out, rows, raw)
    if doc:
        update_doc(doc, os.path.join(out, "results.md"))
    return gl, made


def rerender(out, doc):
    try:
        with open(os.path.join(out, "raw.jsonl")) as f:
            records = [json.loads(l) for l in f if l.strip()]
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        print("rgpu_bench: cannot read %s/raw.jsonl and meta.json: %s" % (out, e),
              file=sys.stderr)
        return 2
    gl, made = write_outputs(out, records, meta, doc)
    log("re-rendered %d runs into %s (results.csv, results.md%s)" % (
        len(records), out, "".join(", " + m for m in made)))
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == "--serve":
        return serve_main(argv[1])
    if len(argv) >= 2 and argv[0] == "--worker":
        return worker_main(argv[1])
    ap = argparse.ArgumentParser(description="rgpu benchmark suite (docs/benchmarks.md)")
    s = ap.add_mutually_exclusive_group()
    s.add_argument("--quick", dest="set", action="store_const", const="quick",
                   help="CI-sized: none+wifi-bad, tcp+quic, 3 repeats, < 5 min (default)")
    s.add_argument("--full", dest="set", action="store_const", const="full",
                   help="every axis, for the GPU machine, within one 10-minute call")
    s.add_argument("--smoke", dest="set", action="store_const", const="smoke",
                   help="self-test plus a tiny loopback run (the ctest)")
    ap.add_argument("--device", choices=["softgpu", "cuda"], default=None,
                    help="server device (default: cuda when nvidia-smi works, else softgpu)")
    ap.add_argument("--transports", help="comma list of tcp,tls,quic")
    ap.add_argument("--profiles", help="comma list of none," + ",".join(PROFILES))
    ap.add_argument("--modes", help="comma list of async,sync (sync = --sync-every-call)")
    ap.add_argument("--workloads", help="comma list of " + ",".join(ALL_WORKLOADS))
    ap.add_argument("--repeat", type=int, help="runs per point (>= 3 for published numbers)")
    ap.add_argument("--out", default=None, help="output folder (default: bench-out)")
    ap.add_argument("--bin", default=None, help="folder with rgpu, rgpu-server, ... "
                    "(default: build/bin)")
    ap.add_argument("--lib", default=None, help="folder with rgpu's libcudart.so.13, used "
                    "when the rgpu command is missing (default: BIN/../lib)")
    ap.add_argument("--progs", default=None, help="folder with the built workloads "
                    "(default: BIN/../bench)")
    ap.add_argument("--cuda-lib", default=None, help="folder with the real libcudart.so.13 "
                    "for the local-GPU baseline (default: /usr/local/cuda/lib64)")
    ap.add_argument("--budget-s", type=float, help="stop starting points after this many "
                    "seconds (the rest are reported as skipped)")
    ap.add_argument("--timeout", type=int, help="seconds one run may take")
    ap.add_argument("--strict", action="store_true", help="exit 1 when any point failed "
                    "(n/a points do not count)")
    ap.add_argument("--doc", default=None, help="also write the results into this Markdown "
                    "file between its generated-results markers (docs/benchmarks.md)")
    ap.add_argument("--rerender", metavar="DIR", help="rebuild results.csv/.md and the plots "
                    "of DIR from its raw.jsonl and meta.json, running nothing")
    ap.add_argument("--jobs", type=int, default=0, help="emulated profiles run side by side "
                    "(default: 3 for --full on a host with >= 12 cores, else 1)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its estimated "
                    "time, run nothing")
    ap.add_argument("--self-test", action="store_true", help="only the harness self-test")
    a = ap.parse_args(argv)
    if a.self_test:
        self_test()
        return 0
    if a.rerender:
        return rerender(a.rerender, a.doc)
    a.set = a.set or "quick"
    cfg = dict(SETS[a.set])
    if a.set == "smoke":
        self_test()

    def lst(v, default, allowed, what):
        items = [x.strip() for x in v.split(",") if x.strip()] if v else list(default)
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            ap.error("unknown %s: %s (choose from %s)" % (what, ",".join(bad) or "(none)",
                                                           ",".join(allowed)))
        return items
    a.transports = lst(a.transports, cfg["transports"], TRANSPORTS, "transport")
    a.profiles = lst(a.profiles, cfg["profiles"], ALL_PROFILES, "profile")
    a.modes = lst(a.modes, cfg["modes"], MODES, "mode")
    a.workloads = lst(a.workloads, cfg["workloads"], ALL_WORKLOADS, "workload")
    a.repeat = a.repeat or cfg["repeat"]
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    if a.device is None:
        a.device = "cuda" if shutil.which("nvidia-smi") and subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True).returncode == 0 else "softgpu"
    a.bin = os.path.abspath(a.bin or default_bin())
    a.progs = os.path.abspath(a.progs or os.path.join(os.path.dirname(a.bin), "bench"))
    a.out = os.path.abspath(a.out or os.path.join(os.getcwd(), "bench-out"))
    if a.timeout:
        cfg["timeout"] = a.timeout
    budget = a.budget_s or cfg["budget"]
    os.makedirs(os.path.join(a.out, "logs"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="rgpu-bench-")
    cuda_lib = a.cuda_lib or ("/usr/local/cuda/lib64" if a.device == "cuda" else None)
    ctx = dict(bin=a.bin, progs=a.progs, tmp=tmp, cuda_lib=cuda_lib,
               lib=os.path.abspath(a.lib) if a.lib else None)
    ctx["cert"], ctx["key"], ctx["cert_error"] = make_cert(tmp, a.bin)
    groups = plan_all(a, cfg)
    total = sum(len(p) for _, p in groups)
    est = sum(estimate_s(p) for _, pts in groups for p in pts)
    log("rgpu bench: %s set, device %s, %d runs (%s), about %s, budget %s; bin %s; out %s" % (
        a.set, a.device, total, "profiles " + ",".join(a.profiles), fmt_dur(est),
        fmt_dur(budget), a.bin, a.out))
    if a.dry_run:
        for prof, pts in groups:
            log("%s: %d runs, about %s" % (prof, len(pts), fmt_dur(sum(estimate_s(p)
                                                                       for p in pts))))
            for p in pts:
                if p["rep"] == 0:
                    log("  %-4s %-6s %-12s %s" % (p["transport"], p["mode"], p["workload"],
                                                  " ".join(p["args"])))
        shutil.rmtree(tmp, ignore_errors=True)
        return 0
    if a.repeat < 3:
        log("note: %d repeat(s) per point; published numbers need at least 3" % a.repeat)
    t0 = time.time()
    deadline = t0 + budget
    records = []
    progress = Progress([p for _, pts in groups for p in pts], budget)
    # Loopback runs alone (it measures the host); emulated profiles may run
    # side by side, each in its own namespaces, on a host with cores to spare.
    jobs = a.jobs or (3 if a.set == "full" and (os.cpu_count() or 1) >= 12 else 1)
    with open(os.path.join(a.out, "raw.jsonl"), "w") as rawf:
        try:
            for prof, pts in groups:
                if prof == "none":
                    run_group(prof, pts, a, cfg, ctx, progress, records, rawf, deadline)
            queue = [g for g in groups if g[0] != "none"]
            qlock = threading.Lock()

            def pool_worker():
                while True:
                    with qlock:
                        if not queue:
                            return
                        prof, pts = queue.pop(0)
                    run_group(prof, pts, a, cfg, ctx, progress, records, rawf, deadline)
            threads = [threading.Thread(target=pool_worker, daemon=True)
                       for _ in range(max(1, min(jobs, len(queue))))]
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            for p in NETEM_PROCS:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            raise
    wall = time.time() - t0
    meta = dict(set=a.set, device=a.device, date=time.strftime("%Y-%m-%d %H:%M UTC",
                                                                 time.gmtime()),
                commit=git_commit(), host=host_desc(a.device), transports=a.transports,
                modes=a.modes, profiles=a.profiles, repeat=a.repeat, wall_s=wall)
    gl, made = write_outputs(a.out, records, meta, a.doc)
    shutil.rmtree(tmp, ignore_errors=True)
    n = {}
    for r in records:
        n[r["status"]] = n.get(r["status"], 0) + 1
    log("done in %s: %s; wrote results.csv, results.md%s in %s" % (
        fmt_dur(wall), ", ".join("%d %s" % (v, k) for k, v in sorted(n.items())),
        "".join(", " + m for m in made), a.out))
    for name, m, t, v in gl:
        log("goal: %s: %s (target %s): %s" % (name, m, t, v))
    if a.strict and (n.get("fail") or n.get("timeout")):
        for r in records:
            if r["status"] in ("fail", "timeout"):
                log("FAILED: %s %s %s %s: %s" % (r["profile"], r["transport"], r["mode"],
                                                 r["workload"], r["reason"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
