"""dbn-live:// against a fake Databento gateway on loopback (feeds/databento/venue/, checked
against the official `databento` client): the same ticks as dbn:FILE through a real feed process
and ring, authentication and key-file errors, drops and silence (one gap tick, reconnect,
resubscribe, the book rebuilt from the snapshot), gateway errors, the raw recording hook."""
import os
import subprocess
import time

import numpy as np
import pytest

from engine.records import KIND_GAP, KIND_QUOTE, TICK_DTYPE
from feeds.core.uri import FeedError

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.data import ESH4 as DATA, cut_and_whole
from tests.helpers.feedutil import check_book_consistent, consume_ring as _consume, one_line_error, read_all

FIELDS = ("ts_event", "instrument", "kind", "side", "price", "size", "bid_px", "bid_sz", "ask_px", "ask_sz")
SLICE = 25_000  # records the fault tests replay (the first 8725 are the day's opening snapshot)


@pytest.fixture(scope="module")
def ref_slice(tmp_path_factory):
    """dbn:FILE of the first SLICE records (the fault tests' market)."""
    from feeds.databento.venue import load
    import databento_dbn as dbn
    dataset, symbols, recs = load(DATA, SLICE)
    head = dbn.Metadata(dataset=dataset, start=0, stype_in=dbn.SType.RAW_SYMBOL, stype_out=dbn.SType.INSTRUMENT_ID,
                        schema=dbn.Schema.MBO, version=3).encode()
    p = tmp_path_factory.mktemp("dbnlive") / "slice.dbn"
    p.write_bytes(head + recs.tobytes())
    return read_all(f"dbn:{p}")


@pytest.fixture
def key(monkeypatch):
    from feeds.databento.venue import DEMO_KEY
    monkeypatch.setenv("DATABENTO_API_KEY", DEMO_KEY)
    return DEMO_KEY


def live_uri(gw, **extra):
    q = {"symbols": "ESH4", "gateway": f"127.0.0.1:{gw.port}", **extra}
    return "dbn-live://GLBX.MDP3?" + "&".join(f"{k}={v}" for k, v in q.items())


def run_live(uri, sink=None):
    """Every tick of a live source run in this process until it idles: (ticks, source)."""
    from feeds.core.sources import open_source
    src = open_source(uri)
    if sink is not None:
        src.raw_sink = sink
    parts = [b.copy() for b in src.batches()]
    return np.concatenate(parts).view(TICK_DTYPE).reshape(-1), src


@pytest.mark.parametrize("path", cut_and_whole(DATA))
def test_live_session_gives_the_dbn_file_ticks_through_a_ring(path, key, shm_name):
    """The whole file flat out through `engine feed` into a real ring: every tick of dbn:FILE, in
    order (ts_recv is the ring's publish time there, seq the ring's; the source itself passes
    the records' ts_recv, checked in-process below)."""
    from feeds.databento.venue import DatabentoVenue, load
    want, _ = read_all(f"dbn:{path}")
    with DatabentoVenue(path) as gw:
        proc = subprocess.Popen(engine_cmd("feed", live_uri(gw, idle_s=1), "--ring", shm_name, "--wait-consumers", "1"),
                                cwd=ROOT, env=engine_env(), stderr=subprocess.PIPE, text=True)
        try:
            got, names = _consume(shm_name, proc)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert gw.sessions[0]["subscriptions"] == [{"schema": "mbo", "stype_in": "raw_symbol", "symbols": "ESH4",
                                                    "snapshot": "0", "is_last": "1"}]
    assert proc.returncode == 0, err
    assert key not in err
    assert names == ["ESH4"]
    assert len(got) == len(want) > 0
    assert np.array_equal(got["seq"], np.arange(len(want)))
    for k in FIELDS:
        assert np.array_equal(got[k], want[k]), k
    assert f"published {len(want)} ticks" in err and f"records={len(load(path)[2])}" in err


def test_source_passes_record_ts_recv_and_counts_latency(ref_slice, key):
    from feeds.databento.venue import DatabentoVenue
    want, _ = ref_slice
    with DatabentoVenue(DATA, limit=SLICE) as gw:
        got, src = run_live(live_uri(gw, idle_s=0.5))
    assert np.array_equal(got, want)  # every word, ts_recv included
    st = src.stats()
    assert st["sessions"] == 1 and st["gaps"] == st["reconnects"] == st["gateway_errors"] == 0
    assert st["records"] == SLICE
    # ts_recv - ts_event of the records that are not snapshot records, by numpy
    from feeds.databento.venue import load
    recs = load(DATA, SLICE)[2]
    live = recs[(recs["flags"] & 0x28) == 0]
    lat = (live["ts_recv"].astype(np.int64) - live["ts_event"].astype(np.int64)) / 1000
    for q, name in ((50, "feed_latency_p50_us"), (99, "feed_latency_p99_us")):
        exact = np.percentile(lat, q)
        assert abs(st[name] - exact) <= 0.07 * exact + 1, (name, st[name], exact)  # 16 bins an octave


def test_receive_times_a_year_off_the_event_times_are_no_latency(key):
    """A gateway whose records' ts_recv are a year after their ts_event (a wrong clock, an old
    day replayed as received today): no percentile is reported, the offset and the count instead."""
    from feeds.databento.venue import DatabentoVenue
    year = 365 * 86400 * 10**9
    with DatabentoVenue(DATA, limit=SLICE) as gw:
        gw.recs["ts_recv"] += year  # (before any session: what every session is sent)
        gw.body = gw.recs.tobytes()
        _, src = run_live(live_uri(gw, idle_s=0.5))
    st = src.stats()
    assert not any(k.startswith("feed_latency_p") for k in st), st
    live = gw.recs[(gw.recs["flags"] & 0x28) == 0]
    assert st["feed_latency_off_clock"] == len(live) > 0
    last = int(live["ts_recv"][-1]) - int(live["ts_event"][-1])
    assert st["feed_latency_clock_offset_us"] == last // 1000 > year // 1000


@pytest.mark.parametrize("fault", ["drop", "silent"])
def test_lost_connection_is_one_gap_then_the_snapshot_rebuilds_the_book(ref_slice, key, fault, tmp_path):
    """The gateway drops the connection (or goes silent: a half-open TCP) after 15000 records;
    300 more pass while we reconnect. One gap tick, a new session with the same subscription,
    and the snapshot's book: from the end of the snapshot on, the ticks are dbn:FILE's."""
    from feeds.databento.venue import DatabentoVenue
    want, wsrc = ref_slice
    raw = []
    opts = {"drop_after": {0: 15000}} if fault == "drop" else {"silent_after": {0: 15000}}
    with DatabentoVenue(DATA, limit=SLICE, skip_on_reconnect=300, **opts) as gw:
        got, src = run_live(live_uri(gw, snapshot=1, heartbeat_s=1, timeout_s=3, backoff_s=0.05, idle_s=5),
                            sink=raw.append)
        sessions = gw.sessions
    st = src.stats()
    assert [s["closed_by"] for s in sessions[:1]] == [fault] and len(sessions) == 2
    assert sessions[0]["subscriptions"] == sessions[1]["subscriptions"]
    assert sessions[1]["subscriptions"][0]["snapshot"] == "1" and sessions[1]["snapshot_records"] > 100
    assert st["gaps"] == st["reconnects"] == 1 and st["sessions"] == 2
    assert st["timeouts"] == (1 if fault == "silent" else 0)
    assert st["records"] == SLICE - 300 + sessions[0]["snapshot_records"] + sessions[1]["snapshot_records"]
    gaps = np.nonzero(got["kind"] == KIND_GAP)[0]
    assert len(gaps) == 1
    # the snapshot ends with a quote (the touch after the rebuild); from there on, dbn:FILE's ticks
    end = gaps[0] + np.nonzero(got[gaps[0]:]["kind"] == KIND_QUOTE)[0][0]
    tail = got[end + 1:]
    assert len(tail) > 10_000
    assert np.array_equal(tail, want[-len(tail):])
    # the rebuilt book is dbn:FILE's book, level by level, and consistent with its orders
    for side in range(2):
        for a, b in zip(src.ladders.side(side), wsrc.ladders.side(side)):
            assert np.array_equal(a, b)
    check_book_consistent(src.ladders, src.orders)
    # the raw recording: one DBN stream (the first metadata, then every record) dbn:FILE reads
    rec = tmp_path / "rec.dbn"
    rec.write_bytes(b"".join(raw))
    again, rsrc = read_all(f"dbn:{rec}")
    assert rsrc.stats()["records"] == st["records"] and rsrc.stats()["skipped_rtypes"] == 2 + st["heartbeats"]  # mappings, heartbeats
    for side in range(2):
        for a, b in zip(rsrc.ladders.side(side), wsrc.ladders.side(side)):
            assert np.array_equal(a, b)


def test_failed_attempts_back_off_and_make_no_more_gaps(ref_slice, key):
    """After the drop, two attempts fail (connected, then closed before the greeting): they are
    counted and retried with backoff; still one gap, one reconnect, and the book comes back."""
    from feeds.databento.venue import DatabentoVenue
    want, wsrc = ref_slice
    with DatabentoVenue(DATA, limit=SLICE, drop_after={0: 15000}, refuse={1, 2}) as gw:
        got, src = run_live(live_uri(gw, snapshot=1, backoff_s=0.05, idle_s=3))  # (CI: a cold compile holds the GIL)
        closed = [s["closed_by"] for s in gw.sessions]
    st = src.stats()
    assert closed[:3] == ["drop", "refused", "refused"] and len(closed) == 4
    assert st["connect_failures"] == 2 and st["reconnects"] == 1 and st["gaps"] == 1 and st["sessions"] == 2
    assert (got["kind"] == KIND_GAP).sum() == 1
    for side in range(2):
        for a, b in zip(src.ladders.side(side), wsrc.ladders.side(side)):
            assert np.array_equal(a, b)


def test_gateway_errors_are_reported_and_counted(ref_slice, key, capfd):
    from feeds.databento.venue import DatabentoVenue
    want, _ = ref_slice
    with DatabentoVenue(DATA, limit=SLICE, error_after={0: 5000}, error_text="fake: slow reader warning") as gw:
        got, src = run_live(live_uri(gw, symbols="ESH4,NOPE4", idle_s=0.5))
    st = src.stats()
    assert st["gateway_errors"] == 2 and st["gaps"] == 0  # the unknown symbol and the injected error
    assert np.array_equal(got, want)  # an error message does not stop the stream
    err = capfd.readouterr().err
    assert "gateway error: Failed to resolve symbol: NOPE4" in err
    assert "gateway error: fake: slow reader warning" in err


def test_the_uris_symbols_have_their_ids_from_the_start_in_its_order(ref_slice, key):
    """The URI's symbols are the source's instruments once opened, ids in the URI's order (a run binds
    a UNIVERSE to them before the first record): ESH4 named second is instrument 1 before the
    gateway maps it and after; NOPE4, which the gateway cannot resolve, keeps its id, unused."""
    from app.multi_rings import fixed_instruments
    from feeds.core.sources import open_source
    from feeds.databento.venue import DatabentoVenue
    want, _ = ref_slice
    with DatabentoVenue(DATA, limit=SLICE) as gw:
        src = open_source(live_uri(gw, symbols="NOPE4,ESH4", idle_s=0.5))
        assert src.instruments == ["NOPE4", "ESH4"] and fixed_instruments(src) == 2
        got = np.concatenate([b.copy() for b in src.batches()]).view(TICK_DTYPE).reshape(-1)
    assert src.instruments == ["NOPE4", "ESH4"]
    assert len(got) == len(want) and set(got["instrument"].tolist()) == {1}
    for k in FIELDS:
        if k != "instrument":
            assert np.array_equal(got[k], want[k]), k


def test_bad_key_fails_with_one_line_and_never_shows_the_key(shm_name):
    from feeds.databento.venue import DatabentoVenue
    bad = "db-WRONGwrongWRONGwrongWRONG9Zz"
    with DatabentoVenue(DATA, limit=100) as gw:
        uri = live_uri(gw)
        res = subprocess.run(engine_cmd("feed", uri, "--ring", shm_name), cwd=ROOT, capture_output=True, text=True,
                             env=engine_env(DATABENTO_API_KEY=bad), timeout=300)
        assert gw.sessions[0]["closed_by"] == "auth failure"
    line = one_line_error(res)
    assert uri in line and "authentication failed" in line and "Authentication failed." in line
    assert bad not in res.stderr + res.stdout and bad[-5:] not in res.stderr + res.stdout


def test_a_refusal_is_one_line_whatever_the_gateway_says(monkeypatch):
    """The gateway's reason for refusing the key is its text: escaped in the error line."""
    from feeds.core.sources import open_source
    from feeds.databento.venue import DatabentoVenue
    monkeypatch.setenv("DATABENTO_API_KEY", "db-WRONGwrongWRONGwrongWRONG9Zz")
    with DatabentoVenue(DATA, limit=100, auth_error="denied\x1b[2K\r[feed] all is well") as gw:
        with pytest.raises(FeedError) as e:
            open_source(live_uri(gw))
    assert str(e.value).endswith(r"authentication failed at 127.0.0.1:%d: denied\x1b[2K\r[feed] all is well" % gw.port)


def test_key_file_must_be_private(tmp_path, monkeypatch):
    from feeds.core.sources import open_source
    from feeds.databento.venue import DEMO_KEY, DatabentoVenue
    monkeypatch.delenv("DATABENTO_API_KEY", raising=False)
    f = tmp_path / "db.key"
    f.write_text(DEMO_KEY + "\n")
    with DatabentoVenue(DATA, limit=100) as gw:
        os.chmod(f, 0o644)
        with pytest.raises(FeedError, match=r"key_file .*db.key must be a file owned by you with mode 0600 \(it is 0644"):
            open_source(live_uri(gw, key_file=f))
        with pytest.raises(FeedError, match="no API key: set DATABENTO_API_KEY or give key_file"):
            open_source(live_uri(gw))
        os.chmod(f, 0o600)
        got, src = run_live(live_uri(gw, key_file=f, idle_s=0.3))
        assert src.stats()["records"] == 100 and src.instruments == ["ESH4"]
        assert len(gw.sessions) == 1  # the refused opens never connected


def test_bad_uris_and_unreachable_gateway(key):
    import socket
    from feeds.core.sources import open_source
    for uri, msg in (("dbn-live://GLBX.MDP3", "symbols= is required"),
                     ("dbn-live://GLBX.MDP3?symbols=ESH4&schema=mbp-1&snapshot=1", "snapshot=1 needs schema=mbo"),
                     ("dbn-live://GLBX.MDP3?symbols=ESH4&schema=ohlcv-1s", "must be one of mbo"),
                     ("dbn-live://?symbols=ESH4", "no dataset named"),
                     ("dbn-live://GLBX.MDP3?symbols=ESH4&nope=1", "unknown parameter 'nope'")):
        with pytest.raises(FeedError, match=msg):
            open_source(uri)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there
    with pytest.raises(FeedError, match=f"cannot connect to 127.0.0.1:{port}"):
        open_source(f"dbn-live://GLBX.MDP3?symbols=ESH4&gateway=127.0.0.1:{port}")


def test_default_gateway_is_the_official_clients():
    from feeds.databento.gateway_protocol import cram_response, default_gateway
    assert default_gateway("GLBX.MDP3") == ("glbx-mdp3.lsg.databento.com", 13000)
    from databento.common.cram import get_challenge_response
    assert cram_response("abc123", "db-0123456789abcdefXYZ") == get_challenge_response("abc123", "db-0123456789abcdefXYZ")


def test_official_client_against_the_fake():
    """The fake is faithful enough for Databento's own client: it authenticates, subscribes and
    receives the mapping and every record; a wrong key fails its authentication."""
    db = pytest.importorskip("databento")
    from feeds.databento.venue import DEMO_KEY, DatabentoVenue
    with DatabentoVenue(DATA, limit=SLICE) as gw:
        got = []
        client = db.Live(key=DEMO_KEY, gateway="127.0.0.1", port=gw.port)
        client.subscribe(dataset="GLBX.MDP3", schema="mbo", symbols="ESH4", stype_in="raw_symbol")
        client.add_callback(got.append)
        client.start()
        deadline = time.monotonic() + 60
        while sum(isinstance(r, db.MBOMsg) for r in got) < SLICE and time.monotonic() < deadline:
            time.sleep(0.02)
        client.stop()
        client.block_for_close(timeout=10)
        assert client.symbology_map == {17077: "ESH4"}
        mbo = [bytes(r)[:56] for r in got if isinstance(r, db.MBOMsg)]
        assert b"".join(mbo) == gw.body
        bad = db.Live(key="db-WRONGwrongWRONGwrongWRONG9Zz", gateway="127.0.0.1", port=gw.port)
        with pytest.raises(db.BentoError, match="Authentication failed"):
            bad.subscribe(dataset="GLBX.MDP3", schema="mbo", symbols="ESH4")


# --- a hostile gateway (feeds/databento/venue/ inject=, spoil) ----------------------------

EVIL = "\x1b[2J\x1b[31mdisk full\n[feed] dbn-live://GLBX.MDP3: all is well\r\u202e"


def test_venue_text_is_escaped_and_cut():
    from feeds.core.venue_text import CAP, escape
    assert escape(EVIL) == r"\x1b[2J\x1b[31mdisk full\n[feed] dbn-live://GLBX.MDP3: all is well\r\u202e"
    assert escape("a\\nb") == r"a\\nb"  # a backslash the venue sent cannot pass for an escape of ours
    assert escape("é ok") == "é ok"
    long = escape("\n" * 1000)
    assert long.startswith(r"\n" * (CAP // 2)) and long.endswith("... [1000 characters, cut]") and len(long) < CAP + 40


def test_a_flood_of_gateway_messages_is_escaped_and_rate_limited(ref_slice, key, capfd):
    """The gateway sends 60,000 error and 60,000 system messages carrying ANSI escapes, a newline
    that would forge a log line and a carriage return, mid-stream. Every one is counted; at most
    venue_text.LINES are printed per PER_S seconds, escaped (one message, one line, no control
    byte), and the rest are said as a number: printed + said == sent. A refused symbol mapping
    after it is still said (a budget of its own). The ticks are unchanged."""
    from feeds.core.venue_text import LINES, PER_S
    from feeds.databento.venue import DatabentoVenue, error_records, mapping_records, system_records
    want, _ = ref_slice
    n = 60_000
    flood = error_records(n, EVIL) + system_records(n, "slow\nreader\x1b[0m") + mapping_records([(99_999, "ESH4")])
    with DatabentoVenue(DATA, limit=SLICE, inject={0: [(5000, flood)]}) as gw:
        t0 = time.monotonic()
        got, src = run_live(live_uri(gw, idle_s=0.5))
        elapsed = time.monotonic() - t0
    st = src.stats()
    assert st["gateway_errors"] == st["system_msgs"] == n
    assert np.array_equal(got, want)
    err = capfd.readouterr().err
    assert not any(c in err for c in "\x1b\r\u202e")
    lines = err.splitlines()
    assert all(ln.startswith("[feed] ") for ln in lines), [ln for ln in lines if not ln.startswith("[feed] ")][:3]
    shown = [ln for ln in lines if ": gateway error: " in ln or ": gateway: " in ln]
    assert r"gateway error: \x1b[2J\x1b[31mdisk full\n[feed] dbn-live://GLBX.MDP3: all is well\r\u202e" in shown[0]
    said = [int(ln.split(": ")[1].split()[0]) for ln in lines if "more gateway messages not shown" in ln]
    assert st["log_suppressed"] == sum(said) > 0 and len(shown) + sum(said) == 2 * n
    assert len(shown) <= LINES * (elapsed // PER_S + 2)  # (per started interval, however long the run)
    assert len(err) < 20_000 * (elapsed // PER_S + 2)
    assert st["mapping_conflicts"] == 1 and "gateway mapped id 99999 to ESH4 but ESH4 is id 17077" in err


def test_mappings_of_symbols_never_subscribed_make_no_instrument(ref_slice, key, capfd):
    """50,000 symbol mappings of symbols never subscribed, then records of those ids: no instrument
    is made (the URI's symbols are the instruments), the mappings are counted, the records too
    (untracked), and the ticks are unchanged. The refusals are said within the log's budget."""
    from feeds.core.venue_text import LINES, PER_S
    from feeds.databento.venue import DatabentoVenue, load, mapping_records, with_id
    want, _ = ref_slice
    recs = load(DATA, 2000)[2]
    junk = mapping_records([(500_000 + i, f"ZZ{i}\x1b[0m") for i in range(50_000)])
    junk += with_id(recs[:1000], 500_001).tobytes() + with_id(recs[1000:], 549_999).tobytes()
    with DatabentoVenue(DATA, limit=SLICE, inject={0: [(3000, junk)]}) as gw:
        t0 = time.monotonic()
        got, src = run_live(live_uri(gw, idle_s=0.5))
        elapsed = time.monotonic() - t0
    st = src.stats()
    assert src.instruments == ["ESH4"] and st["instruments"] == 1
    assert st["unsubscribed_mappings"] == 50_000 and st["untracked"] == 2000 and st["mapping_conflicts"] == 0
    assert np.array_equal(got, want)
    err = capfd.readouterr().err
    shown = [ln for ln in err.splitlines() if ", a symbol not subscribed: ignored" in ln]
    said = [int(ln.split(": ")[1].split()[0]) for ln in err.splitlines()
            if "more refused symbol mappings not shown" in ln]
    assert r"gateway mapped id 500000 to ZZ0\x1b[0m, a symbol not subscribed" in shown[0] and "\x1b" not in err
    assert len(shown) + sum(said) == 50_000 == len(shown) + st["log_suppressed"]
    assert len(shown) <= LINES * (elapsed // PER_S + 2)


def test_a_second_id_for_a_symbol_or_symbol_for_an_id_never_merges_two_books(ref_slice, key, capfd):
    """Mid-stream the gateway maps ESH4 to a second id (then sends another book's records under
    it) and ESM4, also subscribed, to ESH4's id: both mappings are refused and counted, the second
    id's records are untracked, and ESH4's ticks and book are dbn:FILE's alone."""
    from feeds.databento.venue import DatabentoVenue, load, mapping_records, with_id
    want, wsrc = ref_slice
    other = with_id(load(DATA, 9000)[2], 99_999)  # the day's opening book again, as another instrument
    junk = mapping_records([(99_999, "ESH4"), (17077, "ESM4")]) + other.tobytes()
    with DatabentoVenue(DATA, limit=SLICE, inject={0: [(12_000, junk)]}) as gw:
        got, src = run_live(live_uri(gw, symbols="ESH4,ESM4", idle_s=0.5))
    st = src.stats()
    assert st["mapping_conflicts"] == 2 and st["untracked"] == len(other) and st["unsubscribed_mappings"] == 0
    assert src.instruments == ["ESH4", "ESM4"] and st["gateway_errors"] == 1  # ESM4: not in the fake's file
    assert np.array_equal(got, want)
    for side in range(2):
        for a, b in zip(src.ladders.side(side), wsrc.ladders.side(side)):
            assert np.array_equal(a, b)
    check_book_consistent(src.ladders, src.orders)
    err = capfd.readouterr().err
    assert "gateway mapped id 99999 to ESH4 but ESH4 is id 17077 in this session: ignored" in err
    assert "gateway mapped id 17077 to ESM4 but id 17077 is ESH4 in this session: ignored" in err


def test_bad_prices_from_the_gateway_never_reach_a_tick(key, tmp_path):
    """The gateway's records with bad values (feeds.databento.venue.spoil: prices of 0, negative, 2^63 - 2,
    past MAX_PRICE; sizes of 0): the live ticks are dbn:FILE's of the same records with each spoilt
    one made a no-op, and each is counted by kind."""
    from feeds.databento.venue import DatabentoVenue, load, spoil
    import databento_dbn as dbn
    dataset, _, recs = load(DATA, SLICE)
    bad, ref, n_price, n_size = spoil(recs, every=100)
    head = dbn.Metadata(dataset=dataset, start=0, stype_in=dbn.SType.RAW_SYMBOL, stype_out=dbn.SType.INSTRUMENT_ID,
                        schema=dbn.Schema.MBO, version=3).encode()
    (tmp_path / "ref.dbn").write_bytes(head + ref.tobytes())
    want, rsrc = read_all(f"dbn:{tmp_path / 'ref.dbn'}")
    with DatabentoVenue(DATA, limit=SLICE) as gw:
        gw.recs[:] = bad  # (before any session: what every session is sent)
        gw.body = gw.recs.tobytes()
        got, src = run_live(live_uri(gw, idle_s=0.5))
    st = src.stats()
    assert st["bad_price"] == n_price > 50 and st["bad_size"] == n_size > 10
    assert np.array_equal(got, want)
    from feeds.books.ticks import MAX_PRICE
    for k in ("price", "bid_px", "ask_px"):
        assert ((got[k] >= 0) & (got[k] <= MAX_PRICE)).all(), k
