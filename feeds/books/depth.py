"""Depth windows: the top N levels per book side a feed last published (engine/records.py).

At the end of each book event a feed calls `publish`, which compares the top N levels of both
sides of its `Ladders` book (feeds/books/book.py, best level last) with the window it published before
and writes KIND_LEVEL ticks for the differences: every price that left the window (size 0)
first, then every price that entered it or changed size. The new top N becomes the published
window. The feed then writes the event's trades and a quote (touch changed) or a book tick
(`emit_book`, only levels changed). With depth 0 every function here returns at once, so a feed
opened with depth=0 writes exactly what it wrote before depth existed.

Only the sides an event changed are compared: a parser calls `changed(W, book, price)` for each
level it touches (or `changed_all` when it does not track them), and a side whose best changed
price lies behind its N-th level (its window cannot have moved) is not compared at all.

A window can be *stale* (win_n = -1): after a gap tick (`forget`: the consumer voids every book),
a resync request (`forget` again), or a book clear (`mark_stale`: DBN action R, a Binance
snapshot). The instrument's next event then starts with a clear tick (KIND_LEVEL, side NONE)
and re-sends its whole window, so a consumer that holds anything stale for it is corrected too.

Sizes are transformed exactly as ticks.emit transforms the touch (divided by the feed's size
unit, saturated to uint32 and counted), so level 0 carries the quote tick's bid_sz/ask_sz. The
one exception: a level smaller than one size unit is published as 1 (counted as saturated),
since size 0 means "gone" and its price is real.
"""
import numpy as np
from engine.jit import njit

from engine.records import KIND_BOOK, KIND_LEVEL, SIDE_BUY, SIDE_NONE, SIDE_SELL, pack_tick_tail

from feeds.books.ticks import U32_MAX, emit
from feeds.core.borrow import borrow, borrow_all

STALE = -1
WHOLE_SIDE = np.int64(2**62)  # a changed price better than any: the side is always compared


@njit(nogil=True, cache=True)
def room(depth):
    """Most ticks one event's `publish` writes: a clear tick, then per side N removals and N sets."""
    return 4 * depth + 1 if depth else 0


class Windows:
    """Published windows of `n_books` book sides (book id = 2 * instrument + side), N = depth.
    Zero-filled (untouched pages cost nothing), zero-size when depth is 0."""

    def __init__(self, n_books, depth):
        rows = n_books if depth else 0
        self.depth = depth
        self.px = np.zeros((rows, depth), np.int64)
        self.sz = np.zeros((rows, depth), np.int64)
        self.n = np.zeros(rows, np.int64)
        self.scratch = np.zeros((4, depth), np.int64)  # the new window of both sides: px, sz, px, sz
        self.dirty = np.zeros(rows, np.int64)  # the side changed since it was last compared
        self.chg = np.zeros(rows, np.int64)    # ... and its best changed price

    def arrays(self):
        return self.px, self.sz, self.n, self.scratch, self.dirty, self.chg

    def forget(self):
        """Every instrument's next event re-sends its whole window, after a clear tick."""
        self.n[:] = STALE


@njit(nogil=True, cache=True)
def forget(W):
    n = W[2]
    for b in range(n.shape[0]):
        n[b] = STALE


@njit(nogil=True, inline="always", cache=True)
def changed(W, b, price):
    """Book side b changed at `price` in the current event."""
    if W[0].shape[1] == 0:
        return
    changed_a(W[4], W[5], b, price)


@njit(nogil=True, inline="always", cache=True)
def changed_a(dirty, chg, b, price):
    """`changed` on the window's arrays, for a parser's loop that passes no tuple to a helper
    (numba increfs every array of a tuple passed on, even to an inlined function). Depth > 0."""
    bid = (b & 1) == 0
    if dirty[b] == 0 or (price > chg[b] if bid else price < chg[b]):
        chg[b] = price
    dirty[b] = 1


@njit(nogil=True, inline="always", cache=True)
def changed_all(W, inst):
    """Both sides of inst changed anywhere (for callers that do not track prices)."""
    changed(W, 2 * inst, WHOLE_SIDE)
    changed(W, 2 * inst + 1, -WHOLE_SIDE)


@njit(nogil=True, inline="always", cache=True)
def _behind(L, b, price, N):
    """Is `price` behind side b's N-th level (so the side's top N does not include it)?"""
    meta = L[0]
    ln = meta[b, 1]
    if ln < N:
        return False
    p = L[1][meta[b, 0] + ln - N]
    return price < p if (b & 1) == 0 else price > p


@njit(nogil=True, inline="always", cache=True)
def mark_stale(W, inst):
    """This instrument's book was cleared: its next event starts with a clear tick."""
    if W[0].shape[1] > 0:
        W[2][2 * inst] = STALE
        W[2][2 * inst + 1] = STALE


@njit(nogil=True, inline="always", cache=True)
def _size(q, size_div):
    """A level's size as published (no counting): returns (size, saturated?)."""
    if size_div != 1:
        q = q // size_div
    if q > U32_MAX:
        return np.int64(U32_MAX), True
    if q <= 0:
        return np.int64(1), True
    return q, False


@njit(nogil=True, inline="always", cache=True)
def _level(out, n, ts, tr, inst, side, price, size):
    # the words written out, as ticks.emit_gap does: through one shared inline writer of both,
    # ITCH at depth 10 parsed ~10% fewer messages/s (bench/feed_parsers.py's day, A/B alternated)
    w = out[n]
    w[0] = 0
    w[1] = ts
    w[2] = tr
    w[3] = price
    w[4] = 0
    w[5] = 0
    pack_tick_tail(w, size, 0, 0, inst, KIND_LEVEL, side)
    return n + 1


@njit(nogil=True, cache=True)
def emit_clear(out, n, ts, tr, inst):
    """A clear tick: the consumer empties both sides of this instrument's book."""
    return _level(out, n, ts, tr, inst, SIDE_NONE, 0, 0)


@njit(nogil=True, inline="always", cache=True)
def _better(bid, a, b):
    return a > b if bid else a < b


@njit(nogil=True, inline="always", cache=True)
def _removals(W, b, s, k, out, n, ts, tr, inst):
    """Merge walk (both lists best first): size-0 ticks for published prices not among the new
    top k. Returns (n, anything different?)."""
    wpx, wsz, wn, sc = W[0], W[1], W[2], W[3]
    bid = (b & 1) == 0
    side = SIDE_BUY if bid else SIDE_SELL
    m = wn[b]
    diff = m != k
    i = 0
    j = 0
    while i < m:
        p = wpx[b, i]
        if j < k and sc[2 * s, j] == p:
            if wsz[b, i] != sc[2 * s + 1, j]:
                diff = True
            i += 1
            j += 1
        elif j < k and _better(bid, sc[2 * s, j], p):
            j += 1  # entered the window: sent by _sets
            diff = True
        else:
            n = _level(out, n, ts, tr, inst, side, p, 0)
            diff = True
            i += 1
    return n, diff


@njit(nogil=True, inline="always", cache=True)
def _sets(W, L, b, s, k, out, n, ts, tr, inst, stats, sat_stat, size_div):
    """Ticks for the new top k's prices that are new or resized; then they become the window."""
    wpx, wsz, wn, sc = W[0], W[1], W[2], W[3]
    bid = (b & 1) == 0
    side = SIDE_BUY if bid else SIDE_SELL
    m = wn[b]
    meta, lqty = L[0], L[2]
    top = meta[b, 0] + meta[b, 1] - 1
    i = 0
    for j in range(k):
        p = sc[2 * s, j]
        while i < m and _better(bid, wpx[b, i], p):
            i += 1
        if i < m and wpx[b, i] == p and wsz[b, i] == sc[2 * s + 1, j]:
            continue
        q, sat = _size(lqty[top - j], size_div)
        if sat:
            stats[sat_stat] += 1
        n = _level(out, n, ts, tr, inst, side, p, q)
    for j in range(k):
        wpx[b, j] = sc[2 * s, j]
        wsz[b, j] = sc[2 * s + 1, j]
    wn[b] = k
    return n


@njit(nogil=True, inline="always", cache=True)
def publish(W, L, inst, ts, tr, out, n, stats, sat_stat, size_div):
    """End of a book event for `inst`: level ticks for what changed in its window (out needs
    room(N) rows free). Returns (n, level ticks written)."""
    if W[0].shape[1] == 0:  # (no depth: not even the call, whose ~10 arrays each cost a count)
        return n, np.int64(0)
    return _publish(W, L, inst, ts, tr, out, n, stats, sat_stat, size_div)


@njit(nogil=True, cache=True)
def _publish(W, L, inst, ts, tr, out, n, stats, sat_stat, size_div):
    W, L, out, stats = borrow_all(W), borrow_all(L), borrow(out), borrow(stats)  # (feeds/core/borrow.py)
    N = W[0].shape[1]
    wn, sc, dirty, chg = W[2], W[3], W[4], W[5]
    meta, lpx, lqty = L[0], L[1], L[2]
    n0 = n
    b0 = 2 * inst
    stale = wn[b0] < 0 or wn[b0 + 1] < 0
    if stale:
        n = emit_clear(out, n, ts, tr, inst)
        wn[b0] = 0
        wn[b0 + 1] = 0
    # the new top N of each side that may have moved, best first, sizes as published (k = -1: not)
    k0 = -1
    k1 = -1
    for s in range(2):
        b = b0 + s
        if not stale and (dirty[b] == 0 or _behind(L, b, chg[b], N)):
            dirty[b] = 0
            continue
        dirty[b] = 0
        ln = meta[b, 1]
        k = ln if ln < N else N
        top = meta[b, 0] + ln - 1
        for j in range(k):
            sc[2 * s, j] = lpx[top - j]
            sc[2 * s + 1, j] = _size(lqty[top - j], size_div)[0]
        if s == 0:
            k0 = k
        else:
            k1 = k
    d0 = False
    d1 = False
    if k0 >= 0:
        n, d0 = _removals(W, b0, 0, k0, out, n, ts, tr, inst)
    if k1 >= 0:
        n, d1 = _removals(W, b0 + 1, 1, k1, out, n, ts, tr, inst)
    if d0:
        n = _sets(W, L, b0, 0, k0, out, n, ts, tr, inst, stats, sat_stat, size_div)
    if d1:
        n = _sets(W, L, b0 + 1, 1, k1, out, n, ts, tr, inst, stats, sat_stat, size_div)
    return n, n - n0


@njit(nogil=True, inline="always", cache=True)
def emit_book(out, n, ts, tr, inst, top, stats, sat_stat, size_div):
    """KIND_BOOK: the event changed the window but not the touch, which it carries (from `top`,
    as every tick of the feed does)."""
    return emit(out, n, ts, tr, inst, KIND_BOOK, 0, 0, 0, top, stats, sat_stat, size_div)
