"""The book as published: the pure diff book, or it with a newer bookTicker's touch over it (the
view, VL: a ladder of the window's levels a side), and the ticks that end a book event."""
from engine.jit import njit

from feeds.binance.layout import C_CROSSED, C_QUOTES, C_SAT, C_TK_QUOTES, I_OVAP, I_OVAQ, I_OVBP, I_OVBQ
from feeds.books import book, book_deep as deep, depth
from feeds.books.ticks import emit_quote, touch_changed
from feeds.core.borrow import borrow, borrow_all


@njit(nogil=True, inline="always", cache=True)
def _view_walk(px, qty, j, off, s, p, vpx, vqty, vcnt, base, c, K):
    """Ladder levels px[j], px[j - 1].. px[off] worse than the ticker's price p join the view."""
    while j >= off and c < K:
        pj = px[j]
        if (pj < p) if s == 0 else (pj > p):
            vpx[base + c] = pj
            vqty[base + c] = qty[j]
            vcnt[base + c] = 1
            c += 1
        j -= 1
    return c


@njit(nogil=True, inline="always", cache=True)
def build_view(L, D, VL, I, inst, bid, ask):
    """VL's sides of inst (those asked: bid, ask): L's top levels with the ticker's touch (I_OV*)
    over them: levels better than (or at) the ticker's price are gone, the ticker's level is the
    best. A ticker so far inside the book that the ladder runs out first pulls the table's next
    levels into the ladder (when it has room), then takes whatever is still missing from the table."""
    L, D, VL, I = borrow_all(L), borrow_all(D), borrow_all(VL), borrow(I)
    vmeta, vpx, vqty, vcnt = VL[0], VL[1], VL[2], VL[3]
    meta, px, qty = L[0], L[1], L[2]
    K = vpx.shape[0] // vmeta.shape[0]
    for s in range(2):
        if not (bid if s == 0 else ask):
            continue
        b = 2 * inst + s
        base = b * K
        p = I[inst, I_OVBP if s == 0 else I_OVAP]
        q = I[inst, I_OVBQ if s == 0 else I_OVAQ]
        c = 0
        if q > 0:  # (a zero quantity: Binance has no level on that side)
            vpx[base] = p
            vqty[base] = q
            vcnt[base] = 1
            c = 1
            off, n = meta[b, book.M_OFF], meta[b, book.M_LEN]
            c = _view_walk(px, qty, off + n - 1, off, s, p, vpx, vqty, vcnt, base, c, K)
            r = min(deep.TARGET, D[3][b])
            if c < K and r > 0 and n + r <= meta[b, book.M_CAP]:
                # the ladder ran out under the ticker (a fast move): the table's next levels join
                # it (the same book), so the tickers that follow find them there, not in a scan
                deep.refill(L, D, b, r)
                c = _view_walk(px, qty, off + r - 1, off, s, p, vpx, vqty, vcnt, base, c, K)
            if c < K and D[3][b] > 0:  # still short: the table's best
                m = deep.select_best(D, b, K - c, book.sort_key(b, p), vpx, vqty, base + c)
                for a in range(m // 2):  # (worst first -> best first, as the view is built)
                    x, y = base + c + a, base + c + m - 1 - a
                    vpx[x], vpx[y] = vpx[y], vpx[x]
                    vqty[x], vqty[y] = vqty[y], vqty[x]
                for a in range(c, c + m):
                    vcnt[base + a] = 1
                c += m
        for a in range(c // 2):  # best first -> best last, the ladder's order
            x, y = base + a, base + c - 1 - a
            vpx[x], vpx[y] = vpx[y], vpx[x]
            vqty[x], vqty[y] = vqty[y], vqty[x]
        vmeta[b, book.M_OFF] = base
        vmeta[b, book.M_LEN] = c
        vmeta[b, book.M_CAP] = K


@njit(nogil=True, inline="always", cache=True)
def book_event_ticks(L, W, inst, ts, recv, out, n, top, C, size_div, ticker):
    """End of a book event: level ticks, then a quote (touch changed) or a book tick."""
    n, nl = depth.publish(W, L, inst, ts, recv, out, n, C, C_SAT, size_div)
    if touch_changed(L, inst, top):
        C[C_QUOTES] += 1
        if ticker:
            C[C_TK_QUOTES] += 1
        if top[inst, 0] != 0 and top[inst, 2] != 0 and top[inst, 0] >= top[inst, 2]:
            C[C_CROSSED] += 1
        n = emit_quote(out, n, ts, recv, inst, top, C, C_SAT, size_div)
    elif nl:
        n = depth.emit_book(out, n, ts, recv, inst, top, C, C_SAT, size_div)
    return n
