"""The live strategy loop itself, in-process over a real ring: what it emits, and how it stops."""
import threading
import time

import numpy as np
import pytest

from engine import control as C
from engine import latency, shm
from engine.loop_args import NO_MARKS, BacktestArgs, LiveArgs, SignalView, TickView, backtest_args, new_tick, run_args
from engine.records import SIGNAL_DTYPE, SIGNAL_WORDS
from engine.sigring import SignalRing, drain
from engine.strategy_api import check_thresholds, hysteresis, sigmoid32
from engine.strategy_build import load_host
from engine.tickring import TickConsumer, TickRing, publish
from feeds.synthetic.market import Simulator, parse_uri
from models import artifact, dataset


def _setup(shm_name, words, pred, host, cfg, lease_s=60.0, n_inst=4, hs=None):
    ring = TickRing(shm_name + ".ticks", 1 << 16)
    for w in words:
        w = w.copy()
        w[2] = time.monotonic_ns()
        publish(ring.hdr, ring.data, ring.mask, w)
    ring.set_state(shm.STATE_FINISHED)
    cons = TickConsumer(shm_name + ".ticks", start="oldest")
    sr = SignalRing(shm_name + ".signals", 1 << 16)
    ctl = np.zeros(shm.HEADER_WORDS, np.int64)
    ctl[C.CTL_MODEL_ADDR] = pred.addr
    ctl[C.CTL_MODEL_ROWS] = pred.rows_addr  # (flat: a flush of several rows scores them in one call)
    ctl[C.CTL_MODEL_GEN] = 1
    ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + int(lease_s * 1e9)
    hist = latency.new_counts()
    hs = host.state(n_inst, 0) if hs is None else hs
    live = LiveArgs(signals=SignalView.of(sr), ctl=ctl, hist=hist, state=hs.loop_arrays(), row=host.new_row(),
                    out=np.zeros(1, np.float32), tick=new_tick(), sig=np.zeros(SIGNAL_WORDS, np.int64),
                    pvals=host.params(), cfg=cfg)
    return run_args(host.mod, TickView.of(cons), live), sr, ctl, hist


def _expected_signals(words, pred, host):
    """Offline: the strategy's rows, XGBoost-exact margins, the hysteresis rule in Python."""
    X, inst, _, idx = dataset.featurize(host, words, 4, 0)
    margins = pred.predict_margin(X)
    v = host.strategy.values
    pos, out = {}, []
    for j in range(len(X)):
        score = sigmoid32(margins[j])
        prev = pos.get(inst[j], 0)
        new = hysteresis(prev, score, v["enter_long"], v["exit_long"], v["enter_short"], v["exit_short"])
        if new != prev:
            pos[inst[j]] = new
            out.append((idx[j], inst[j], new, prev, score, margins[j]))
    return out


def _ticks(n, seed):
    words = np.zeros((n, 8), np.int64)
    Simulator(parse_uri(f"synthetic://?instruments=4&seed={seed}")).generate(words)
    words[:, 0] = np.arange(n)  # the seqs the ring gives them (a tick file holds the same)
    return words


def test_the_strategy_is_compiled_for_one_tick_type(tmp_path):
    """The loops give on_tick their tick read-only (host_step's borrow_ro): a backtest's comes
    read-only from the mapped file, the live loops' and the data-set loop's from writable arrays,
    and on_tick is compiled once for all of them, by build's one probe."""
    f = tmp_path / f"one_type_{tmp_path.name[-12:]}.py"  # (a strategy of its own: compiled here, not cached)
    f.write_text("from numba import njit\nFEATURES = ('a',)\nDEPTH = 0\nSTATE = 1\nPARAMS = {}\n\n"
                 "@njit\ndef on_tick(state, book, tick, row, params):\n    row[0] = tick[3]\n    return True\n")
    host = load_host(str(f))
    mod = host.mod
    assert [sig[list(mod.probe.py_func.__code__.co_varnames).index("tick")].mutable
            for sig in mod.probe.signatures] == [False]
    words = _ticks(100, 5)  # writable, as the drift monitor's buffer
    mod.featurize_loop(words, *host.state(4, 0).arrays(), host.params(), np.empty((100, 1), np.float32),
                       *(np.empty(100, t) for t in (np.int64, np.float64, np.int64)), host.new_row())
    assert mod.featurize_loop.signatures[0][0].mutable  # (the loop itself took the writable array)
    assert [sig[2].mutable for sig in mod.on_tick.signatures] == [False], mod.on_tick.signatures


def test_loop_emits_exactly_the_offline_signals(default_model, shm_name):
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    words = _ticks(30_000, 31)
    args, sr, ctl, hist = _setup(shm_name, words, pred, host, host.loop_cfg(exit_on_eof=True))
    state = host.mod.run_loop(*args)
    assert state == C.LOOP_EOF
    buf = np.zeros((1 << 16, SIGNAL_WORDS), np.int64)
    got = buf[: drain(sr.hdr, sr.data, sr.mask, buf)].copy().view(SIGNAL_DTYPE).ravel()
    want = _expected_signals(words, pred, host)
    assert len(want) > 50 and len(got) == len(want) and sr.drops == 0
    assert list(got["tick_seq"]) == [w[0] for w in want]
    assert list(got["instrument"]) == [w[1] for w in want]
    assert list(got["position"]) == [w[2] for w in want] and list(got["prev_position"]) == [w[3] for w in want]
    assert list(got["side"]) == [np.sign(w[2]) for w in want]
    # scores and margins bit for bit
    assert np.array_equal(got["score"].view(np.int32), np.array([w[4] for w in want], np.float32).view(np.int32))
    assert np.array_equal(got["margin"].view(np.int32), np.array([w[5] for w in want], np.float32).view(np.int32))
    # the mid is the touch of the tick that triggered the signal; both clocks are stamped
    trig = words[got["tick_seq"].astype(np.int64)]
    assert np.array_equal(got["mid_px"], (trig[:, 4] + trig[:, 5]) // 2)
    assert (got["ts_signal"] >= got["ts_recv"]).all() and (abs(got["ts_wall"] - time.time_ns()) < 120e9).all()
    assert ctl[C.L_TICKS] == len(words) and ctl[C.L_SIGNALS] == len(want)
    assert hist[latency.ST_MODEL].sum() == ctl[C.L_SCORED]


def test_loop_stops_when_its_lease_runs_out(default_model, shm_name):
    """Nobody renews the lease: a spinning loop must stop by itself, never spin forever."""
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    args, _, ctl, _ = _setup(shm_name, _ticks(100, 1), pred, host, host.loop_cfg(), lease_s=0.3)
    result = []
    t = threading.Thread(target=lambda: result.append(host.mod.run_loop(*args)), daemon=True)
    t.start()
    t.join(10)
    assert result == [C.LOOP_LEASE_EXPIRED]


def test_loop_stops_on_command(default_model, shm_name):
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    args, _, ctl, _ = _setup(shm_name, _ticks(100, 1), pred, host, host.loop_cfg())
    result = []
    t = threading.Thread(target=lambda: result.append(host.mod.run_loop(*args)), daemon=True)
    t.start()
    time.sleep(0.2)
    assert t.is_alive()  # spinning on an empty ring
    ctl[C.CTL_CMD] = C.CMD_STOP
    t.join(5)
    assert result == [C.LOOP_STOPPED] and ctl[C.L_TICKS] == 100


@pytest.mark.parametrize("score,pos,want", [
    (0.70, 0, 1), (0.60, 1, 1), (0.54, 1, 0), (0.60, 0, 0), (0.30, 1, -1), (0.40, -1, -1), (0.46, -1, 0),
])
def test_hysteresis(score, pos, want):
    assert hysteresis(pos, np.float32(score), 0.65, 0.55, 0.35, 0.45) == want


def test_thresholds_must_be_ordered():
    with pytest.raises(ValueError, match="thresholds must satisfy"):
        check_thresholds({"enter_long": 0.5, "exit_long": 0.55, "enter_short": 0.35, "exit_short": 0.45}, True)


def _drain_all(sr):
    buf = np.zeros((1 << 16, SIGNAL_WORDS), np.int64)
    return buf[: drain(sr.hdr, sr.data, sr.mask, buf)].copy().view(SIGNAL_DTYPE).ravel()


def test_a_conflated_backlog_is_replayed_exactly_by_the_backtest(default_model, shm_name):
    """The whole stream waits in the ring before the loop starts (the loop is far behind): with
    conflation it folds every tick, scores each pending instrument once per window, and writes a
    mark per window; the backtest given those marks emits the very same signals, and both end
    with the same books and features."""
    from engine.records import SIGNAL_FLAG_MARK, SIGNAL_MARK_WORD
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    words = _ticks(30_000, 32)
    live_hs = host.state(4, 0)
    args, sr, ctl, hist = _setup(shm_name, words, pred, host, host.loop_cfg(exit_on_eof=True, conflate=True,
                                                                            conflate_max=512), hs=live_hs)
    assert host.mod.run_loop(*args) == C.LOOP_EOF
    recs = _drain_all(sr)
    is_mark = (recs["flags"] & SIGNAL_FLAG_MARK) != 0
    live, marks = recs[~is_mark], recs[is_mark]
    X, _, _, _ = dataset.featurize(host, words, 4, 0)
    scoreable = len(X)
    assert ctl[C.L_TICKS] == len(words) and sr.drops == 0
    assert ctl[C.L_CONFLATED] > 0.5 * scoreable          # most scoreable ticks were folded, not scored
    assert ctl[C.L_SCORED] + ctl[C.L_CONFLATED] == scoreable
    assert ctl[C.L_MARKS] == len(marks) > len(words) // 512 - 1
    assert (marks["ts_event"] <= marks["tick_seq"]).all() and (np.diff(marks["tick_seq"].astype(np.int64)) > 0).all()
    assert len(live) > 10 and (np.diff(live["tick_seq"].astype(np.int64)) > 0).all()  # in tick order
    # the backtest with the recorded marks: the same signals, bit for bit
    ro = words.copy()
    ro.flags.writeable = False
    hs = host.state(4, 0)
    sigs = np.zeros((1 << 16, SIGNAL_WORDS), np.int64)
    margins = np.full(len(words), np.nan, np.float32)
    mk = np.stack([marks["ts_event"].astype(np.int64), marks["tick_seq"].astype(np.int64)], axis=1)
    cfg = host.loop_cfg()
    parts = BacktestArgs(words=ro, state=hs.loop_arrays(), row=host.new_row(), out=np.zeros(1, np.float32),
                         model=pred.addr, pvals=host.params(), cfg=cfg, sigs=sigs, margins=margins,
                         hist=latency.new_counts(), marks=mk, mrows=pred.rows_addr)
    i, nsig, scored = host.mod.backtest_loop(*backtest_args(host.mod, parts))
    bt = sigs[:nsig].copy().view(SIGNAL_DTYPE).ravel()
    # flushes of several instruments scored them in one call, live and in the backtest
    assert pred.rows_addr and live_hs.cst[host.mod.CS_BATCHED] > 0 and hs.cst[host.mod.CS_BATCHED] > 0
    # ... with the bits of one row a call: a backtest without the rows function gives the same signals
    hs1, sigs1, margins1 = host.state(4, 0), np.zeros_like(sigs), np.full(len(words), np.nan, np.float32)
    _, nsig1, _ = host.mod.backtest_loop(*backtest_args(host.mod, parts._replace(
        state=hs1.loop_arrays(), row=host.new_row(), out=np.zeros(1, np.float32), hist=latency.new_counts(),
        sigs=sigs1, margins=margins1, mrows=0)))
    assert hs1.cst[host.mod.CS_BATCHED] == 0 and nsig1 == nsig and np.array_equal(sigs1[:nsig], sigs[:nsig])
    assert np.array_equal(margins1.view(np.int32), margins.view(np.int32))
    assert i == len(words) and scored == ctl[C.L_SCORED] and nsig == len(live)
    for f in ("tick_seq", "instrument", "position", "prev_position", "mid_px"):
        assert np.array_equal(bt[f], live[f]), f
    assert np.array_equal(bt["score"].view(np.int32), live["score"].view(np.int32))
    assert np.array_equal(bt["margin"].view(np.int32), live["margin"].view(np.int32))
    for a, b in ((live_hs.fstate, hs.fstate), (live_hs.book, hs.book)):  # features state and books
        assert np.array_equal(a, b)
    # without the marks the backtest scores every scoreable tick: more signals, same final books
    hs2 = host.state(4, 0)
    _, nsig2, scored2 = host.mod.backtest_loop(*backtest_args(host.mod, parts._replace(
        state=hs2.loop_arrays(), row=host.new_row(), out=np.zeros(1, np.float32), hist=latency.new_counts(),
        marks=NO_MARKS)))
    assert scored2 == scoreable and nsig2 > nsig
    for a, b in ((live_hs.fstate, hs2.fstate), (live_hs.book, hs2.book)):  # every tick folded: the same ones
        assert np.array_equal(a, b)
    assert SIGNAL_MARK_WORD == np.int64(SIGNAL_FLAG_MARK) << 32


def test_a_stop_inside_a_conflation_window_decides_it_as_the_backtest_does(default_model, shm_name):
    """The loop is told to stop while a window is pending (a backlog in the ring, one window for all
    of it, the stop seen at the first housekeeping step): the window is flushed before the loop
    returns, and a backtest of the ticks it read, given its marks, makes the very same signals. (Left
    pending, the run made none of them and the backtest scored those ticks one by one: a suite run's
    recording gave 2 signals the live run never made.)"""
    from engine.records import SIGNAL_FLAG_MARK
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    words = _ticks(30_000, 34)
    cfg = host.loop_cfg(conflate=True, conflate_max=1 << 30, conflate_ns=10**15)  # (a window only the stop ends)
    args, sr, ctl, _ = _setup(shm_name, words, pred, host, cfg)
    ctl[C.CTL_CMD] = C.CMD_STOP  # (seen at the first housekeeping step, HOUSEKEEP_EVERY - 1 ticks in)
    assert host.mod.run_loop(*args) == C.LOOP_STOPPED
    read = int(ctl[C.L_TICKS])
    assert 0 < read < len(words)
    recs = _drain_all(sr)
    is_mark = (recs["flags"] & SIGNAL_FLAG_MARK) != 0
    live, marks = recs[~is_mark], recs[is_mark]
    assert len(marks) == 1 and marks["tick_seq"][0] == read - 1 and len(live) > 0  # one window, flushed at the stop
    ro = words[:read].copy()
    ro.flags.writeable = False
    hs = host.state(4, 0)
    sigs = np.zeros((1 << 16, SIGNAL_WORDS), np.int64)
    mk = np.stack([marks["ts_event"].astype(np.int64), marks["tick_seq"].astype(np.int64)], axis=1)
    parts = BacktestArgs(words=ro, state=hs.loop_arrays(), row=host.new_row(), out=np.zeros(1, np.float32),
                         model=pred.addr, pvals=host.params(), cfg=host.loop_cfg(), sigs=sigs,
                         margins=np.full(read, np.nan, np.float32), hist=latency.new_counts(), marks=mk,
                         mrows=pred.rows_addr)
    _, nsig, scored = host.mod.backtest_loop(*backtest_args(host.mod, parts))
    bt = sigs[:nsig].copy().view(SIGNAL_DTYPE).ravel()
    assert nsig == len(live) and scored == ctl[C.L_SCORED]
    for f in ("tick_seq", "instrument", "position", "prev_position", "mid_px"):
        assert np.array_equal(bt[f], live[f]), f
    assert np.array_equal(bt["margin"].view(np.int32), live["margin"].view(np.int32))


def test_without_conflation_a_backlog_scores_every_tick(default_model, shm_name):
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    words = _ticks(5_000, 33)
    args, sr, ctl, _ = _setup(shm_name, words, pred, host, host.loop_cfg(exit_on_eof=True, conflate=False))
    assert host.mod.run_loop(*args) == C.LOOP_EOF
    X, _, _, _ = dataset.featurize(host, words, 4, 0)
    assert ctl[C.L_SCORED] == len(X) and ctl[C.L_CONFLATED] == 0 and ctl[C.L_MARKS] == 0
