"""The engine's strategy loop as it was before strategies became user files (v1: nine features
fixed in engine/features.py, hysteresis thresholds in a cfg array), kept verbatim in substance
so bench/strategy_host.py can time the old and the new per-tick code in the same run. Not used
by the engine."""
import math

import numpy as np
from numba import njit

from engine import latency
from engine.intrinsics import call_predict, f32_bits, monotonic_ns
from engine.records import KIND_GAP, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL, tick_instrument, tick_kind, tick_side, w_hi32, w_lo32

NUM_FEATURES = 9
WARMUP_QUOTES = 16


def _alpha(half_life):
    return 1.0 - 2.0 ** (-1.0 / half_life)


A_FAST, A_MID, A_SLOW, A_VOL, A_FLOW = _alpha(4), _alpha(32), _alpha(256), _alpha(64), _alpha(16)
(S_QUOTES, S_MID, S_BID, S_ASK, S_BSZ, S_ASZ, S_R_FAST, S_R_MID, S_R_SLOW, S_VAR,
 S_FLOW_NUM, S_FLOW_DEN, S_TRADES, S_LAST_TRADE_HI, S_LAST_TRADE_LO) = range(15)
STATE_WIDTH = 16
CFG_ENTER_LONG, CFG_EXIT_LONG, CFG_ENTER_SHORT, CFG_EXIT_SHORT, CFG_EXIT_ON_EOF, CFG_WARM_EVERY, CFG_SIGMOID = range(7)


def make_cfg(enter_long=0.65, exit_long=0.55, enter_short=0.35, exit_short=0.45, sigmoid=True):
    cfg = np.zeros(8, np.float64)
    cfg[:7] = (enter_long, exit_long, enter_short, exit_short, 0.0, 0.0, 1.0 if sigmoid else 0.0)
    return cfg


@njit(nogil=True, cache=True)
def reset(state):
    """Forget everything (after a gap): instruments re-warm before they are scored."""
    for i in range(state.shape[0]):
        for k in range(state.shape[1]):
            state[i, k] = 0.0


@njit(nogil=True, inline="always", cache=True)
def update(state, w):
    """Fold one tick (int64[8] words) into its instrument's state; returns the instrument,
    or -1 when the tick is not a quote or trade (or names an unknown instrument).
    A gap tick resets every instrument, which then re-warms before it is scored."""
    inst = tick_instrument(w)
    kind = tick_kind(w)
    if kind == KIND_GAP:  # ticks were lost: every instrument's state is stale
        reset(state)
        return -1
    if inst >= state.shape[0]:
        return -1
    s = state[inst]
    if kind == KIND_QUOTE:
        bid = w[4]
        ask = w[5]
        if bid <= 0 or ask <= 0:
            return -1  # one side empty: no mid to speak of
        mid = 0.5 * (bid + ask)
        if s[S_QUOTES] > 0:
            r = (mid - s[S_MID]) / s[S_MID] * 1e4
            s[S_R_FAST] += A_FAST * (r - s[S_R_FAST])
            s[S_R_MID] += A_MID * (r - s[S_R_MID])
            s[S_R_SLOW] += A_SLOW * (r - s[S_R_SLOW])
            s[S_VAR] += A_VOL * (r * r - s[S_VAR])
        s[S_QUOTES] += 1.0
        s[S_MID] = mid
        s[S_BID] = bid
        s[S_ASK] = ask
        s[S_BSZ] = w_hi32(w[6])
        s[S_ASZ] = w_lo32(w[7])
        return inst
    if kind == KIND_TRADE:
        size = float(w_lo32(w[6]))
        side = tick_side(w)
        signed = size if side == SIDE_BUY else (-size if side == SIDE_SELL else 0.0)
        s[S_FLOW_NUM] += A_FLOW * (signed - s[S_FLOW_NUM])
        s[S_FLOW_DEN] += A_FLOW * (size - s[S_FLOW_DEN])
        s[S_TRADES] += 1.0
        s[S_LAST_TRADE_HI] = w[1] >> 32
        s[S_LAST_TRADE_LO] = w[1] & 0xFFFFFFFF
        return inst
    return -1


@njit(nogil=True, inline="always", cache=True)
def warm(state, inst):
    return state[inst, S_QUOTES] >= WARMUP_QUOTES


@njit(nogil=True, inline="always", cache=True)
def fill_row(state, inst, ts_event, row):
    """Write the instrument's feature row (float32) as of exchange time ts_event."""
    s = state[inst]
    mid = s[S_MID]
    tot = s[S_BSZ] + s[S_ASZ]
    row[0] = (s[S_ASK] - s[S_BID]) / mid * 1e4
    if tot > 0:
        row[1] = (s[S_BSZ] - s[S_ASZ]) / tot
        micro = (s[S_BID] * s[S_ASZ] + s[S_ASK] * s[S_BSZ]) / tot
        row[2] = (micro - mid) / mid * 1e4
    else:
        row[1] = np.nan
        row[2] = np.nan
    row[3] = s[S_R_FAST]
    row[4] = s[S_R_MID]
    row[5] = s[S_R_SLOW]
    row[6] = np.sqrt(s[S_VAR])
    if s[S_FLOW_DEN] > 0:
        row[7] = s[S_FLOW_NUM] / s[S_FLOW_DEN]
    else:
        row[7] = np.nan
    if s[S_TRADES] > 0:
        last = (np.int64(s[S_LAST_TRADE_HI]) << 32) | np.int64(s[S_LAST_TRADE_LO])
        row[8] = (ts_event - last) * 1e-6
    else:
        row[8] = np.nan


@njit(nogil=True, inline="always", cache=True)
def decide(pos, score, cfg):
    """Hysteresis: enter beyond the outer thresholds, leave only inside the inner ones."""
    if score >= cfg[CFG_ENTER_LONG]:
        return 1
    if score <= cfg[CFG_ENTER_SHORT]:
        return -1
    if pos == 1 and score < cfg[CFG_EXIT_LONG]:
        return 0
    if pos == -1 and score > cfg[CFG_EXIT_SHORT]:
        return 0
    return pos


@njit(nogil=True, inline="always", cache=True)
def sigmoid32(margin):
    return np.float32(1.0 / (1.0 + math.exp(-np.float64(margin))))


@njit(nogil=True, inline="always", cache=True)
def features_step(fstate, tick, row):
    """Fold a tick into its instrument's features; returns the instrument when it is warm and
    its row is filled (ready to score), else -1. Live loop and backtest share it."""
    inst = update(fstate, tick)
    if inst < 0 or not warm(fstate, inst):
        return -1
    fill_row(fstate, inst, tick[1], row)
    return inst


@njit(nogil=True, inline="always", cache=True)
def decide_step(fstate, inst, tick, out, pos, cfg, use_sigmoid, sig, signals, gen):
    """Score -> position with hysteresis; when it changes, fill the signal record `sig` (all
    but word 4, the emit time) and return True. Live loop and backtest share it."""
    margin = out[0]
    score = sigmoid32(margin) if use_sigmoid else margin
    prev = pos[inst]
    new = decide(prev, score, cfg)
    if new == prev:
        return False
    pos[inst] = new
    sig[0] = signals
    sig[1] = tick[0]
    sig[2] = tick[1]
    sig[3] = tick[2]
    sig[5] = np.int64((fstate[inst, S_BID] + fstate[inst, S_ASK]) // 2)
    sig[6] = f32_bits(score) | (f32_bits(margin) << 32)
    sig[7] = inst | ((new & 0xFF) << 16) | ((prev & 0xFF) << 24) | ((gen & 0xFFFFFFFF) << 32)
    return True


@njit(nogil=True, cache=True)
def backtest_loop(words, start, fstate, row, out, model, pos, cfg, sigs, nsig, base, margins, hist):
    """Run ticks words[start:]; signals go to sigs[nsig:], numbered from base + nsig; the margin
    of every scored tick to margins[i] (NaN elsewhere). Returns (next tick, nsig, scored): stops
    early when sigs is full."""
    use_sigmoid = cfg[CFG_SIGMOID] != 0.0
    scored = 0
    i = start
    n = words.shape[0]
    while i < n:
        if nsig == sigs.shape[0]:
            return i, nsig, scored
        tick = words[i]
        t0 = monotonic_ns()
        inst = features_step(fstate, tick, row)
        if inst >= 0:
            call_predict(model, row, out)
            scored += 1
            margins[i] = out[0]
            sig = sigs[nsig]
            if decide_step(fstate, inst, tick, out, pos, cfg, use_sigmoid, sig, base + nsig, 1):
                sig[4] = tick[2]  # acts at the tick's receive time (no live clock here)
                nsig += 1
            latency.record(hist, latency.ST_TOTAL, monotonic_ns() - t0)
        i += 1
    return i, nsig, scored


@njit(cache=True)
def featurize(words, state, X, inst_out, mid_out, idx_out):
    """models/dataset.py's data-set loop as it was."""
    m = 0
    for t in range(words.shape[0]):
        w = words[t]
        inst = update(state, w)
        if inst >= 0 and warm(state, inst):
            fill_row(state, inst, w[1], X[m])
            inst_out[m] = inst
            mid_out[m] = state[inst, S_MID]
            idx_out[m] = t
            m += 1
    return m
