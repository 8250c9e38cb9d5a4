"""Trades and aggTrades: a trade tick each (the aggressor: a sell when the buyer is the maker),
a repeated trade id dropped."""
import numpy as np
from engine.jit import njit

from engine.records import KIND_TRADE, SIDE_BUY, SIDE_SELL

from feeds.binance.layout import (C_SAT, C_TRADE_BAD_PRICE, C_TRADE_BAD_SIZE, C_TRADE_DUP, C_TRADES, E_BOOL, E_MISSING,
                                  G_SIZE_DIV, I_OVU, I_TID, I_TS, K_T, K_a, K_m, K_p, K_q, K_t, OK, fail)
from feeds.binance.message import dec_field, int_field
from feeds.books import depth
from feeds.books.ticks import emit, price_ok
from feeds.core.jscan import V_FALSE, V_NONE, V_TRUE


@njit(nogil=True, inline="always", cache=True)
def trade(b, F, inst, recv, L, W, VL, top, out, n, S, agg):
    """A trade (or an aggTrade): a trade id at or below the last one seen is a duplicate (a new
    connection's overlap with the old one) and is dropped; a trade without an id is taken."""
    I, G, C = S[0], S[1], S[2]
    kid = K_a if agg else K_t
    tid = np.int64(-1)
    if F[kid, 0] != V_NONE:
        err, tid = int_field(b, F, kid)
        if err:
            return fail(G, err, kid), n
        if tid <= I[inst, I_TID]:
            C[C_TRADE_DUP] += 1
            return OK, n
    err, px = dec_field(b, F, K_p, 9)
    if err:
        return fail(G, err, K_p), n
    err, qty = dec_field(b, F, K_q, 8)
    if err:
        return fail(G, err, K_q), n
    err, T = int_field(b, F, K_T)
    if err:
        return fail(G, err, K_T), n
    if F[K_m, 0] == V_TRUE:
        side = SIDE_SELL  # the buyer was the maker: a sell hit the bid
    elif F[K_m, 0] == V_FALSE:
        side = SIDE_BUY
    elif F[K_m, 0] == V_NONE:
        return fail(G, E_MISSING, K_m), n
    else:
        return fail(G, E_BOOL, K_m), n
    if not price_ok(px):  # (a sign is read: a negative price is a number here)
        C[C_TRADE_BAD_PRICE] += 1
        return OK, n
    if qty <= 0:
        C[C_TRADE_BAD_SIZE] += 1
        return OK, n
    if tid >= 0:
        I[inst, I_TID] = tid
    C[C_TRADES] += 1
    ts = T * 1_000_000
    if ts > I[inst, I_TS]:
        I[inst, I_TS] = ts
    size_div = G[G_SIZE_DIV]
    if I[inst, I_OVU] >= 0:
        n, nl = depth.publish(W, VL, inst, ts, recv, out, n, C, C_SAT, size_div)  # stale only
    else:
        n, nl = depth.publish(W, L, inst, ts, recv, out, n, C, C_SAT, size_div)
    n = emit(out, n, ts, recv, inst, KIND_TRADE, side, px, qty, top, C, C_SAT, size_div)
    if nl:
        n = depth.emit_book(out, n, ts, recv, inst, top, C, C_SAT, size_div)
    return OK, n
