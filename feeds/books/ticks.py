"""Writing engine ticks from a book (numba), shared by every feed handler.

A parser fills an int64[n, 8] buffer of tick words; the feed process publishes it or
`engine convert` writes it out. seq (word 0) is left 0: the ring assigns it, and converters
number ticks in file order.
"""
import numpy as np
from engine.jit import njit

from engine.records import KIND_GAP, KIND_QUOTE, pack_tick_tail

from feeds.books import book

U32_MAX = 0xFFFFFFFF
# The largest price a tick carries (1e-9 units: 4.6e9 a unit, beyond any market's): two of them
# still add up within int64 (a mid), and DBN's undefined price (2^63 - 1) and its neighbours are
# out. A price of 0 or below is none either: 0 is a tick's empty side (engine/records.py).
MAX_PRICE = np.int64(2**62)
# per-instrument last published touch: bid px, bid qty, ask px, ask qty
T_BID, T_BQ, T_ASK, T_AQ = 0, 1, 2, 3


@njit(nogil=True, inline="always", cache=True)
def sat32(q):
    """A size for the record's uint32 fields; returns (value, saturated?)."""
    if q > U32_MAX:
        return np.int64(U32_MAX), True
    if q < 0:
        return np.int64(0), True
    return q, False


@njit(nogil=True, inline="always", cache=True)
def price_ok(p):
    """Can a tick carry price p (a trade's, a level's)? Parsers reject (and count) what cannot."""
    return 0 < p <= MAX_PRICE


@njit(nogil=True, inline="always", cache=True)
def touch_changed(L, inst, top):
    """Has instrument `inst`'s touch changed since the last quote tick? Updates `top` if so."""
    return touch_changed_a(L[0], L[1], L[2], inst, top)


@njit(nogil=True, inline="always", cache=True)
def touch_changed_a(meta, px, qty, inst, top):
    """touch_changed on the ladder's arrays: a parser's loop passes no tuple to a helper (numba
    increfs every array in a tuple it passes, even to an inlined function)."""
    bp, bq = book.best_a(meta, px, qty, 2 * inst)
    ap, aq = book.best_a(meta, px, qty, 2 * inst + 1)
    if bp == top[inst, T_BID] and bq == top[inst, T_BQ] and ap == top[inst, T_ASK] and aq == top[inst, T_AQ]:
        return False
    top[inst, T_BID] = bp
    top[inst, T_BQ] = bq
    top[inst, T_ASK] = ap
    top[inst, T_AQ] = aq
    return True


@njit(nogil=True, inline="always", cache=True)
def emit(out, n, ts_event, ts_recv, inst, kind, side, price, size, top, stats, sat_stat, size_div):
    """Write one tick at out[n] carrying `inst`'s last published touch; returns n + 1.
    Quantities are divided by size_div (a feed's size unit) and saturated to uint32 (counted)."""
    w = out[n]
    w[0] = 0
    w[1] = ts_event
    w[2] = ts_recv
    w[3] = price
    w[4] = top[inst, T_BID]
    w[5] = top[inst, T_ASK]
    s, b, q = size, top[inst, T_BQ], top[inst, T_AQ]
    if size_div != 1:  # (feeds whose sizes are already lots pass 1 and skip three divisions)
        s, b, q = s // size_div, b // size_div, q // size_div
    s, a = sat32(s)
    b, c = sat32(b)
    q, d = sat32(q)
    if a or c or d:
        stats[sat_stat] += 1
    pack_tick_tail(w, s, b, q, inst, kind, side)
    return n + 1


@njit(nogil=True, inline="always", cache=True)
def emit_quote(out, n, ts_event, ts_recv, inst, top, stats, sat_stat, size_div):
    return emit(out, n, ts_event, ts_recv, inst, KIND_QUOTE, 0, 0, 0, top, stats, sat_stat, size_div)


@njit(nogil=True, cache=True)
def emit_gap(out, n, ts_event, ts_recv, lost):
    """A gap tick: `lost` messages never arrived; every instrument's state is stale."""
    w = out[n]
    w[0] = 0
    w[1] = ts_event
    w[2] = ts_recv
    w[3] = lost
    w[4] = 0
    w[5] = 0
    pack_tick_tail(w, 0, 0, 0, 0, KIND_GAP, 0)
    return n + 1
