"""The hftbacktest side of bench/backtest_speed.py's throughput rows, run in its own virtualenv
(hftbacktest 2.4.4 pins numpy < 2.3; the engine pins 2.4.6).

The capture goes through hftbacktest's own converter (not timed), then ROIVectorMarketDepthBacktest
replays it (its faster depth: a vector over a price range of interest, here 0.5x to 1.5x the
first trade's price; 1.7-2.4x faster than HashMapMarketDepthBacktest on this loop, measured
here). The timed part is one njit loop (hftbacktest's usual strategy shape) that, per feed event
(wait_next_feed), does the shipped strategy's work, strategies/microstructure.py ported line for
line:
  - each trade since the last event (last_trades): the trade-flow EWMAs and the last trade's
    exchange time, then a score once warm;
  - when the touch changed (best bid/ask price or size): the mid-return EWMAs and variance,
    then a score once warm (`warmup` quotes seen).
Scoring = the 9 features into a float32 row, the model through its function pointer (the
engine's call_predict), the sigmoid and the engine's hysteresis rule on the thresholds, and a
signal record when the position changes. Prices and sizes are taken in the engine's units
(1e-9 price, size units of one lot) so the two loops compute the same numbers.

Two runs of the same loop: `stub`, the pointer at a cfunc that writes margin 0 (no model:
score 0.5, the rule never trades), and `model`, the pointer at the engine's flat kernel
(bench/_hftbacktest_model.py loads it, sha256-checked). After compiling both, it prints one JSON
line (event rows, the range of interest), then runs once per line read on stdin (`stub` or
`model`, so the caller interleaves them with its own runs on a shared machine) and prints one
JSON line for each: loop seconds, feed events, scored rows, signals. A model run's margins and
their exchange times go to margins_out (.npz) for the caller to compare with its own."""
import contextlib
import json
import sys
import time

import numpy as np
from numba import cfunc, njit, types

import _hftbacktest_model as M
from hftbacktest import BacktestAsset, ROIVectorMarketDepthBacktest
from hftbacktest.data.utils import binancefutures
from hftbacktest.types import BUY_EVENT, SELL_EVENT, TRADE_EVENT

call_predict = M.call_predict


def _alpha(half_life):
    return 1.0 - 2.0 ** (-1.0 / half_life)


A_FAST, A_MID, A_SLOW, A_VOL, A_FLOW = _alpha(4), _alpha(32), _alpha(256), _alpha(64), _alpha(16)


@cfunc(types.void(types.CPointer(types.float32), types.CPointer(types.float32)))
def no_model(row, out):
    out[0] = 0.0


@njit(inline="always")
def _fill_row(row, mid, bid, ask, bsz, asz, rf, rm, rs, var, fnum, fden, trades, last_trade, ts):
    tot = bsz + asz
    row[0] = (ask - bid) / mid * 1e4
    if tot > 0:
        row[1] = (bsz - asz) / tot
        micro = (bid * asz + ask * bsz) / tot
        row[2] = (micro - mid) / mid * 1e4
    else:
        row[1] = np.nan
        row[2] = np.nan
    row[3] = rf
    row[4] = rm
    row[5] = rs
    row[6] = np.sqrt(var)
    row[7] = fnum / fden if fden > 0 else np.nan
    row[8] = (ts - last_trade) * 1e-6 if trades > 0 else np.nan


@njit(inline="always")
def _decide(model, row, out, pos, th, sigs, nsig, margins, stamps, scored, ts):
    """The model through its pointer, the sigmoid, the hysteresis rule; a signal on a change."""
    call_predict(model, row, out)
    margins[scored] = out[0]
    stamps[scored] = ts
    score = np.float32(1.0 / (1.0 + np.exp(-np.float64(out[0]))))
    new = pos
    if score >= th[0]:
        new = 1
    elif score <= th[2]:
        new = -1
    elif pos > 0 and score < th[1]:
        new = 0
    elif pos < 0 and score > th[3]:
        new = 0
    if new != pos:
        sigs[nsig, 0] = ts
        sigs[nsig, 1] = new
        sigs[nsig, 2] = pos
        sigs[nsig, 3] = score
        nsig += 1
    return new, nsig


@njit
def strategy_loop(hbt, model, warmup, th, px_scale, lots_per_qty, row, out, sigs, margins, stamps):
    quotes = 0.0
    mid = bid = ask = bsz = asz = 0.0
    rf = rm = rs = var = 0.0
    fnum = fden = 0.0
    trades = 0
    last_trade = np.int64(0)
    lbt = lat = np.int64(0)
    lbq = laq = -1.0
    pos = 0
    nsig = 0
    scored = 0
    events = 0
    while True:
        r = hbt.wait_next_feed(False, 3_600_000_000_000)
        if r == 1:  # end of data
            break
        if r != 2:
            continue
        events += 1
        tr = hbt.last_trades(0)
        n = len(tr)
        for j in range(n):
            q = float(np.int64(round(tr[j].qty * lots_per_qty)))
            ev = tr[j].ev
            signed = q if ev & BUY_EVENT else (-q if ev & SELL_EVENT else 0.0)
            fnum += A_FLOW * (signed - fnum)
            fden += A_FLOW * (q - fden)
            trades += 1
            last_trade = tr[j].exch_ts
            if quotes >= warmup:
                _fill_row(row, mid, bid, ask, bsz, asz, rf, rm, rs, var, fnum, fden, trades, last_trade, last_trade)
                pos, nsig = _decide(model, row, out, pos, th, sigs, nsig, margins, stamps, scored, last_trade)
                scored += 1
        if n:
            hbt.clear_last_trades(0)
        d = hbt.depth(0)
        bt = d.best_bid_tick
        at = d.best_ask_tick
        bq = d.bid_qty_at_tick(bt)
        aq = d.ask_qty_at_tick(at)
        if bt == lbt and at == lat and bq == lbq and aq == laq:
            continue  # the touch did not change: no quote
        lbt, lat, lbq, laq = bt, at, bq, aq
        if bq <= 0 or aq <= 0:
            continue  # one side empty: no mid to speak of
        b = float(bt * px_scale)
        a = float(at * px_scale)
        m = 0.5 * (b + a)
        if quotes > 0:
            ret = (m - mid) / mid * 1e4
            rf += A_FAST * (ret - rf)
            rm += A_MID * (ret - rm)
            rs += A_SLOW * (ret - rs)
            var += A_VOL * (ret * ret - var)
        quotes += 1.0
        mid, bid, ask = m, b, a
        bsz = float(np.int64(round(bq * lots_per_qty)))
        asz = float(np.int64(round(aq * lots_per_qty)))
        if quotes >= warmup:
            ts = np.int64(0)
            fl = hbt.feed_latency(0)  # (the depth event's exchange time, its receive time)
            if fl is not None:
                ts, _ = fl
            _fill_row(row, mid, bid, ask, bsz, asz, rf, rm, rs, var, fnum, fden, trades, last_trade, ts)
            pos, nsig = _decide(model, row, out, pos, th, sigs, nsig, margins, stamps, scored, ts)
            scored += 1
    return events, scored, nsig


def main():
    a = json.loads(sys.argv[1])
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only the protocol's JSON lines
        data = binancefutures.convert(a["capture"], buffer_size=5_000_000)
    _lib, addr = M.load(a["artifact"], a["lib"], a["lib_sha256"], a["rows"], a["rows_sha256"])
    p = a["params"]
    th = np.array([p["enter_long"], p["exit_long"], p["enter_short"], p["exit_short"]], np.float64)
    tick, lot = a["tick_size"], a["lot_size"]
    first = float(data["px"][(data["ev"] & 0xFF) == TRADE_EVENT][0])
    lb, ub = round(first * 0.5, 1), round(first * 1.5, 1)  # its range of interest: the depth it keeps
    models = {"stub": no_model.address, "model": addr}

    def once(name):
        asset = (BacktestAsset().data([data]).linear_asset(1.0).constant_order_latency(0, 0)
                 .risk_adverse_queue_model().no_partial_fill_exchange().trading_value_fee_model(0.0, 0.0)
                 .tick_size(tick).lot_size(lot).last_trades_capacity(4096).roi_lb(lb).roi_ub(ub))
        hbt = ROIVectorMarketDepthBacktest([asset])
        row, res = np.zeros(a["features"], np.float32), np.zeros(1, np.float32)
        sigs, margins = np.zeros((len(data), 4), np.float64), np.zeros(len(data), np.float32)
        stamps = np.zeros(len(data), np.int64)
        t = time.perf_counter()
        events, scored, nsig = strategy_loop(hbt, models[name], p["warmup"], th, round(tick * 1e9), round(1 / lot),
                                             row, res, sigs, margins, stamps)
        dt = time.perf_counter() - t
        hbt.close()
        if name == "model":
            np.savez(a["margins_out"], margin=margins[:scored], ts_event=stamps[:scored])
        return {"run": name, "seconds": dt, "feed_events": int(events), "scored": int(scored), "signals": int(nsig)}

    for name in models:
        once(name)  # compiles
    print(json.dumps({"events": int(len(data)), "roi": [lb, ub]}), flush=True)
    for line in sys.stdin:  # one timed run per line: the caller interleaves them with its own
        print(json.dumps(once(line.strip())), flush=True)


if __name__ == "__main__":
    main()
