"""bookTicker messages: cross-checked against the diff book on a shared update id, and (newer than
the book) their touch put over the book's until a diff reaches their update id
(feeds/binance/capture.py documents the rules)."""
from engine.jit import njit

from feeds.binance import crosscheck
from feeds.binance.layout import (C_TICKERS, C_TK_BAD_PRICE, C_TK_BAD_SIZE, C_TK_NO_BOOK, C_TK_OLD, G_QUOTE,
                                  G_SIZE_DIV, I_BOOKU, I_OVAP, I_OVAQ, I_OVBP, I_OVBQ, I_OVU, I_TS, K_A, K_B, K_E, K_T,
                                  K_a, K_b, K_u, OK, fail)
from feeds.binance.message import dec_field, int_field, ts_field
from feeds.binance.view import book_event_ticks, build_view
from feeds.books import depth
from feeds.books.ticks import price_ok
from feeds.core.jscan import V_NONE


@njit(nogil=True, inline="always", cache=True)
def _tk_price_ok(p, q):
    """A bookTicker side's price: one a tick can carry, or 0 with quantity 0 (the side is empty)."""
    return price_ok(p) or (p == 0 and q == 0)


@njit(nogil=True, inline="always", cache=True)
def ticker(b, F, inst, recv, L, D, W, VL, top, out, n, S, DM, TM):
    """A bookTicker: cross-checked against the diff book on a shared update id; newer than the
    book, its touch goes over the book's (quote tick) until a diff reaches its update id."""
    I, G, C = S[0], S[1], S[2]
    err, u_ = int_field(b, F, K_u)
    if err:
        return fail(G, err, K_u), n
    err, bp = dec_field(b, F, K_b, 9)
    if err:
        return fail(G, err, K_b), n
    err, bq = dec_field(b, F, K_B, 8)
    if err:
        return fail(G, err, K_B), n
    err, ap = dec_field(b, F, K_a, 9)
    if err:
        return fail(G, err, K_a), n
    err, aq = dec_field(b, F, K_A, 8)
    if err:
        return fail(G, err, K_A), n
    ts = I[inst, I_TS]  # spot tickers carry no time: the instrument's latest exchange time
    if F[K_T, 0] != V_NONE or F[K_E, 0] != V_NONE:
        err, key, ts = ts_field(b, F)
        if err:
            return fail(G, err, key), n
    elif ts == 0:
        ts = recv
    if bq < 0 or aq < 0:
        C[C_TK_BAD_SIZE] += 1
        return OK, n
    if not (_tk_price_ok(bp, bq) and _tk_price_ok(ap, aq)):
        C[C_TK_BAD_PRICE] += 1
        return OK, n
    C[C_TICKERS] += 1
    crosscheck.ticker_touch(DM[0], DM[1], TM[0], TM[1], C, inst, u_, bp, bq, ap, aq)
    if G[G_QUOTE] == 0:
        return OK, n
    if I[inst, I_BOOKU] < 0:
        C[C_TK_NO_BOOK] += 1
        return OK, n
    if u_ <= I[inst, I_BOOKU] or u_ <= I[inst, I_OVU]:  # (or no newer than the ticker already over it:
        C[C_TK_OLD] += 1                                # a new connection's overlap repeats tickers)
        return OK, n
    # While a ticker is over the book (I_OVU >= 0), VL is the view of the current ladder under it:
    # every ladder change either rebuilds VL (an older diff) or ends the overlay (a newer diff, a
    # snapshot, a gap). So a side whose touch the new ticker repeats has the same view: rebuilt
    # and re-published are only the sides it moves (most tickers move one).
    over = I[inst, I_OVU] >= 0
    nbid = not over or bp != I[inst, I_OVBP] or bq != I[inst, I_OVBQ]
    nask = not over or ap != I[inst, I_OVAP] or aq != I[inst, I_OVAQ]
    I[inst, I_OVU] = u_
    I[inst, I_OVBP] = bp
    I[inst, I_OVBQ] = bq
    I[inst, I_OVAP] = ap
    I[inst, I_OVAQ] = aq
    build_view(L, D, VL, I, inst, nbid, nask)
    if nbid:
        depth.changed(W, 2 * inst, depth.WHOLE_SIDE)
    if nask:
        depth.changed(W, 2 * inst + 1, -depth.WHOLE_SIDE)
    n = book_event_ticks(VL, W, inst, ts, recv, out, n, top, C, G[G_SIZE_DIV], True)
    return OK, n
