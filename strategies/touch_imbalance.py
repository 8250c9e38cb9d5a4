"""A market maker's toy: join the touch on the side the touch imbalance favours.

Scored on every quote once the instrument has seen `warmup` quotes. `decide` ignores the model's
score and reads the imbalance the last quote left in the state: at or above `threshold` it wants
+`size` lots, at or below -`threshold` it wants -`size`, else it keeps what it has. `maker` = 1
has the backtest send its orders as maker orders that join the touch (engine backtest's
execution simulator, replay/execsim.py); 0 crosses the spread. The same rule is the strategy
bench/backtest_speed.py runs in hftbacktest beside ours.
Features: imb_1, the touch imbalance (bid size - ask size) / (bid size + ask size); spread_bps.
"""
from numba import njit

from engine.strategy_api import KIND_QUOTE, ask_px, ask_sz, bid_px, bid_sz, kind

FEATURES = ("imb_1", "spread_bps")
DEPTH = 0
STATE = 2
PARAMS = {"warmup": 8.0, "threshold": 0.8, "size": 1.0, "maker": 1.0}
S_UPDATES, S_IMB = range(2)


@njit(nogil=True)
def on_tick(s, book, tick, row, params):
    if kind(tick) != KIND_QUOTE:
        return False
    bid, ask = bid_px(tick), ask_px(tick)  # DEPTH 0: the touch is in the quote itself (book is empty)
    b, a = float(bid_sz(tick)), float(ask_sz(tick))
    if bid <= 0 or ask <= 0 or b + a <= 0:
        return False
    s[S_UPDATES] += 1.0
    s[S_IMB] = (b - a) / (b + a)
    row[0] = s[S_IMB]
    row[1] = (ask - bid) / (0.5 * (bid + ask)) * 1e4
    return s[S_UPDATES] >= params.warmup


@njit(nogil=True)
def decide(s, score, position, params):
    if s[S_IMB] >= params.threshold:
        return int(params.size)
    if s[S_IMB] <= -params.threshold:
        return -int(params.size)
    return position
