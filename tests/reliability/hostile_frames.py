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

def main():
    bindir = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
    port = free_port()
    env = dict(os.environ, RGPU_LOG="error")
    srv = subprocess.Popen([os.path.join(bindir, "rgpu-server"), "--listen", "tcp://127.0.0.1:%d" % port,
                            "--device", "softgpu"], env=env)
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
        return 0
    finally:
        srv.terminate()
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()

if __name__ == "__main__":
    sys.exit(main())
