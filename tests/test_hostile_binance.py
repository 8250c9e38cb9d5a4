"""binance-live against a hostile or broken venue (issue 60): feeds/binance/venue/
replaying the real usdm capture on loopback, with its hostile faults (ws_fault, rest_fault). The
client is the real one in a real `engine feed` process, watched from outside
(tests/helpers/feed_proc.py): every buffer capped (the connection or the reply dropped with its
reason, and counted, long before the venue has sent what it would; memory read from /proc stays
flat), every retry backed off (the requests the venue saw, counted, never more than the backoff's
schedule lets through), every wait ended by SIGTERM (the process gone long before the wait would
have ended, its files complete), every bad reply or URI value one line, and the venue's own words
escaped and rate-limited."""
import os
import re
import socket
import threading
import time

import pytest

from feeds.core.uri import FeedError

from tests.conftest import ROOT
from tests.helpers.data import USDM, cut_and_whole
from tests.helpers.feed_proc import FeedProc
from tests.helpers.feedutil import cli, one_line_error

BUDGET = 512 << 20  # what one hostile connection or reply may send: an uncapped client holds all of it
GROWTH_MB = 120  # what a capped client may grow by meanwhile (buffers it keeps, allocator slack)
STOP_S = 10.0  # a stopped feed is gone within this; each wait it ends is 30 s or more (they held 15-45 s)
COLD_S = 900  # the first wait of a test may include the first compile of the feed (minutes)


def uri(fb, **extra):
    q = {"symbols": "BTCUSDT", "ws": fb.ws_url, "rest": fb.rest_url, "update": "0ms", **extra}
    return "binance-live://usdm?" + "&".join(f"{k}={v}" for k, v in q.items())


def venue(**kw):
    from feeds.binance.venue import BinanceVenue
    return BinanceVenue(USDM, market="usdm", speed=kw.pop("speed", 2.0), hostile_budget=BUDGET, **kw)


def depth_times(fb):
    return [t for t, path in list(fb.rest_times) if path.endswith("/depth")]


def allowed(window, base, cap):
    """How many tries the backoff lets into `window` seconds: the first, then each retry j (1, 2,
    ...) at least half of base * 2^(j-1), up to cap, after the one before (feeds/binance/live_waits.py backoff
    draws from [d/2, d])."""
    n, spent = 1, 0.0
    while spent + 0.5 * min(cap, base * 2 ** (n - 1)) <= window:
        spent += 0.5 * min(cap, base * 2 ** (n - 1))
        n += 1
    return n


def assert_backed_off(times, base, cap):
    """The tries the venue saw (its clock, as they arrived) are no more than the backoff's schedule
    lets into their span, plus one (the first may have arrived late: a connection opened for it)."""
    assert len(times) >= 2
    window = times[-1] - times[0]
    assert len(times) <= allowed(window, base, cap) + 1, (
        f"{len(times)} tries in {window:.2f} s; the backoff allows {allowed(window, base, cap)}: "
        f"{[round(b - a, 3) for a, b in zip(times, times[1:])]}")


# -- every buffer capped ---------------------------------------------------------------------

WS_ATTACKS = {  # fault -> what the client says when it drops the connection
    "fragments": "a fragmented message over 1048576 bytes",
    "big_pings": "a control frame of 1048576 bytes",
    "ping_flood": "the server reads nothing",
}


def _live_gaps_agree(ring):
    """The feed's counters in its ring show every reconnect's gap (and at least two)."""
    c = ring_counters(ring)
    return c.get("reconnects", 0) >= 2 and c.get("stream_gaps", 0) == c.get("reconnects", 0)


@pytest.mark.parametrize("fault, reader", [("fragments", "python"), ("fragments", "native"),
                                           ("big_pings", "python"), ("big_pings", "native"),
                                           ("ping_flood", "python")])
def test_a_hostile_stream_is_dropped_before_it_fills_memory(fault, reader, shm_name):
    """Endless continuation frames (an uncapped reassembly reached 2.17 GB), 1 MiB pings (control
    frames are at most 125 bytes), 125-byte pings from a server that reads none of our pongs (they
    piled up to 830 MB): each connection is dropped with its reason, long before the venue has sent
    the 512 MiB it would, and the feed's memory stays flat; every drop is one gap and a reconnect."""
    with venue(ws_fault=fault, ws_fault_after=300) as fb, \
            FeedProc(uri(fb, reader=reader, backoff_s=0.05, backoff_max_s=0.2), ring=shm_name) as f:
        f.wait(lambda: fb.hostile_sent > 0, what="the first attack", timeout=COLD_S)
        base = f.rss_mb()
        f.wait(lambda: fb.connections >= 3 or fb.hostile_spent, what="two attacks dropped")
        # (a reconnect's gap line is scanned with the new connection's first read: a stop in
        # between ends the feed before it, so the venue calms down and the stop waits for the
        # ring's counters to agree)
        fb.ws_fault = None
        f.wait(lambda: _live_gaps_agree(shm_name), what="each reconnect's gap scanned")
        assert f.stop() == 0, f.stderr
    assert fb.hostile_spent == 0, "an attack ran to its end: the client held it all"
    assert f.peak_mb - base < GROWTH_MB, (base, f.peak_mb)
    assert f.stderr.count(WS_ATTACKS[fault]) >= 2, f.stderr[-3000:]
    st = f.counters()
    assert st["reconnects"] >= 2 and st["stream_gaps"] == st["reconnects"], st


def test_an_exchange_info_that_never_ends_is_one_line(shm_name):
    """A 2 GB exchangeInfo held 1.48 GB: the reply is read up to its cap (1 MiB + 64 KiB a symbol),
    then refused in one line; the venue never got to send its 512 MiB."""
    with venue(rest_fault={"exchangeInfo": "huge"}) as fb, FeedProc(uri(fb), ring=shm_name) as f:
        f.wait(lambda: fb.rest_times, what="the exchangeInfo request", timeout=COLD_S, every=0.005)
        rc = f.wait_exit()
    base = f.rss_before(fb.rest_times[0][0])
    assert fb.hostile_spent == 0 and f.peak_mb - base < GROWTH_MB, (base, f.peak_mb)
    res = type("R", (), {"returncode": rc, "stderr": f.stderr})
    line = one_line_error(res)
    assert "exchangeInfo" in line and "a reply over 1114112 bytes" in line, line


def test_a_depth_reply_that_never_ends_is_a_rest_error_backed_off(shm_name):
    """The same for a depth snapshot: each read to its cap, counted as a REST error, asked again
    after the backoff; the feed lives on and its memory stays flat."""
    with venue(rest_fault={"depth": "huge"}) as fb, FeedProc(uri(fb, backoff_max_s=2), ring=shm_name) as f:
        f.wait(lambda: len(depth_times(fb)) >= 2, what="a second depth request")
        base = f.rss_mb()
        f.wait(lambda: len(depth_times(fb)) >= 4, what="four depth requests")
        assert f.stop() == 0, f.stderr
    assert fb.hostile_spent == 0 and f.peak_mb - base < GROWTH_MB, (base, f.peak_mb)
    assert f.counters()["rest_errors"] >= 3
    assert_backed_off(depth_times(fb), 0.5, 2)


# -- every retry backed off ------------------------------------------------------------------

REST_RETRIES = {  # fault -> the counter each refused reply adds to
    "retry_after_0": "rest_banned",  # endless 429 with Retry-After: 0 (51,354 requests in 13 s)
    "garbage": "rest_errors",  # an HTML body (31,665 requests in 13 s)
    "bad_json": "bad_lines",  # JSON cut short: the scanner refuses the line
    "stale": "resyncs",  # a snapshot older than the diffs (13,351 requests and gaps in 44 s)
}


@pytest.mark.parametrize("fault", list(REST_RETRIES))
def test_rest_retries_back_off_whatever_the_venue_says(fault, shm_name):
    """Every depth reply refused one way or another (they made 13,000-51,000 requests in 13-44 s):
    the requests the venue saw are no more than the backoff lets through (from 0.5 s, doubling to
    backoff_max_s=2 here, whatever the venue says), each refusal counted (a stale snapshot is a gap
    and a resync), memory flat."""
    with venue(rest_fault={"depth": fault}) as fb, FeedProc(uri(fb, backoff_max_s=2), ring=shm_name) as f:
        f.wait(lambda: len(depth_times(fb)) >= 2, what="a second depth request")
        base = f.rss_mb()
        f.wait(lambda: len(depth_times(fb)) >= 7, what="seven depth requests")
        assert f.stop() == 0, f.stderr
    assert_backed_off(depth_times(fb), 0.5, 2)
    st = f.counters()
    assert st[REST_RETRIES[fault]] >= 6, st
    if fault == "stale":
        assert st["gaps"] == st["resyncs"] + st["stream_gaps"] and st["stream_gaps"] == 0, st
    assert f.peak_mb - base < GROWTH_MB, (base, f.peak_mb)


def test_connections_that_die_young_back_off(shm_name):
    """A venue that sends one frame and closes (reconnected ~8 times a second, each with a REST
    snapshot): the connections it saw are no more than the backoff lets through, doubling from
    backoff_s, and so are the snapshots asked."""
    with venue(ws_fault="close", ws_fault_after=1, speed=1.0) as fb, \
            FeedProc(uri(fb, backoff_s=0.05, backoff_max_s=30), ring=shm_name) as f:
        f.wait(lambda: fb.connections >= 8, what="eight connections")
        assert f.stop() == 0, f.stderr
    assert_backed_off(fb.conn_times, 0.05, 30)
    assert len(depth_times(fb)) <= fb.connections
    if len(depth_times(fb)) >= 2:
        assert_backed_off(depth_times(fb), 0.5, 30)
    st = f.counters()  # (the last connection's gap line may be unread at SIGTERM: it died at once)
    assert st["reconnects"] >= 6 and st["reconnects"] - 1 <= st["stream_gaps"] <= st["reconnects"], st


def ring_counters(name):
    from engine import ring_info, shm
    try:
        return ring_info.inspect(shm.ring_path(name))["feed_counters"]
    except (OSError, shm.RingError):
        return {}


def test_a_connection_lost_while_a_rotation_s_retries_back_off_is_a_gap_at_once(shm_name):
    """The venue refuses new connections (maintenance) when the 24-hour rotation (rotate_s=1 here)
    opens the standby, whose retries back off; then it drops the active connection. The loss is
    a gap at once (the rotation given up, the connection replaced), not when a retry succeeds."""
    with venue(speed=1.0) as fb, \
            FeedProc(uri(fb, rotate_s=1, backoff_s=0.5, backoff_max_s=60), ring=shm_name) as f:
        f.wait(lambda: fb.frames_sent > 100, what="the stream", timeout=COLD_S)
        fb.ws_refuse = True
        f.wait(lambda: fb.ws_refused >= 1 and f.said("cannot connect to"), what="the standby refused")
        fb.kick()
        f.wait(lambda: ring_counters(shm_name).get("reconnects") == 1, what="the loss counted while no connection opens",
               timeout=30)
        assert fb.connections == 1 and fb.ws_refuse
        assert f.stop() == 0, f.stderr
    st = f.counters()
    assert st["reconnects"] == 1 and st["stream_gaps"] == 1 and st["rotations"] == 0, st


@pytest.mark.parametrize("reader", ["python", "native"])
def test_a_frame_trickled_a_byte_at_a_time_is_silence(reader, shm_name):
    """A frame that never completes, a byte every 0.1 s: silence is measured in whole frames, so
    silence_s after the last one the connection is replaced (one gap each), however many bytes
    came meanwhile."""
    with venue(ws_fault="trickle", ws_fault_after=300, trickle_s=0.1) as fb, \
            FeedProc(uri(fb, reader=reader, silence_s=1, backoff_s=0.05, backoff_max_s=0.2), ring=shm_name) as f:
        f.wait(lambda: fb.connections >= 3, what="two silent connections replaced")
        assert f.stop() == 0, f.stderr
    st = f.counters()
    assert st["silences"] >= 2 and st["reconnects"] >= 2 and st["stream_gaps"] == st["reconnects"], st
    assert fb.hostile_sent >= 10  # (bytes came all along)


# -- every wait ends at SIGTERM --------------------------------------------------------------

def _stopped_promptly(f):
    """SIGTERM ends the wait: the process exits by itself, cleanly, long before the wait would end
    (each test's wait is 30 s or more)."""
    assert f.stop() == 0, f.stderr
    assert f.stop_s < STOP_S, f"{f.stop_s:.1f} s to stop:\n{f.stderr[-2000:]}"
    assert "Traceback" not in f.stderr and "never retrieved" not in f.stderr, f.stderr


@pytest.mark.parametrize("cmd", ["feed", "record"])
def test_sigterm_ends_a_ban_of_any_length(cmd, shm_name, tmp_path):
    """Retry-After: 1e23 on exchangeInfo (kept the process 15-30 s after SIGTERM): the ban is
    honoured up to three days, and a SIGTERM ends it at once; `engine record` closes its file
    complete."""
    with venue(rest_fault={"exchangeInfo": "retry_after_huge"}) as fb:
        u = uri(fb)
        args = ("record", u, "--out", str(tmp_path / "rec")) if cmd == "record" else (u,)
        with FeedProc(*args, ring=shm_name if cmd == "feed" else None) as f:
            f.wait(lambda: f.said("REST 429"), what="the ban")
            assert f.said("no requests for 259200 s"), f.stderr
            _stopped_promptly(f)
    if cmd == "record":
        from engine.tickfile import TickFile
        files = list((tmp_path / "rec").rglob("*.ticks"))
        assert files and all(TickFile(p).complete for p in files), files


def test_sigterm_ends_engine_run_while_its_feed_sits_out_a_ban(shm_name, default_model, tmp_path):
    """The same ban under `engine run` (it waited for the feed's ring regardless: 55 s, then an
    error): the run stops at SIGTERM, says nothing ran, and leaves nothing in /dev/shm."""
    from engine import shm
    with venue(rest_fault={"exchangeInfo": "retry_after_huge"}) as fb, \
            FeedProc("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--feed", uri(fb),
                     "--model", str(default_model), "--name", shm_name, "--signals-out", str(tmp_path / "s.sig"),
                     "--hlog", "none") as f:
        f.wait(lambda: f.said("REST 429"), what="the ban", timeout=COLD_S)
        _stopped_promptly(f)
    assert f.said("stopped while the feed was starting"), f.stderr
    assert not [p for p in os.listdir(os.path.dirname(shm.ring_path(shm_name))) if p.startswith(shm_name)]


def test_sigterm_ends_a_rest_reply_that_never_comes(shm_name):
    """A depth request the venue never answers (held the process 15 s; the request's own timeout
    is 30 s): the feed streams on meanwhile (no book) and SIGTERM ends the request."""
    with venue(rest_fault={"depth": "never"}) as fb, FeedProc(uri(fb), ring=shm_name) as f:
        f.wait(lambda: depth_times(fb) and fb.frames_sent > 500, what="the depth request")
        _stopped_promptly(f)
    st = f.counters()
    assert len(depth_times(fb)) == 1 and st["trades"] > 0 and st["snapshots"] == 0 and st["rest_errors"] == 0, st


def test_sigterm_ends_engine_run_while_its_feed_waits_for_a_reply(shm_name, default_model, tmp_path):
    """The same in `engine run` (held it 15 s): the run and its feed process stop at SIGTERM, the
    signal file whole (its header, whole records)."""
    from engine.signal_log import RECORD, read_records
    sig = tmp_path / "live.sig"
    with venue(rest_fault={"depth": "never"}) as fb, \
            FeedProc("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--feed", uri(fb),
                     "--model", str(default_model), "--name", shm_name, "--signals-out", str(sig),
                     "--hlog", str(tmp_path / "lat.hlog")) as f:
        f.wait(lambda: depth_times(fb) and fb.frames_sent > 500, what="the depth request", timeout=COLD_S)
        _stopped_promptly(f)
    assert f.said("[feed] published ") and len(depth_times(fb)) == 1, f.stderr
    read_records(sig)
    assert (sig.stat().st_size - 64) % RECORD == 0


def test_sigterm_ends_a_reconnect_backoff(shm_name):
    """A connection that died young, then a backoff of 30-60 s (held the process 7.5-15 s): the
    feed keeps beating meanwhile (its ring's heartbeat fresh, its counters showing the reconnect
    before the next connection), and SIGTERM ends the backoff."""
    from engine import ring_info, shm

    def beating():
        try:
            info = ring_info.inspect(shm.ring_path(shm_name))
        except (OSError, shm.RingError):
            return False
        return info["feed_counters"].get("reconnects") == 1 and info["heartbeat_age_s"] < 1.0
    with venue(ws_fault="close", ws_fault_after=1, speed=1.0) as fb, \
            FeedProc(uri(fb, backoff_s=60, backoff_max_s=120), ring=shm_name) as f:
        f.wait(lambda: f.said("reconnecting in "), what="the backoff", timeout=COLD_S)
        f.wait(beating, what="a fresh heartbeat and the reconnect counted during the backoff", timeout=20)
        assert fb.connections == 1  # (still in the backoff)
        _stopped_promptly(f)
    assert fb.connections == 1


def test_a_handshake_that_never_comes_is_retried_in_clear_words(shm_name):
    """A websocket server that accepts and never answers the upgrade: `cannot connect to URL
    (timed out)`, not `()`, and no asyncio 'Future exception was never retrieved' about it (said
    when the failed attempt is let go: at the next failure, so two are waited for)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(srv.accept()) for _ in range(4)], daemon=True).start()
    ws = f"ws://127.0.0.1:{srv.getsockname()[1]}"
    try:
        with venue() as fb, FeedProc(uri(fb, ws=ws), ring=shm_name) as f:
            f.wait(lambda: f.stderr.count("again in") >= 2, what="two retries", timeout=COLD_S)
            _stopped_promptly(f)
    finally:
        srv.close()
    assert f"cannot connect to {ws} (timed out); again in" in f.stderr, f.stderr


# -- one clear line --------------------------------------------------------------------------

@pytest.mark.parametrize("fault, says", [("list", "no list of symbol objects"),
                                         ("not_objects", "no list of symbol objects"),
                                         ("nested", "JSON nested deeper than a parser follows"),
                                         ("garbage", "not JSON")])
def test_an_exchange_info_that_is_not_binances_is_one_line(fault, says, shm_name):
    """A JSON list, symbols that are not objects (tracebacks), JSON nested 100,000 deep (a
    recursion message without the URI), HTML: one line naming the URI, exchangeInfo and why."""
    with venue(rest_fault={"exchangeInfo": fault}) as fb:
        u = uri(fb)
        line = one_line_error(cli("feed", u, "--ring", shm_name, timeout=120))
    assert u in line and "exchangeInfo" in line and says in line, line


def test_a_rest_url_that_is_not_http_is_one_line(shm_name):
    """rest=file:///etc/passwd printed a traceback."""
    line = one_line_error(cli("feed", "binance-live://spot?symbols=BTCUSDT&rest=file:///etc/passwd", "--ring",
                              shm_name, timeout=120))
    assert "rest='file:///etc/passwd' is not a http:// or https://HOST URL" in line, line


@pytest.mark.parametrize("q, says", [
    ("silence_s=nan", "silence_s='nan': must be a finite number > 0"),
    ("rotate_s=nan", "rotate_s='nan'"), ("backoff_s=nan", "backoff_s='nan'"), ("overlap_s=nan", "overlap_s='nan'"),
    ("backoff_max_s=nan", "backoff_max_s='nan'"), ("backoff_max_s=inf", "backoff_max_s='inf'"),
    ("backoff_s=2&backoff_max_s=1", "backoff_max_s=1 is below backoff_s=2"),
    ("idle_s=-1", "idle_s='-1': must be a finite number >= 0"), ("idle_s=inf", "idle_s='inf'"),
    ("reader_core=-5", "reader_core='-5': must be an integer >= 0"),
    ("size_unit=nan", "size_unit='nan': must be a finite number > 0"),
    ("snapshot_limit=many", "snapshot_limit='many': must be an integer 1..5000"),
    ("ws=http://127.0.0.1:9", "ws='http://127.0.0.1:9' is not a ws:// or wss://HOST URL"),
    ("rest=http://:80", "rest='http://:80' is not a http:// or https://HOST URL"),
    ("rest=http://h:port", "rest='http://h:port'"),
])
def test_binance_live_values_are_checked(q, says):
    """nan durations, backoff_max_s=inf, idle_s=-1, reader_core=-5 were taken; size_unit=nan said
    "cannot convert float NaN to integer": each is one line naming the value and the rule."""
    from feeds.core.sources import open_source
    with pytest.raises(FeedError, match=says.replace("(", r"\(").replace("?", r"\?")):
        open_source(f"binance-live://spot?symbols=BTCUSDT&{q}")


@pytest.mark.parametrize("q, says", [
    ("heartbeat_s=0", "heartbeat_s='0': must be an integer >= 1"),
    ("timeout_s=nan", "timeout_s='nan': must be a finite number >= 0"),
    ("backoff_max_s=inf", "backoff_max_s='inf': must be a finite number > 0"),
    ("idle_s=-1", "idle_s='-1'"), ("connect_timeout_s=nan", "connect_timeout_s='nan'"),
])
def test_dbn_live_values_are_checked_by_the_same_rules(q, says):
    """One validator for every source (feeds/core/uri.py): dbn-live's values, the same words."""
    from feeds.core.sources import open_source
    with pytest.raises(FeedError, match=says):
        open_source(f"dbn-live://GLBX.MDP3?symbols=ESH4&key_file=/nonexistent&{q}")


# -- the venue's words ----------------------------------------------------------------------

# what a hostile venue says: a control sequence (clears the operator's screen), then a newline and
# a line that looks like ours, a carriage return, a Unicode line separator and a right-to-left mark
FORGED = "[feed] published 424242 ticks"
EVIL = f"Invalid symbol.\x1b[2J\x1b[31m\n{FORGED}\r\u2028\u202eengine: error: forged"


def assert_no_forged_line(stderr):
    """Nothing the venue said reached the log as it was sent: no control character, no line of
    ours it wrote."""
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u202e]", stderr), stderr
    assert not any(ln.startswith((FORGED, "engine: error: forged")) for ln in stderr.splitlines()), stderr


def test_the_venue_s_refusal_cannot_forge_a_log_line(shm_name):
    """exchangeInfo refused (HTTP 400) with a `msg` that tries to clear the screen and write a line
    of ours: the one error line carries it escaped, readable, and nothing else is printed."""
    with venue(rest_fault={"exchangeInfo": "refused"}, venue_text=EVIL) as fb:
        res = cli("feed", uri(fb), "--ring", shm_name, timeout=120)
    line = one_line_error(res)
    assert_no_forged_line(res.stderr)
    assert "unknown symbol among BTCUSDT" in line and r"Invalid symbol.\x1b[2J\x1b[31m\n[feed] published" in line
    assert r"\r\u2028\u202eengine: error: forged" in line, line


def test_a_close_reason_cannot_forge_a_log_line_and_is_rate_limited(shm_name):
    """Every connection closed after one frame with that reason, reconnected with almost no backoff
    (backoff_s=0.001): each loss is said escaped, at most 10 lines every 10 s, the rest counted
    (log_suppressed) and their number said; each is still one gap (its reason, in the gap line,
    does not break it)."""
    t0 = time.monotonic()
    with venue(ws_fault="close", ws_fault_after=1, speed=1.0, venue_text=EVIL[:120]) as fb, \
            FeedProc(uri(fb, backoff_s=0.001, backoff_max_s=0.002), ring=shm_name) as f:
        f.wait(lambda: fb.connections >= 40, what="forty connections", timeout=COLD_S)
        assert f.stop() == 0, f.stderr
    lifetime = time.monotonic() - t0
    assert_no_forged_line(f.stderr)
    shown = [ln for ln in f.stderr.splitlines() if ": connection lost (" in ln]
    closes = [ln for ln in shown if "(close frame 1000: " in ln]
    assert closes and all(r"Invalid symbol.\x1b[2J\x1b[31m\n[feed] published 424242 ticks\r" in ln for ln in closes)
    st = f.counters()  # (the last connection's gap line may be unread at SIGTERM: it died at once)
    assert st["reconnects"] >= 39 and st["reconnects"] - 1 <= st["stream_gaps"] <= st["reconnects"], st
    assert len(shown) <= 10 * (1 + int(lifetime // 10)), (len(shown), lifetime)
    assert len(shown) + st["log_suppressed"] == st["reconnects"], (len(shown), st)
    said = [int(m) for m in re.findall(r"(\d+) more connection and REST messages not shown", f.stderr)]
    assert sum(said) == st["log_suppressed"] > 0, (said, st)


def test_a_refused_upgrade_s_status_line_is_escaped(shm_name):
    """A websocket server that refuses the upgrade with a status line holding a control sequence:
    the one error line quotes it escaped."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def refuse():
        try:
            c, _ = srv.accept()
        except OSError:
            return
        c.recv(65536)
        c.sendall(b"HTTP/1.1 400 \x1b[2J\x1b]0;owned\x07\x85Bad\r\nContent-Length: 0\r\n\r\n")
        c.close()
    threading.Thread(target=refuse, daemon=True).start()
    try:
        with venue() as fb:
            res = cli("feed", uri(fb, ws=f"ws://127.0.0.1:{srv.getsockname()[1]}"), "--ring", shm_name, timeout=120)
    finally:
        srv.close()
    line = one_line_error(res)
    assert_no_forged_line(res.stderr)
    assert "\x85" not in res.stderr and "\x07" not in res.stderr
    assert r'refused the subscription: the server answered "HTTP/1.1 400 \x1b[2J\x1b]0;owned\x07\x85Bad"' in line, line


# -- all of it, alternating ------------------------------------------------------------------

SOAK_S = 36.0  # two cycles of 1.5 s phases: short enough for every run of the suite (10 minutes: the bench)


@pytest.mark.parametrize("capture", cut_and_whole(USDM, ids=["usdm"]))
def test_a_soak_of_alternating_faults_keeps_memory_flat_and_counts_every_gap(monkeypatch, capture):
    """bench/hostile_soak.py for SOAK_S (two cycles of its phases): the venue alternates every fault
    above; after the first cycle the feed's memory, descriptors and threads do not grow, no attack
    runs to its end, and every lost connection is one gap line, every gap one gap tick in the ring."""
    import importlib.util
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("hostile_soak", ROOT / "bench" / "hostile_soak.py")
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    r = soak.soak(SOAK_S, phase_s=SOAK_S / 2 / len(soak.CYCLE), capture=capture)
    r.pop("samples")
    assert r["rss_growth_mb"] < 60 and r["fd_growth"] <= 4 and r["thread_growth"] <= 1, r
    assert r["attacks"] >= 8 and r["reconnects"] >= 4 and r["attacks_run_to_the_end"] == 0, r
    assert r["gaps_counted"], r


def test_a_frame_header_cut_byte_by_byte_is_judged_once_whole():
    """feeds/transport/ws_client.py over a real loopback socket, the server writing a byte at a time: a text
    frame whose header, once whole, says 2 GiB ends the connection there (nothing of it kept); the
    frames before it, cut anywhere, come out whole."""
    import asyncio

    from tests.helpers.ws_loopback import read_through_client
    good = [bytes([0x81, 126]) + (300).to_bytes(2, "big") + b"a" * 300, bytes([0x81, 5]) + b"hello"]
    evil = bytes([0x81, 127]) + (2 << 30).to_bytes(8, "big") + b"x" * 64

    async def send(reader, writer):
        try:
            for b in b"".join(good) + evil:
                writer.write(bytes([b]))
                await writer.drain()
                await asyncio.sleep(0.001)
        except ConnectionError:
            pass

    lines, reason, left = read_through_client(send)
    assert reason == "a frame of 2147483648 bytes (over 1048576)" and left == 0, (reason, left)
    assert [ln.split(b" ", 1)[1] for ln in lines] == [b"a" * 300, b"hello"]
