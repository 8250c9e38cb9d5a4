"""binance-live:// against a fake Binance venue on loopback (feeds/binance/venue/: websocket +
REST replaying the real captures, with the venue's faults): a live run's ticks equal `binance:FILE`
of its own recording exactly and the capture's once synced; every fault (drop, close frame,
silence, half-open, missing and duplicated diffs, a stale snapshot, malformed and oversized frames,
429/418, the 24-hour rotation) ends in a resynced book, each gap counted; bad symbols are one line."""
import subprocess
import threading
import time

import numpy as np
import pytest

from engine.records import KIND_GAP, TICK_DTYPE
from feeds.core.uri import FeedError

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.data import SPOT, USDM
from tests.helpers.feedutil import cli, consume_ring, one_line_error, read_all

FIELDS = ("ts_event", "instrument", "kind", "side", "price", "size", "bid_px", "bid_sz", "ask_px", "ask_sz")
LINES = 6000  # capture lines a fault test replays (22 s of the usdm market)
SPEED = 10.0  # its pace: recorded x10 (flat out, the fake's REST waits behind its stream)


def uri(fb, market="spot", **extra):
    q = {"symbols": "BTCUSDT", "ws": fb.ws_url, "rest": fb.rest_url, "idle_s": 60,  # (a safety net: run_live
         # ends a run when the venue has played its capture; idle_s 0.5 ended a loaded CI run before
         # the fault it was testing, the venue stalled for longer than that)
         **({"update": "0ms"} if market == "usdm" else {}), **extra}
    return f"binance-live://{market}?" + "&".join(f"{k}={v}" for k, v in q.items())


def _compiled():
    """The signatures of every numba function a live run calls from Python."""
    from feeds.binance import read as binance_read, scan as binance_scan, pump as ws_pump, symbols
    from feeds.core import feed_latency
    from feeds.transport import ws_client
    fns = (binance_scan.scan_packed, ws_client.deframe, feed_latency.record_feed, feed_latency.record_since,
           binance_read.read, symbols.needs_snapshot, ws_pump.pump)
    return {f.__name__: list(f.signatures) for f in fns}


def run_live(fb, u, direct=True, raw=True):
    """Every tick of a live run in this process until the venue fb has played its capture and the
    source has read nothing more for QUIET_S, its raw lines, and the source
    (direct: published from the read callback, else every batch yielded; "ring": as the feed process
    runs it, the read callback publishing through feeds/process.py Put into a real tick ring, one
    numba call a read (feeds/binance/read.py), and the ticks read back from the ring).
    Nothing is compiled once the source is open (it compiles before it connects: a compile of
    the scanner after is a minute with no frame read, on a cold cache). raw=False: no raw lines
    (the native reader runs only when nothing records them)."""
    from feeds.core.sources import open_source
    src = open_source(u)
    before = _compiled()
    lines, parts = [], []
    if raw:
        src.raw_sink = lambda data: lines.append(bytes(data))
    raw = lines
    src.direct_ticks = 0
    threading.Thread(target=_stop_after_the_venue, args=(fb, src), daemon=True).start()

    def put(t, lat, offset):  # (what the feed process's publish_live does, into a list)
        from feeds.core.feed_latency import record_feed, record_since
        record_feed(lat.counts["feed_latency"], t, offset)
        parts.append(t.copy())
        record_since(lat.counts["frame_to_tick"], t, time.monotonic_ns())
        src.direct_ticks += len(t)
        return len(t)
    if direct == "ring":
        return _run_into_ring(src, raw, before)
    if direct:  # most frames published from the read callback
        src.direct = put
    for b in src.batches():
        parts.append(b.copy())
    assert _compiled() == before
    ticks = np.concatenate(parts).view(TICK_DTYPE).reshape(-1) if parts else np.zeros(0, TICK_DTYPE)
    return ticks, b"".join(raw), src


QUIET_S = 0.5


def _stop_after_the_venue(fb, src):
    """Stop src once fb has sent its last frame and src has read nothing for QUIET_S since (and
    holds no line unread): the end of a run is the venue's, not a pause of a loaded machine's."""
    fb.done.wait()
    last, since = -1, time.monotonic()
    while not src.stopped:
        n = src._frames()
        if n != last or src.active.buf:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > QUIET_S:
            src.stop()
        time.sleep(0.05)


def _run_into_ring(src, raw, before):
    import os

    from engine import shm
    from engine.records import RECORD_WORDS
    from engine.tickring import TickRing
    from feeds.books.crossed import CrossedWatch
    from feeds.process import Put
    ring = TickRing(f"test-binlive-{os.getpid()}", 1 << 18, depth=src.depth)
    try:
        ring.publish_instruments(src.instruments, src.specs)
        put = Put(ring, src, CrossedWatch(1.0), lambda: False)
        src.direct = put
        batched = 0
        for b in src.batches():
            if len(b):
                batched += put.batch(b)
        assert _compiled() == before
        n = int(ring.hdr[shm.H_WRITE])
        assert n == put.produced < len(ring.data) // RECORD_WORDS  # (nothing overwritten)
        src.direct_ticks = n - batched
        ticks = ring.data[:n * RECORD_WORDS].copy().view(TICK_DTYPE).reshape(-1)
    finally:
        ring.unlink()
    assert np.array_equal(ticks["seq"], np.arange(n))
    return ticks, b"".join(raw), src


def replayed(raw, tmp_path, market):
    """binance:FILE of a live run's raw lines."""
    p = tmp_path / f"live.{market}.binance"
    p.write_bytes(raw)
    return read_all(f"binance:{p}?on_error=skip&market={market}")[0]


def same_as_its_recording(got, raw, src, tmp_path, market="spot"):
    """The live ticks are binance:FILE of the lines it recorded, word for word (ts_recv there is the
    line's wall clock: the ring's monotonic receive time plus the offset read at start)."""
    want = replayed(raw, tmp_path, market)
    assert len(got) == len(want) > 0
    for k in FIELDS:
        assert np.array_equal(got[k], want[k]), k
    assert np.array_equal(got["ts_recv"] + src.offset, want["ts_recv"])


def synced_tail_equal(got, want, k):
    """The last k ticks agree (once both books are synced, a live run is the capture's stream); gap
    ticks after the market's end (a silent venue, reconnected) are not the capture's."""
    end = want["ts_event"].max()
    while len(got) and (got["kind"][-1] == KIND_GAP or got["ts_event"][-1] > end):  # (a snapshot's: now)
        got = got[:-1]
    assert len(got) >= k and len(want) >= k
    for f in FIELDS:
        assert np.array_equal(got[f][-k:], want[f][-k:]), f


@pytest.fixture(scope="module")
def capture_prefix(tmp_path_factory):
    """binance:FILE of the capture's first LINES lines, per market (what a fault test's venue plays)."""
    import gzip
    out = {}
    d = tmp_path_factory.mktemp("binlive")
    for market, path in (("spot", SPOT), ("usdm", USDM)):
        with gzip.open(path, "rb") as f:
            lines = f.readlines()[:LINES]  # (all of a shorter capture, as the venue plays it)
        p = d / f"{market}.binance"
        p.write_bytes(b"".join(lines))
        out[market] = read_all(f"binance:{p}?market={market}")[0]
    return out


@pytest.mark.parametrize("direct", ["ring", True, False], ids=["one-call-a-read-into-a-ring", "from-the-read-callback",
                                                              "batches"])
def test_live_run_is_its_recording_and_the_capture_once_synced(direct, tmp_path):
    """At recorded pace x10 the snapshot asked at connect is the capture's own (the venue answers
    when its market reaches it, 27 ms after the first frame at this pace): after the first book,
    the live ticks are the capture's; the same whether they are published from the socket's read
    callback (a feed process) or every batch is yielded (engine record)."""
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(SPOT, market="spot", speed=10.0, max_lines=4000) as fb:
        got, raw, src = run_live(fb, uri(fb), direct=direct)
    same_as_its_recording(got, raw, src, tmp_path)
    assert (src.direct_ticks > len(got) // 2) if direct else src.direct_ticks == 0, (src.direct_ticks, len(got))
    st = src.stats()
    assert st["connects"] == 1 and st["reconnects"] == 0 and st["gaps"] == 0 and st["snapshots"] == 1
    assert st["frames"] == 3999  # every line but the capture's snapshot, which came by REST
    import gzip
    with gzip.open(SPOT, "rb") as f:
        snap = [ln for _, ln in zip(range(20), f) if b'"lastUpdateId"' in ln][0].split(b" ", 1)[1].strip()
    assert snap[1:] in raw  # the recorded snapshot, with the symbol the live feed adds
    ref = replayed(b"".join(gzip.open(SPOT).readlines()[:4000]), tmp_path, "spot")
    synced_tail_equal(got, ref, int(len(ref) * 0.9))


@pytest.mark.parametrize("mode", ["check", "off"])
def test_book_ticker_takes_the_files_values_and_off(mode, tmp_path):
    """book_ticker=check: the bookTicker stream only cross-checked, as binance:FILE?book_ticker=check
    reads the recording; off: not subscribed (no ticker line recorded), the diff book's ticks."""
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(SPOT, market="spot", speed=10.0, max_lines=4000) as fb:
        got, raw, src = run_live(fb, uri(fb, book_ticker=mode))
    st = src.stats()
    assert st["ticker_quotes"] == 0 and st["gaps"] == 0
    assert (b"@bookTicker" in raw) == (mode == "check") and (st["book_tickers"] > 0) == (mode == "check")
    p = tmp_path / "live.binance"
    p.write_bytes(raw)
    want = read_all(f"binance:{p}?on_error=skip&market=spot&book_ticker=check")[0]
    assert len(got) == len(want) > 0
    for k in FIELDS:
        assert np.array_equal(got[k], want[k]), k


def test_coinm_follows_the_same_procedure_on_its_own_endpoints(tmp_path):
    """COIN-M (dapi): the usdm capture's first lines with BTCUSDT renamed BTCUSD_PERP, served as a
    COIN-M market (its REST paths and exchangeInfo, pu continuity): the live ticks are binance:FILE
    of their recording, and the capture's once synced; the instrument is BINANCE-D's, inverse
    (contracts priced in USD, settled in BTC)."""
    import gzip
    from feeds.binance.venue import BinanceVenue
    with gzip.open(USDM, "rb") as f:
        lines = b"".join(next(f) for _ in range(LINES))
    cap = tmp_path / "coinm.binance"
    cap.write_bytes(lines.replace(b"BTCUSDT", b"BTCUSD_PERP").replace(b"btcusdt", b"btcusd_perp"))
    with BinanceVenue(cap, market="coinm", speed=SPEED) as fb:
        got, raw, src = run_live(fb, uri(fb, "coinm", symbols="BTCUSD_PERP", update="0ms"))  # (the capture's stream)
    same_as_its_recording(got, raw, src, tmp_path, "coinm")
    st = src.stats()
    assert st["connects"] == 1 and st["gaps"] == 0 and st["snapshots"] == 1 and st["depth_applied"] > 100
    assert src.instruments == ["BTCUSD_PERP"]
    spec = src.specs[0]
    assert spec["venue"] == "BINANCE-D" and spec["inverse"] and spec["currency"] == "BTC"
    ref = read_all(f"binance:{cap}?market=coinm")[0]
    synced_tail_equal(got, ref, int(len(ref) * 0.9))


@pytest.mark.parametrize("reader", ["python", "native"])
def test_through_a_feed_process_and_ring(reader, tmp_path, shm_name, capture_prefix):
    """`engine feed binance-live://...` into a real ring (usdm at x10: flat out, the fake's REST
    snapshot comes late and cut to 1000 levels, and a deep level may differ): the ring's ticks end as
    the capture's, read by the event loop's callback or by the native reader's thread."""
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", speed=SPEED, max_lines=LINES) as fb:
        # (idle_s 3: on a loaded machine the fake's stream once stalled past 0.5 s and ended the feed early)
        proc = subprocess.Popen(engine_cmd("feed", uri(fb, "usdm", idle_s=3, reader=reader), "--ring", shm_name,
                                           "--wait-consumers", "1"),
                                cwd=ROOT, env=engine_env(), stderr=subprocess.PIPE, text=True)
        try:
            got, names = consume_ring(shm_name, proc, timeout=120)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert names == ["BTCUSDT"]
    assert np.array_equal(got["seq"], np.arange(len(got)))
    assert (got["kind"] != KIND_GAP).all()
    synced_tail_equal(got, capture_prefix["usdm"], len(got) // 2)
    # the fake venue replays a 2024 capture: its event times are not on our clock, so no feed latency
    # (it was a 100 s p50, the histogram's ceiling), the offset instead; our own frame to tick is one clock
    assert "feed_latency_p50_us=" not in err and "feed_latency_clock_offset_us=" in err, err
    assert "frame_to_tick_p50_us=" in err and "frames=" in err


@pytest.mark.parametrize("fault, counter", [
    ({"drop_after": 1500}, "reconnects"),
    ({"close_after": 1500}, "reconnects"),
    ({"silence_after": 1500, "silence_s": 3.0}, "silences"),
    ({"half_open_after": 1500}, "silences"),
    ({"oversized_at": {1500}}, "reconnects"),
])  # (after the market's end the connection is silent too: a silence test's run sees a few more)
def test_lost_connection_is_one_gap_then_a_new_book(fault, counter, tmp_path, capture_prefix):
    """A drop, a close frame, silence (the venue stops without closing) and a half-open socket all
    end the same way: a gap line (so the recording replays the gap), one gap tick, a new connection
    and snapshot, and the book back: the end of the run is the capture's."""
    from feeds.binance.venue import BinanceVenue
    silent = counter == "silences"
    # (a silence is seen after silence_s, then a new connection and snapshot: at half the pace, so the
    # market is still on when they come on a loaded machine: at x10 one suite run's came after its end)
    with BinanceVenue(USDM, market="usdm", speed=SPEED / 2 if silent else SPEED, max_lines=LINES, **fault) as fb:
        got, raw, src = run_live(fb, uri(fb, "usdm", silence_s=1.0 if silent else 5.0, backoff_s=0.05))
        conns = fb.connections
    same_as_its_recording(got, raw, src, tmp_path, "usdm")
    st = src.stats()
    assert st[counter] >= 1 and st["reconnects"] >= 1 and conns == st["reconnects"] + 1
    assert (st["reconnects"] == 1) if not silent else True
    assert st["stream_gaps"] == st["reconnects"] and (got["kind"] == KIND_GAP).sum() >= 1
    assert st["snapshots"] >= 2
    assert b'"e":"gap"' in raw
    synced_tail_equal(got, capture_prefix["usdm"], 300)


def test_missing_diff_is_a_gap_and_a_new_snapshot(tmp_path, capture_prefix):
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", speed=SPEED, max_lines=LINES, skip_diffs={200}) as fb:
        got, raw, src = run_live(fb, uri(fb, "usdm"))
    same_as_its_recording(got, raw, src, tmp_path, "usdm")
    st = src.stats()
    assert st["gaps"] == 1 and st["resyncs"] == 1 and st["reconnects"] == 0 and st["snapshots"] == 2
    assert (got["kind"] == KIND_GAP).sum() == 1
    synced_tail_equal(got, capture_prefix["usdm"], 300)


def test_duplicated_diff_and_malformed_frame_are_dropped_and_counted(tmp_path, capture_prefix):
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", speed=SPEED, max_lines=LINES, dup_diffs={100, 300},
                     malformed_at={2000}) as fb:
        got, raw, src = run_live(fb, uri(fb, "usdm"))
    same_as_its_recording(got, raw, src, tmp_path, "usdm")
    st = src.stats()
    assert st["depth_duplicates"] == 2 and st["bad_lines"] == 1 and st["gaps"] == 0
    synced_tail_equal(got, capture_prefix["usdm"], len(got) // 2)


def test_stale_snapshot_is_asked_again(tmp_path, capture_prefix):
    """A snapshot older than the stream it should bridge (spot: its update ids move ~10 an event, so
    1000 behind is 100 events) is a gap and a new snapshot."""
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(SPOT, market="spot", speed=SPEED, max_lines=LINES, stale_snapshot=True) as fb:
        got, raw, src = run_live(fb, uri(fb, "spot"))
        depth_calls = [c for c in fb.rest_calls if c[0].endswith("/depth")]
    same_as_its_recording(got, raw, src, tmp_path, "spot")
    st = src.stats()
    assert len(depth_calls) == 2 and st["snapshots"] == 2 and st["gaps"] == 1
    synced_tail_equal(got, capture_prefix["spot"], 300)


@pytest.mark.parametrize("status", [429, 418])
def test_rest_limits_back_off_as_the_venue_says(status, tmp_path):
    """A 429 (too many requests) or 418 (banned) stops every REST call for the Retry-After the venue
    gives; then the snapshot comes and the book syncs."""
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", speed=SPEED, max_lines=3000, rest_status=[status], retry_after=1) as fb:
        got, raw, src = run_live(fb, uri(fb, "usdm"))
        calls = list(fb.rest_calls)
    same_as_its_recording(got, raw, src, tmp_path, "usdm")
    st = src.stats()
    assert st["rest_banned"] == 1 and st["snapshots"] == 1
    assert calls[0][2] == status and [c[2] for c in calls[1:]] == [200] * (len(calls) - 1)
    assert calls[1][0] == calls[0][0]  # the refused call asked again (exchangeInfo, at start)


def test_rotation_before_the_venue_limit_makes_no_gap(tmp_path, capture_prefix):
    """The 24-hour limit, accelerated: the venue closes a connection after 1.5 s; we replace it after
    0.7 s (a second connection beside the first, then the switch): no gap, no resync, every tick once."""
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", speed=SPEED / 2, max_lines=LINES, max_conn_s=1.5) as fb:
        got, raw, src = run_live(fb, uri(fb, "usdm", rotate_s=0.7, overlap_s=0.2))
        conns = fb.connections
    same_as_its_recording(got, raw, src, tmp_path, "usdm")
    st = src.stats()
    assert st["rotations"] >= 2 and conns - st["rotations"] in (1, 2)  # (2: a standby open at the end)
    assert st["gaps"] == 0 and st["reconnects"] == 0 and st["snapshots"] == 1
    assert st["depth_duplicates"] + st["trade_duplicates"] + st["ticker_dropped_old"] > 0  # the overlaps
    synced_tail_equal(got, capture_prefix["usdm"], int(len(capture_prefix["usdm"]) * 0.8))


def test_pings_are_answered(tmp_path):
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", speed=2.0, max_lines=800, ping_s=0.2, pong_timeout_s=1.0) as fb:
        got, raw, src = run_live(fb, uri(fb, "usdm"))
        pongs, reasons = fb.pongs, fb.closed_reasons
    assert pongs >= 3 and not [r for r in reasons if r[1] == "pong_timeout"]
    assert src.stats()["reconnects"] == 0


NATIVE_FAULTS = {  # fault -> (the venue's arguments, the URI's, what the counters must show)
    "drop": ({"drop_after": 1500}, {}, {"reconnects": 1}),
    "close-frame": ({"close_after": 1500}, {}, {"reconnects": 1}),
    "silence": ({"silence_after": 1500, "silence_s": 3.0}, {"silence_s": 1.0}, {"silences": None}),
    "half-open": ({"half_open_after": 1500}, {"silence_s": 1.0}, {"silences": None}),
    "oversized": ({"oversized_at": {1500}}, {}, {"reconnects": 1}),
    "missing-diff": ({"skip_diffs": {200}}, {}, {"gaps": 1, "resyncs": 1, "reconnects": 0, "snapshots": 2}),
    "pings": ({"ping_s": 0.2, "pong_timeout_s": 1.0}, {}, {"reconnects": 0}),
    "rotation": ({"max_conn_s": 1.5}, {"rotate_s": 0.7, "overlap_s": 0.2}, {"gaps": 0, "reconnects": 0, "snapshots": 1}),
}


def test_native_reader_publishes_the_capture(tmp_path):
    """reader=native (a thread of its own polls and reads the socket; spin, the same thread never
    sleeping, is tests/test_ws_pump.py's: a core spun for seconds starves the suite's other worker):
    into a real ring as a feed process publishes, every frame counted, the capture's ticks once
    synced, one producer (the ring's sequence unbroken and equal to the publisher's count), most of
    them published by that thread with no Python per read."""
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(SPOT, market="spot", speed=10.0, max_lines=4000) as fb:
        got, _, src = run_live(fb, uri(fb, reader="native"), direct="ring", raw=False)
    st = src.stats()
    assert st["connects"] == 1 and st["reconnects"] == 0 and st["gaps"] == 0 and st["snapshots"] == 1
    assert st["frames"] == 3999
    assert src.pump.ticks > len(got) // 2 and src.pump.reads > 100, (src.pump.ticks, src.pump.reads, len(got))
    assert not src.pump.running
    import gzip
    ref = replayed(b"".join(gzip.open(SPOT).readlines()[:4000]), tmp_path, "spot")
    synced_tail_equal(got, ref, int(len(ref) * 0.9))


@pytest.mark.parametrize("fault", list(NATIVE_FAULTS))
def test_native_reader_hands_every_fault_back_and_resyncs(fault, capture_prefix):
    """Each fault with reader=native: the thread hands the connection back to the event loop (a
    control frame, the end of the stream, a gap that needs a snapshot, a stop for a silence or a
    rotation), the source does what it does with the Python reader, and the thread takes the
    connection again once the book is synced: the run ends as the capture, the ring's sequence
    unbroken, and the thread published ticks after the fault too."""
    from feeds.binance.venue import BinanceVenue
    venue, extra, want = NATIVE_FAULTS[fault]
    slow = fault in ("rotation", "silence", "half-open")  # (as in test_lost_connection_is_one_gap_then_a_new_book)
    with BinanceVenue(USDM, market="usdm", speed=SPEED / 2 if slow else SPEED, max_lines=LINES, **venue) as fb:
        got, _, src = run_live(fb, uri(fb, "usdm", reader="native", backoff_s=0.05, **extra), direct="ring", raw=False)
        pongs, sent = fb.pongs, fb.frames_sent
    st = src.stats()
    for k, v in want.items():
        assert (st[k] >= 1) if v is None else st[k] == v, (k, st)
    if fault in ("pings", "missing-diff"):  # (nothing cut off: every frame sent was taken once, pings among them)
        assert st["frames"] == sent, (st["frames"], sent)
    else:  # (a rotation closes the old connection unread past the switch: frames the standby also carries,
        assert st["frames"] <= sent  # a few of them on a loaded machine; its ticks are checked below)
    if fault == "pings":
        assert pongs >= 3 and st["gaps"] == 0 and st["snapshots"] == 1
    if fault == "rotation":
        assert st["rotations"] >= 2
    if st["reconnects"]:
        assert st["stream_gaps"] == st["reconnects"] and (got["kind"] == KIND_GAP).sum() >= 1 and st["snapshots"] >= 2
    assert src.pump.starts >= 2 and src.pump.ticks > len(got) // 4, (src.pump.starts, src.pump.ticks, len(got))
    synced_tail_equal(got, capture_prefix["usdm"], 300)


def test_a_stopped_feed_process_stops_its_native_reader_first(shm_name):
    """SIGTERM to `engine feed binance-live://...` while the native reader publishes (the capture at
    x2): the process stops the reader before its last counts and before the ring says finished, so
    the ticks it says it published are exactly the ring's, every one read by a consumer."""
    import re
    import signal
    import threading

    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", speed=2.0, max_lines=LINES) as fb:
        proc = subprocess.Popen(engine_cmd("feed", uri(fb, "usdm", idle_s=0, reader="native"), "--ring", shm_name,
                                           "--wait-consumers", "1"), cwd=ROOT, env=engine_env(), stderr=subprocess.PIPE,
                                text=True)
        out = {}
        reader = threading.Thread(target=lambda: out.update(zip(("got", "names"), consume_ring(shm_name, proc, 120))))
        try:
            reader.start()
            deadline = time.monotonic() + 60
            while fb.frames_sent < 1500 and time.monotonic() < deadline:  # (synced and streaming)
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
            reader.join(60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    said = int(re.search(r"published (\d+) ticks", err).group(1))
    got = out["got"]
    assert said == len(got) > 1000 and np.array_equal(got["seq"], np.arange(len(got)))


def test_unknown_symbol_and_bad_uris_are_one_line(shm_name):
    from feeds.binance.venue import BinanceVenue
    with BinanceVenue(USDM, market="usdm", max_lines=100) as fb:
        res = cli("feed", uri(fb, "usdm", symbols="BTCUSDT,NOPE"), "--ring", shm_name, timeout=120)
    line = one_line_error(res)
    assert "NOPE" in line and "unknown symbol" in line and "Invalid symbol" in line
    from feeds.core.sources import open_source
    for bad, says in (("binance-live://moon?symbols=X", "market"), ("binance-live://spot", "no symbols"),
                      ("binance-live://spot?symbols=X&update=7ms", "update"),
                      ("binance-live://spot?symbols=X&silence_s=0", "silence_s"),
                      ("binance-live://spot?symbols=X&reader=fast", "reader"),
                      ("binance-live://spot?symbols=X&reader=native&ws=wss://example.invalid", "needs ws://"),
                      ("binance-live://spot?symbols=X&reader_core=4096&ws=ws://127.0.0.1:9", "reader_core=4096 is not a CPU"),
                      ("binance-live://spot?symbols=X&reader=python&reader_core=0", "reader_core pins the native"),
                      ("binance-live://spot?symbols=X&reader_core=0&ws=wss://example.invalid", "wss://"),
                      ("binance-live://spot?symbols=X&frobs=1", "frobs")):
        with pytest.raises(FeedError, match=says):
            open_source(bad)


def test_deframe_makes_one_line_a_text_frame_whatever_its_length_and_newlines():
    """ws_client.deframe (copying eight bytes a step): every payload length 0..300, newlines at the
    start, the end, inside and across a word boundary, several frames in one read and the last one
    cut short: each complete frame is `<stamp><payload, newline -> space>\\n` and nothing else."""
    from feeds.transport import ws_client
    rng = np.random.default_rng(7)
    frames, want = [], []
    for ln in range(0, 301):
        p = bytearray(rng.integers(32, 127, ln, dtype=np.uint8).tobytes())
        for at in {0, ln - 1, ln // 2, 7, 8, 15} if ln else ():
            if 0 <= at < ln and rng.random() < 0.5:
                p[at] = 10
        head = bytes([0x81, ln]) if ln < 126 else bytes([0x81, 126, ln >> 8, ln & 255])
        frames.append(head + bytes(p))
        want.append(b"123 " + bytes(p).replace(b"\n", b" ") + b"\n")
    data = b"".join(frames) + frames[-1][:-5]  # (a frame cut short: left for the next read)
    b = np.frombuffer(data, np.uint8)
    out = np.full(len(data) + ws_client.LINE_EXTRA * (len(data) // 2 + 1), 0xEE, np.uint8)
    used, w, n, st, *_ = ws_client.deframe(b, len(data), np.frombuffer(b"123 ", np.uint8), out, 1 << 20)
    assert (st, n, used) == (ws_client.D_MORE, len(frames), len(data) - len(frames[-1]) + 5)
    assert out[:w].tobytes() == b"".join(want)
    assert (out[w:] == 0xEE).all()  # nothing written past the lines


def test_frames_cut_across_socket_reads_come_out_whole():
    """ws_client over a real loopback socket, the server writing its frames in pieces of random
    sizes (a byte to a few KiB, so reads cut frames anywhere, headers included): every text frame
    (lengths 0..300, 1,000 and 70,000: all three header forms) is one line with its payload, in
    order; pings among them are answered. A cut frame is completed from the next read's head and
    the rest taken apart in place (WsProtocol._join), or joined whole when the read does not
    finish it."""
    import asyncio
    import socket

    from tests.helpers.ws_loopback import read_through_client
    rng = np.random.default_rng(11)
    payloads = [rng.integers(32, 127, n, dtype=np.uint8).tobytes() for n in
                list(range(0, 301)) + [1000, 70000, 5, 70000, 126, 65535, 65536]]
    stream = bytearray()
    pings = 0
    for i, p in enumerate(payloads):
        n = len(p)
        head = bytes([0x81, n]) if n < 126 else bytes([0x81, 126]) + n.to_bytes(2, "big") if n < 65536 \
            else bytes([0x81, 127]) + n.to_bytes(8, "big")
        stream += head + p
        if i % 37 == 0:
            stream += bytes([0x89, 3]) + b"p%02d" % (pings % 100)
            pings += 1
    pongs = []

    async def send(reader, writer):
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pos = 0
        while pos < len(stream):
            k = int(rng.integers(1, 4000))
            writer.write(bytes(stream[pos:pos + k]))
            pos += k
            await writer.drain()
            await asyncio.sleep(0)
        while len(pongs) < pings:  # the client's pongs (masked frames: 2 + 4 + 3 bytes each)
            pongs.append(await reader.readexactly(9))
        writer.close()

    lines = read_through_client(send)[0]
    assert [ln.split(b" ", 1)[1] for ln in lines] == payloads
    assert len(pongs) == pings and all(p[0] == 0x8A for p in pongs)
