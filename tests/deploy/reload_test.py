#!/usr/bin/env python3
"""SIGHUP reloads tokens and certificates without dropping sessions (issue 20).

  reload_test.py BUILD/bin E2E_DIR [tls|quic]

A softgpu rgpu-server on tls:// (or quic://) with --token-file and --cert/--key, its
stderr a file that JOURNAL_STREAM names (as systemd does for the journal), so
its log lines carry syslog priorities.  While resume_loop (copies and
kernels, every result checked) runs a session:

  1. the token file is emptied and SIGHUP sent: the reload fails, is logged
     at error priority ("<3>"), and the old token still opens sessions;
  2. the token file and the certificate/key are replaced and SIGHUP sent:
     a new client with the old token is refused, one that pins the old
     certificate is refused, one with the new token and certificate runs
     device_query;
  3. the running session goes on and resume_loop prints PASS.

Prints one line with the measured times.  Exit 0 when all pass.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def fail(msg, log=None):
    print("FAIL reload_test: " + msg)
    if log:
        print("--- server log ---\n" + open(log).read())
    sys.exit(1)


def wait_for(path, pattern, count=1, timeout=10.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if len(re.findall(pattern, open(path).read(), re.M)) >= count:
            return True
        time.sleep(0.05)
    return False


def client(bindir, uri, program, token, ca, args=()):
    env = dict(os.environ, RGPU_TOKEN=token, RGPU_CA=ca, RGPU_LOG="warn")
    env.pop("JOURNAL_STREAM", None)
    return subprocess.run([os.path.join(bindir, "rgpu"), "run", "--server", uri, "--", program]
                          + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=60)


def main():
    bindir, e2e = sys.argv[1], sys.argv[2]
    scheme = sys.argv[3] if len(sys.argv) > 3 else "tls"
    server_bin = os.path.join(bindir, "rgpu-server")
    work = tempfile.mkdtemp(prefix="rgpu-reload-")
    srv = loop = None
    try:
        for d in ("c1", "c2", "live"):
            os.mkdir(os.path.join(work, d))
        for d in ("c1", "c2"):
            subprocess.run([server_bin, "--gen-cert", os.path.join(work, d)], check=True,
                           capture_output=True)
        live = os.path.join(work, "live")
        for f in ("cert.pem", "key.pem"):
            shutil.copy(os.path.join(work, "c1", f), os.path.join(live, f))
        token = os.path.join(work, "token")
        with open(token, "w") as f:
            f.write("token-one\n")
        log = os.path.join(work, "server.err")
        errf = open(log, "w")
        st = os.fstat(errf.fileno())
        env = dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
        srv = subprocess.Popen([server_bin, "--listen", scheme + "://127.0.0.1:0", "--device", "softgpu",
                                "--token-file", token, "--cert", os.path.join(live, "cert.pem"),
                                "--key", os.path.join(live, "key.pem"), "--image-cache", "off"],
                               stdout=subprocess.DEVNULL, stderr=errf, env=env)
        if not wait_for(log, r"listening on %s://127\.0\.0\.1:\d+" % scheme):
            fail("the server did not start", log)
        port = re.search(r"listening on %s://127\.0\.0\.1:(\d+)" % scheme, open(log).read()).group(1)
        uri = "%s://127.0.0.1:%s" % (scheme, port)
        c1 = os.path.join(work, "c1", "cert.pem")
        c2 = os.path.join(work, "c2", "cert.pem")

        # A session that lives across both reloads (at least 5 s).
        lenv = dict(os.environ, RGPU_TOKEN="token-one", RGPU_CA=c1, RGPU_LOG="warn")
        loop = subprocess.Popen([os.path.join(bindir, "rgpu"), "run", "--server", uri, "--",
                                 os.path.join(e2e, "resume_loop"), "20", "100", "5"],
                                env=lenv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        if not wait_for(log, r"event=start", 1):
            fail("the long session did not start", log)
        time.sleep(0.5)

        # 1. A bad file: logged, the old token kept.
        open(token, "w").close()
        srv.send_signal(signal.SIGHUP)
        if not wait_for(log, r"^<3>rgpu-server\[\d+\] error: event=reload-failed what=token"):
            fail("an empty token file was not reported at error priority", log)
        r = client(bindir, uri, os.path.join(e2e, "device_query"), "token-one", c1)
        if "PASS device_query" not in r.stdout:
            fail("after a failed reload the old token no longer works:\n" + r.stdout, log)

        # 2. New token and certificate.
        with open(token + ".new", "w") as f:
            f.write("token-two\n")
        os.rename(token + ".new", token)
        for f in ("cert.pem", "key.pem"):
            shutil.copy(os.path.join(work, "c2", f), os.path.join(live, f + ".new"))
            os.rename(os.path.join(live, f + ".new"), os.path.join(live, f))
        t_hup = time.time()
        srv.send_signal(signal.SIGHUP)
        if not wait_for(log, r"^<6>rgpu-server\[\d+\] info: event=reloaded failures=0"):
            fail("the second reload was not logged as complete", log)
        reload_ms = (time.time() - t_hup) * 1000
        if not re.search(r"^<6>rgpu-server\[\d+\] info: event=reload what=certificate",
                         open(log).read(), re.M):
            fail("no certificate reload line", log)
        r = client(bindir, uri, os.path.join(e2e, "no_server"), "token-one", c2)
        if "authentication failed" not in r.stdout:
            fail("the old token still opened a session:\n" + r.stdout, log)
        r = client(bindir, uri, os.path.join(e2e, "no_server"), "token-two", c1)
        if not re.search(r"certificate verification failed", r.stdout):
            fail("a client pinning the old certificate was not refused:\n" + r.stdout, log)
        r = client(bindir, uri, os.path.join(e2e, "device_query"), "token-two", c2)
        if "PASS device_query" not in r.stdout:
            fail("the new token and certificate did not open a session:\n" + r.stdout, log)

        # 3. The session that was open all along.
        try:
            out, _ = loop.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            loop.kill()
            out, _ = loop.communicate()
        if loop.returncode != 0 or "PASS resume_loop" not in out:
            fail("the session open across the reloads failed (rc %s):\n%s" % (loop.returncode, out),
                 log)
        if re.search(r"event=(disconnected|shutdown|resume)", open(log).read()):
            fail("the long session was disturbed", log)
        print("PASS reload_test (%s): session kept across 2 SIGHUPs, bad token file kept the old one, "
              "old token and old certificate refused after the reload, new ones accepted "
              "(reload logged within %.0f ms)" % (scheme, reload_ms))
        return 0
    finally:
        if loop and loop.poll() is None:
            loop.kill()
        if srv:
            srv.terminate()
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
