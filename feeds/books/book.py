"""Order books for the feed handlers: price ladders (L2) and an order table on top (L3).

Everything here is numba over flat arrays so a parser calls it per message without Python.

Ladder: one sorted array of levels per book side (book id = instrument * 2 + side, side 0 bid,
1 ask), stored so the best level is last (bids ascending by price, asks descending): most
activity is near the touch, so inserts and removals move few levels. Side arrays live in one
pool; a side that fills up is moved to the pool's end with twice the room by `grow`, which runs
outside the parser (the parser returns NEED_ROOM instead of allocating).

Order table: open addressing with linear probing and backward-shift deletion (no tombstones,
so probe chains stay short for a whole trading day of adds and deletes); consecutive refs
share a cache line (`_slot`).
"""
import numpy as np
from engine.jit import njit

from feeds.core.borrow import borrow, borrow_all

BID, ASK = 0, 1
# ladder meta columns
M_OFF, M_LEN, M_CAP = 0, 1, 2
# order table value columns
O_BOOK, O_PRICE, O_QTY = 0, 1, 2
EMPTY_KEY = np.int64(-(2 ** 63))  # order refs are unsigned 64-bit on the wire; this one never occurs in practice


class Ladders:
    """Price levels for `nbooks` book sides (2 per instrument)."""

    def __init__(self, nbooks, pool=1 << 16):
        self.meta = np.zeros((nbooks, 3), np.int64)
        self.px = np.zeros(pool, np.int64)
        self.qty = np.zeros(pool, np.int64)
        self.cnt = np.zeros(pool, np.int64)
        self.used = np.zeros(1, np.int64)

    def arrays(self):
        return (self.meta, self.px, self.qty, self.cnt, self.used)

    def grow(self, book):
        """Give book side `book` twice its room (at least 16 levels) at the pool's end."""
        new_cap = max(16, 2 * int(self.meta[book, M_CAP]))
        if self.used[0] + new_cap > len(self.px):
            self._compact(extra=new_cap)
        off, n, _ = self.meta[book]  # (compaction moves it)
        start = self.used[0]
        for a in (self.px, self.qty, self.cnt):
            a[start:start + n] = a[off:off + n]
        self.meta[book] = (start, n, new_cap)
        self.used[0] = start + new_cap

    def _compact(self, extra):
        """Rebuild the pool with only live sides (and room for `extra` more levels)."""
        live = int(self.meta[:, M_CAP].sum())
        size = max(len(self.px), 1 << 16)
        while size < 2 * (live + extra):
            size *= 2
        px, qty, cnt = (np.zeros(size, np.int64) for _ in range(3))
        pos = 0
        for b in np.nonzero(self.meta[:, M_CAP])[0]:
            off, n, cap = self.meta[b]
            px[pos:pos + n] = self.px[off:off + n]
            qty[pos:pos + n] = self.qty[off:off + n]
            cnt[pos:pos + n] = self.cnt[off:off + n]
            self.meta[b, M_OFF] = pos
            pos += cap
        self.px, self.qty, self.cnt = px, qty, cnt
        self.used[0] = pos

    def side(self, book):
        """(prices, qtys, counts) of one side, best first (copies; for tests and tools)."""
        off, n, _ = self.meta[book]
        sl = slice(off, off + n)
        return self.px[sl][::-1].copy(), self.qty[sl][::-1].copy(), self.cnt[sl][::-1].copy()


class Orders:
    """order ref -> (book side, price, open quantity)."""

    def __init__(self, cap=1 << 16):
        self.keys = np.full(cap, EMPTY_KEY, np.int64)
        self.vals = np.zeros((cap, 3), np.int64)
        self.count = np.zeros(1, np.int64)

    def arrays(self):
        return (self.keys, self.vals, self.count)

    def maybe_grow(self):
        """Double the table when it is over a third full (the parser asks before it inserts)."""
        if self.count[0] * 3 < len(self.keys):
            return False
        keys, vals = self.keys, self.vals
        self.keys = np.full(2 * len(keys), EMPTY_KEY, np.int64)
        self.vals = np.zeros((2 * len(keys), 3), np.int64)
        rehash(keys, vals, self.keys, self.vals)
        return True


@njit(nogil=True, cache=True)
def rehash(okeys, ovals, keys, vals):
    """The orders of (okeys, ovals) inserted into the empty table (keys, vals): Orders' growth
    (a live source compiles it before it opens)."""
    for i in range(okeys.shape[0]):
        if okeys[i] != EMPTY_KEY:
            j = _find(keys, okeys[i])
            keys[j] = okeys[i]
            vals[j, 0] = ovals[i, 0]
            vals[j, 1] = ovals[i, 1]
            vals[j, 2] = ovals[i, 2]


# --- order table -------------------------------------------------------------------------

@njit(nogil=True, inline="always", cache=True)
def _slot(key, mask):
    # Fibonacci hashing of key // 8 spreads runs of refs; key % 8 keeps 8 consecutive refs (as
    # exchanges number orders) in one cache line of keys, so a lookup of a recent order hits
    # cache (the first probe's miss was the ITCH parser's largest cost after refcounting)
    h = np.uint64(key >> 3) * np.uint64(0x9E3779B97F4A7C15)
    return ((np.int64(h >> np.uint64(17)) << 3) | (key & 7)) & mask


@njit(nogil=True, inline="always", cache=True)
def _find(keys, key):
    """Slot holding `key`, or the empty slot where it would go."""
    mask = keys.shape[0] - 1
    i = _slot(key, mask)
    while keys[i] != EMPTY_KEY and keys[i] != key:
        i = (i + 1) & mask
    return i


# The table's functions come twice: on its arrays, for a parser's loop that unpacks O once and
# borrows the arrays (feeds/core/borrow.py: numba's atomic refcounts on arrays handed on were most of
# ITCH's time), and on the tuple O, for everyone else.

@njit(nogil=True, inline="always", cache=True)
def ofind(keys, key):
    """Slot of order `key`, or -1."""
    i = _find(keys, key)
    return i if keys[i] == key else -1


@njit(nogil=True, inline="always", cache=True)
def oinsert(keys, vals, count, key, book, price, qty):
    """Insert a new order; returns its slot, or -1 if the ref is already live (a duplicate add).
    The caller made sure the table has room (Orders.maybe_grow)."""
    i = _find(keys, key)
    if keys[i] == key:
        return -1
    keys[i] = key
    vals[i, O_BOOK] = book
    vals[i, O_PRICE] = price
    vals[i, O_QTY] = qty
    count[0] += 1
    return i


@njit(nogil=True, inline="always", cache=True)
def oremove(keys, vals, count, i):
    """Remove the order in slot i, shifting later members of its probe chain back."""
    mask = keys.shape[0] - 1
    keys[i] = EMPTY_KEY
    count[0] -= 1
    j = i
    while True:
        j = (j + 1) & mask
        if keys[j] == EMPTY_KEY:
            return
        home = _slot(keys[j], mask)
        # move j into the hole at i unless its home lies cyclically in (i, j]
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            keys[i] = keys[j]
            vals[i, 0] = vals[j, 0]
            vals[i, 1] = vals[j, 1]
            vals[i, 2] = vals[j, 2]
            keys[j] = EMPTY_KEY
            i = j


@njit(nogil=True, inline="always", cache=True)
def order_find(O, key):
    """Slot of order `key`, or -1."""
    return ofind(O[0], key)


@njit(nogil=True, cache=True)
def order_insert(O, key, book, price, qty):
    """oinsert: the new order's slot, or -1 for a duplicate ref."""
    keys, vals, count = O
    return oinsert(keys, vals, count, key, book, price, qty)


@njit(nogil=True, cache=True)
def order_remove(O, i):
    """oremove: the order in slot i goes."""
    keys, vals, count = O
    oremove(keys, vals, count, i)


# --- ladders -----------------------------------------------------------------------------

@njit(nogil=True, inline="always", cache=True)
def sort_key(book, price):
    # sort key, ascending with the best level last: bids by price, asks by -price
    return price if (book & 1) == BID else -price


@njit(nogil=True, inline="always", cache=True)
def _first_at_or_above(px, book, lo, hi, k):
    """The first index of px[lo:hi] (ascending by sort_key) whose key is k or more: hi if none."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if sort_key(book, px[mid]) < k:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True, inline="always", cache=True)
def _locate_a(meta, px, book, price):
    """(index of the level at `price`, or of where it would be inserted; found?)."""
    off = meta[book, M_OFF]
    n = meta[book, M_LEN]
    k = sort_key(book, price)
    # near the touch first: most updates are within a few levels of it
    j = off + n - 1
    stop = off + n - 8 if n > 8 else off
    while j >= stop:
        kj = sort_key(book, px[j])
        if kj == k:
            return j, True
        if kj < k:
            return j + 1, False
        j -= 1
    lo = _first_at_or_above(px, book, off, stop, k)  # binary search the rest
    return lo, lo < off + n and px[lo] == price


@njit(nogil=True, inline="always", cache=True)
def _locate(L, book, price):
    return _locate_a(L[0], L[1], book, price)


@njit(nogil=True, inline="always", cache=True)
def has_room(L, book):
    return L[0][book, M_LEN] < L[0][book, M_CAP]


@njit(nogil=True, inline="always", cache=True)
def ladd(meta, px, qty, cnt, book, price, dqty, dcount):
    """level_add on the ladder's arrays (for a parser's loop, like ofind/oinsert/oremove)."""
    j, found = _locate_a(meta, px, book, price)
    end = meta[book, M_OFF] + meta[book, M_LEN]
    if found:
        q = qty[j] + dqty
        c = cnt[j] + dcount
        if q > 0:
            qty[j] = q
            cnt[j] = c if c > 0 else 1
            return q
        for k in range(j, end - 1):  # remove
            px[k] = px[k + 1]
            qty[k] = qty[k + 1]
            cnt[k] = cnt[k + 1]
        meta[book, M_LEN] -= 1
        return q
    if dqty <= 0:
        return dqty
    for k in range(end, j, -1):  # insert at j
        px[k] = px[k - 1]
        qty[k] = qty[k - 1]
        cnt[k] = cnt[k - 1]
    px[j] = price
    qty[j] = dqty
    cnt[j] = dcount if dcount > 0 else 1
    meta[book, M_LEN] += 1
    return dqty


@njit(nogil=True, cache=True)
def level_add(L, book, price, dqty, dcount):
    """Add dqty (may be negative) and dcount orders at `price`; a level whose quantity reaches
    zero or below goes away. Returns the level's new quantity (negative = the book was
    inconsistent, clamped away). Needs has_room(L, book) when the level may be new."""
    L = borrow_all(L)  # (feeds/core/borrow.py: no counting in this call)
    meta, px, qty, cnt = L[0], L[1], L[2], L[3]
    return ladd(meta, px, qty, cnt, book, price, dqty, dcount)


@njit(nogil=True, cache=True)
def level_set(L, book, price, q):
    """Set the quantity at `price` (L2 feeds send absolute sizes); q == 0 removes it.
    Needs has_room(L, book) when the level may be new."""
    L = borrow_all(L)
    qty = L[2]
    j, found = _locate(L, book, price)
    if found:
        return level_add(L, book, price, q - qty[j], np.int64(0))
    if q > 0:
        return level_add(L, book, price, q, np.int64(1))
    return 0


@njit(nogil=True, inline="always", cache=True)
def _vkey(book, V, off, k, i):
    """Sort key of the i-th update in ascending order (`k` < 0: V holds them in descending order)."""
    j = off + i if k > 0 else off - k - 1 - i
    return sort_key(book, V[2 * j]), j


@njit(nogil=True, inline="always", cache=True)
def monotone(book, V, off, k):
    """Are the k pairs' prices V[2j], j = off..off+k-1, strictly ascending by sort key (worst first),
    strictly descending (best first)? Both for k <= 1."""
    up = True
    down = True
    for i in range(off + 1, off + k):
        d = sort_key(book, V[2 * i]) - sort_key(book, V[2 * i - 2])
        up = up and d > 0
        down = down and d < 0
    return up, down


@njit(nogil=True, cache=True)
def levels_set(L, book, V, off, k):
    """level_set for the k (price, quantity) pairs V[2j], V[2j+1], j = off..off+k-1, in one merge:
    O(levels from the deepest update to the touch + k) instead of one array shift per update
    (a Binance diff carries ~40 levels, many far from the touch of a 1000-level book).
    Same result as calling level_set in order; pairs not strictly sorted by price (either way)
    are set one by one. Needs room for every pair with q > 0. Marks V's applied quantities -1."""
    L, V = borrow_all(L), borrow(V)
    if k == 0:
        return
    meta, px, qty, cnt = L[0], L[1], L[2], L[3]
    up, down = monotone(book, V, off, k)
    if not (up or down):
        for i in range(off, off + k):
            level_set(L, book, V[2 * i], V[2 * i + 1])
        return
    kk = k if up else -k
    base = meta[book, M_OFF]
    end = base + meta[book, M_LEN]
    k0, _ = _vkey(book, V, off, kk, 0)
    lo = _first_at_or_above(px, book, base, end, k0)  # the first level at or above the smallest key
    # pass 1, towards the touch: set and remove matched levels, compacting in place (w <= r)
    w = lo
    u = 0
    ins = 0
    for r in range(lo, end):
        kr = sort_key(book, px[r])
        while u < k:
            ku, j = _vkey(book, V, off, kk, u)
            if ku >= kr:
                break
            if V[2 * j + 1] > 0:
                ins += 1
            u += 1
        keep = True
        if u < k:
            ku, j = _vkey(book, V, off, kk, u)
            if ku == kr:
                if V[2 * j + 1] > 0:
                    qty[r] = V[2 * j + 1]
                else:
                    keep = False
                V[2 * j + 1] = -1
                u += 1
        if keep:
            px[w] = px[r]
            qty[w] = qty[r]
            cnt[w] = cnt[r]
            w += 1
    for i in range(u, k):
        _, j = _vkey(book, V, off, kk, i)
        if V[2 * j + 1] > 0:
            ins += 1
    # pass 2, from the touch back: the new levels go in (d >= r)
    r = w - 1
    d = w + ins - 1
    for i in range(k - 1, -1, -1):
        ku, j = _vkey(book, V, off, kk, i)
        if V[2 * j + 1] <= 0:
            continue
        while r >= lo and sort_key(book, px[r]) > ku:
            px[d] = px[r]
            qty[d] = qty[r]
            cnt[d] = cnt[r]
            d -= 1
            r -= 1
        px[d] = V[2 * j]
        qty[d] = V[2 * j + 1]
        cnt[d] = 1
        d -= 1
    meta[book, M_LEN] = w + ins - base


@njit(nogil=True, cache=True)
def level_clear(L, book):
    L = borrow_all(L)
    L[0][book, M_LEN] = 0


@njit(nogil=True, inline="always", cache=True)
def best_a(meta, px, qty, book):
    """(price, quantity) of the best level, (0, 0) if the side is empty."""
    n = meta[book, M_LEN]
    if n == 0:
        return np.int64(0), np.int64(0)
    j = meta[book, M_OFF] + n - 1
    return px[j], qty[j]


@njit(nogil=True, inline="always", cache=True)
def best(L, book):
    return best_a(L[0], L[1], L[2], book)


@njit(nogil=True, cache=True)
def depth(L, book):
    return L[0][book, M_LEN]
