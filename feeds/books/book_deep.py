"""An L2 book whose stream covers the whole book (Binance diffs name levels thousands deep): the
top of each side in the shared ladder (feeds/books/book.py), the levels below it in a hash table.

Why: a sorted ladder pays one shift per level between an update and the touch. Binance's spot
diffs land a median 85 levels from the touch and a tenth of them 650+ deep in a 1000-2400 level
book, so the ladder alone cost a third of the capture's parse time. Here an update below the
ladder's worst level is one hash probe; the ladder keeps between LOW and HIGH levels (refilled
from the table's best, spilled into it), which is all any reader of the book looks at: depth
windows and views read at most 33 levels from the touch (feeds/books/depth.py).

Invariant, per side: every ladder level is better than every table level, and the ladder holds
at least LOW levels whenever the table holds any (a view under a ticker deeper than the ladder
may pull more than HIGH into it: `refill`; the next diff spills them back). Callers check room
first (`room`): the ladder needs TARGET levels and its new ones, the table stays under half full
(`Deep.grow` otherwise).
"""
import numpy as np
from engine.jit import njit

from feeds.books import book
from feeds.books.book import M_CAP, M_LEN, M_OFF
from feeds.core.borrow import borrow, borrow_all

LOW, TARGET, HIGH = 64, 128, 256
EMPTY = np.int64(-1)  # (prices are never negative)


class Deep:
    """The table of every side's deep levels: price, book side, quantity per slot."""

    def __init__(self, nbooks, cap=1 << 14):
        self.px = np.full(cap, EMPTY, np.int64)
        self.bk = np.zeros(cap, np.int64)
        self.qty = np.zeros(cap, np.int64)
        self.count = np.zeros(nbooks + 1, np.int64)  # per side, then the total

    def arrays(self):
        return (self.px, self.bk, self.qty, self.count)

    def grow(self):
        """Twice the slots, every level rehashed."""
        px, bk, qty = self.px, self.bk, self.qty
        self.px = np.full(2 * len(px), EMPTY, np.int64)
        self.bk = np.zeros(2 * len(px), np.int64)
        self.qty = np.zeros(2 * len(px), np.int64)
        _rehash(px, bk, qty, self.px, self.bk, self.qty)

    def levels(self, b):
        """Side b's table levels as {price: quantity} (for tests)."""
        m = (self.px != EMPTY) & (self.bk == b)
        return dict(zip(self.px[m].tolist(), self.qty[m].tolist()))


@njit(nogil=True, inline="always", cache=True)
def _home(price, b, mask):
    h = (np.uint64(price) ^ (np.uint64(b) << np.uint64(56))) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(20)) & mask


@njit(nogil=True, inline="always", cache=True)
def _find(dpx, dbk, price, b):
    mask = dpx.shape[0] - 1
    i = _home(price, b, mask)
    while dpx[i] != EMPTY and (dpx[i] != price or dbk[i] != b):
        i = (i + 1) & mask
    return i


@njit(nogil=True, cache=True)
def _rehash(opx, obk, oqty, dpx, dbk, dqty):
    for i in range(opx.shape[0]):
        if opx[i] != EMPTY:
            j = _find(dpx, dbk, opx[i], obk[i])
            dpx[j], dbk[j], dqty[j] = opx[i], obk[i], oqty[i]


@njit(nogil=True, cache=True)
def _remove(D, i):
    """Empty slot i, shifting later members of its probe chain back (no tombstones)."""
    D = borrow_all(D)  # (feeds/core/borrow.py: no counting in this call)
    dpx, dbk, dqty, count = D
    mask = dpx.shape[0] - 1
    count[dbk[i]] -= 1
    count[count.shape[0] - 1] -= 1
    dpx[i] = EMPTY
    j = i
    while True:
        j = (j + 1) & mask
        if dpx[j] == EMPTY:
            return
        home = _home(dpx[j], dbk[j], mask)
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            dpx[i], dbk[i], dqty[i] = dpx[j], dbk[j], dqty[j]
            dpx[j] = EMPTY
            i = j


@njit(nogil=True, cache=True)
def _set(D, b, price, q):
    """Set a table level (q == 0 removes it)."""
    D = borrow_all(D)
    dpx, dbk, dqty, count = D
    i = _find(dpx, dbk, price, b)
    if dpx[i] == EMPTY:
        if q > 0:
            dpx[i], dbk[i], dqty[i] = price, b, q
            count[b] += 1
            count[count.shape[0] - 1] += 1
    elif q > 0:
        dqty[i] = q
    else:
        _remove(D, i)


@njit(nogil=True, cache=True)
def room(L, D, b, new, cleared):
    """0 when side b (emptied first if `cleared`) can take a batch that may add `new` levels;
    else what to grow: 1 the ladder side, 2 the table."""
    L, D = borrow_all(L), borrow_all(D)
    meta = L[0]
    n = 0 if cleared else meta[b, M_LEN]
    if n + new > meta[b, M_CAP] or meta[b, M_CAP] < TARGET:
        return 1
    count = D[3]
    if 2 * (count[count.shape[0] - 1] + new + n) > D[0].shape[0]:
        return 2
    return 0


@njit(nogil=True, cache=True)
def clear(L, D, b):
    """Side b empty, ladder and table."""
    L, D = borrow_all(L), borrow_all(D)
    meta = L[0]
    meta[b, M_LEN] = 0
    dpx, dbk = D[0], D[1]
    i = np.int64(0)
    while D[3][b] > 0 and i < dpx.shape[0]:
        if dpx[i] != EMPTY and dbk[i] == b:
            _remove(D, i)  # (the chain shifts back into i: look at it again)
        else:
            i += 1


@njit(nogil=True, cache=True)
def set_levels(L, D, b, V, off, k):
    """book.levels_set for side b's k pairs at V[2 * off..]: those at or above the ladder's worst
    level go to the ladder in one merge, those below it to the table; then the ladder is
    rebalanced. Same book as level_set in order. Marks V's ladder-applied quantities -1."""
    L, D, V = borrow_all(L), borrow_all(D), borrow(V)
    meta, px = L[0], L[1]
    if meta[b, M_LEN] == 0 and D[3][b] > 0:  # (not after a rebalance: kept for the invariant)
        refill(L, D, b, min(TARGET, D[3][b]))
    if D[3][b] == 0:  # nothing below the ladder: it takes all (and spills)
        book.levels_set(L, b, V, off, k)
    else:
        worst = book.sort_key(b, px[meta[b, M_OFF]])
        up, down = book.monotone(b, V, off, k)  # (best first: spot, futures asks; worst first: futures bids)
        if down:  # a head for the ladder, a tail below it
            h = off
            while h < off + k and book.sort_key(b, V[2 * h]) >= worst:
                h += 1
            book.levels_set(L, b, V, off, h - off)
            for i in range(h, off + k):
                _set(D, b, V[2 * i], V[2 * i + 1])
        elif up:  # a head below the ladder, a tail for it
            t = off
            while t < off + k and book.sort_key(b, V[2 * t]) < worst:
                t += 1
            for i in range(off, t):
                _set(D, b, V[2 * i], V[2 * i + 1])
            book.levels_set(L, b, V, t, off + k - t)
        else:
            for i in range(off, off + k):
                if book.sort_key(b, V[2 * i]) >= worst:
                    book.level_set(L, b, V[2 * i], V[2 * i + 1])
                else:
                    _set(D, b, V[2 * i], V[2 * i + 1])
    _rebalance(L, D, b)


@njit(nogil=True, cache=True)
def _rebalance(L, D, b):
    L, D = borrow_all(L), borrow_all(D)
    meta, px, qty, cnt = L[0], L[1], L[2], L[3]
    off, n = meta[b, M_OFF], meta[b, M_LEN]
    if n > HIGH:  # the worst levels go to the table
        s = n - TARGET
        for j in range(off, off + s):
            _set(D, b, px[j], qty[j])
        for j in range(off, off + TARGET):
            px[j], qty[j], cnt[j] = px[j + s], qty[j + s], cnt[j + s]
        meta[b, M_LEN] = TARGET
    elif n < LOW and D[3][b] > 0:
        refill(L, D, b, min(TARGET - n, D[3][b]))


@njit(nogil=True, inline="always", cache=True)
def _sift_down(px, qty, off, m, j, b):
    """The min-heap (by book.sort_key) px[off:off + m] with its node j put back in order below j."""
    p, q = px[off + j], qty[off + j]
    k = book.sort_key(b, p)
    while True:
        c = 2 * j + 1
        if c >= m:
            break
        if c + 1 < m and book.sort_key(b, px[off + c + 1]) < book.sort_key(b, px[off + c]):
            c += 1
        if book.sort_key(b, px[off + c]) >= k:
            break
        px[off + j], qty[off + j] = px[off + c], qty[off + c]
        j = c
    px[off + j], qty[off + j] = p, q


@njit(nogil=True, cache=True)
def select_best(D, b, r, bound, px, qty, off):
    """Side b's r best table levels with a sort key below `bound` (book.sort_key) into px[off:],
    qty[off:], worst first (the ladder's order); returns how many there were (<= r). One pass
    over the table keeping the best in a min-heap (the worst kept at its root), then a heap sort:
    for refills and for a view deeper than the ladder."""
    D, px, qty = borrow_all(D), borrow(px), borrow(qty)
    dpx, dbk, dqty = D[0], D[1], D[2]
    m = 0
    if r <= 0:
        return m
    for i in range(dpx.shape[0]):
        if dpx[i] == EMPTY or dbk[i] != b:
            continue
        key = book.sort_key(b, dpx[i])
        if key >= bound:
            continue
        if m < r:  # push: sift up
            j = m
            m += 1
            while j > 0 and book.sort_key(b, px[off + ((j - 1) >> 1)]) > key:
                px[off + j], qty[off + j] = px[off + ((j - 1) >> 1)], qty[off + ((j - 1) >> 1)]
                j = (j - 1) >> 1
            px[off + j], qty[off + j] = dpx[i], dqty[i]
        elif key > book.sort_key(b, px[off]):  # better than the worst kept: it takes the root's place
            px[off], qty[off] = dpx[i], dqty[i]
            _sift_down(px, qty, off, m, 0, b)
    for end in range(m - 1, 0, -1):  # heap sort: each minimum to the end (best first) ...
        px[off], px[off + end] = px[off + end], px[off]
        qty[off], qty[off + end] = qty[off + end], qty[off]
        _sift_down(px, qty, off, end, 0, b)
    for a in range(m // 2):  # ... then worst first
        x, y = off + a, off + m - 1 - a
        px[x], px[y] = px[y], px[x]
        qty[x], qty[y] = qty[y], qty[x]
    return m


@njit(nogil=True, cache=True)
def refill(L, D, b, r):
    """The table's r best levels of side b go under the ladder's worst (all better than theirs)."""
    L, D = borrow_all(L), borrow_all(D)
    meta, px, qty, cnt = L[0], L[1], L[2], L[3]
    off, n = meta[b, M_OFF], meta[b, M_LEN]
    for j in range(off + n - 1, off - 1, -1):  # make room below
        px[j + r], qty[j + r], cnt[j + r] = px[j], qty[j], cnt[j]
    select_best(D, b, r, np.int64(2**62), px, qty, off)
    for j in range(off, off + r):
        cnt[j] = 1
        _set(D, b, px[j], np.int64(0))
    meta[b, M_LEN] = n + r
