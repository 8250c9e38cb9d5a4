"""A real `engine run` daemon for tests: free ports, its own token, stderr to a file."""
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from tests.conftest import ROOT, engine_cmd, engine_env


_PORTS = itertools.count(os.getpid())


def free_tcp_port():
    """A port for an engine to listen on, free now, from below the kernel's ephemeral range (a
    port bind(0) gives is free only until the next bind(0) or connect() takes it: another xdist
    worker's engine got one that way) and from a span of its own per xdist worker."""
    lo = 32768
    with contextlib.suppress(OSError, ValueError):
        lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    w = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    k = int(w[2:]) if w[2:].isdigit() else 0
    span = (lo - 10_000) // 8
    for _ in range(span if span >= 100 else 0):  # (an ephemeral range from below 10800: bind(0) as before)
        port = 10_000 + (k % 8) * span + next(_PORTS) % span
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            return port
    with socket.socket() as s:  # (all taken: as before)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(fn, what, timeout=60):
    """fn()'s first true value, polled until `timeout` s have passed (then AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def external_feed(uri, ring, wait=True):
    """A standalone `engine feed URI --ring RING` process; with `wait`, returns once its ring exists."""
    from engine.shm import ring_path
    proc = subprocess.Popen(engine_cmd("feed", uri, "--ring", ring), cwd=ROOT, env=engine_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while wait and not os.path.exists(ring_path(ring)):
        assert proc.poll() is None, f"engine feed exited ({proc.returncode})"
        assert time.monotonic() < deadline, f"no ring {ring_path(ring)} after 60 s"
        time.sleep(0.05)
    return proc


def wait_ready(d, want, timeout):
    """Seconds until daemon d's /ready says `want` (True: 200); AssertionError after `timeout`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if (d.get("/ready")[0] == 200) == want:
            return time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError(f"/ready did not become {want} within {timeout} s:\n{d.log()}")


def on_external_feed(tmp_path, name, uri):
    """An `engine feed URI` on the ring NAME.ext and a daemon named NAME reading that ring, up
    and ready: (ring, feed process, daemon). Both are stopped if it never gets there."""
    ring = f"{name}.ext"
    feed = external_feed(uri, ring)
    d = Daemon(tmp_path, name, "--ring", ring)
    try:
        d.wait_for("/metrics /health /ready")
        wait_ready(d, True, 30)
    except BaseException:
        d.stop()
        feed.kill()
        feed.wait()
        raise
    return ring, feed, d


class Daemon:
    def __init__(self, tmp_path, name, *extra, core=None, http_port=None, pub_port=None):
        self.name = name
        self.http_port, self.pub_port = http_port or free_tcp_port(), pub_port or free_tcp_port()
        self.http = f"127.0.0.1:{self.http_port}"
        self.pub = f"tcp://127.0.0.1:{self.pub_port}"
        self.token_file = tmp_path / f"{name}.token"
        self.err_path = tmp_path / f"{name}.err"
        self.sig_path = tmp_path / f"{name}.sig"
        self.hlog = tmp_path / f"{name}.hlog"
        # (a metrics token as an operator gives its Prometheus one: readable by a group, not others)
        self.metrics_token_file = tmp_path / f"{name}.metrics-token"
        self.metrics_token_file.write_text(f"mt-{os.urandom(12).hex()}\n")
        os.chmod(self.metrics_token_file, 0o640)
        args = ["run", "--no-rt", "--name", name, "--http", self.http, "--pub", self.pub, "--token-file",
                str(self.token_file), "--signals-out", str(self.sig_path), "--hlog", str(self.hlog),
                "--metrics-token-file", str(self.metrics_token_file), *extra]
        if core is not None:
            args += ["--core", str(core)]
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(engine_cmd(*args), cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE,
                                     stderr=self.err, text=True)

    def log(self):
        return self.err_path.read_text()

    def wait_for(self, text, timeout=120):
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc.poll() is None, f"engine exited ({self.proc.returncode}):\n{self.log()}"
            assert time.monotonic() < deadline, f"never saw {text!r}:\n{self.log()}"
            time.sleep(0.05)

    def get(self, path, token=None, method="GET"):
        """(status, body bytes)"""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request(f"http://{self.http}{path}", method=method, headers=headers,
                                     data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError as e:  # (refused or reset: say whether the engine is still there, and what it said)
            time.sleep(0.2)
            state = "running" if self.proc.poll() is None else f"exited ({self.proc.returncode})"
            raise AssertionError(f"GET {path}: {e}; the engine: {state}:\n{self.log()}") from None

    def pub_key_file(self):
        """The engine's CURVE public key file (written at its start)."""
        from engine.dirs import state_dir
        from app.zpub import key_paths
        return key_paths(self.name, state_dir())[1]

    def pub_key(self):
        from app.zpub import read_public_key
        return read_public_key(self.pub_key_file())

    def subscriber(self, ctx):
        """A SUB socket (not yet connected) that checks this engine's key, as every subscriber must."""
        from app.zpub import subscriber
        return subscriber(ctx, self.pub_key())

    def token(self):
        return self.token_file.read_text().strip()

    def status(self):
        code, body = self.get("/status", self.token())
        assert code == 200, body
        return json.loads(body)

    def stop(self, timeout=10):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out = self.proc.stdout.read()
        self.err.close()
        return out

    def feed_pid(self):
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                except OSError:
                    continue
                if b"feed" in cmd and any(c.endswith(b".ticks") for c in cmd) and str(self.proc.pid).encode() and \
                        int(open(f"/proc/{pid}/stat").read().split()[3]) == self.proc.pid:
                    return int(pid)
        return None


def scrape(d, private=False):
    """({sample name: {frozen labels: value}}, raw body) of a real GET /metrics of daemon d (private:
    /metrics/private, with its token: money, positions and the kill switch too)."""
    from prometheus_client.parser import text_string_to_metric_families
    code, body = d.get("/metrics/private", d.token()) if private else d.get("/metrics")
    assert code == 200, (code, body)
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out, body
