"""Nasdaq TotalView-ITCH 5.0: length-framed messages -> per-instrument order books -> ticks.

The same parser reads day files (each message preceded by a 2-byte big-endian length) and the
message blocks of MoldUDP64 packets, which use the same framing.

Policy for bad input (documented in README, tested by tests/test_itch.py and the fuzz test):
- every length is checked before a byte is read (numba does not bounds-check);
- a message type the book does not need is skipped by its length and counted;
- a known type whose length is not the one ITCH 5.0 gives is an error in strict mode (files,
  by default: "byte N: ..."), or counted and skipped (`?on_error=skip`, and always for live UDP);
- a file that ends inside a message is truncated: an error naming the offset;
- updates for an order the book does not know (it was filtered out, or the feed started
  mid-day) are counted and skipped; an execution larger than the order is clamped and counted;
- an add or a replace at price 0 (a level no tick can carry: 0 is a tick's empty side) is counted
  (bad_price) and not applied.
"""
import numpy as np
from engine.jit import njit

from engine.records import KIND_TRADE, MAX_INSTRUMENTS, SIDE_BUY, SIDE_SELL

from feeds.books import book, depth
from feeds.books.book import Ladders, Orders
from feeds.books.depth import Windows
from feeds.core.borrow import borrow
from feeds.books.ticks import emit, emit_quote, price_ok, touch_changed_a

# message type -> length (ITCH 5.0 specification, section 1.x); the book needs the first ten
LENGTHS = {
    b"S": 12, b"R": 39, b"A": 36, b"F": 40, b"E": 31, b"C": 36, b"X": 23, b"D": 19, b"U": 35,
    b"P": 44,
    # skipped by length (listed so the writer and tests can produce them)
    b"H": 25, b"Y": 20, b"L": 26, b"V": 35, b"W": 12, b"K": 28, b"J": 35, b"h": 21, b"Q": 40,
    b"B": 19, b"I": 50, b"N": 20, b"O": 48,
}
NEEDED = b"SRAFECXDUP"
_LEN = np.zeros(256, np.int64)  # 0 = a type the book does not need
for _t in NEEDED:
    _LEN[_t] = LENGTHS[bytes([_t])]

# parser return status
ST_INPUT, ST_OUT, ST_ROOM_ORDERS, ST_ROOM_LADDER, ST_ERROR, ST_DONE = range(6)
# stats
(S_MSGS, S_SKIPPED, S_UNTRACKED, S_UNKNOWN_ORDER, S_DUP_ORDER, S_OVER_EXEC, S_BAD_LEN, S_QUOTES,
 S_TRADES, S_SATURATED, S_CROSSED, S_BAD_SIDE, S_INSTRUMENTS, S_BAD_PRICE, NSTATS) = range(15)
STAT_NAMES = ("messages", "skipped_types", "untracked", "unknown_order", "duplicate_order",
              "over_execution", "bad_length", "quotes", "trades", "size_saturated", "crossed_quotes",
              "bad_side", "instruments", "bad_price")
# errors (err[0]); err[1] = byte offset, err[2] = message type, err[3] = its length
E_BAD_LEN, E_ZERO_LEN = 1, 2
# cfg
C_STRICT, C_DAY_NS = 0, 1


@njit(nogil=True, inline="always", cache=True)
def be16(b, i):
    return (np.int64(b[i]) << 8) | np.int64(b[i + 1])


@njit(nogil=True, inline="always", cache=True)
def be32(b, i):
    return (np.int64(b[i]) << 24) | (np.int64(b[i + 1]) << 16) | (np.int64(b[i + 2]) << 8) | np.int64(b[i + 3])


@njit(nogil=True, inline="always", cache=True)
def be48(b, i):
    return (be16(b, i) << 32) | be32(b, i + 2)


@njit(nogil=True, inline="always", cache=True)
def be64(b, i):
    return (be32(b, i) << 32) | be32(b, i + 4)  # wraps to negative above 2^63: fine for a key


PRICE_TO_NANO = 100_000  # ITCH prices have 4 implied decimals; ticks use 1e-9


@njit(nogil=True, cache=True)
def _wanted(b, m, want):
    if want.shape[0] == 0:
        return True
    for r in range(want.shape[0]):
        same = True
        for k in range(8):
            if want[r, k] != b[m + k]:
                same = False
                break
        if same:
            return True
    return False


@njit(nogil=True, inline="always", cache=True)
def _trade(out, n, ts, tr, inst, resting_side, price, qty, top, stats):
    # the aggressor is on the other side of the resting order
    side = SIDE_SELL if resting_side == book.BID else SIDE_BUY
    stats[S_TRADES] += 1
    return emit(out, n, ts, tr, inst, KIND_TRADE, side, price, qty, top, stats, S_SATURATED, 1)


@njit(nogil=True, inline="always", cache=True)
def _emit_quote(out, n, ts, tr, inst, top, stats):
    stats[S_QUOTES] += 1
    if top[inst, 0] != 0 and top[inst, 2] != 0 and top[inst, 0] >= top[inst, 2]:
        stats[S_CROSSED] += 1
    return emit_quote(out, n, ts, tr, inst, top, stats, S_SATURATED, 1)


# depth.publish inlined into parse's one call site: a call passes the window and ladder arrays
# field by field (about 80 words copied per event), which cost more than publish's own work.
_publish = njit(nogil=True, inline="always")(depth.publish.py_func)


@njit(nogil=True, inline="always", cache=True)
def _reduce(meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, slot, dq):
    """Take dq shares off the order in `slot` (removing it when none remain); returns the
    shares actually taken (clamped to what the order had)."""
    bk = vals[slot, book.O_BOOK]
    px = vals[slot, book.O_PRICE]
    have = vals[slot, book.O_QTY]
    take = dq if dq < have else have
    left = have - take
    book.ladd(meta, lpx, lqty, lcnt, bk, px, -take, -1 if left == 0 else 0)
    if N:
        depth.changed_a(dirty, chg, bk, px)
    if left == 0:
        book.oremove(keys, vals, count, slot)
    else:
        vals[slot, book.O_QTY] = left
    return take


# The message families, inlined into parse's loop. Each takes the borrowed arrays one by one
# (numba increfs every array taken out of a tuple or passed on, even to an inlined function) and
# returns scalars: the instrument whose event the message is (-1: none) and _OK, or the status
# parse returns (ST_ROOM_*: nothing was applied, the caller makes room and calls again).
# Measured (the bench's ITCH file at depth 0, old and new alternated in one process): these,
# written with one exit each, cost nothing measurable; the same with early returns, a helper
# returning the whole trade (5 values) or the event epilogue as a helper cost 3-9%, so the
# trade decision and the epilogue stay in parse.
# Each message that changes a book (or trades) is one book event. Its ticks: level ticks (a stale
# window, after a gap, is re-sent even for a trade alone), its trade (carrying the touch after it),
# then a quote if the touch changed, else a book tick if only deeper levels did. Every array parse
# uses is borrowed (feeds/core/borrow.py; the caller holds them all for the call): numba's atomic
# refcounting of arrays handed to helpers was two thirds of its time.
_OK = -1


@njit(nogil=True, cache=True)
def _pass_over(b, pos, ln, strict, err, stats):
    """The message at b[pos] (length ln) that parse does not apply: a zero or a wrong length (an
    error when strict, else counted), or a type the book does not need (counted). Returns
    ST_ERROR (err says what and where) or _OK: parse moves on by its length. parse passes a zero
    length over at once, the others once out has room for a message's ticks (ST_OUT first, as for
    any message). Not inlined: inlined with the framing, the loop ran ~10% slower at depth 10."""
    if ln == 0:
        err[0], err[1] = E_ZERO_LEN, pos
    elif _LEN[b[pos + 2]] == 0:
        stats[S_SKIPPED] += 1
        stats[S_MSGS] += 1
        return _OK
    else:
        err[0], err[1], err[2], err[3] = E_BAD_LEN, pos, b[pos + 2], ln
    if strict:
        return ST_ERROR
    stats[S_BAD_LEN] += 1
    return _OK


@njit(nogil=True, inline="always", cache=True)
def _directory(b, m, loc, inst, locmap, syms, want, stats):
    """'R' stock directory: a wanted symbol not seen before becomes an instrument."""
    if inst < 0 and stats[S_INSTRUMENTS] < MAX_INSTRUMENTS and _wanted(b, m + 11, want):
        inst = stats[S_INSTRUMENTS]
        stats[S_INSTRUMENTS] += 1
        locmap[loc] = inst
        for q in range(8):
            syms[inst, q] = b[m + 11 + q]


@njit(nogil=True, inline="always", cache=True)
def _add(b, m, inst, meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, stats, need):
    """'A', 'F' add order. Returns (event instrument, _OK or ST_ROOM_*)."""
    ev = -1
    st = _OK
    s = b[m + 19]
    px = be32(b, m + 32) * PRICE_TO_NANO
    if s != 66 and s != 83:
        stats[S_BAD_SIDE] += 1
    elif not price_ok(px):
        stats[S_BAD_PRICE] += 1
    else:
        bk = 2 * inst + (book.BID if s == 66 else book.ASK)
        if count[0] * 3 >= keys.shape[0]:
            st = ST_ROOM_ORDERS
        elif meta[bk, book.M_LEN] >= meta[bk, book.M_CAP]:
            need[0] = bk
            st = ST_ROOM_LADDER
        else:
            qty = be32(b, m + 20)
            if book.oinsert(keys, vals, count, be64(b, m + 11), bk, px, qty) < 0:
                stats[S_DUP_ORDER] += 1
            else:
                book.ladd(meta, lpx, lqty, lcnt, bk, px, qty, 1)
                if N:
                    depth.changed_a(dirty, chg, bk, px)
                ev = inst
    return ev, st


@njit(nogil=True, inline="always", cache=True)
def _replace(b, m, meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, stats, need):
    """'U' replace: the old order goes, a new one (new ref) takes its side. Returns (event
    instrument, _OK or ST_ROOM_*)."""
    ev = -1
    st = _OK
    slot = book.ofind(keys, be64(b, m + 11))
    if slot < 0:
        stats[S_UNKNOWN_ORDER] += 1
    else:
        bk = vals[slot, book.O_BOOK]
        px = be32(b, m + 31) * PRICE_TO_NANO
        if not price_ok(px):  # (the old order stays)
            stats[S_BAD_PRICE] += 1
        elif meta[bk, book.M_LEN] >= meta[bk, book.M_CAP]:
            need[0] = bk
            st = ST_ROOM_LADDER
        elif count[0] * 3 >= keys.shape[0]:
            st = ST_ROOM_ORDERS
        else:
            qty = be32(b, m + 27)
            if book.oinsert(keys, vals, count, be64(b, m + 19), bk, px, qty) < 0:  # the new ref is live
                stats[S_DUP_ORDER] += 1
            else:
                # an insert moves no other entry, so slot still holds the old order
                _reduce(meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, slot, vals[slot, book.O_QTY])
                book.ladd(meta, lpx, lqty, lcnt, bk, px, qty, 1)
                if N:
                    depth.changed_a(dirty, chg, bk, px)
                ev = bk >> 1
    return ev, st


@njit(nogil=True, inline="always", cache=True)
def _take(b, m, t, meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, stats):
    """'E', 'C' executions, 'X' cancel, 'D' delete: shares off an order. Returns (its book
    side, -1 for an unknown order; its price; the shares taken)."""
    bk = -1
    px = took = 0
    slot = book.ofind(keys, be64(b, m + 11))
    if slot < 0:
        stats[S_UNKNOWN_ORDER] += 1
    else:
        bk = vals[slot, book.O_BOOK]
        px = vals[slot, book.O_PRICE]
        if t == 68:
            dq = vals[slot, book.O_QTY]
        else:
            dq = be32(b, m + 19)
            if dq > vals[slot, book.O_QTY]:
                stats[S_OVER_EXEC] += 1
        took = _reduce(meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, slot, dq)
    return bk, px, took


@njit(nogil=True, cache=True)
def parse(b, pos, end, max_msgs, ts_recv, cfg, locmap, syms, want, L, O, top, W, stats, err, need,
          out, n):
    """Apply length-framed ITCH messages b[pos:end] (at most max_msgs) to the books, writing ticks
    to out[n:] (ts_recv < 0: stamped with their exchange time; W: the depth windows, feeds/books/depth.py).
    Returns (pos, n, messages consumed, status): on ST_INPUT pos is the start of an incomplete
    message; on ST_OUT / ST_ROOM_* the message at pos was not applied and the caller makes room
    and calls again; on ST_ERROR err holds what and where."""
    b, cfg, locmap, syms, want = borrow(b), borrow(cfg), borrow(locmap), borrow(syms), borrow(want)
    top, stats, err, need, out = borrow(top), borrow(stats), borrow(err), borrow(need), borrow(out)
    meta, lpx, lqty, lcnt = borrow(L[0]), borrow(L[1]), borrow(L[2]), borrow(L[3])
    L = (meta, lpx, lqty, lcnt, borrow(L[4]))
    keys, vals, count = borrow(O[0]), borrow(O[1]), borrow(O[2])
    dirty, chg = borrow(W[4]), borrow(W[5])
    W = (borrow(W[0]), borrow(W[1]), borrow(W[2]), borrow(W[3]), dirty, chg)
    N = W[0].shape[1]  # depth: 0 skips every depth call
    day = cfg[C_DAY_NS]
    room = 2 + depth.room(N)  # a message writes a trade, a quote and its level ticks
    k = 0
    while k < max_msgs:
        if end - pos < 2 or be16(b, pos) > end - pos - 2:
            return pos, n, k, ST_INPUT
        ln = be16(b, pos)
        if ln == 0 or (n + room <= out.shape[0] and ln != _LEN[b[pos + 2]]):
            if _pass_over(b, pos, ln, cfg[C_STRICT] != 0, err, stats) == ST_ERROR:
                return pos, n, k, ST_ERROR
            pos += 2 + ln
            k += 1
            continue
        if n + room > out.shape[0]:
            return pos, n, k, ST_OUT
        m = pos + 2
        t = b[m]
        loc = be16(b, m + 1)
        ts = day + be48(b, m + 5)
        inst = locmap[loc]
        # an event of instrument ev (-1: none), ended below; touch: the book changed; a trade: tside, tpx, tq
        ev, st, touch, trade = -1, _OK, True, False
        tside = tpx = tq = 0
        if t == 82:  # 'R' stock directory: maybe a new instrument
            _directory(b, m, loc, inst, locmap, syms, want, stats)
        elif t == 83:  # 'S' system event: nothing for the book
            pass
        elif inst < 0:
            stats[S_UNTRACKED] += 1
        elif t == 85:  # 'U' replace
            ev, st = _replace(b, m, meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, stats, need)
        elif t == 69 or t == 67 or t == 88 or t == 68:  # 'E', 'C' executions, 'X' cancel, 'D' delete
            bk, tpx, tq = _take(b, m, t, meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, stats)
            if bk >= 0:
                ev, tside = bk >> 1, bk & 1
                if t == 69:
                    trade = True
                elif t == 67 and b[m + 31] == 89:  # printable 'Y': a trade to count, at its own price
                    trade = True
                    tpx = be32(b, m + 32) * PRICE_TO_NANO
        elif t == 65 or t == 70:  # 'A', 'F' add order
            ev, st = _add(b, m, inst, meta, lpx, lqty, lcnt, keys, vals, count, dirty, chg, N, stats, need)
        elif t == 80:  # 'P' trade of a non-displayed order: a trade, no book change
            ev, touch, trade = inst, False, True
            tside = book.BID if b[m + 19] == 66 else book.ASK
            tpx = be32(b, m + 32) * PRICE_TO_NANO
            tq = be32(b, m + 20)
        if st != _OK:
            return pos, n, k, st
        if ev >= 0:  # the event's ticks
            tr = ts if ts_recv < 0 else ts_recv
            nl = 0
            if N:
                n, nl = _publish(W, L, ev, ts, tr, out, n, stats, S_SATURATED, 1)
            changed = touch and touch_changed_a(meta, lpx, lqty, ev, top)
            if trade:
                n = _trade(out, n, ts, tr, ev, tside, tpx, tq, top, stats)
            if changed:
                n = _emit_quote(out, n, ts, tr, ev, top, stats)
            elif nl:
                n = depth.emit_book(out, n, ts, tr, ev, top, stats, S_SATURATED, 1)
        stats[S_MSGS] += 1
        pos = m + ln
        k += 1
    return pos, n, k, ST_DONE


class ItchBooks:
    """Books and instrument table of one ITCH feed, and a resumable `apply`."""

    def __init__(self, symbols=(), strict=True, day_ns=0, depth=0):
        self.cfg = np.array([1 if strict else 0, day_ns], np.int64)
        self.locmap = np.full(65536, -1, np.int64)
        self.syms = np.zeros((MAX_INSTRUMENTS, 8), np.uint8)
        self._names = []  # syms decoded so far (`instruments`)
        self.want = np.zeros((len(symbols), 8), np.uint8)
        for i, s in enumerate(symbols):
            self.want[i] = np.frombuffer(s.encode("ascii").ljust(8)[:8], np.uint8)
        self.ladders = Ladders(2 * MAX_INSTRUMENTS)
        self.orders = Orders()
        self.top = np.zeros((MAX_INSTRUMENTS, 4), np.int64)
        self.windows = Windows(2 * MAX_INSTRUMENTS, depth)
        self.stats = np.zeros(NSTATS, np.int64)
        self.err = np.zeros(4, np.int64)
        self.need = np.zeros(1, np.int64)

    def apply(self, buf, pos, end, out, n, max_msgs=1 << 62, ts_recv=-1):
        """Like `parse`, but makes room itself. Returns (pos, n, consumed, status) with status
        ST_INPUT, ST_OUT, ST_DONE or ST_ERROR."""
        if len(out) < 2 + depth.room(self.windows.depth):
            raise ValueError(f"a tick buffer of {len(out)} rows cannot hold one message's ticks at depth "
                             f"{self.windows.depth}")
        done = 0
        while True:
            pos, n, k, st = parse(buf, pos, end, max_msgs - done, ts_recv, self.cfg, self.locmap,
                                  self.syms, self.want, self.ladders.arrays(), self.orders.arrays(),
                                  self.top, self.windows.arrays(), self.stats, self.err, self.need,
                                  out, n)
            done += k
            if st == ST_ROOM_ORDERS:
                self.orders.maybe_grow()
            elif st == ST_ROOM_LADDER:
                self.ladders.grow(int(self.need[0]))
            else:
                return pos, n, done, st

    def forget(self):
        """After a gap tick or on a resync request: every instrument's next event re-sends its
        window (feeds/books/depth.py)."""
        self.windows.forget()

    def error_text(self):
        code, off, t, ln = (int(x) for x in self.err)
        if code == E_ZERO_LEN:
            return f"byte {off}: zero message length"
        name = chr(t) if 32 < t < 127 else f"0x{t:02x}"
        return f"byte {off}: message type {name!r} has length {ln}; ITCH 5.0 says {int(_LEN[t])}"

    def instruments(self):
        """The symbols by instrument index. Asked per batch by the publisher: only new ones are
        decoded (an instrument's symbol is set once, when its directory message makes it)."""
        k = int(self.stats[S_INSTRUMENTS])
        self._names += [bytes(self.syms[i]).decode("ascii", "replace").rstrip() for i in range(len(self._names), k)]
        return self._names[:k]

    def stats_dict(self):
        return {name: int(v) for name, v in zip(STAT_NAMES, self.stats)}

    def depth(self, inst, side):
        return self.ladders.side(2 * inst + side)
