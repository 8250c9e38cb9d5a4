"""An ITCH 5.0 writer: engine ticks (from the simulator) -> a valid ITCH 5.0 message stream.

The simulator gives a touch per instrument and, with depth, its book's top levels. Without depth
(a stream of quotes and trades) the writer keeps one displayed order per side that stands for the
whole touch quantity and turns each tick into the messages a Nasdaq feed would
send for it: Add (A, or F every 7th), Replace (U) when the touch moves, Cancel (X) when it
shrinks in place, Delete + Add now and then, and executions (E, or C with a price) for trades.
The day starts with system events and a Stock Directory (R) message per instrument, plus a
Trading Action (H) each, which a reader skips by length. With depth (level ticks in the stream)
it keeps one displayed order per published level instead, so an ITCH reader rebuilds the same
depth window (write_depth_ticks).
"""
import numpy as np
from engine.jit import njit

from engine.records import (KIND_LEVEL, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_NONE, tick_instrument, tick_kind,
                            tick_side, w_hi32, w_lo32)

from feeds.nasdaq.itch import LENGTHS, PRICE_TO_NANO

MAX_MSG = 2 + 50
# per-instrument writer state: bid ref, bid px, bid qty, ask ref, ask px, ask qty
W_REF, W_PX, W_QTY = 0, 1, 2


@njit(nogil=True, inline="always", cache=True)
def _put16(o, p, v):
    o[p] = (v >> 8) & 0xFF
    o[p + 1] = v & 0xFF


@njit(nogil=True, inline="always", cache=True)
def _put32(o, p, v):
    for k in range(4):
        o[p + k] = (v >> (8 * (3 - k))) & 0xFF


@njit(nogil=True, inline="always", cache=True)
def _put48(o, p, v):
    for k in range(6):
        o[p + k] = (v >> (8 * (5 - k))) & 0xFF


@njit(nogil=True, inline="always", cache=True)
def _put64(o, p, v):
    for k in range(8):
        o[p + k] = (v >> (8 * (7 - k))) & 0xFF


@njit(nogil=True, cache=True)
def _head(o, p, typ, ln, loc, ts):
    """Length prefix and the common header; returns the message start."""
    _put16(o, p, ln)
    m = p + 2
    for k in range(ln):
        o[m + k] = 0
    o[m] = typ
    _put16(o, m + 1, loc)
    _put16(o, m + 3, 0)
    _put48(o, m + 5, ts)
    return m


@njit(nogil=True, cache=True)
def _add(o, p, loc, ts, ref, buy, qty, px, sym, attributed):
    ln = 40 if attributed else 36
    m = _head(o, p, 70 if attributed else 65, ln, loc, ts)
    _put64(o, m + 11, ref)
    o[m + 19] = 66 if buy else 83
    _put32(o, m + 20, qty)
    for k in range(8):
        o[m + 24 + k] = sym[k]
    _put32(o, m + 32, px // PRICE_TO_NANO)
    if attributed:
        for k in range(4):
            o[m + 36 + k] = 78  # "NSDQ"-like MPID filler
    return p + 2 + ln


@njit(nogil=True, cache=True)
def _execute(o, p, loc, ts, ref, qty, price, g):
    """E (or, every 5th, C: executed at a price, printable) of qty shares of order ref."""
    g[2] += 1
    if g[1] % 5 == 0:
        m = _head(o, p, 67, 36, loc, ts)
        _put64(o, m + 11, ref)
        _put32(o, m + 19, qty)
        _put64(o, m + 23, g[2])
        o[m + 31] = 89
        _put32(o, m + 32, price // PRICE_TO_NANO)
        p += 38
    else:
        m = _head(o, p, 69, 31, loc, ts)
        _put64(o, m + 11, ref)
        _put32(o, m + 19, qty)
        _put64(o, m + 23, g[2])
        p += 33
    g[1] += 1
    return p


@njit(nogil=True, cache=True)
def _delete(o, p, loc, ts, ref):
    """D: order ref goes."""
    m = _head(o, p, 68, 19, loc, ts)
    _put64(o, m + 11, ref)
    return p + 21


@njit(nogil=True, cache=True)
def _cancel(o, p, loc, ts, ref, shares):
    """X: order ref shrinks by `shares`, in place."""
    m = _head(o, p, 88, 23, loc, ts)
    _put64(o, m + 11, ref)
    _put32(o, m + 19, shares)
    return p + 25


@njit(nogil=True, cache=True)
def _replace(o, p, loc, ts, ref, new_ref, qty, px):
    """U: order ref becomes new_ref, of qty shares at px."""
    m = _head(o, p, 85, 35, loc, ts)
    _put64(o, m + 11, ref)
    _put64(o, m + 19, new_ref)
    _put32(o, m + 27, qty)
    _put32(o, m + 31, px // PRICE_TO_NANO)
    return p + 37


@njit(nogil=True, cache=True)
def write_ticks(ticks, i, n, st, syms, g, day_ns, o, p):
    """Turn ticks[i:n] into ITCH messages at o[p:]. `st` is int64[instruments, 6] writer state,
    g = [next order ref, message counter, match number]. Returns (i, p); stops early when
    `o` has less than 4 messages of room left."""
    while i < n:
        if p + 4 * MAX_MSG > o.shape[0]:
            return i, p
        w = ticks[i]
        inst = tick_instrument(w)
        loc = inst + 1  # locate codes start at 1
        ts = w[1] - day_ns
        kind = tick_kind(w)
        sym = syms[inst]
        if kind == KIND_TRADE:
            buy = tick_side(w) == SIDE_BUY
            s = 3 if buy else 0  # the resting order is on the other side
            qty = w_lo32(w[6])
            if st[inst, s + W_REF] != 0 and st[inst, s + W_PX] == w[3] and qty <= st[inst, s + W_QTY]:
                p = _execute(o, p, loc, ts, st[inst, s + W_REF], qty, w[3], g)
                st[inst, s + W_QTY] -= qty
                if st[inst, s + W_QTY] == 0:
                    st[inst, s + W_REF] = 0
        elif kind == KIND_QUOTE:
            for side in range(2):
                s = 3 * side
                px = w[4] if side == 0 else w[5]
                qty = w_hi32(w[6]) if side == 0 else w_lo32(w[7])
                ref = st[inst, s + W_REF]
                if ref != 0 and st[inst, s + W_PX] == px and st[inst, s + W_QTY] == qty:
                    continue
                g[1] += 1
                if ref == 0 or qty == 0:
                    if ref != 0:  # D: the side went away
                        p = _delete(o, p, loc, ts, ref)
                        st[inst, s + W_REF] = 0
                    if qty > 0:
                        g[0] += 1
                        p = _add(o, p, loc, ts, g[0], side == 0, qty, px, sym, g[1] % 7 == 0)
                        st[inst, s + W_REF] = g[0]
                elif st[inst, s + W_PX] == px and qty < st[inst, s + W_QTY]:  # X: shrinks in place
                    p = _cancel(o, p, loc, ts, ref, st[inst, s + W_QTY] - qty)
                elif g[1] % 11 == 0:  # D + A (a cancel-replace done by hand)
                    p = _delete(o, p, loc, ts, ref)
                    g[0] += 1
                    p = _add(o, p, loc, ts, g[0], side == 0, qty, px, sym, False)
                    st[inst, s + W_REF] = g[0]
                else:  # U: replace with a new ref
                    g[0] += 1
                    p = _replace(o, p, loc, ts, ref, g[0], qty, px)
                    st[inst, s + W_REF] = g[0]
                st[inst, s + W_PX] = px
                st[inst, s + W_QTY] = qty
        i += 1
    return i, p


# depth mode: one displayed order per published level. lv[book, slot] = (price, ref, qty)
L_PX, L_REF, L_QTY = 0, 1, 2
# g words of the depth mode, after the three above: pending level ticks, clear ticks among them
G_NPEND, G_NCLEAR = 3, 4
P_CLEAR = 2  # pending side for a clear tick


@njit(nogil=True, inline="always", cache=True)
def _slot(lv, lvn, bk, price):
    for k in range(lvn[bk]):
        if lv[bk, k, L_PX] == price:
            return k
    return -1


@njit(nogil=True, inline="always", cache=True)
def _drop_slot(lv, lvn, bk, k):
    last = lvn[bk] - 1
    for q in range(3):
        lv[bk, k, q] = lv[bk, last, q]
    lvn[bk] = last


@njit(nogil=True, cache=True)
def _crosses(lv, lvn, other, price, bid):
    """Would a bid (bid=True) or ask at `price` meet the other side's orders?"""
    for k in range(lvn[other]):
        q = lv[other, k, L_PX]
        if (q <= price) if bid else (q >= price):
            return True
    return False


@njit(nogil=True, cache=True)
def _apply_level(lv, lvn, inst, side, price, size, sym, g, loc, ts, o, p):
    """Messages that make the written book's level at `price` hold `size` (0: none)."""
    bk = 2 * inst + side
    k = _slot(lv, lvn, bk, price)
    if k < 0:
        if size > 0 and lvn[bk] < lv.shape[1]:
            g[1] += 1
            g[0] += 1
            p = _add(o, p, loc, ts, g[0], side == 0, size, price, sym, g[1] % 7 == 0)
            k = lvn[bk]
            lv[bk, k, L_PX] = price
            lv[bk, k, L_REF] = g[0]
            lv[bk, k, L_QTY] = size
            lvn[bk] = k + 1
        return p
    have = lv[bk, k, L_QTY]
    if size == have:
        return p
    g[1] += 1
    ref = lv[bk, k, L_REF]
    if size == 0:  # D: the level went away
        p = _delete(o, p, loc, ts, ref)
        _drop_slot(lv, lvn, bk, k)
    elif size < have:  # X: shrinks in place
        p = _cancel(o, p, loc, ts, ref, have - size)
        lv[bk, k, L_QTY] = size
    elif g[1] % 11 == 0:  # D + A (a cancel-replace done by hand)
        p = _delete(o, p, loc, ts, ref)
        g[0] += 1
        p = _add(o, p, loc, ts, g[0], side == 0, size, price, sym, False)
        lv[bk, k, L_REF] = g[0]
        lv[bk, k, L_QTY] = size
    else:  # U: replace with a new ref (it grew)
        g[0] += 1
        p = _replace(o, p, loc, ts, ref, g[0], size, price)
        lv[bk, k, L_REF] = g[0]
        lv[bk, k, L_QTY] = size
    return p


@njit(nogil=True, cache=True)
def _flush_levels(lv, lvn, pend, syms, g, day_ns, o, p):
    """Apply the held level ticks of an event, in order (removals came first)."""
    for j in range(g[G_NPEND]):
        inst = pend[j, 0]
        side = pend[j, 1]
        loc = inst + 1
        ts = pend[j, 4] - day_ns
        if side == P_CLEAR:
            for s in range(2):
                bk = 2 * inst + s
                for k in range(lvn[bk]):
                    g[1] += 1
                    p = _delete(o, p, loc, ts, lv[bk, k, L_REF])
                lvn[bk] = 0
        else:
            p = _apply_level(lv, lvn, inst, side, pend[j, 2], pend[j, 3], syms[inst], g, loc, ts, o, p)
    g[G_NPEND] = 0
    g[G_NCLEAR] = 0
    return p


@njit(nogil=True, cache=True)
def write_depth_ticks(ticks, i, n, lv, lvn, pend, syms, g, day_ns, o, p):
    """Depth mode of write_ticks, for streams with level ticks (engine/records.py): each
    published level is one displayed order. An event's level ticks are held until its quote or
    book tick, so its trades execute against the orders as they were (the level ticks already
    show the book after the trade). Returns (i, p); stops early when `o` might not hold what the
    next tick writes."""
    D = lv.shape[1]
    while i < n:
        w = ticks[i]
        kind = tick_kind(w)
        # a flush writes at most two messages a level tick and 2D a clear tick
        need = (2 * g[G_NPEND] + 2 * D * g[G_NCLEAR] + 4) * MAX_MSG
        if p + need > o.shape[0]:
            return i, p
        inst = tick_instrument(w)
        if kind == KIND_LEVEL:
            if g[G_NPEND] == pend.shape[0]:  # more than an event holds: apply what is held
                p = _flush_levels(lv, lvn, pend, syms, g, day_ns, o, p)
            j = g[G_NPEND]
            side = tick_side(w)
            pend[j, 0] = inst
            pend[j, 1] = P_CLEAR if side == SIDE_NONE else (0 if side == SIDE_BUY else 1)
            pend[j, 2] = w[3]
            pend[j, 3] = w_lo32(w[6])
            pend[j, 4] = w[1]
            g[G_NPEND] = j + 1
            if side == SIDE_NONE:
                g[G_NCLEAR] += 1
        elif kind == KIND_TRADE:
            buy = tick_side(w) == SIDE_BUY
            bk = 2 * inst + (1 if buy else 0)  # the resting order is on the other side
            qty = w_lo32(w[6])
            k = _slot(lv, lvn, bk, w[3])
            if k < 0 and qty > 0 and lvn[bk] < D and not _crosses(lv, lvn, bk ^ 1, w[3], not buy):
                # the order it hit was never published (the window was being (re)sent in this
                # event): show it just before the execution
                g[1] += 1
                g[0] += 1
                p = _add(o, p, inst + 1, w[1] - day_ns, g[0], not buy, qty, w[3], syms[inst], False)
                k = lvn[bk]
                lv[bk, k, L_PX] = w[3]
                lv[bk, k, L_REF] = g[0]
                lv[bk, k, L_QTY] = qty
                lvn[bk] = k + 1
            if k >= 0 and qty <= lv[bk, k, L_QTY]:
                p = _execute(o, p, inst + 1, w[1] - day_ns, lv[bk, k, L_REF], qty, w[3], g)
                lv[bk, k, L_QTY] -= qty
                if lv[bk, k, L_QTY] == 0:
                    _drop_slot(lv, lvn, bk, k)
        else:  # the event's end (quote, book), or anything else: its levels go out
            p = _flush_levels(lv, lvn, pend, syms, g, day_ns, o, p)
        i += 1
    return i, p


def symbol_bytes(name):
    b = name.encode("ascii")
    if not 1 <= len(b) <= 8:
        raise ValueError(f"ITCH symbols are 1..8 ASCII characters, got {name!r}")
    return b.ljust(8)


def message(typ, locate=0, ts=0, body=b""):
    """One framed ITCH message from its type and body after the common header (for the day's
    preamble and for tests). The body is padded/checked against the spec length."""
    ln = LENGTHS[typ]
    raw = typ + locate.to_bytes(2, "big") + b"\0\0" + ts.to_bytes(6, "big") + body
    if len(raw) > ln:
        raise ValueError(f"ITCH {typ!r} body too long: {len(raw)} > {ln}")
    return ln.to_bytes(2, "big") + raw.ljust(ln, b"\0")


def directory(locate, symbol, ts=0):
    """R: Stock Directory for `symbol` (market Q, round lot 100, normal status)."""
    return message(b"R", locate, ts, symbol_bytes(symbol) + b"QN" + (100).to_bytes(4, "big")
                   + b"NCZ " + b"PN 1N" + (0).to_bytes(4, "big") + b"N")


def preamble(symbols, ts=0):
    """System events and the directory a day file starts with."""
    out = [message(b"S", 0, ts, b"O")]
    for i, s in enumerate(symbols):
        out.append(directory(i + 1, s, ts))
        out.append(message(b"H", i + 1, ts, symbol_bytes(s) + b"T" + b"\0" + b"    "))
    out.append(message(b"S", 0, ts, b"S"))
    out.append(message(b"S", 0, ts, b"Q"))
    return b"".join(out)


def epilogue(ts):
    return message(b"S", 0, ts, b"M") + message(b"S", 0, ts, b"E") + message(b"S", 0, ts, b"C")


class ItchWriter:
    """Streams ticks of `instruments` instruments into ITCH bytes; call `write(ticks)` for each
    batch, then `finish(last_ts)`. `day_ns` is the midnight that ITCH timestamps count from.
    depth: the stream's depth window (its `depth`); with depth > 0 the day file holds an order
    per published level (the window), else one per side standing for the touch."""

    def __init__(self, instruments, day_ns, symbols=None, depth=0):
        self.symbols = symbols or [f"SYN{i:04d}" for i in range(instruments)]
        self.syms = np.array([np.frombuffer(symbol_bytes(s), np.uint8) for s in self.symbols])
        self.st = np.zeros((instruments, 6), np.int64)
        self.depth = depth
        self.lv = np.zeros((2 * instruments if depth else 0, depth, 3), np.int64)
        self.lvn = np.zeros(2 * instruments if depth else 0, np.int64)
        self.pend = np.zeros((4 * depth + 2, 5), np.int64)
        self.g = np.zeros(5, np.int64)
        self.day_ns = day_ns
        self.buf = np.zeros(1 << 20, np.uint8)

    def start(self, ts_ns):
        return preamble(self.symbols, self._rel(ts_ns))

    def _rel(self, ts_ns):
        t = int(ts_ns) - int(self.day_ns)
        if not 0 <= t < 86_400 * 10**9:
            raise ValueError(f"tick time {ts_ns} is not within the ITCH day starting at {self.day_ns}")
        return t

    def write(self, ticks):
        """ITCH bytes for int64[n, 8] tick words (yields chunks)."""
        self._rel(int(ticks[0, 1]))
        self._rel(int(ticks[-1, 1]))
        i = 0
        while i < len(ticks):
            if self.depth:
                i, p = write_depth_ticks(ticks, i, len(ticks), self.lv, self.lvn, self.pend, self.syms, self.g,
                                         self.day_ns, self.buf, 0)
            else:
                i, p = write_ticks(ticks, i, len(ticks), self.st, self.syms, self.g, self.day_ns, self.buf, 0)
            yield self.buf[:p].tobytes()

    def finish(self, ts_ns):
        return epilogue(self._rel(ts_ns))
