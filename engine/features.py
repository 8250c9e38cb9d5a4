"""The one feature definition: per instrument, incremental, numba.

Live loop, replay and data-set building all call `update` then `fill_row`, so what
was trained is what trades. The schema hash (models/schema) covers this file's
source: any change here changes the hash every model artifact is checked against.

Features (float32 row; NaN = missing, which every back end handles like XGBoost):
  0 spread_bps        (ask - bid) / mid, basis points
  1 imbalance         (bid_sz - ask_sz) / (bid_sz + ask_sz) at the touch
  2 microprice_bps    size-weighted microprice minus mid, basis points
  3 ret_ewma_fast     EWMA of per-update mid returns (bps), half-life 4 quote updates
  4 ret_ewma_mid      same, half-life 32
  5 ret_ewma_slow     same, half-life 256
  6 vol_ewma          sqrt of EWMA of squared returns (bps), half-life 64
  7 trade_flow        EWMA(signed trade size) / EWMA(trade size), half-life 16 trades; NaN before a trade
  8 since_trade_ms    exchange time since the instrument's last trade, ms; NaN before a trade
Decays count updates, not wall time, so features depend only on the tick sequence.
"""
import numpy as np
from numba import njit

from .records import KIND_GAP, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL, tick_instrument, tick_kind, tick_side, w_hi32, w_lo32

FEATURE_NAMES = ("spread_bps", "imbalance", "microprice_bps", "ret_ewma_fast", "ret_ewma_mid",
                 "ret_ewma_slow", "vol_ewma", "trade_flow", "since_trade_ms")
NUM_FEATURES = len(FEATURE_NAMES)
WARMUP_QUOTES = 16  # quote updates an instrument needs before it is scored


def _alpha(half_life):
    return 1.0 - 2.0 ** (-1.0 / half_life)


A_FAST, A_MID, A_SLOW, A_VOL, A_FLOW = _alpha(4), _alpha(32), _alpha(256), _alpha(64), _alpha(16)

# State columns per instrument (float64)
# (an int64 ns timestamp is kept exactly as two 32-bit halves: a float64 near 1.7e18 ns
#  would resolve only 256 ns)
(S_QUOTES, S_MID, S_BID, S_ASK, S_BSZ, S_ASZ, S_R_FAST, S_R_MID, S_R_SLOW, S_VAR,
 S_FLOW_NUM, S_FLOW_DEN, S_TRADES, S_LAST_TRADE_HI, S_LAST_TRADE_LO) = range(15)
STATE_WIDTH = 16


def new_state(n_instruments):
    return np.zeros((n_instruments, STATE_WIDTH), np.float64)


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
