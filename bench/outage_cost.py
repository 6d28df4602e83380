#!/usr/bin/env python3
"""What an outage costs a synchronous workload, tcp:// against quic:// (issue 21).

bench_latency (a loop of 64-byte device-to-host cudaMemcpy calls, each a
round trip) runs through rgpu against a softgpu rgpu-server inside rgpu-netem,
once without an outage and once per --outages D with the link down both ways
from --at seconds for D seconds, one transport after the other, with the
transport's default timeouts (30 s idle timeout).  The loop's own wall time
(iterations / calls_per_s, start-up excluded) gives the cost:

  cost = loop time with the outage - loop time without - D

so a cost of one RTT means calls flowed again as soon as the link did.
Needs root and /dev/net/tun (exit 77 otherwise).

  bench/outage_cost.py --bin build/bin --bench build/bench [--rtt-ms 20]
      [--outages 2,5,10] [--iters 300] [--repeat 1] [--transports tcp,quic]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile


def run_once(a, scheme, outage_s, cert):
    port = 7500 if scheme == "tcp" else 7501
    argv = [os.path.join(a.bin, "rgpu-netem"), "-q", "--rtt-ms", str(a.rtt_ms),
            "--server-ready-wait", "%s:%d" % ("udp" if scheme == "quic" else "tcp", port)]
    if outage_s:
        argv += ["--outage", "%g:%g" % (a.at, outage_s)]
    argv += ["--", os.path.join(a.bin, "rgpu-server"), "--listen",
             "%s://10.77.0.2:%d" % (scheme, port), "--device", "softgpu",
             "--cert", cert + "/cert.pem", "--key", cert + "/key.pem", ":::",
             "env", "RGPU_LOG=warn", "RGPU_CA=" + cert + "/cert.pem",
             os.path.join(a.bin, "rgpu"), "run", "--server", "%s://10.77.0.2:%d" % (scheme, port),
             "--", os.path.join(a.bench, "bench_latency"), "--iters", str(a.iters)]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=a.iters + 120)
    m = re.search(r"RESULT workload=latency .*?calls_per_s=([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        print("  %s outage %s failed (%d): %s" % (scheme, outage_s, r.returncode,
                                                 r.stdout.strip()[-400:]), file=sys.stderr)
        return None
    resumed = len(re.findall(r"resumed session", r.stdout))
    return a.iters / float(m.group(1)), resumed


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin", default=os.path.join(here, "..", "build", "bin"))
    ap.add_argument("--bench", default=os.path.join(here, "..", "build", "bench"))
    ap.add_argument("--rtt-ms", type=float, default=20)
    ap.add_argument("--at", type=float, default=2.0, help="outage start, s after the client starts")
    ap.add_argument("--outages", default="2,5,10")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--transports", default="tcp,quic")
    a = ap.parse_args(argv)
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        print("outage_cost: needs root and /dev/net/tun: skipped")
        return 77
    outages = [float(x) for x in a.outages.split(",") if x]
    with tempfile.TemporaryDirectory() as cert:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=10.77.0.2",
                        "-addext", "subjectAltName=IP:10.77.0.2", "-keyout", cert + "/key.pem",
                        "-out", cert + "/cert.pem"], check=True, capture_output=True)
        print("| transport | loop without outage | " +
              " | ".join("%g s outage: cost" % d for d in outages) + " |")
        print("|---|---|" + "---|" * len(outages))
        for scheme in a.transports.split(","):
            base, costs = [], {d: [] for d in outages}
            notes = {d: 0 for d in outages}
            for _ in range(a.repeat):
                r0 = run_once(a, scheme, 0, cert)
                if not r0:
                    continue
                base.append(r0[0])
                for d in outages:
                    r = run_once(a, scheme, d, cert)
                    if r:
                        costs[d].append(r[0] - r0[0] - d)
                        notes[d] += r[1]

            def cell(v, d=None):
                if not v:
                    return "n/a"
                s = "%.2f s" % statistics.median(v)
                if len(v) > 1:
                    s += " (%.2f-%.2f)" % (min(v), max(v))
                if d is not None and notes[d]:
                    s += ", %d resume%s" % (notes[d], "s" if notes[d] > 1 else "")
                return s
            print("| %s | %s | %s |" % (scheme, cell(base),
                                        " | ".join(cell(costs[d], d) for d in outages)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
