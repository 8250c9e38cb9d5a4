"""A hostile local user: files planted at a ring's name (another user's, a link, writable by
others) are refused on the opened descriptor and never mapped; a running engine whose feed died
does not attach to a forged ring; a paused feed that resumes is back; locks live in a private
directory."""
import os
import signal
import time

import numpy as np
import pytest

from engine import locks, shm
from engine.tickring import TickConsumer, TickRing, publish

from tests.helpers.daemon import Daemon, on_external_feed, wait_ready
from tests.test_daemon import SYN, metrics, sample

ROOT_USER = os.geteuid() == 0
NOBODY = 65534


def _ring(name):
    r = TickRing(name, 1 << 10)
    w = np.zeros(8, np.int64)
    w[4], w[5] = 100, 101
    publish(r.hdr, r.data, r.mask, w)
    return r


def test_our_own_0600_ring_is_mapped(shm_name):
    _ring(shm_name)
    assert os.stat(shm.ring_path(shm_name)).st_mode & 0o777 == 0o600
    TickConsumer(shm_name).close()


@pytest.mark.skipif(not ROOT_USER, reason="chown to another uid needs root")
def test_a_ring_owned_by_another_user_is_refused_unless_trusted(shm_name):
    _ring(shm_name)
    os.chown(shm.ring_path(shm_name), NOBODY, NOBODY)
    with pytest.raises(shm.RingRefused, match=f"owned by uid {NOBODY}, not by this engine's uid 0"):
        TickConsumer(shm_name)
    shm.trust_uid(NOBODY)  # --ring-owner nobody
    try:
        TickConsumer(shm_name).close()
    finally:
        shm.TRUSTED_UIDS.discard(NOBODY)


@pytest.mark.parametrize("mode", [0o644, 0o660, 0o606])
def test_a_ring_others_can_reach_is_refused(shm_name, mode):
    _ring(shm_name)
    os.chmod(shm.ring_path(shm_name), mode)
    with pytest.raises(shm.RingRefused, match=f"mode {mode:04o} lets other users at it"):
        TickConsumer(shm_name)


def test_a_link_at_a_rings_name_is_never_followed(shm_name):
    _ring(shm_name + ".real")
    os.symlink(shm.ring_path(shm_name + ".real"), shm.ring_path(shm_name))
    with pytest.raises(shm.RingRefused, match="symbolic link"):
        TickConsumer(shm_name)


@pytest.mark.skipif(not ROOT_USER, reason="planting another user's file needs root here")
def test_a_planted_file_claiming_pid_1_does_not_block_start_up(shm_name):
    """Another user's file at our ring's name, with a live pid in its header: not believed."""
    r = _ring(shm_name + ".plant")
    r.hdr[shm.H_PID] = 1
    os.rename(shm.ring_path(shm_name + ".plant"), shm.ring_path(shm_name))
    os.chown(shm.ring_path(shm_name), NOBODY, NOBODY)
    note = shm.check_owner(shm.ring_path(shm_name))
    assert note.startswith("replacing ") and f"owned by uid {NOBODY}" in note
    TickRing(shm_name, 1 << 10)  # replaces it
    assert os.stat(shm.ring_path(shm_name)).st_uid == 0


def test_locks_live_in_a_private_directory():
    d = locks.lock_dir()
    st = os.lstat(d)
    assert not d.startswith("/dev/shm") and st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700


@pytest.mark.skipif(not ROOT_USER, reason="planting another user's ring needs root here")
def test_an_engine_whose_feed_died_does_not_attach_to_a_forged_ring(tmp_path, shm_name, default_model):
    ring, feed, d = on_external_feed(tmp_path, shm_name, SYN.format(rate=20000))
    path = shm.ring_path(ring)
    forger = None
    try:
        feed.kill()
        feed.wait()
        wait_ready(d, False, 2.0)
        # another user's ring, right magic, beating: what a local attacker renames into place
        forger = TickRing(ring + ".forged", 1 << 12)
        forger.set_state(shm.STATE_PRODUCING)
        os.chown(shm.ring_path(ring + ".forged"), NOBODY, NOBODY)
        os.rename(shm.ring_path(ring + ".forged"), path)
        t0 = d.status()["counters"]["ticks"]
        end = time.monotonic() + 2.0
        w = np.zeros(8, np.int64)
        while time.monotonic() < end:
            w[2] = time.monotonic_ns()
            w[4], w[5] = 1, 10**12
            for _ in range(200):
                publish(forger.hdr, forger.data, forger.mask, w)
            forger.heartbeat()
            time.sleep(0.005)
        st = d.status()
        assert st["counters"]["ticks"] == t0 and st["reattached"] == 0
        assert d.get("/ready")[0] == 503
        assert sample(metrics(d), "engine_rings_refused") >= 1
        assert f"owned by uid {NOBODY}" in d.log() and "refused" in d.log()
    finally:
        d.stop()
        if feed.poll() is None:
            feed.kill()
        for p in (path, path + ".instruments"):
            if os.path.lexists(p):
                os.unlink(p)


def test_a_paused_feed_that_resumes_is_back(tmp_path, shm_name, default_model):
    ring, feed, d = on_external_feed(tmp_path, shm_name, SYN.format(rate=20000))
    try:
        feed.send_signal(signal.SIGSTOP)
        wait_ready(d, False, 3.0)
        d.wait_for("feed is down", timeout=5)
        feed.send_signal(signal.SIGCONT)
        wait_ready(d, True, 5.0)
        d.wait_for("feed is back", timeout=5)
    finally:
        feed.send_signal(signal.SIGCONT)
        feed.send_signal(signal.SIGTERM)
        feed.wait(10)
        d.stop()


def test_a_loaded_machine_does_not_stop_the_loop(tmp_path, shm_name, default_model):
    """Three busy processes a core beside the engine, from before it starts: starting the control
    plane (zmq keys, HTTP) took 4.9 s here, longer than the loop's 3 s lease, and the loop stopped
    itself at every start. The lease is now renewed from the loop's first tick on."""
    import subprocess
    import sys
    from tests.conftest import strategy_core
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3 * os.cpu_count())]
    d = None
    try:
        d = Daemon(tmp_path, shm_name, "--feed", SYN.format(rate=50000), "--duration", "6", core=strategy_core())
        d.proc.wait(timeout=180)
    finally:
        for b in burners:
            b.kill()
            b.wait()
        out = d.stop() if d is not None else ""
    assert d.proc.returncode == 0, d.log()
    assert "engine run:" in out and "lease" not in d.log().lower(), d.log()


def test_a_metrics_flood_and_deaf_subscribers_never_touch_the_loop(tmp_path, shm_name, default_model):
    """150 keep-alive clients scraping /metrics as fast as they can and 50 zmq subscribers that
    never read, at 50k ticks/s: the loop keeps its lease, no signal is dropped, memory stays
    bounded, and the engine ends normally with its summary."""
    import http.client
    import threading

    import zmq
    from tests.conftest import strategy_core
    d = Daemon(tmp_path, shm_name, "--feed", SYN.format(rate=50000), "--duration", "8", core=strategy_core())
    stop = threading.Event()
    codes = []

    def scraper():
        c = http.client.HTTPConnection(d.http.split(":")[0], int(d.http.split(":")[1]), timeout=10)
        while not stop.is_set():
            try:
                c.request("GET", "/metrics")
                r = c.getresponse()
                r.read()
                codes.append(r.status)
            except OSError:
                c.close()
                time.sleep(0.01)
    try:
        d.wait_for("/metrics /health /ready")
        ctx = zmq.Context()
        subs = []
        for _ in range(50):
            s = d.subscriber(ctx)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.setsockopt(zmq.RCVHWM, 1)
            s.setsockopt(zmq.RCVBUF, 4096)
            s.connect(d.pub)
            subs.append(s)
        rss0 = int(open(f"/proc/{d.proc.pid}/statm").read().split()[1]) * 4096
        threads = [threading.Thread(target=scraper, daemon=True) for _ in range(150)]
        for t in threads:
            t.start()
        time.sleep(5)
        rss1 = int(open(f"/proc/{d.proc.pid}/statm").read().split()[1]) * 4096
        d.proc.wait(timeout=60)
        stop.set()
        for s in subs:
            s.close(0)
        ctx.term()
    finally:
        stop.set()
        out = d.stop()
    assert d.proc.returncode == 0, d.log()
    assert "engine run:" in out and "drops 0" in out, out      # the summary, nothing dropped
    assert "lease" not in d.log().lower()
    # (the flood was real: hundreds of scrapes answered while the loop ran; how many is the machine's
    # speed: 709 in 5 s in a whole-suite run on this 2-core VM beside the other worker, thousands alone)
    # (a flood happened; how big one is, this machine's speed beside the suite's other worker says: 171
    # answered in one whole-suite run)
    assert len(codes) > 100 and set(codes) <= {200, 503}, (len(codes), set(codes))
    assert rss1 - rss0 < 100e6, (rss0, rss1)  # 50 deaf subscribers x 5 s of signals: bounded
