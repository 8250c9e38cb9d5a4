"""An engine command (`engine feed SOURCE --ring NAME` by default) in a process of its own, watched from
outside as an operator would: its memory, descriptors and threads read from /proc, its stderr kept,
SIGTERM timed, its closing counters parsed."""
import os
import signal
import subprocess
import tempfile
import time

from tests.conftest import ROOT, engine_cmd, engine_env


class FeedProc:
    def __init__(self, *args, ring=None):
        argv = args if ring is None else ("feed", *args, "--ring", ring)
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(engine_cmd(*argv), cwd=ROOT, env=engine_env(), stdout=subprocess.DEVNULL,
                                     stderr=self._err)
        self.peak_mb = 0.0
        self.samples = []  # (monotonic s, rss MB, fds, threads)
        self.stop_s = None
        self._text = None  # stderr, kept when the process is done with

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._text = self.stderr
        self._err.close()

    def sample(self):
        """(rss MB, open fds, threads) now, kept in samples; None once it has exited."""
        try:
            status = dict(ln.split(":", 1) for ln in open(f"/proc/{self.proc.pid}/status"))
            fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except (OSError, ValueError):
            return None
        if status.get("State", "").strip().startswith("Z") or "VmRSS" not in status:  # (exiting)
            return None
        s = (int(status["VmRSS"].split()[0]) / 1024, fds, int(status["Threads"]))
        self.samples.append((time.monotonic(), *s))
        self.peak_mb = max(self.peak_mb, s[0])
        return s

    def rss_before(self, t):
        """The RSS (MB) of the last sample taken before monotonic time t."""
        before = [s[1] for s in self.samples if s[0] <= t]
        assert before, "no sample before that time"
        return before[-1]

    def rss_mb(self):
        s = self.sample()
        return s[0] if s else 0.0

    def wait(self, cond, timeout=120.0, what="the condition", every=0.02):
        """Sample until cond() is true; AssertionError when the process ends first or at timeout."""
        deadline = time.monotonic() + timeout
        while not cond():
            self.sample()
            if self.proc.poll() is not None:
                raise AssertionError(f"the engine exited ({self.proc.returncode}) before {what}:\n"
                                     f"{self.stderr[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:g} s:\n{self.stderr[-3000:]}")
            time.sleep(every)

    def wait_exit(self, timeout=120.0):
        """Sample until it exits by itself: its return code."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.sample()
            assert time.monotonic() < deadline, f"still running after {timeout:g} s:\n{self.stderr[-3000:]}"
            time.sleep(0.02)
        return self.proc.returncode

    def stop(self, timeout=60.0):
        """SIGTERM, then wait: its return code (the seconds it took are stop_s)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.stop_s = time.monotonic() - t0
        return rc

    @property
    def stderr(self):
        if self._text is not None:
            return self._text
        self._err.seek(0)
        return self._err.read().decode(errors="replace")

    def said(self, text):
        return text in self.stderr

    def counters(self):
        """The feed's closing counters (`[feed] k=v ...`, zeros left out there: 0 here)."""
        from collections import defaultdict
        out = defaultdict(int)
        for ln in self.stderr.splitlines():
            if ln.startswith("[feed] ") and "=" in ln and " -> " not in ln:
                for kv in ln[7:].split():
                    k, _, v = kv.partition("=")
                    try:
                        out[k] = float(v) if "." in v else int(v)
                    except ValueError:
                        pass
        return out
