"""The built-in strategy's incremental features equal features recomputed from scratch over the
whole history."""
import math

import numpy as np

from engine.records import KIND_GAP, KIND_QUOTE, KIND_TRADE, SIDE_BUY, TICK_DTYPE
from feeds.synthetic.market import Simulator, parse_uri

from .conftest import builtin_host

HOST = builtin_host()
F = HOST.strategy.module  # strategies/microstructure.py: its decay constants
WARMUP_QUOTES = int(HOST.strategy.values["warmup"])


def featurize(words, n_inst):
    return HOST.featurize(words, n_inst, 0)


def _ewma(values, alpha):
    """EWMA from zero, written as the explicit weighted sum (not the recursion)."""
    m = len(values)
    if m == 0:
        return 0.0
    w = alpha * (1 - alpha) ** np.arange(m - 1, -1, -1)
    return float(np.dot(w, values))


def reference_row(history, inst, ts_event):
    """Features of `inst` from its full tick history (a list of TICK_DTYPE records)."""
    quotes = [r for r in history if r["instrument"] == inst and r["kind"] == KIND_QUOTE
              and r["bid_px"] > 0 and r["ask_px"] > 0]
    trades = [r for r in history if r["instrument"] == inst and r["kind"] == KIND_TRADE]
    last = quotes[-1]
    bid, ask = float(last["bid_px"]), float(last["ask_px"])
    bsz, asz = float(last["bid_sz"]), float(last["ask_sz"])
    mids = np.array([(float(q["bid_px"]) + float(q["ask_px"])) / 2 for q in quotes])
    rets = (mids[1:] - mids[:-1]) / mids[:-1] * 1e4
    mid = mids[-1]
    row = [(ask - bid) / mid * 1e4, (bsz - asz) / (bsz + asz),
           ((bid * asz + ask * bsz) / (bsz + asz) - mid) / mid * 1e4,
           _ewma(rets, F.A_FAST), _ewma(rets, F.A_MID), _ewma(rets, F.A_SLOW), math.sqrt(_ewma(rets ** 2, F.A_VOL))]
    if trades:
        sizes = np.array([float(t["size"]) for t in trades])
        signed = np.array([s if t["side"] == SIDE_BUY else -s for s, t in zip(sizes, trades, strict=True)])
        row += [_ewma(signed, F.A_FLOW) / _ewma(sizes, F.A_FLOW), (ts_event - int(trades[-1]["ts_event"])) * 1e-6]
    else:
        row += [np.nan, np.nan]
    return np.array(row, np.float32)


def _ticks(n, seed=3, instruments=3, depth=0):
    words = np.zeros((n, 8), np.int64)
    Simulator(parse_uri(f"synthetic://?instruments={instruments}&seed={seed}&trade_prob=0.2&depth={depth}")).generate(words)
    return words


def _check(words, n_inst):
    X, inst, _, idx = featurize(words, n_inst)
    recs = words.view(TICK_DTYPE).ravel()
    assert len(X) > 100
    # history since the last gap (a gap resets every instrument)
    gaps = np.flatnonzero(recs["kind"] == KIND_GAP)
    checked = 0
    for j in range(0, len(X), max(1, len(X) // 150)):
        t = idx[j]
        start = gaps[gaps < t][-1] + 1 if (gaps < t).any() else 0
        ref = reference_row(list(recs[start: t + 1]), inst[j], int(recs[t]["ts_event"]))
        np.testing.assert_allclose(X[j], ref, rtol=2e-6, atol=1e-6, equal_nan=True,
                                   err_msg=f"row {j} (tick {t}, instrument {inst[j]})")
        checked += 1
    return checked, X


def test_incremental_features_equal_recomputed_from_scratch():
    checked, X = _check(_ticks(3000), 3)
    assert checked > 100
    assert not np.isnan(X[-1]).any()  # (missing values before an instrument's first trade: the reference checks)


def test_gap_resets_state_and_warmup_restarts():
    words = _ticks(3000)
    gap = np.zeros(8, np.int64)
    gap[3] = 17
    gap[7] = np.int64(KIND_GAP) << 48
    words = np.concatenate([words[:1500], gap[None, :], words[1500:]])
    checked, _ = _check(words, 3)
    assert checked > 100
    _, _, _, idx = featurize(words, 3)
    # nothing is scored right after the gap: every instrument needs WARMUP_QUOTES quotes again
    after = idx[idx > 1500]
    recs = words.view(TICK_DTYPE).ravel()
    first = after[0]
    n_quotes = np.sum((recs["kind"][1501:first + 1] == KIND_QUOTE) & (recs["instrument"][1501:first + 1] == recs["instrument"][first]))
    assert n_quotes >= WARMUP_QUOTES


def test_synthetic_feed_is_deterministic_under_a_seed():
    a, b, c = _ticks(20000, seed=9), _ticks(20000, seed=9), _ticks(20000, seed=10)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    r = a.view(TICK_DTYPE).ravel()
    assert (r["ask_px"] > r["bid_px"]).all() and (r["bid_sz"] > 0).all() and (r["ask_sz"] > 0).all()
    assert set(np.unique(r["instrument"])) == {0, 1, 2}
    assert ((r["kind"] == KIND_TRADE).mean() > 0.05)


def test_level_ticks_in_the_stream_change_nothing_for_a_touch_strategy():
    """The same market with and without book levels in the stream: the same rows, at the same
    quote and trade ticks."""
    plain, deep = _ticks(20000, seed=4), _ticks(200000, seed=4, depth=10)
    Xa, ia, _, xa = featurize(plain, 3)
    Xb, ib, _, xb = featurize(deep, 3)
    n = len(Xa)
    assert n > 5000 and len(Xb) >= n
    assert np.array_equal(Xa.view(np.int32), Xb[:n].view(np.int32)) and np.array_equal(ia, ib[:n])
    assert np.array_equal(plain[xa, 1:], deep[xb[:n], 1:])
