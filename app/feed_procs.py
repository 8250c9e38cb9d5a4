"""The feed processes of `engine run`: each one spawned on its own tick ring (`engine feed`, with
the run's pace flags), waited for until its ring is there, and stopped at the end."""
import os
import subprocess
import sys
import time

from engine import ring_info, shm

from .progress import log


def spawn_feed(cfg, ring_name, uri, run_clock=False):
    cmd = [sys.executable, "-m", "app", "feed", uri, "--ring", ring_name,
           "--capacity", str(cfg.ring_capacity), "--wait-consumers", "1", "--wait-timeout", "0", "--die-with-parent",
           "--crossed-after", f"{cfg.crossed_after:g}"]
    if run_clock:  # one of several files: paced on the clock the run sets in every file's ring
        cmd += ["--run-clock"]
    if cfg.keep_rings:
        cmd += ["--keep"]  # the feed removes its ring on exit unless told to keep it
    if cfg.quiet:
        cmd += ["--quiet"]
    # each feed the run's pace flags it honours (app/source_params.py FLAGS: the run checked them)
    from .source_params import source
    kind = source(uri).kind
    if kind == "synthetic" and "rate=" not in uri:  # (the built-in synthetic source, or a URI without a rate)
        cmd += ["--rate", f"{cfg.rate:g}"]
    if cfg.speed == 0 and kind in ("synthetic", "file"):
        cmd += ["--max"]
    elif kind == "file":
        cmd += ["--speed", f"{cfg.speed:g}"]
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (app/feed_procs.py)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError as e:
        raise RuntimeError(f"cannot start the feed process ({cmd[0]}): {e.strerror}") from None


def first_recv(path):
    """A ring's first tick's receive time (its header, opened as every ring is: checked first)."""
    fd, _ = shm.open_checked(path)
    try:
        return int(shm.read_header_fd(fd, path)[shm.H_FIRST_RECV])
    finally:
        os.close(fd)


class StoppedBeforeStart(Exception):
    """SIGTERM/SIGINT came while the run waited for a feed (a venue's ban, a reply that never
    comes): nothing ran, nothing is left (the run's stop removes what it made)."""


def wait_ring(path, proc, timeout=60.0, stop=None):
    """Until the feed process `proc` has made its ring `path` (RuntimeError when it exits first,
    or after timeout; StoppedBeforeStart when `stop` is set meanwhile)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if stop is not None and stop.is_set():
            raise StoppedBeforeStart(f"stopped while the feed was starting ({path} not made yet): nothing ran")
        if proc.poll() is not None:
            raise RuntimeError(f"feed process exited with status {proc.returncode} before creating {path}")
        if os.path.exists(path):
            try:
                info = ring_info.inspect(path)
                if info["producer_pid"] == proc.pid:
                    return
            except shm.RingError:
                pass
        time.sleep(0.01)
    raise RuntimeError(f"feed process did not create {path} within {timeout:.0f} s")


def say_clock(inp, speed):
    """Files paced on the run's one clock that start far apart: the later ones wait the time
    between them (at --speed), which is said, with what to do instead."""
    if not inp.multi or not speed:
        return
    firsts = {}
    for rn, uri, ordered in zip(inp.ring_names, inp.feed_uris, inp.ordered):
        t = first_recv(shm.ring_path(rn)) if ordered else 0
        if t:
            firsts[uri] = t
    if len(firsts) > 1:
        last = max(firsts, key=firsts.get)
        wait = (firsts[last] - min(firsts.values())) / 1e9 / speed
        if wait > 60:
            log(f"warning: the files start {(firsts[last] - min(firsts.values())) / 3.6e12:,.1f} h apart in their "
                f"receive times: at --speed {speed:g} the run waits {wait / 3600:,.1f} h for {last}'s first tick "
                "(one clock for all the files); --max reads them in the same order without waiting")


def stop_feed(proc):
    try:
        proc.wait(timeout=0.3)  # it has nothing to flush; we remove its ring ourselves
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
