#!/usr/bin/env python3
"""Resumable sessions end to end (issue 9), without netem.

  resume_test.py BUILD/bin PROGRAM [--transport tcp|quic|tls|all]

A softgpu rgpu-server, and between it and the client a proxy this script
can cut: TCP (tcp://, tls://) connections are reset on both sides, QUIC's
UDP datagrams are dropped until the client's QUIC idle timeout (1.5 s here)
ends its connection.  Per transport:

  1. two cuts in the middle of a run of PROGRAM (resume_loop.cu: copies and
     kernels, every result checked): the program must print PASS and exit 0,
     the client must log two resumes and the server two resume events;
  2. an outage longer than the server's grace period (--grace-s 2, link
     refused for 5 s): the program must fail with a CUDA error, not hang
     and not be killed by a signal, and the server must have freed the
     session (grace-expired).

Prints one summary line per case with the measured figures.  Exit 0 when all
pass.
"""
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time


class TcpProxy:
    """Forwards 127.0.0.1:port -> upstream; cut() resets every connection;
    while blocked, new connections are closed at once."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.pairs = []
        self.blocked_until = 0.0
        self.lock = threading.Lock()
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            if time.time() < self.blocked_until:
                self._reset(c)
                continue
            try:
                u = socket.create_connection(self.upstream)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.pairs.append((c, u))
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()

    @staticmethod
    def _reset(s):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        except OSError:
            pass

    def _pump(self, a, b):
        socks = [a, b]
        try:
            while True:
                r, _, _ = select.select(socks, [], [], 1.0)
                for s in r:
                    d = s.recv(1 << 16)
                    if not d:
                        raise OSError("eof")
                    (b if s is a else a).sendall(d)
        except (OSError, ValueError):
            pass
        finally:
            self._reset(a)
            self._reset(b)

    def cut(self, block_s=0.0):
        self.blocked_until = time.time() + block_s
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for a, b in pairs:
            self._reset(a)
            self._reset(b)
        self.cuts += 1


class UdpProxy:
    """UDP host:port -> upstream, one upstream socket per client address;
    cut(d) drops every datagram for d seconds.  direct_ports: also forward
    host:P -> 127.0.0.1:P for each P (a session's own port, rgpu-server
    --quic-direct LO-HI), so that a cut cuts the direct path too."""

    def __init__(self, upstream, host="127.0.0.1", direct_ports=()):
        self.fronts = {}  # front socket -> upstream address
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind((host, 0))
        self.port = self.s.getsockname()[1]
        self.fronts[self.s] = upstream
        for p in direct_ports:
            f = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            f.bind((host, p))
            self.fronts[f] = ("127.0.0.1", p)
        self.map = {}
        self.rev = {}
        self.drop_until = 0.0
        self.cuts = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            socks = list(self.fronts.keys()) + list(self.rev.keys())
            r, _, _ = select.select(socks, [], [], 0.5)
            for sk in r:
                try:
                    d, addr = sk.recvfrom(65536)
                except OSError:
                    continue
                if time.time() < self.drop_until:
                    continue
                if sk in self.fronts:
                    u = self.map.get((sk, addr))
                    if u is None:
                        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                        u.connect(self.fronts[sk])
                        self.map[(sk, addr)] = u
                        self.rev[u] = (sk, addr)
                    u.send(d)
                else:
                    front, addr = self.rev[sk]
                    front.sendto(d, addr)

    def cut(self, block_s):
        self.drop_until = time.time() + block_s
        self.cuts += 1


def start_server(bindir, scheme, extra, workdir):
    args = [os.path.join(bindir, "rgpu-server"), "--listen", "%s://127.0.0.1:0" % scheme,
            "--device", "softgpu"] + extra
    env = dict(os.environ)
    if scheme in ("tls", "quic"):
        subprocess.run([os.path.join(bindir, "rgpu-server"), "--gen-cert", workdir,
                        "--cert-names", PROXY_HOST], check=True, capture_output=True)
        args += ["--cert", os.path.join(workdir, "cert.pem"), "--key", os.path.join(workdir, "key.pem")]
    err = open(os.path.join(workdir, "server.err"), "w+")
    p = subprocess.Popen(args, stderr=err, stdout=subprocess.DEVNULL, env=env)
    for _ in range(100):
        err.flush()
        text = open(err.name).read()
        m = re.search(r"listening on \S+://127\.0\.0\.1:(\d+)", text)
        if m:
            return p, int(m.group(1)), err.name
        if p.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError("server did not start:\n" + open(err.name).read())


def stop_server(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


# quic-direct: the proxy's address, so that a session's own port (the same
# number on both addresses) goes through it too.
PROXY_HOST = "127.0.0.2"


def free_udp_ports(n):
    """n consecutive UDP port numbers free on both 127.0.0.1 and PROXY_HOST."""
    for _ in range(50):
        base = 20000 + int.from_bytes(os.urandom(2), "little") % 30000
        socks = []
        try:
            for p in range(base, base + n):
                for h in ("127.0.0.1", PROXY_HOST):
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    socks.append(s)
                    s.bind((h, p))
            return list(range(base, base + n))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free UDP port range")


def run_case(bindir, program, scheme, cuts, block_s, grace_s, expect_ok, iters, workdir,
             pause_ms=100, min_s=0.0):
    # quic: the relay only (--quic-direct off), a NAT forwarding the listener's
    # port alone; quic-direct: sessions move to their worker's own port, which
    # the proxy forwards (and cuts) too.
    direct = scheme == "quic-direct"
    if direct:
        scheme = "quic"
        ports = free_udp_ports(8)
        extra = ["--quic-direct", "%d-%d" % (ports[0], ports[-1])]
    else:
        ports = []
        extra = ["--quic-direct", "off"] if scheme == "quic" else []
    srv, port, errlog = start_server(bindir, scheme, ["--grace-s", str(grace_s)] + extra, workdir)
    try:
        host = PROXY_HOST if direct else "127.0.0.1"
        proxy = (UdpProxy(("127.0.0.1", port), host, ports) if scheme == "quic"
                 else TcpProxy(("127.0.0.1", port)))
        env = dict(os.environ, RGPU_SERVER="%s://%s:%d" % (scheme, host, proxy.port),
                   RGPU_LOG="warn", RGPU_RECONNECT_S="20")
        if scheme in ("tls", "quic"):
            env["RGPU_CA"] = os.path.join(workdir, "cert.pem")
        if scheme == "quic":
            env["RGPU_IDLE_TIMEOUT_MS"] = "1500"
        t0 = time.time()
        cp = subprocess.Popen([os.path.join(bindir, "rgpu"), "run", "--server", env["RGPU_SERVER"],
                               "--", program, str(iters), str(pause_ms), str(min_s)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        for at in cuts:
            while time.time() - t0 < at and cp.poll() is None:
                time.sleep(0.02)
            if cp.poll() is None:
                # QUIC: drop long enough for the client's idle timeout.
                proxy.cut(block_s if block_s else (2.0 if scheme == "quic" else 0.0))
        try:
            out, _ = cp.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            cp.kill()
            out, _ = cp.communicate()
            return False, "client hung (killed after 90 s)\n" + out
        wall = time.time() - t0
        time.sleep(0.3)
        slog = open(errlog).read()
        resumes = len(re.findall(r"event=resume ", slog))
        moves = len(re.findall(r"event=quic-direct ", slog))
        client_resumes = len(re.findall(r"resumed session", out))
        resent = sum(int(x) for x in re.findall(r"re-sent (\d+) bytes", out)[-1:] or [0])
        replayed = sum(int(x) for x in re.findall(r"(\d+) bytes replayed", out)[-1:] or [0])
        summary = ("%s: cuts=%d wall=%.1fs exit=%d client_resumes=%d server_resumes=%d "
                   "resent_bytes=%d replayed_bytes=%d direct_moves=%d"
                   % ("quic-direct" if direct else scheme, proxy.cuts, wall, cp.returncode,
                      client_resumes, resumes, resent, replayed, moves))
        if expect_ok:
            # Direct: the first move, then one after each resume (which comes
            # through the listener's relay).
            ok = (cp.returncode == 0 and "PASS resume_loop" in out and client_resumes == len(cuts)
                  and resumes == len(cuts) and moves == (1 + len(cuts) if direct else 0))
        else:
            expired = "event=grace-expired" in slog
            summary += " grace_expired=%d" % expired
            ok = (cp.returncode == 1 and "FAIL resume_loop" in out and expired and
                  "PASS" not in out)
        return ok, summary + ("" if ok else "\n--- client ---\n" + out + "\n--- server ---\n" + slog)
    finally:
        stop_server(srv)


def drain_case(bindir, program, workdir):
    """SIGTERM with a session running: new sessions are refused at once, the
    running one is told SHUTDOWN after --drain-s 2, and the server exits 0."""
    srv, port, errlog = start_server(bindir, "tcp", ["--drain-s", "2"], workdir)
    uri = "tcp://127.0.0.1:%d" % port
    env = dict(os.environ, RGPU_SERVER=uri, RGPU_LOG="warn")
    cp = subprocess.Popen([os.path.join(bindir, "rgpu"), "run", "--server", uri, "--", program,
                           "200", "50"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    time.sleep(1.0)
    t0 = time.time()
    srv.send_signal(15)
    time.sleep(0.3)
    info = subprocess.run([os.path.join(bindir, "rgpu"), "info", "--server", uri], env=env,
                          capture_output=True, text=True, timeout=30)
    refused = info.returncode != 0 and "shutting down" in (info.stdout + info.stderr)
    try:
        out, _ = cp.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        cp.kill()
        out, _ = cp.communicate()
        out = "client hung\n" + out
    t_client = time.time() - t0
    try:
        rc = srv.wait(15)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = -999
    t_server = time.time() - t0
    slog = open(errlog).read()
    ok = (refused and cp.returncode == 1 and "shutting down" in out and "FAIL resume_loop" in out
          and rc == 0 and 1.5 < t_client < 10 and "event=shutdown" in slog)
    summary = ("drain: new session refused=%d client_error_after=%.1fs server_exit=%d after %.1fs"
               % (refused, t_client, rc, t_server))
    return ok, summary + ("" if ok else "\n--- client ---\n" + out + "\n--- info ---\n" +
                          info.stdout + info.stderr + "\n--- server ---\n" + slog)


def main():
    bindir, program = sys.argv[1], sys.argv[2]
    if "--drain" in sys.argv:
        with tempfile.TemporaryDirectory() as wd:
            ok, s = drain_case(bindir, program, wd)
        print(("ok   " if ok else "FAIL ") + s, flush=True)
        return 0 if ok else 1
    transports = ["tcp", "quic", "quic-direct"]
    if "--transport" in sys.argv:
        t = sys.argv[sys.argv.index("--transport") + 1]
        transports = ["tcp", "tls", "quic", "quic-direct"] if t == "all" else [t]
    failed = 0
    for scheme in transports:
        with tempfile.TemporaryDirectory() as wd:
            # A QUIC cut lasts 2 s plus the idle timeout: space the cuts out.
            cuts = [1.0, 5.5] if scheme.startswith("quic") else [1.0, 2.5]
            ok, s = run_case(bindir, program, scheme, cuts=cuts, block_s=0, grace_s=60,
                             expect_ok=True, iters=20, workdir=wd, pause_ms=5,
                             min_s=cuts[-1] + 2.5)
            print(("ok   " if ok else "FAIL ") + "two cuts, " + s, flush=True)
            failed += not ok
        with tempfile.TemporaryDirectory() as wd:
            ok, s = run_case(bindir, program, scheme, cuts=[1.0], block_s=5.0, grace_s=2,
                             expect_ok=False, iters=60, workdir=wd)
            print(("ok   " if ok else "FAIL ") + "beyond grace, " + s, flush=True)
            failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
