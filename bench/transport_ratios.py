#!/usr/bin/env python3
"""rgpu against its own transport, per transport (issue 4 / issue 8 goal).

For each of tcp, tls and quic on loopback this runs, pinned with taskset:

  raw   rgpu-transport-perf: 64-byte ping-pong (median, p99), bulk up, bulk down
  rgpu  bench_latency (a 64-byte cudaMemcpy D2H: one request, one 64-byte
        reply) and bench_bandwidth (pinned cudaMemcpy H2D and D2H) through
        `rgpu run` against an rgpu-server on the same transport

and prints one table with the ratios: latency rgpu/raw (1.0 = rgpu adds
nothing) and bandwidth rgpu/raw (issue 8 wants >= 0.90).  Each point is the
median of --repeat runs; the spread (min-max) is printed beside it.

  bench/transport_ratios.py --bin build/bin --progs build/bench [--transports tcp,tls,quic]
      [--repeat 3] [--iters 5000] [--bytes 256M] [--client-cpu 1] [--server-cpu 0]
      [--device softgpu|cuda] [--csv out.csv] [--md out.md]

Exit status 1 if any run failed (its cell shows n/a).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError("bad size %r (e.g. 64M)" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def pin(cpu):
    if cpu is None or cpu < 0 or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", str(cpu)]


class Server:
    """A background process that prints a 'listening on X' line once ready."""

    def __init__(self, argv, regex, log, env=None):
        self.log = open(log, "w+")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 10
        self.addr = None
        while time.time() < deadline and self.addr is None:
            self.log.seek(0)
            m = re.search(regex, self.log.read())
            if m:
                self.addr = m.group(1)
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        if self.addr is None:
            self.log.seek(0)
            text = self.log.read()
            self.stop()
            raise RuntimeError("%s did not start: %s" % (argv[0], text.strip()[-500:]))

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def run(argv, env=None, timeout=300):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=timeout, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(argv), r.returncode, r.stdout[-800:]))
    return r.stdout


def results(text):
    """RESULT k=v ... lines of the bench programs -> list of dicts."""
    out = []
    for line in text.splitlines():
        if line.startswith("RESULT "):
            out.append(dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv))
    return out


def raw_runs(a, t, cert, work):
    extra = ["--cert", cert + "/cert.pem", "--key", cert + "/key.pem"] if t != "tcp" else []
    srv = Server(pin(a.server_cpu) + [os.path.join(a.bin, "rgpu-transport-perf"), "--server",
                                      "%s://127.0.0.1:0" % t] + extra,
                 r"listening on (\S+)", os.path.join(work, "raw-%s.log" % t))
    try:
        uri = "%s://%s" % (t, srv.addr)
        cli = pin(a.client_cpu) + [os.path.join(a.bin, "rgpu-transport-perf"), "--client", uri,
                                   "--json"]
        if t != "tcp":
            cli += ["--ca", cert + "/cert.pem"]
        o = {}
        out = run(cli + ["--mode", "ping", "-n", str(a.iters), "--size", "64"])
        for line in out.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
                if j["test"] == "ping":
                    o["lat_med"], o["lat_p99"] = j["median_us"], j["p99_us"]
        for mode, key in (("bulk", "up"), ("down", "down")):
            out = run(cli + ["--mode", mode, "--bytes", str(a.bytes * a.reps)])
            for line in out.splitlines():
                if line.startswith("{"):
                    j = json.loads(line)
                    if j["test"] == mode:
                        o[key] = j["gbit_s"]
        return o
    finally:
        srv.stop()


def rgpu_runs(a, t, cert, work):
    extra = ["--cert", cert + "/cert.pem", "--key", cert + "/key.pem"] if t != "tcp" else []
    srv = Server(pin(a.server_cpu) + [os.path.join(a.bin, "rgpu-server"), "--listen",
                                      "%s://127.0.0.1:0" % t, "--device", a.device] + extra,
                 r"listening on (\S+)", os.path.join(work, "rgpu-%s.log" % t))
    try:
        env = dict(os.environ)
        env.pop("RGPU_SERVER", None)
        env["RGPU_CA"] = cert + "/cert.pem"
        env.setdefault("RGPU_LOG", "warn")
        runp = pin(a.client_cpu) + [os.path.join(a.bin, "rgpu"), "run", "--server", srv.addr, "--"]
        o = {}
        for r in results(run(runp + [os.path.join(a.progs, "bench_latency"), "--iters",
                                     str(a.iters), "--size", "64"], env)):
            o["lat_med"], o["lat_p99"] = float(r["p50_us"]), float(r["p99_us"])
        for d, key in (("h2d", "up"), ("d2h", "down")):
            for r in results(run(runp + [os.path.join(a.progs, "bench_bandwidth"), "--sizes",
                                         str(a.bytes), "--mem", "pinned", "--dir", d, "--reps",
                                         str(a.reps)], env)):
                o[key] = float(r["gbps"]) * 8  # the program reports GB/s
        return o
    finally:
        srv.stop()


def med(v):
    return statistics.median(v) if v else None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin", default=os.path.join(here, "..", "build", "bin"))
    ap.add_argument("--progs", default=os.path.join(here, "..", "build", "bench"))
    ap.add_argument("--transports", default="tcp,tls,quic")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5000, help="ping-pongs / sync calls per run")
    ap.add_argument("--bytes", type=parse_size, default=parse_size("256M"),
                    help="size of one bulk copy (rgpu) ")
    ap.add_argument("--reps", type=int, default=4, help="bulk copies per run; the raw run "
                    "moves bytes*reps in one stream")
    ap.add_argument("--client-cpu", type=int, default=1, help="-1 = do not pin")
    ap.add_argument("--server-cpu", type=int, default=0, help="-1 = do not pin")
    ap.add_argument("--device", default="softgpu", choices=["softgpu", "cuda"])
    ap.add_argument("--csv")
    ap.add_argument("--md")
    a = ap.parse_args(argv)
    transports = [t for t in a.transports.split(",") if t]
    for t in transports:
        if t not in ("tcp", "tls", "quic"):
            ap.error("unknown transport %s" % t)
    work = tempfile.mkdtemp(prefix="rgpu-ratios-")
    cert = os.path.join(work, "cert")
    os.mkdir(cert)
    run([os.path.join(a.bin, "rgpu-server"), "--gen-cert", cert])
    failed = 0
    data = {t: {"raw": [], "rgpu": []} for t in transports}
    try:
        # Repeats outermost, so drift of a shared machine spreads over all.
        for rep in range(a.repeat):
            for t in transports:
                for kind, fn in (("raw", raw_runs), ("rgpu", rgpu_runs)):
                    print("[%d/%d] %s %s ..." % (rep + 1, a.repeat, t, kind), file=sys.stderr,
                          flush=True)
                    try:
                        data[t][kind].append(fn(a, t, cert, work))
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        failed += 1
                        print("  failed: %s" % e, file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def col(t, kind, key):
        return [r[key] for r in data[t][kind] if key in r]

    def cell(v, fmt):
        if not v:
            return "n/a"
        s = fmt % med(v)
        return s + (" (%s-%s)" % (fmt % min(v), fmt % max(v)) if len(v) > 1 else "")

    def ratio(t, key):
        r, g = med(col(t, "raw", key)), med(col(t, "rgpu", key))
        return "%.2f" % (g / r) if r and g else "n/a"

    hdr = ["transport", "raw ping med us", "rgpu sync call med us", "latency rgpu/raw",
           "raw p99 us", "rgpu p99 us", "raw up Gbit/s", "rgpu H2D Gbit/s", "H2D rgpu/raw",
           "raw down Gbit/s", "rgpu D2H Gbit/s", "D2H rgpu/raw"]
    rows = []
    for t in transports:
        rows.append([t, cell(col(t, "raw", "lat_med"), "%.1f"), cell(col(t, "rgpu", "lat_med"), "%.1f"),
                     ratio(t, "lat_med"), cell(col(t, "raw", "lat_p99"), "%.1f"),
                     cell(col(t, "rgpu", "lat_p99"), "%.1f"), cell(col(t, "raw", "up"), "%.2f"),
                     cell(col(t, "rgpu", "up"), "%.2f"), ratio(t, "up"),
                     cell(col(t, "raw", "down"), "%.2f"), cell(col(t, "rgpu", "down"), "%.2f"),
                     ratio(t, "down")])
    md = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    note = ("loopback, device %s, client CPU %s, server CPU %s, %d runs per point (median, "
            "min-max), %d x %d-byte calls, bulk %d x %d MiB pinned" %
            (a.device, a.client_cpu, a.server_cpu, a.repeat, a.iters, 64, a.reps, a.bytes >> 20))
    print("\n".join(md))
    print("\n" + note)
    if a.md:
        with open(a.md, "w") as f:
            f.write("\n".join(md) + "\n\n" + note + "\n")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("transport,kind,run,lat_med_us,lat_p99_us,up_gbit_s,down_gbit_s\n")
            for t in transports:
                for kind in ("raw", "rgpu"):
                    for i, r in enumerate(data[t][kind]):
                        f.write("%s,%s,%d,%s,%s,%s,%s\n" % (t, kind, i, r.get("lat_med", ""),
                                r.get("lat_p99", ""), r.get("up", ""), r.get("down", "")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
