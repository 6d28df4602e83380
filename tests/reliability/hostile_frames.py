#!/usr/bin/env python3
"""Hostile-input test (issue 9): sends truncated, oversized, out-of-order,
garbage and slowloris frames to a softgpu rgpu-server over TCP, and checks
that every bad connection gets an error reply or is closed within a bound,
that the server process stays alive, and that a well-behaved client
(`rgpu info`) is still served after each attack.

usage: hostile_frames.py BINDIR   (BINDIR holds rgpu-server and rgpu)
Exit 0 on success; prints one line of figures."""
import os, socket, struct, subprocess, sys, time, random

MAGIC = 0x31504752
HDR = struct.Struct("<IBBHIIQ")  # magic version kind opcode length aux seq = 24 bytes
assert HDR.size == 24

def hdr(version=1, kind=1, opcode=1, length=0, aux=1, seq=1, magic=MAGIC):
    return HDR.pack(magic, version, kind, opcode, length, aux, seq)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def attack(port, data, hold_s=0.0, timeout=10.0):
    """Sends data, then reads until the server closes or replies; returns
    'closed', 'reply' or raises on a hang beyond timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if data:
            s.sendall(data)
        if hold_s:
            time.sleep(hold_s)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        got = b""
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                return "closed"
            if not b:
                return "reply" if got else "closed"
            got += b
        raise RuntimeError("server neither replied nor closed within %.0fs" % timeout)
    finally:
        s.close()

def healthy(bindir, port):
    r = subprocess.run([os.path.join(bindir, "rgpu"), "info", "--server", "tcp://127.0.0.1:%d" % port],
                       capture_output=True, timeout=30)
    return r.returncode == 0

def http(mport, data, timeout=10.0):
    """Sends raw bytes to the metrics port, then half-closes (an incomplete
    request then ends at once instead of at the server's 5 s request
    timeout); returns (status, body) or (0, b"") if the server closed
    without an answer.  Raises on a hang."""
    s = socket.create_connection(("127.0.0.1", mport), timeout=timeout)
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        got = b""
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            got += b
    finally:
        s.close()
    if not got.startswith(b"HTTP/1.1 "):
        return 0, got
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split()[1]), body

def metric(text, name):
    for line in text.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            yield line

def metrics_attacks(mport):
    """Hostile HTTP against --metrics: every request is answered or closed,
    a held-open slow request does not delay a scrape."""
    get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    cases = [
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd", (405,)),
        (b"GET /admin HTTP/1.1\r\n\r\n", (404,)),
        (b"GET /metrics HTTP/9.9\r\n\r\n", (505,)),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", (505, 400)),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", (431, 0)),
        (b"GET /" + b"m" * 5000 + b" HTTP/1.1\r\n\r\n", (414, 400, 0)),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) * 4, (400, 0)),
        (b"GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n", (400,)),
        (b"", (0,)),
    ]
    for data, want in cases:
        code, _ = http(mport, data)
        assert code in want, "metrics answered %d to %r, want %s" % (code, data[:40], want)
    slow = [socket.create_connection(("127.0.0.1", mport)) for _ in range(8)]
    for k, c in enumerate(slow):
        c.sendall(b"GET /metrics HTTP/1.1\r\nHo"[: 5 + k])
    t0 = time.time()
    code, body = http(mport, get)
    dt = time.time() - t0
    for c in slow:
        c.close()
    assert code == 200 and dt < 2.0, "scrape with slow clients open: %d after %.2fs" % (code, dt)
    return len(cases) + len(slow), dt

def main():
    bindir = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
    port = free_port()
    env = dict(os.environ, RGPU_LOG="error")
    args = [os.path.join(bindir, "rgpu-server"), "--listen", "tcp://127.0.0.1:%d" % port, "--device", "softgpu"]
    helptext = subprocess.run([args[0], "--help"], capture_output=True, text=True).stdout
    mport = free_port() if "--metrics" in helptext else 0
    if mport:
        args += ["--metrics", "tcp://127.0.0.1:%d" % mport]
    srv = subprocess.Popen(args, env=env)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
            except OSError:
                time.sleep(0.1)
        assert healthy(bindir, port), "server not healthy before attacks"
        rnd = random.Random(9)
        cases = [
            ("empty", b""),
            ("truncated header", hdr()[:10]),
            ("bad magic", hdr(magic=0xdeadbeef)),
            ("bad version", hdr(version=7)),
            ("bad kind", hdr(kind=9)),
            ("oversized length", hdr(length=0xffffffff)),
            ("truncated payload", hdr(length=1000) + b"x" * 10),
            ("request before HELLO", hdr(opcode=200, length=8, seq=5) + b"\0" * 8),
            ("out-of-order seq", hdr(seq=100) + hdr(seq=3)),
            ("reply kind from client", hdr(kind=2)),
            ("garbage 4K", bytes(rnd.getrandbits(8) for _ in range(4096))),
        ]
        for i in range(20):
            cases.append(("random header %d" % i, hdr(version=1, kind=rnd.choice([1, 2, 3]),
                          opcode=rnd.getrandbits(16), length=rnd.getrandbits(12), aux=rnd.getrandbits(32),
                          seq=rnd.getrandbits(64)) + bytes(rnd.getrandbits(8) for _ in range(rnd.getrandbits(12)))))
        outcomes = {}
        for name, data in cases:
            o = attack(port, data)
            outcomes[o] = outcomes.get(o, 0) + 1
            assert srv.poll() is None, "server died after: " + name
            assert healthy(bindir, port), "server stopped serving after: " + name
        # slowloris: half a header, then silence; another client must still be served meanwhile.
        s = socket.create_connection(("127.0.0.1", port)); s.sendall(hdr()[:12])
        assert healthy(bindir, port), "slowloris connection blocked other clients"
        s.close()
        assert srv.poll() is None
        print("hostile_frames: %d attacks (%s), server alive, healthy client served after each, slowloris did not block"
              % (len(cases), ", ".join("%s=%d" % kv for kv in sorted(outcomes.items()))))
        if mport:
            n, dt = metrics_attacks(mport)
            assert srv.poll() is None, "server died after the metrics attacks"
            assert healthy(bindir, port), "server stopped serving after the metrics attacks"
            code, body = http(mport, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert code == 200
            total = int(next(metric(body, "rgpu_sessions_total")).split()[-1])
            ended = list(metric(body, "rgpu_sessions_ended_total"))
            errs = int(next(metric(body, "rgpu_errors_all")).split()[-1])
            herr = int(next(metric(body, "rgpu_metrics_http_errors_total")).split()[-1])
            # Every connection above was a session (none refused): attacks + healthy checks.
            assert total >= len(cases), "sessions_total %d < %d attacks" % (total, len(cases))
            assert any('reason="bad-frame"' in e for e in ended), ended
            print("hostile_frames: metrics endpoint: %d hostile HTTP requests answered or closed, scrape with 8 slow "
                  "clients open took %.3f s; counted sessions_total=%d errors_all=%d http_errors=%d; ended: %s"
                  % (n, dt, total, errs, herr, " ".join(e.split("{")[1].replace("reason=", "").replace("}", "=")
                                                           .replace('"', "").replace("= ", "=") for e in ended)))
        return 0
    finally:
        srv.terminate()
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()

if __name__ == "__main__":
    sys.exit(main())
