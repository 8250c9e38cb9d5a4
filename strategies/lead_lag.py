"""Futures leading spot: score the spot market (the lag) on what the perpetual (the lead) just did.

Binance's USD-M BTCUSDT perpetual trades several times the volume of spot BTCUSDT and its touch
tends to move first; a spot quote that has not followed yet is the edge this file models. Its
UNIVERSE names both (bind others with `--universe lead=... --universe lag=...`); every tick of
either reaches on_tick, and each one that moves a mid re-scores the lag, so a lead move is scored
at once, not at the lag's next quote.

Features (all about the lag as of this tick):
  lead_ret_bps     the lead's mid change since its previous mid (bps), the move not yet followed
  lead_ewm_bps     an EWMA of the lead's mid changes (bps, `fast`)
  basis_dev_bps    the lead-lag basis minus its slow EWMA (`slow`): spot cheap or rich to the perp
  lag_imb, lead_imb   touch imbalance of each, (bid size - ask size) / (bid size + ask size)
  lead_depth_imb   the lead's imbalance over its DEPTH levels (member_book)
  lag_spread_bps   the lag's spread
  lead_age_ms      receive time since the lead's last tick (how fresh its view is)
"""
import math

from numba import njit

from engine.strategy_api import (KIND_BOOK, KIND_QUOTE, kind, member_ask, member_bid, member_book,
                                 member_ts_recv, ts_recv)

UNIVERSE = {"lead": "BINANCE-F:BTCUSDT", "lag": "BINANCE:BTCUSDT"}
LEAD, LAG = 0, 1
FEATURES = ("lead_ret_bps", "lead_ewm_bps", "basis_dev_bps", "lag_imb", "lead_imb", "lead_depth_imb",
            "lag_spread_bps", "lead_age_ms")
DEPTH = 5
STATE = 1
SHARED = 6
PARAMS = {"fast": 0.3, "slow": 0.01, "warmup": 50.0,
          "enter_long": 0.6, "exit_long": 0.52, "enter_short": 0.4, "exit_short": 0.48}
# u.shared columns
SH_LEAD_MID, SH_LEAD_RET, SH_LEAD_EWM, SH_BASIS, SH_UPDATES, SH_LAG_MID = range(6)


@njit(nogil=True, inline="always")
def _mid(u, m):
    b, a = member_bid(u, m), member_ask(u, m)
    return 0.5 * (b + a) if b > 0 and a > 0 else 0.0


@njit(nogil=True, inline="always")
def _imb(b, a):
    return (b - a) / (b + a) if b + a > 0 else 0.0


@njit(nogil=True)
def on_tick(state, book, tick, row, params, u):
    k = kind(tick)
    if k != KIND_QUOTE and k != KIND_BOOK:
        return -1
    sh = u.shared
    lead, lag = _mid(u, LEAD), _mid(u, LAG)
    if lead <= 0.0 or lag <= 0.0:
        return -1
    if u.me == LEAD:
        prev = sh[SH_LEAD_MID]
        sh[SH_LEAD_RET] = (lead - prev) / prev * 1e4 if prev > 0 else 0.0
        sh[SH_LEAD_EWM] += params.fast * (sh[SH_LEAD_RET] - sh[SH_LEAD_EWM])
        sh[SH_LEAD_MID] = lead
    elif lag == sh[SH_LAG_MID] and k == KIND_BOOK:
        return -1  # a lag book tick below its touch: nothing this file reads moved
    sh[SH_LAG_MID] = lag
    basis = (lead - lag) / lag * 1e4
    sh[SH_BASIS] = basis if sh[SH_UPDATES] == 0 else sh[SH_BASIS] + params.slow * (basis - sh[SH_BASIS])
    sh[SH_UPDATES] += 1.0
    lb = member_book(u, LEAD)
    bsum, asum = 0.0, 0.0
    for i in range(lb.bid_sz.shape[0]):
        bsum += lb.bid_sz[i]
        asum += lb.ask_sz[i]
    g = member_book(u, LAG)
    row[0] = sh[SH_LEAD_RET] if u.me == LEAD else 0.0
    row[1] = sh[SH_LEAD_EWM]
    row[2] = basis - sh[SH_BASIS]
    row[3] = _imb(float(g.bid_sz[0]), float(g.ask_sz[0]))
    row[4] = _imb(float(lb.bid_sz[0]), float(lb.ask_sz[0]))
    row[5] = _imb(bsum, asum)
    row[6] = (member_ask(u, LAG) - member_bid(u, LAG)) / lag * 1e4
    t_lead = member_ts_recv(u, LEAD)
    row[7] = (ts_recv(tick) - t_lead) / 1e6 if t_lead > 0 else math.nan
    return LAG if sh[SH_UPDATES] >= params.warmup else -1
