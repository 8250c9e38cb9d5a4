"""`engine feed` with real-format sources: every tick reaches a ring consumer, in order."""
import os
import subprocess
import time

import numpy as np


from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.data import SPOT
from tests.helpers.feedutil import cli, consume_ring, read_all

FIELDS = ("ts_event", "instrument", "kind", "side", "price", "size", "bid_px", "bid_sz", "ask_px", "ask_sz")


def _consume(name, proc, timeout=120):
    return consume_ring(name, proc, timeout)[0]


def _feed(source, ring, *extra):
    return subprocess.Popen(engine_cmd("feed", source, "--ring", ring, "--wait-consumers", "1", *extra),
                            cwd=ROOT, env=engine_env(), stderr=subprocess.PIPE, text=True)


def test_itch_file_through_the_feed_process(tmp_path, shm_name):
    f = tmp_path / "d.itch"
    assert cli("convert", "synthetic://?instruments=2&count=20000&seed=9", "--out", str(f), "--quiet").returncode == 0
    uri = f"itch:{f}?date=2023-11-14"
    want, _ = read_all(uri)
    proc = _feed(uri, shm_name, "--max")
    got = _consume(shm_name, proc)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert len(got) == len(want)
    assert np.array_equal(got["seq"], np.arange(len(want)))
    for k in FIELDS:
        assert np.array_equal(got[k], want[k]), k
    assert f"published {len(want)} ticks" in err


def test_file_pace_follows_recorded_receive_times(tmp_path, shm_name):
    """--speed replays at the recorded pace (here 1000x): gaps between ticks shrink by the factor,
    never below it (a replay that runs early would be wrong; later is only scheduling noise)."""
    # (level ticks, or bookTicker quotes, would crowd the first 400 into a few ms)
    uri = f"binance:{SPOT}?depth=0&book_ticker=check"
    want, _ = read_all(uri)
    n = 400
    proc = _feed(uri, shm_name, "--speed", "1000", "--count", str(n))
    got = _consume(shm_name, proc)
    proc.communicate(timeout=30)
    assert len(got) == n
    rec = (want["ts_recv"][:n] - want["ts_recv"][0]) / 1000.0   # recorded offsets, scaled
    live = got["ts_recv"] - got["ts_recv"][0]                  # publish times (CLOCK_MONOTONIC)
    assert rec[-1] > 5e6  # the run spans milliseconds: flat out would take ~0.1 ms
    # the schedule is anchored just before tick 0 goes out, so tick 0 may be late by up to the
    # first call's overhead (allowed: 1 ms); no tick is published before its scaled time
    assert (live >= rec - 1e6).all()


def test_a_live_batch_is_published_in_one_call_with_its_latencies(shm_name):
    """publish_live (a live source's read callback publishes through it, feeds/process.py Put):
    every tick in the ring as given but for ts_recv moved from the wall clock to CLOCK_MONOTONIC,
    the feed latency of the ticks with an event time, and one frame-to-tick time a tick."""
    from engine import latency, shm
    from engine.tickring import POLL_TICK, TickConsumer, TickRing, poll
    from feeds.core.publisher import publish_live
    ring = TickRing(shm_name, 1 << 6)
    c = TickConsumer(shm_name, start="oldest")
    try:
        offset = 1_000_000_000_000
        now = time.monotonic_ns()
        ticks = np.zeros((5, 8), np.int64)
        ticks[:, 1] = [0, now + offset - 7_000, now + offset - 7_000, 0, now + offset - 7_000]  # ts_event (wall)
        ticks[:, 2] = now + offset - 3_000  # ts_recv (wall)
        ticks[:, 4] = np.arange(5) + 100
        want = ticks.copy()
        feed, f2t = (np.zeros((1, latency.COUNTS_LEN), np.int64) for _ in range(2))
        assert publish_live(ring.hdr, ring.data, ring.mask, ticks, feed, f2t, offset) == 5
        got = []
        for _ in range(5):
            assert poll(c.hdr, c.data, c.mask, c.slot_base, c.out) == POLL_TICK
            got.append(c.out.copy())
        got = np.array(got)
        assert (got[:, 2] == now - 3_000).all() and (got[:, 4] == want[:, 4]).all() and (got[:, 1] == want[:, 1]).all()
        assert feed.sum() == 3 and f2t.sum() == 5
        assert latency.to_hdrh(feed[0]).get_value_at_percentile(50) in range(3_900, 4_100)  # ts_recv - ts_event
        assert ring.hdr[shm.H_HEARTBEAT_NS] >= now
    finally:
        c.close()
        ring.unlink()


def test_wait_for_consumers_gives_up_after_its_timeout_or_never(shm_name):
    """--wait-timeout: past it, one line naming the ring, exit 2, no ring left behind; 0 waits as long
    as it takes (what `engine run` gives its feeds: a first compile on a busy machine outlasted the
    old fixed 60 s, and the feed gave up on an engine that was still starting)."""
    proc = _feed("synthetic://?count=500&seed=3", shm_name, "--wait-timeout", "0.5")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    lines = [x for x in err.splitlines() if x.startswith("engine: error")]
    assert lines == [f"engine: error: no consumer attached to /dev/shm/{shm_name} within 0.5 s"], err
    assert "Traceback" not in err and not os.path.exists(f"/dev/shm/{shm_name}")
    proc = _feed("synthetic://?count=500&seed=3", shm_name, "--wait-timeout", "0")
    try:
        t0 = time.monotonic()
        while not os.path.exists(f"/dev/shm/{shm_name}"):
            assert proc.poll() is None and time.monotonic() - t0 < 120, proc.stderr.read()
            time.sleep(0.05)
        time.sleep(1.5)  # (past what a 0 read as "no time at all" would allow)
        assert proc.poll() is None
        got = _consume(shm_name, proc)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert len(got) == 500 and np.array_equal(got["seq"], np.arange(500))
