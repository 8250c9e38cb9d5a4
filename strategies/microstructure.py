"""The built-in strategy (the default): touch microstructure and trade flow, hysteresis decisions.

Features (NaN = missing, which every model back end handles as XGBoost does):
  spread_bps        (ask - bid) / mid, basis points
  imbalance         (bid_sz - ask_sz) / (bid_sz + ask_sz) at the touch
  microprice_bps    size-weighted microprice minus mid, basis points
  ret_ewma_fast     EWMA of per-update mid returns (bps), half-life 4 quote updates
  ret_ewma_mid      same, half-life 32
  ret_ewma_slow     same, half-life 256
  vol_ewma          sqrt of the EWMA of squared returns (bps), half-life 64
  trade_flow        EWMA(signed trade size) / EWMA(trade size), half-life 16 trades; NaN before a trade
  since_trade_ms    exchange time since the instrument's last trade, ms; NaN before a trade
Decays count updates, not wall time, so features depend only on the tick sequence. An
instrument is scored on its quote and trade ticks once it has seen `warmup` quotes.
No `decide`: the engine's hysteresis rule applies with the thresholds in PARAMS.
Copy this file to start a strategy of your own (README, "Strategies").
"""
import numpy as np
from numba import njit

from engine.strategy_api import KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL, ask_px, ask_sz, bid_px, bid_sz, kind, side, size

FEATURES = ("spread_bps", "imbalance", "microprice_bps", "ret_ewma_fast", "ret_ewma_mid", "ret_ewma_slow",
            "vol_ewma", "trade_flow", "since_trade_ms")
DEPTH = 0
PARAMS = {"warmup": 16.0, "enter_long": 0.65, "exit_long": 0.55, "enter_short": 0.35, "exit_short": 0.45}


def _alpha(half_life):
    return 1.0 - 2.0 ** (-1.0 / half_life)


A_FAST, A_MID, A_SLOW, A_VOL, A_FLOW = _alpha(4), _alpha(32), _alpha(256), _alpha(64), _alpha(16)

# State columns (an int64 ns timestamp is kept exactly as two 32-bit halves: a float64 near
# 1.7e18 ns would resolve only 256 ns)
(S_QUOTES, S_MID, S_BID, S_ASK, S_BSZ, S_ASZ, S_R_FAST, S_R_MID, S_R_SLOW, S_VAR,
 S_FLOW_NUM, S_FLOW_DEN, S_TRADES, S_LAST_TRADE_HI, S_LAST_TRADE_LO) = range(15)
STATE = 16


@njit(nogil=True, inline="always")
def fill_row(s, ts, row):
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
    row[7] = s[S_FLOW_NUM] / s[S_FLOW_DEN] if s[S_FLOW_DEN] > 0 else np.nan
    if s[S_TRADES] > 0:
        last = (np.int64(s[S_LAST_TRADE_HI]) << 32) | np.int64(s[S_LAST_TRADE_LO])
        row[8] = (ts - last) * 1e-6
    else:
        row[8] = np.nan


@njit(nogil=True, inline="always")
def on_tick(s, book, tick, row, params):
    k = kind(tick)
    if k == KIND_QUOTE:
        bid = bid_px(tick)
        ask = ask_px(tick)
        if bid <= 0 or ask <= 0:
            return False  # one side empty: no mid to speak of
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
        s[S_BSZ] = bid_sz(tick)
        s[S_ASZ] = ask_sz(tick)
    elif k == KIND_TRADE:
        q = float(size(tick))
        sd = side(tick)
        signed = q if sd == SIDE_BUY else (-q if sd == SIDE_SELL else 0.0)
        s[S_FLOW_NUM] += A_FLOW * (signed - s[S_FLOW_NUM])
        s[S_FLOW_DEN] += A_FLOW * (q - s[S_FLOW_DEN])
        s[S_TRADES] += 1.0
        s[S_LAST_TRADE_HI] = tick[1] >> 32
        s[S_LAST_TRADE_LO] = tick[1] & 0xFFFFFFFF
    else:
        return False
    if s[S_QUOTES] < params.warmup:
        return False
    fill_row(s, tick[1], row)
    return True
