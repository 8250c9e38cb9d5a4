"""A depth strategy: order-book imbalance over several levels, queue sizes, and a `decide` that
sizes the position by conviction.

It reads the top 10 levels of each side (DEPTH = 10) and is scored whenever its book changes
(quote and book ticks) once the instrument has seen `warmup` book updates; trades feed the flow
feature. Features (NaN = missing):
  spread_bps         (ask - bid) / mid, basis points
  imb_1, imb_3,      (bid size - ask size) / (bid size + ask size) over the top 1, 3, 5, 10 levels
  imb_5, imb_10
  imb_weighted       the same over 10 levels, level k weighted 1 / (k + 1)
  bid_queue, ask_queue   size at the touch over the mean size of levels 1..4 of that side: a thin
                     touch queue in front of a thick book is about to move
  bid_depth_bps,     size-weighted distance of the side's 10 levels from the mid, basis points
  ask_depth_bps      (how far the liquidity sits)
  microprice_bps     size-weighted microprice minus mid, basis points
  ret_ewma           EWMA of per-update mid returns (bps), half-life 8 updates
  vol_ewma           sqrt of the EWMA of squared returns (bps), half-life 64 updates
  trade_flow         EWMA(signed trade size) / EWMA(trade size), half-life 16 trades; NaN before a trade

decide: the score is the model's probability of an up move. Conviction |score - 0.5| at or above
`enter - 0.5` opens a position of 1 unit plus one unit per further `step` of conviction, at most
`max_position`; the position is held (and resized) while conviction stays at or above
`exit - 0.5` on the same side, and closed below that.
"""
import math

import numpy as np
from numba import njit

from engine.strategy_api import KIND_TRADE, SIDE_BUY, SIDE_SELL, kind, side, size

FEATURES = ("spread_bps", "imb_1", "imb_3", "imb_5", "imb_10", "imb_weighted", "bid_queue", "ask_queue",
            "bid_depth_bps", "ask_depth_bps", "microprice_bps", "ret_ewma", "vol_ewma", "trade_flow")
DEPTH = 10
PARAMS = {"warmup": 32.0, "enter": 0.62, "exit": 0.54, "step": 0.05, "max_position": 5.0}

A_RET, A_VOL, A_FLOW = 1.0 - 2.0 ** (-1.0 / 8), 1.0 - 2.0 ** (-1.0 / 64), 1.0 - 2.0 ** (-1.0 / 16)
S_UPDATES, S_MID, S_RET, S_VAR, S_FLOW_NUM, S_FLOW_DEN = range(6)
STATE = 6


@njit(nogil=True, inline="always")
def _imbalance(bsz, asz, n):
    b = 0.0
    a = 0.0
    for k in range(n):
        b += bsz[k]
        a += asz[k]
    return (b - a) / (b + a) if b + a > 0 else np.nan


@njit(nogil=True, inline="always")
def _queue(sz):
    deeper = 0.0
    n = 0
    for k in range(1, 5):
        if sz[k] > 0:
            deeper += sz[k]
            n += 1
    return sz[0] / (deeper / n) if n > 0 and sz[0] > 0 else np.nan


@njit(nogil=True, inline="always")
def _depth_bps(px, sz, mid):
    num = 0.0
    den = 0.0
    for k in range(px.shape[0]):
        if sz[k] > 0:
            num += abs(px[k] - mid) * sz[k]
            den += sz[k]
    return num / den / mid * 1e4 if den > 0 else np.nan


@njit(nogil=True)
def on_tick(s, book, tick, row, params):
    if kind(tick) == KIND_TRADE:
        q = float(size(tick))
        sd = side(tick)
        signed = q if sd == SIDE_BUY else (-q if sd == SIDE_SELL else 0.0)
        s[S_FLOW_NUM] += A_FLOW * (signed - s[S_FLOW_NUM])
        s[S_FLOW_DEN] += A_FLOW * (q - s[S_FLOW_DEN])
        return False
    bid = book.bid_px[0]
    ask = book.ask_px[0]
    if bid <= 0 or ask <= 0:
        return False  # one side empty: no mid
    mid = 0.5 * (bid + ask)
    if s[S_UPDATES] > 0 and mid != s[S_MID]:
        r = (mid - s[S_MID]) / s[S_MID] * 1e4
        s[S_RET] += A_RET * (r - s[S_RET])
        s[S_VAR] += A_VOL * (r * r - s[S_VAR])
    s[S_UPDATES] += 1.0
    s[S_MID] = mid
    if s[S_UPDATES] < params.warmup:
        return False
    bsz = book.bid_sz
    asz = book.ask_sz
    row[0] = (ask - bid) / mid * 1e4
    row[1] = _imbalance(bsz, asz, 1)
    row[2] = _imbalance(bsz, asz, 3)
    row[3] = _imbalance(bsz, asz, 5)
    row[4] = _imbalance(bsz, asz, 10)
    wb = 0.0
    wa = 0.0
    for k in range(10):
        wb += bsz[k] / (k + 1.0)
        wa += asz[k] / (k + 1.0)
    row[5] = (wb - wa) / (wb + wa) if wb + wa > 0 else np.nan
    row[6] = _queue(bsz)
    row[7] = _queue(asz)
    row[8] = _depth_bps(book.bid_px, bsz, mid)
    row[9] = _depth_bps(book.ask_px, asz, mid)
    tot = float(bsz[0] + asz[0])
    row[10] = ((bid * asz[0] + ask * bsz[0]) / tot - mid) / mid * 1e4 if tot > 0 else np.nan
    row[11] = s[S_RET]
    row[12] = math.sqrt(s[S_VAR])
    row[13] = s[S_FLOW_NUM] / s[S_FLOW_DEN] if s[S_FLOW_DEN] > 0 else np.nan
    return True


@njit(nogil=True)
def decide(s, score, position, params):
    edge = score - 0.5
    conviction = abs(edge)
    sgn = 1 if edge > 0 else -1
    if conviction >= params.enter - 0.5:
        units = 1 + int((conviction - (params.enter - 0.5)) / params.step)
        return sgn * min(units, int(params.max_position))
    if position != 0 and (position > 0) == (edge > 0) and conviction >= params.exit - 0.5:
        return position  # still convinced enough to hold
    return 0
