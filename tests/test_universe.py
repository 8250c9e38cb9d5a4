"""Strategies across instruments (UNIVERSE, engine/strategy_api.py): a strategy reading another
instrument's book sees exactly that book, a live run of several feeds and the backtest of its
recording give the same signals, the shipped lead_lag trains, backtests and runs on the real
Binance captures (futures leading spot), and every binding problem is one line before the run."""
import json
import textwrap

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.records import KIND_GAP, KIND_LEVEL, KIND_TRADE, SIDE_BUY, SIDE_NONE, SIGNAL_FLAG_MARK
from engine.tickfile import TickFile
from tests.conftest import converted
from tests.helpers.data import SPOT, USDM
from tests.helpers.feedutil import cli, one_line_error

LEVELS = 3

# every member's DEPTH levels, last trade and receive time, encoded exactly in float32 (prices in
# 0.01 units: < 2^24 for BTC; sizes and times: their low 24 bits)
PROBE = textwrap.dedent(f'''
    from numba import njit
    from engine.strategy_api import member_book, member_trade_px, member_trade_sz, member_ts_recv

    UNIVERSE = ("BINANCE-F:BTCUSDT", "BINANCE:BTC*")
    FEATURES = tuple(f"m{{m}}_{{x}}{{k}}" for m in range(2) for x in ("bp", "bs", "ap", "as") for k in range({LEVELS})) + (
        "m0_tp", "m0_tz", "m0_ts", "m1_tp", "m1_tz", "m1_ts", "me")
    DEPTH = {LEVELS}
    STATE = 1
    PARAMS = {{}}

    @njit
    def _px(x):
        return float(x // 10_000_000)

    @njit
    def _lo(x):
        return float(x & 0xFFFFFF)

    @njit
    def on_tick(state, book, tick, row, params, u):
        j = 0
        for m in range(2):
            b = member_book(u, m)
            for k in range(DEPTH):
                row[j] = _px(b.bid_px[k])
                row[j + DEPTH] = _lo(b.bid_sz[k])
                row[j + 2 * DEPTH] = _px(b.ask_px[k])
                row[j + 3 * DEPTH] = _lo(b.ask_sz[k])
                j += 1
            j += 3 * DEPTH
        for m in range(2):
            row[j] = _px(member_trade_px(u, m))
            row[j + 1] = _lo(member_trade_sz(u, m))
            row[j + 2] = _lo(member_ts_recv(u, m))
            j += 3
        row[j] = u.me
        return u.me
''')


@pytest.fixture(scope="module")
def captures():
    """The two same-day captures, converted (futures, spot)."""
    return converted(f"binance:{USDM}"), converted(f"binance:{SPOT}")


@pytest.fixture(scope="module")
def lead_lag_model(captures, tmp_path_factory):
    """strategies/lead_lag.py trained on the two captures merged (20 trees)."""
    usdm, spot = captures
    model = tmp_path_factory.mktemp("lead_lag") / "model"
    r = _run("train", f"tickfile:{usdm}", f"tickfile:{spot}", "--merge", "--strategy", "lead_lag", "--out",
             str(model), "--trees", "20", "--horizon", "500", "--horizon-unit", "ms")
    assert json.loads(r.stdout.splitlines()[-1])["auc"] > 0.6
    return model


def _run(*args, timeout=900):
    r = cli(*args, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r


def _reference_rows(tf, members):
    """Per tick index, what the probe must see: each member's top LEVELS (from a dict book of the
    level ticks, nothing shared with the engine's), last trade and receive time."""
    t = tf.ticks
    books = {i: ({}, {}) for i in range(len(tf.instruments))}
    trade = {i: (0, 0) for i in books}
    seen = {i: 0 for i in books}
    out = {}
    kinds, insts, sides = t["kind"], t["instrument"], t["side"]
    for n in range(len(t)):
        k, i = int(kinds[n]), int(insts[n])
        if k == KIND_GAP:
            for b in books.values():
                b[0].clear()
                b[1].clear()
            trade = {i: (0, 0) for i in books}
            seen = {i: 0 for i in books}
            continue
        seen[i] = int(t["ts_recv"][n])
        if k == KIND_LEVEL:
            if sides[n] == SIDE_NONE:
                books[i][0].clear()
                books[i][1].clear()
            else:
                side = books[i][0 if sides[n] == SIDE_BUY else 1]
                px, sz = int(t["price"][n]), int(t["size"][n])
                if sz:
                    side[px] = sz
                else:
                    side.pop(px, None)
            continue
        if k == KIND_TRADE:
            trade[i] = (int(t["price"][n]), int(t["size"][n]))
        row = []
        for m in members:
            bid = sorted(books[m][0].items(), reverse=True)[:LEVELS]
            ask = sorted(books[m][1].items())[:LEVELS]
            bid += [(0, 0)] * (LEVELS - len(bid))
            ask += [(0, 0)] * (LEVELS - len(ask))
            row += [p // 10_000_000 for p, _ in bid] + [s & 0xFFFFFF for _, s in bid]
            row += [p // 10_000_000 for p, _ in ask] + [s & 0xFFFFFF for _, s in ask]
        for m in members:
            row += [trade[m][0] // 10_000_000, trade[m][1] & 0xFFFFFF, seen[m] & 0xFFFFFF]
        out[n] = row
    return out


def test_a_member_sees_exactly_its_book_trade_and_time_at_every_tick(tmp_path, captures):
    """The probe strategy copies both members' books into its row on every tick of either: each
    row equals a dict book of the merged file's level ticks at that tick, for both members."""
    from replay.merged import write_merged
    merged = write_merged(list(captures), tmp_path / "merged.ticks")
    tf = TickFile(merged)
    assert tf.instruments == ["BINANCE-F:BTCUSDT", "BINANCE:BTCUSDT"]
    assert len({s["source"] for s in tf.specs}) == 2
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = tmp_path / "rows.parquet"
    _run("features", f"tickfile:{merged}", "--strategy", str(probe), "--out", str(out), "--quiet")
    rows = pq.read_table(out).to_pandas()
    ref = _reference_rows(tf, [0, 1])
    # every tick that reaches on_tick (quotes, trades, book ticks that moved the window) of both members
    assert len(rows) > 10_000 and set(rows["me"]) == {0.0, 1.0}
    feats = [c for c in rows.columns if c.startswith("m") and c != "me"]
    got = rows[feats].to_numpy(np.float64)
    want = np.array([ref[int(s)] for s in rows["seq"]], np.float64)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert len(bad) == 0, (f"{len(bad)} rows differ, first at seq {int(rows['seq'].iloc[bad[0]])}: "
                           f"{dict(zip(feats, got[bad[0]]))} vs {dict(zip(feats, want[bad[0]]))}")
    # the member a row is scored as is the tick's own (the probe returns u.me)
    assert np.array_equal(rows["instrument"].to_numpy(), rows["me"].to_numpy().astype(np.uint16))


def test_lead_lag_trains_backtests_and_runs_live_on_the_captures_bit_for_bit(tmp_path, captures, lead_lag_model):
    """strategies/lead_lag.py: trained on the two captures merged, backtested with --merge, and run
    live over both as two feeds with --record: the recording's backtest gives the live signals bit
    for bit; every signal is the lag's (spot). A model is refused for another binding."""
    usdm, spot = captures
    model = lead_lag_model
    ident = json.loads((model / "manifest.json").read_text())["strategy"]
    assert ident["universe"] == ["BINANCE-F:BTCUSDT", "BINANCE:BTCUSDT"]

    bt = json.loads(_run("backtest", str(usdm), str(spot), "--merge", "--strategy", "lead_lag", "--model", str(model),
                         "--out", str(tmp_path / "bt"), "--quiet", "--json").stdout)
    assert bt["signals"] > 20 and (tmp_path / "bt" / "merged.ticks").exists()
    assert abs(bt["decisions"]["net"] - bt["pnl"]) < 1e-6 and bt["decisions"]["multi_leg"] == 0
    assert any("in-sample" in w for w in bt["warnings"]), bt["warnings"]  # (merged from the training files)
    sig = pq.read_table(tmp_path / "bt" / "signals.parquet").to_pandas()
    assert set(sig["symbol"]) == {"BINANCE:BTCUSDT"}

    live, rec = tmp_path / "live.sig", tmp_path / "rec.ticks"
    run = json.loads(_run("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--max", "--json",
                          "--strategy", "lead_lag", "--model", str(model), "--feed", f"tickfile:{usdm}",
                          "--feed", f"tickfile:{spot}", "--record", str(rec), "--signals-out", str(live),
                          "--name", f"ll{tmp_path.name[-8:]}").stdout)
    assert run["ticks"] == len(TickFile(usdm)) + len(TickFile(spot)) and run["lost"] == 0
    _run("backtest", str(rec), "--strategy", "lead_lag", "--model", str(model), "--out", str(tmp_path / "rb"),
         "--quiet", "--json")
    from engine.signal_log import read_signals
    ls = read_signals(live)
    ls = ls[(ls["flags"] & SIGNAL_FLAG_MARK) == 0]
    rb = pq.read_table(tmp_path / "rb" / "signals.parquet")
    assert len(ls) == rb.num_rows == run["signals"] > 20
    for col in ("seq", "tick_seq", "instrument", "ts_recv", "mid_px", "position", "prev_position"):
        assert np.array_equal(ls[col].astype(np.int64), rb.column(col).to_numpy().astype(np.int64)), col
    assert np.array_equal(ls["margin"].view(np.uint32), rb.column("margin").to_numpy().view(np.uint32))
    assert set(np.unique(ls["instrument"])) == {TickFile(rec).instruments.index("BINANCE:BTCUSDT")}
    assert np.array_equal(ls["decision"], ls["seq"])  # (decide per scored member: each signal its own decision)

    # the roles swapped: another universe, the model refused (one line, before any work)
    r = cli("backtest", str(tmp_path / "bt" / "merged.ticks"), "--strategy", "lead_lag", "--model", str(model),
            "--universe", "lead=BINANCE:BTCUSDT", "--universe", "lag=BINANCE-F:BTCUSDT", "--out", str(tmp_path / "x"))
    assert "universe BINANCE-F:BTCUSDT, BINANCE:BTCUSDT" in one_line_error(r)


def test_binding_errors_are_one_line_before_the_run(tmp_path):
    """A member no input provides, a pattern matching several, an unbound or unknown role, a
    bool-returning or five-argument on_tick: each one line naming the file and the member."""
    src = "synthetic://?instruments=3&count=3000&seed=5"
    f = tmp_path / "pair.py"

    def write(universe, ret="return u.me", args="state, book, tick, row, params, u"):
        f.write_text(textwrap.dedent(f'''
            from numba import njit
            UNIVERSE = {universe}
            FEATURES = ("x",)
            DEPTH = 0
            STATE = 1
            PARAMS = {{}}

            @njit
            def on_tick({args}):
                row[0] = 1.0
                {ret}
        '''))

    def err(*extra):
        r = cli("features", src, "--strategy", str(f), "--out", str(tmp_path / "o.parquet"), *extra)
        return one_line_error(r)

    write('{"a": "SYNTHETIC:SYN0000", "b": None}')
    assert "role b is not bound: --universe b=INSTRUMENT" in err()
    assert "--universe c=...: no such role" in err("--universe", "c=SYN0001", "--universe", "b=SYN0001")
    assert "member role b (NOPE:X): no instrument of" in err("--universe", "b=NOPE:X")
    assert "matches 3 instruments" in err("--universe", "b=SYN*")
    r = cli("features", src, "--strategy", str(f), "--universe", "b=SYN0002", "--out", str(tmp_path / "ok.parquet"),
            "--json")
    assert r.returncode == 0, r.stderr
    assert set(pq.read_table(tmp_path / "ok.parquet").column("symbol").to_pylist()) == {"SYN0000", "SYN0002"}
    # a service's config binds roles too ([strategy.universe]); --universe wins over it
    conf = tmp_path / "engine.toml"
    conf.write_text(f'[strategy]\nname = "{f}"\n\n[strategy.universe]\nb = "NOPE:Y"\n')
    run = ("run", "--config", str(conf), "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--feed", src,
           "--name", f"cu{tmp_path.name[-8:]}")
    assert "member role b (NOPE:Y): no instrument of the run's sources" in one_line_error(cli(*run))
    assert "member role b (NOPE:Z)" in one_line_error(cli(*run, "--universe", "b=NOPE:Z"))
    write('("SYN0000", "SYN0001")', ret="return True")  # (a code error: numba's block, with the line and a hint)
    r = cli("features", src, "--strategy", str(f), "--out", str(tmp_path / "o.parquet"))
    assert r.returncode == 2 and "with a UNIVERSE it must return an int" in r.stderr and "Traceback" not in r.stderr
    write('("SYN0000", "SYN0001")', args="state, book, tick, row, params")
    assert "takes 5 arguments" in err() and "names a UNIVERSE" in err()
    write('("SYN0000", "SYN0001")')
    assert "--universe binds roles, and its UNIVERSE is a tuple" in err("--universe", "a=SYN0000")
    # what on_tick may not write (one probe compile with the loops' read-only tick; told apart after)
    write('("SYN0000", "SYN0001")', ret="u.ist[0, 0] = 1\n                return u.me")
    assert "on_tick writes to what `u` shows of the members" in err()
    write('("SYN0000", "SYN0001")', ret="tick[3] = 0\n                return u.me")
    assert "on_tick writes to `tick`, which is read-only" in err()
    # no default model (the synthetic market has none of its members); a failed --merge leaves no OUT
    a, b = converted("synthetic://?instruments=2&count=2000&seed=6"), converted("synthetic://?instruments=1&count=2000&seed=7")
    write('("SYNTHETIC:SYN0000", "SYNTHETIC:SYN0000@tickfile-2")')  # (the same symbol in two inputs)
    r = cli("backtest", str(a), str(b), "--merge", "--strategy", str(f), "--out", str(tmp_path / "bt"))
    assert "names a UNIVERSE, so it has no default model" in one_line_error(r)
    assert not (tmp_path / "bt").exists()


def test_lead_lag_runs_on_two_live_binance_venues_and_its_recording_backtests_bit_for_bit(tmp_path, lead_lag_model):
    """binance-live knows its URI's symbols at start: a UNIVERSE binds to a live perpetual and a live
    spot market (two local venues replaying the captures) before the first frame; the run's
    recording names both, and its backtest gives the live signals bit for bit."""
    from feeds.binance.venue import BinanceVenue

    def uri(fb, market):
        q = {"symbols": "BTCUSDT", "ws": fb.ws_url, "rest": fb.rest_url, **({"update": "0ms"} if market == "usdm" else {})}
        return f"binance-live://{market}?" + "&".join(f"{k}={v}" for k, v in q.items())

    live, rec = tmp_path / "live.sig", tmp_path / "rec.ticks"
    with BinanceVenue(USDM, market="usdm", speed=10.0, max_lines=30000) as fu, \
            BinanceVenue(SPOT, market="spot", speed=10.0, max_lines=30000) as fs:
        run = json.loads(_run("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--json",
                              "--strategy", "lead_lag", "--model", str(lead_lag_model), "--feed", uri(fu, "usdm"),
                              "--feed", uri(fs, "spot"), "--duration", "25", "--record", str(rec),
                              "--signals-out", str(live), "--name", f"lb{tmp_path.name[-8:]}").stdout)
    r = TickFile(rec)
    assert r.instruments == ["BINANCE-F:BTCUSDT", "BINANCE:BTCUSDT"]
    assert run["ticks"] == len(r) > 10_000 and all(s["counters"]["ticks"] > 1000 for s in run["sources"].values())
    # (live sources conflate when the loop falls behind: the backtest replays the run's conflation)
    _run("backtest", str(rec), "--strategy", "lead_lag", "--model", str(lead_lag_model), "--out", str(tmp_path / "rb"),
         "--conflate-as-recorded", str(live), "--quiet", "--json")
    from engine.signal_log import read_signals
    ls = read_signals(live)
    ls = ls[(ls["flags"] & SIGNAL_FLAG_MARK) == 0]
    rb = pq.read_table(tmp_path / "rb" / "signals.parquet")
    assert len(ls) == rb.num_rows == run["signals"] > 0
    for col in ("seq", "tick_seq", "instrument", "ts_recv", "position"):
        assert np.array_equal(ls[col].astype(np.int64), rb.column(col).to_numpy().astype(np.int64)), col
    assert set(np.unique(ls["instrument"])) == {1}  # (the lag: spot)


def test_a_live_source_that_names_instruments_as_it_reads_is_refused_for_a_universe(tmp_path, captures):
    r = cli("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--max", "--strategy", "lead_lag",
            "--feed", f"binance:{USDM}", "--feed", f"binance:{SPOT}", "--name", f"lr{tmp_path.name[-8:]}")
    assert "names its instruments only as it reads them" in one_line_error(r)


PAIR = textwrap.dedent('''
    from numba import njit
    from engine.strategy_api import KIND_QUOTE, ask_px, bid_px, kind, member_ask, member_bid

    UNIVERSE = {"a": "SYN0000", "b": "SYN0001"}
    FEATURES = ("spread_ab", "ret_a")
    DEPTH = 0
    STATE = 2
    SHARED = 1
    PARAMS = {"enter": 0.55}

    @njit
    def on_tick(state, book, tick, row, params, u):
        if kind(tick) != KIND_QUOTE or u.me != 0:
            return -1
        a = 0.5 * (bid_px(tick) + ask_px(tick))
        b = 0.5 * (member_bid(u, 1) + member_ask(u, 1))
        row[0] = (a - b) / a * 1e4 if b > 0 else 0.0
        row[1] = (a - state[0]) / a * 1e4 if state[0] > 0 else 0.0
        state[0] = a
        u.shared[0] += 1.0
        return 0 if u.shared[0] > 20 else -1

    @njit
    def decide(state, score, targets, params, u):
        if score >= params.enter:
            targets[0], targets[1] = 1, -1
        elif score <= 1.0 - params.enter:
            targets[0], targets[1] = -1, 1
''')


def test_a_pair_decision_is_one_signal_a_leg_of_one_decision_live_and_backtest(tmp_path, shm_name):
    """A decide over targets moves both members at once: every decision is two signals (consecutive
    seqs, opposite positions, one decision id); a live run of the file and its backtest agree on all
    of it, the decision ids included."""
    ticks = converted("synthetic://?instruments=2&count=30000&seed=41")
    pair = tmp_path / "pair.py"
    pair.write_text(PAIR)
    model = tmp_path / "model"
    _run("train", f"tickfile:{ticks}", "--strategy", str(pair), "--out", str(model), "--trees", "20")
    live = tmp_path / "live.sig"
    run = json.loads(_run("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--max", "--json",
                          "--feed", f"tickfile:{ticks}", "--strategy", str(pair), "--model", str(model),
                          "--signals-out", str(live), "--name", shm_name).stdout)
    rep = json.loads(_run("backtest", str(ticks), "--strategy", str(pair), "--model", str(model), "--out",
                          str(tmp_path / "bt"), "--quiet", "--json").stdout)
    from engine.signal_log import read_signals
    ls = read_signals(live)
    bt = pq.read_table(tmp_path / "bt" / "signals.parquet").to_pandas()
    assert len(ls) == len(bt) == run["signals"] > 20
    for col in ("seq", "tick_seq", "instrument", "position", "prev_position", "decision", "mid_px"):
        assert np.array_equal(ls[col].astype(np.int64), bt[col].to_numpy().astype(np.int64)), col
    legs = bt.groupby("decision")
    assert legs.size().eq(2).all()
    for d, g in legs:
        assert list(g["seq"]) == [d, d + 1] and list(g["instrument"]) == [0, 1]
        assert g["position"].sum() == 0 and set(g["position"].abs()) == {1}
        assert g["tick_seq"].nunique() == 1
    # the report's decisions: every one a pair; held back to back from flat, together they are the run's PnL
    d = rep["decisions"]
    assert d["decisions"] == d["multi_leg"] == len(bt) // 2 and abs(d["net"] - rep["pnl"]) < 1e-6
    assert d["multi_leg_net"] == d["net"]
