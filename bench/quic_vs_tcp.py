#!/usr/bin/env python3
"""Raw QUIC against raw TCP over emulated links (issue 21).

For each rgpu-netem profile, this runs rgpu-transport-perf side by side over
tcp:// and quic:// (one or more QUIC congestion controllers) through the same
emulated link, in one invocation, and prints one table:

  bulk up / down   goodput of --seconds worth of the profile's link rate,
                   measured by the tool (first byte to the acknowledged last
                   byte), in Mbit/s and as a fraction of the link rate
  ping             64-byte synchronous request/response, median and p99
  outage (opt.)    with --outage T:D: a ping run through a link that is down
                   for D seconds from T s; the one call that waited reports
                   the outage's cost = its max latency minus D

The TCP congestion control of the emulated hosts (the kernel default in the
client namespace, or --tcp-cc) is printed next to QUIC's.  Needs root and
/dev/net/tun (rgpu-netem).

  bench/quic_vs_tcp.py --bin build/bin [--profiles wifi-bad,cellular,edge-worst]
      [--quic-cc default,cubic] [--seconds 8] [--repeat 1] [--pings 200]
      [--outage 2:10] [--before-env RGPU_QUIC_MAX_ACK_DELAY_MS=25] [--md out.md]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

# Link rate per profile, Mbit/s per direction (netem/rgpu_netem_profiles.c).
PROFILE_RATE = {"lan": 1000, "wifi-good": 100, "wifi-bad": 20, "cellular": 10,
                "satellite-like": 10, "edge-worst": 5, "none": 0}
PROFILE_RTT_MS = {"lan": 1, "wifi-good": 10, "wifi-bad": 30, "cellular": 60,
                  "satellite-like": 300, "edge-worst": 100, "none": 0.1}
PORT = 7443


def netem(a, profile, server, client, extra=(), ready=None, timeout=300, env=None):
    argv = [os.path.join(a.bin, "rgpu-netem"), "-q", "--profile", profile,
            "--seed", str(a.seed)] + list(extra)
    if ready:
        argv += ["--server-ready-wait", ready]
    argv += ["--"] + server + [":::"] + client
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired as e:
        # A transfer below a sixth of the link rate: report it as missing.
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out
    return r.returncode, r.stdout


def perf(a, scheme, cc, cert, mode_args, profile, extra=(), bindir=None, env=None):
    perf_bin = os.path.join(bindir or a.bin, "rgpu-transport-perf")
    srv = [perf_bin, "--server", "%s://10.77.0.2:%d" % (scheme, PORT)]
    cli = [perf_bin, "--client", "%s://10.77.0.2:%d" % (scheme, PORT), "--json"]
    if scheme == "quic":
        srv += ["--cert", cert + "/cert.pem", "--key", cert + "/key.pem"]
        cli += ["--ca", cert + "/cert.pem", "--server-name", "localhost"]
    if cc == "nocap":  # the default controller without the probe cap (issue 21's "before")
        srv += ["--max-pto-ms", "-1"]
        cli += ["--max-pto-ms", "-1"]
    elif cc and cc != "default":
        srv += ["--cc", cc]
        cli += ["--cc", cc]
    rc, out = netem(a, profile, srv, cli + list(mode_args), extra,
                    ("udp:%d" if scheme == "quic" else "tcp:%d") % PORT, timeout=6 * a.seconds + 40,
                    env=env)
    res = {}
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            res[j["test"]] = j
    if rc != 0 and not res:
        print("  %s %s %s failed (%d): %s" % (profile, scheme, " ".join(mode_args), rc,
                                             out.strip()[-300:]), file=sys.stderr)
    return res


def make_cert(a, cert):
    """rgpu-server --gen-cert, or certtool where the server is not built."""
    srv = os.path.join(a.bin, "rgpu-server")
    if os.path.exists(srv):
        subprocess.run([srv, "--gen-cert", cert], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return
    tmpl = os.path.join(cert, "tmpl")
    with open(tmpl, "w") as f:
        f.write('cn = "rgpu"\ndns_name = "localhost"\nip_address = "10.77.0.2"\n'
                'ip_address = "127.0.0.1"\ntls_www_server\nsigning_key\nexpiration_days = 30\n')
    subprocess.run(["certtool", "--generate-privkey", "--key-type=ecdsa", "--curve=secp256r1",
                    "--outfile", cert + "/key.pem"], check=True, capture_output=True)
    subprocess.run(["certtool", "--generate-self-signed", "--load-privkey", cert + "/key.pem",
                    "--template", tmpl, "--outfile", cert + "/cert.pem"], check=True,
                   capture_output=True)


def tcp_cc_of_client_ns(a):
    rc, out = netem(a, "none", [],
                    ["cat", "/proc/sys/net/ipv4/tcp_congestion_control"])
    return out.strip().splitlines()[-1] if rc == 0 and out.strip() else "?"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin", default=os.path.join(here, "..", "build", "bin"))
    ap.add_argument("--profiles", default="wifi-bad,cellular,edge-worst")
    ap.add_argument("--quic-cc", default="default",
                    help="comma list: default (the transport's own choice), cubic, reno, bbr, "
                    "bbr2, nocap (default without the probe cap)")
    ap.add_argument("--tcp-cc", default="", help="TCP_CONGESTION for tcp (default: the kernel's)")
    ap.add_argument("--seconds", type=float, default=8.0, help="bulk size = this x link rate")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--pings", type=int, default=200)
    ap.add_argument("--outage", default="", help="T:D, adds an outage ping run per transport")
    ap.add_argument("--outage-pings", type=int, default=0,
                    help="pings in the outage run (default: enough to outlast it)")
    ap.add_argument("--tests", default="up,down,ping", help="subset of up,down,ping")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--before-bin", help="also run quic with the rgpu-transport-perf in this "
                    "directory (an older build), as 'quic before'")
    ap.add_argument("--before-env", action="append", default=[], metavar="VAR=VALUE",
                    help="also run quic (default controller) with these variables set at both "
                    "ends, as 'quic before' (e.g. RGPU_QUIC_MAX_ACK_DELAY_MS=25); repeatable")
    ap.add_argument("--md")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a cell has no figure (for the smoke test)")
    a = ap.parse_args(argv)
    tests = a.tests.split(",")
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        print("quic_vs_tcp: needs root and /dev/net/tun (rgpu-netem); skipped", file=sys.stderr)
        return 77
    work = tempfile.mkdtemp(prefix="rgpu-qvt-")
    cert = os.path.join(work, "cert")
    os.mkdir(cert)
    make_cert(a, cert)
    host_cc = a.tcp_cc or tcp_cc_of_client_ns(a)
    variants = [("tcp", a.tcp_cc or "", None, None)] + \
        [("quic", c, None, None) for c in a.quic_cc.split(",") if c]
    if a.before_bin:
        variants.append(("quic", "default", a.before_bin, None))
    if a.before_env:
        variants.append(("quic", "default", None, dict(kv.split("=", 1) for kv in a.before_env)))
    rows = []
    try:
        for prof in a.profiles.split(","):
            rate = PROFILE_RATE.get(prof, 0)
            nbytes = int((rate or 1000) * 1e6 / 8 * a.seconds)
            for scheme, cc, bindir, env in variants:
                acc = {}
                for rep in range(a.repeat):
                    print("[%s] %s %s run %d" % (prof, scheme, cc or host_cc, rep + 1),
                          file=sys.stderr, flush=True)
                    for mode, key in (("bulk", "up"), ("down", "down")):
                        if key not in tests:
                            continue
                        r = perf(a, scheme, cc, cert, ["--mode", mode, "--bytes", str(nbytes)], prof,
                                 bindir=bindir, env=env)
                        if "quic_info" in r:
                            acc.setdefault("payload", []).append(r["quic_info"]["max_udp_payload"])
                        if mode in r:
                            acc.setdefault(key, []).append(r[mode]["bytes"] * 8 / r[mode]["seconds"] / 1e6)
                    if "ping" in tests:
                        r = perf(a, scheme, cc, cert, ["--mode", "ping", "-n", str(a.pings)], prof,
                                 bindir=bindir, env=env)
                        if "ping" in r:
                            acc.setdefault("p50", []).append(r["ping"]["median_us"] / 1000)
                            acc.setdefault("p99", []).append(r["ping"]["p99_us"] / 1000)
                    if a.outage:
                        t, d = (float(x) for x in a.outage.split(":"))
                        # Enough pings to run 3 s past the outage's end.
                        n = a.outage_pings or int((t + d + 3) * 1000 / PROFILE_RTT_MS.get(prof, 50))
                        r = perf(a, scheme, cc, cert, ["--mode", "ping", "-n", str(n)], prof,
                                 ["--outage", a.outage], bindir=bindir, env=env)
                        if "ping" in r and "max_us" in r["ping"]:
                            acc.setdefault("outage", []).append(r["ping"]["max_us"] / 1e6 - d)
                        if "quic_info" in r:
                            acc.setdefault("capped", []).append(r["quic_info"]["capped_probes"])
                    for r in (perf(a, scheme, cc, cert, ["--mode", "ping", "-n", "3"], prof,
                                   bindir=bindir, env=env),) if scheme == "quic" and not bindir and \
                            "cc_used" not in acc else ():
                        if "quic_info" in r:
                            acc["cc_used"] = r["quic_info"]["cc"]
                label = (cc or host_cc) if scheme == "tcp" else acc.get("cc_used", cc)
                if bindir:
                    label = "before (cubic)"
                elif env:
                    label += " (before: %s)" % " ".join(a.before_env)
                elif scheme == "quic" and cc == "default":
                    label += " (default)"
                elif cc == "nocap":
                    label += " (no probe cap)"
                rows.append((prof, rate, scheme, label, acc))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def m(v, fmt):
        if not v:
            return "n/a"
        s = fmt % statistics.median(v)
        return s + (" (%s-%s)" % (fmt % min(v), fmt % max(v)) if len(v) > 1 else "")

    def frac(v, rate):
        return "%.0f%%" % (100 * statistics.median(v) / rate) if v and rate else "n/a"

    hdr = ["profile", "transport", "cc", "up Mbit/s", "up/link", "down Mbit/s", "down/link",
           "ping p50 ms", "ping p99 ms", "payload B"] + (["outage cost s"] if a.outage else [])
    md = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for prof, rate, scheme, cc, acc in rows:
        cells = [prof, scheme, cc, m(acc.get("up"), "%.2f"), frac(acc.get("up"), rate),
                 m(acc.get("down"), "%.2f"), frac(acc.get("down"), rate),
                 m(acc.get("p50"), "%.1f"), m(acc.get("p99"), "%.1f"),
                 m(acc.get("payload"), "%d") if scheme == "quic" else "-"]
        if a.outage:
            cells.append(m(acc.get("outage"), "%.2f") +
                         (" (%d capped)" % max(acc["capped"]) if acc.get("capped") else ""))
        md.append("| " + " | ".join(cells) + " |")
    note = ("rgpu-netem profiles, rgpu-transport-perf, bulk = %.0f s of link rate, %s"
            "%d run(s) per cell (median, min-max); host TCP congestion control: %s%s" %
            (a.seconds, "%d pings, " % a.pings if "ping" in tests else "", a.repeat, host_cc,
             "; outage %s (cost = longest call minus the outage)" % a.outage if a.outage else ""))
    print("\n".join(md) + "\n\n" + note)
    if a.md:
        with open(a.md, "w") as f:
            f.write("\n".join(md) + "\n\n" + note + "\n")
    want = [k for k in ("up", "down") if k in tests] + (["p50"] if "ping" in tests else []) + \
        (["outage"] if a.outage else [])
    missing = any(not acc.get(k) for _, _, _, _, acc in rows for k in want)
    return 1 if a.strict and missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
