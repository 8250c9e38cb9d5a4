"""`dbn:FILE` — Databento DBN (v1-v3; zstd or plain): MBO into an L3 book, MBP-1 / MBP-10 and
trades straight to ticks.

  dbn:FILE?symbols=ESH4&on_error=stop&depth=10
  symbols   raw symbols to keep (from the file's symbology; default all instruments)
  on_error  stop (default): a malformed record is an error naming its byte offset; skip: count it
  depth     book levels per side published as level ticks, 0..32 (default 10; 0 = none), capped
            by what the file has: MBO any, MBP-10 10, MBP-1/TBBO 1, trades and others 0
            (`.depth` says what is published; the metadata is read when the source is opened)

The metadata header is decoded by the `databento-dbn` package; records are read by the numba
code below (every length checked before it is read). Quote ticks come at the end of each
exchange event (a record with F_LAST) when the instrument's top of book changed; trades of the
event are held until then so they carry the touch after the event, as the record layout says.
MBO semantics are Databento's: A add, C cancel (size = what is cancelled), M modify, R clear the
instrument's book, T trade and F fill do not change the book (cancels that follow do), N none.
ts_recv is the record's ts_recv (capture time).

Bad values are rejected and counted, never reaching the book or a tick: an add, modify, trade
or MBP record with a price no tick can carry (0 or below, or above ticks.MAX_PRICE, e.g.
2^63 - 2) in `bad_price` (UNDEF_PRICE where a price is needed: `undef_price`), an add or a trade
of size 0 in `bad_size`. The record still ends its event (F_LAST).

Depth (engine/records.py): a book event ends with the record carrying F_LAST; its level ticks
come first, then the held trades, then the quote or a book tick. Action R marks the instrument's
window stale, so that event starts with a clear tick and re-sends the window. MBP-1/MBP-10
records have their levels set into a per-instrument ladder (cleared per record) so the same
window diff applies.
"""
import struct

import numpy as np
from engine.jit import njit

from engine.readonly import read_only
from engine.records import KIND_TRADE, MAX_INSTRUMENTS, SIDE_BUY, SIDE_NONE, SIDE_SELL

from feeds.books import book, depth

from feeds.core import files, uri as U, venues
from feeds.books.book import Ladders, Orders
from feeds.books.depth import Windows
from feeds.core.borrow import borrow
from feeds.books.ticks import emit, emit_quote, price_ok, touch_changed

RT_MBP0, RT_MBP1, RT_MBP10, RT_MBO = 0x00, 0x01, 0x0A, 0xA0
MIN_LEN = {RT_MBP0: 48, RT_MBP1: 80, RT_MBP10: 368, RT_MBO: 56}
# levels a schema carries per side: what `depth=` is capped to (others: none)
SCHEMA_DEPTH = {"mbo": U.MAX_DEPTH, "mbp-10": 10, "mbp-1": 1, "tbbo": 1}
_MIN = np.zeros(256, np.int64)
for _r, _l in MIN_LEN.items():
    _MIN[_r] = _l
F_LAST = 0x80
UNDEF_PRICE = np.int64(2**63 - 1)

ST_INPUT, ST_OUT, ST_ROOM_ORDERS, ST_ROOM_LADDER, ST_ERROR = range(5)
(S_RECORDS, S_SKIPPED, S_UNTRACKED, S_UNKNOWN_ORDER, S_DUP_ORDER, S_BAD_LEN, S_QUOTES, S_TRADES,
 S_SATURATED, S_CROSSED, S_CLEARS, S_UNDEF_PRICE, S_BAD_SIDE, S_BAD_ACTION, S_INSTRUMENTS,
 S_NEGATIVE, S_BAD_PRICE, S_BAD_SIZE, NSTATS) = range(19)
STAT_NAMES = ("records", "skipped_rtypes", "untracked", "unknown_order", "duplicate_order", "bad_length",
              "quotes", "trades", "size_saturated", "crossed_quotes", "clears", "undef_price", "bad_side",
              "bad_action", "instruments", "negative_level", "bad_price", "bad_size")
E_SHORT, E_BAD_LEN = 1, 2
PENDING = 256  # trades held until their event's F_LAST


@njit(nogil=True, inline="always", cache=True)
def le32(b, i):
    return np.int64(b[i]) | (np.int64(b[i + 1]) << 8) | (np.int64(b[i + 2]) << 16) | (np.int64(b[i + 3]) << 24)


@njit(nogil=True, inline="always", cache=True)
def le64(b, i):
    return le32(b, i) | (le32(b, i + 4) << 32)


# The records' byte layout, decoded here only (replay/l3.py reads MBO records through these too).
# Every record starts with its header: length / 4 (byte 0), rtype (1), publisher (2-3),
# instrument_id (4-7), ts_event (8-15).


@njit(nogil=True, inline="always", cache=True)
def record_instrument(b, pos):
    """The instrument_id of the record at b[pos] (the venue's id, not our index)."""
    return le32(b, pos + 4)


@njit(nogil=True, inline="always", cache=True)
def record_ts_event(b, pos):
    return le64(b, pos + 8)


@njit(nogil=True, inline="always", cache=True)
def mbo_fields(b, pos):
    """The MBO record (RT_MBO, MIN_LEN[RT_MBO] bytes) at b[pos], past its header: (order_id, price,
    size, flags, action, side, ts_recv); action and side are the ASCII codes, flags has F_LAST."""
    return (le64(b, pos + 16), le64(b, pos + 24), le32(b, pos + 32), b[pos + 36], b[pos + 38], b[pos + 39],
            le64(b, pos + 40))


@njit(nogil=True, cache=True)
def _inst(ids, idx, stats, iid, auto):
    """Dense index of instrument id `iid` (open addressing), assigning one if `auto`; -1 if not tracked."""
    j = _slot(ids, iid)
    if ids[j] == iid:
        return idx[j]
    if not auto or stats[S_INSTRUMENTS] >= MAX_INSTRUMENTS:
        return -1
    ids[j] = iid
    idx[j] = stats[S_INSTRUMENTS]
    stats[S_INSTRUMENTS] += 1
    return idx[j]


@njit(nogil=True, cache=True)
def inst_at(ids, idx, iid, at):
    """Track instrument id `iid` as dense index `at` (dbn-live: a symbol of its URI, whose index is
    fixed at start) unless it is tracked already. Returns its index."""
    j = _slot(ids, iid)
    if ids[j] != iid:
        ids[j] = iid
        idx[j] = at
    return idx[j]


@njit(nogil=True, inline="always", cache=True)
def _slot(ids, iid):
    """Where `iid` is in the open-addressed table, or the empty slot it would take."""
    mask = ids.shape[0] - 1
    j = (iid * 0x9E3779B1) & mask
    while ids[j] != -1 and ids[j] != iid:
        j = (j + 1) & mask
    return j


@njit(nogil=True, inline="always", cache=True)
def _side(c):
    return SIDE_BUY if c == 66 else (SIDE_SELL if c == 65 else SIDE_NONE)


# from_book as a plain bool (a constant True/False is typed as a literal, and each compiled the event
# flush and the trade hold apart, with the depth publish inlined in each: ~4 s of a cold start here)
_FROM_BOOK, _FROM_MBP = np.bool_(True), np.bool_(False)


@njit(nogil=True, cache=True)
def _flush_event(L, W, inst, ts, tr, top, pend, npend, stats, out, n, from_book):
    """End of an event for `inst`: its level ticks, its held trades (with the touch after), then
    a quote if the touch changed, else a book tick if levels did. from_book=False: `top` was
    already set from an MBP record."""
    n, nl = depth.publish(W, L, inst, ts, tr, out, n, stats, S_SATURATED, 1)
    changed = touch_changed(L, inst, top) if from_book else top[inst, 4] != 0
    top[inst, 4] = 0
    k = 0
    for j in range(npend[0]):
        if pend[j, 0] == inst:
            n = emit(out, n, pend[j, 4], tr, inst, KIND_TRADE, pend[j, 3], pend[j, 1], pend[j, 2],
                     top, stats, S_SATURATED, 1)
            stats[S_TRADES] += 1
        else:
            for q in range(5):
                pend[k, q] = pend[j, q]
            k += 1
    npend[0] = k
    if changed:
        stats[S_QUOTES] += 1
        if top[inst, 0] != 0 and top[inst, 2] != 0 and top[inst, 0] >= top[inst, 2]:
            stats[S_CROSSED] += 1
        n = emit_quote(out, n, ts, tr, inst, top, stats, S_SATURATED, 1)
    elif nl:
        n = depth.emit_book(out, n, ts, tr, inst, top, stats, S_SATURATED, 1)
    return n


@njit(nogil=True, cache=True)
def _hold_trade(L, W, inst, ts, tr, price, size, sidec, top, pend, npend, stats, out, n, from_book):
    """Hold a trade until its event ends (flushing the held ones first if the buffer is full)."""
    if npend[0] == PENDING:
        n = _flush_event(L, W, inst, ts, tr, top, pend, npend, stats, out, n, from_book)
    if npend[0] == PENDING:  # all held for other instruments (hostile input): let the oldest go
        n = emit(out, n, pend[0, 4], tr, pend[0, 0], KIND_TRADE, pend[0, 3], pend[0, 1], pend[0, 2],
                 top, stats, S_SATURATED, 1)
        stats[S_TRADES] += 1
        for j in range(PENDING - 1):
            for q in range(5):
                pend[j, q] = pend[j + 1, q]
        npend[0] = PENDING - 1
    j = npend[0]
    pend[j, 0] = inst
    pend[j, 1] = price
    pend[j, 2] = size
    pend[j, 3] = _side(sidec)
    pend[j, 4] = ts
    npend[0] = j + 1
    return n


@njit(nogil=True, cache=True)
def _clear(L, O, inst):
    """Action R: drop every order and level of one instrument."""
    keys, vals = O[0], O[1]
    for j in range(keys.shape[0]):  # rare (snapshots, recoveries): a full scan is fine
        while keys[j] != book.EMPTY_KEY and (vals[j, book.O_BOOK] >> 1) == inst:
            book.order_remove(O, j)  # backward shift may move another order into j: re-check
    book.level_clear(L, 2 * inst)
    book.level_clear(L, 2 * inst + 1)


@njit(nogil=True, cache=True)
def _mbp_levels(L, b, pos, inst, nlev, N):
    """Set an MBP record's levels (at most N a side) into the instrument's cleared ladder."""
    for s in range(2):
        bk = 2 * inst + s
        book.level_clear(L, bk)
        for k in range(nlev if nlev < N else N):
            at = pos + 48 + 32 * k
            px = le64(b, at + 8 * s)
            if px == UNDEF_PRICE:
                break
            book.level_set(L, bk, px, le32(b, at + 16 + 4 * s))


# The record kinds, inlined into parse's loop (its arrays are borrowed, feeds/core/borrow.py, so the
# tuples handed on cost no reference counting). Each returns (n, _OK or the status parse
# returns: ST_ROOM_* when nothing was applied and the caller makes room and calls again).
_OK = -1


@njit(nogil=True, inline="always", cache=True)
def _mbo_add(L, O, W, inst, oid, price, size, action, sidec, stats, need):
    """MBO 'A' add, 'M' modify (an unknown order: an add). Returns _OK or ST_ROOM_*."""
    slot = book.order_find(O, oid)
    if sidec != 66 and sidec != 65:
        stats[S_BAD_SIDE] += 1
        return _OK
    if price == UNDEF_PRICE:
        stats[S_UNDEF_PRICE] += 1
        return _OK
    if not price_ok(price):
        stats[S_BAD_PRICE] += 1
        return _OK
    if size == 0 and action == 65:
        stats[S_BAD_SIZE] += 1
        return _OK
    bk = 2 * inst + (book.BID if sidec == 66 else book.ASK)
    if O[2][0] * 3 >= O[0].shape[0]:
        return ST_ROOM_ORDERS
    if not book.has_room(L, bk):
        need[0] = bk
        return ST_ROOM_LADDER
    if slot >= 0 and action == 65:
        stats[S_DUP_ORDER] += 1
        return _OK
    if slot >= 0:  # modify: out of the old level, into the new one
        vals = O[1]
        if book.level_add(L, vals[slot, book.O_BOOK], vals[slot, book.O_PRICE],
                          -vals[slot, book.O_QTY], -1) < 0:
            stats[S_NEGATIVE] += 1
        depth.changed(W, vals[slot, book.O_BOOK], vals[slot, book.O_PRICE])
        book.order_remove(O, slot)
    elif action == 77:
        stats[S_UNKNOWN_ORDER] += 1
    if size > 0:
        book.order_insert(O, oid, bk, price, size)
        book.level_add(L, bk, price, size, 1)
        depth.changed(W, bk, price)
    return _OK


@njit(nogil=True, inline="always", cache=True)
def _mbo_cancel(L, O, W, oid, size, stats):
    """MBO 'C' cancel, full or partial."""
    slot = book.order_find(O, oid)
    if slot < 0:
        stats[S_UNKNOWN_ORDER] += 1
        return
    vals = O[1]
    have = vals[slot, book.O_QTY]
    take = size if size < have else have
    if book.level_add(L, vals[slot, book.O_BOOK], vals[slot, book.O_PRICE], -take,
                      -1 if take == have else 0) < 0:
        stats[S_NEGATIVE] += 1
    depth.changed(W, vals[slot, book.O_BOOK], vals[slot, book.O_PRICE])
    if take == have:
        book.order_remove(O, slot)
    else:
        vals[slot, book.O_QTY] = have - take


@njit(nogil=True, inline="always", cache=True)
def _trade_ok(price, size, stats):
    """Can a trade of this price and size be a tick? Counts it when not."""
    if not price_ok(price):
        stats[S_BAD_PRICE if price != UNDEF_PRICE else S_UNDEF_PRICE] += 1
        return False
    if size == 0:
        stats[S_BAD_SIZE] += 1
        return False
    return True


@njit(nogil=True, inline="always", cache=True)
def _mbp_prices_ok(b, pos, nlev):
    """Are the MBP record's level prices (nlev a side, up to the first undefined one) prices a
    tick can carry?"""
    for s in range(2):
        for k in range(nlev):
            px = le64(b, pos + 48 + 32 * k + 8 * s)
            if px == UNDEF_PRICE:
                break
            if not price_ok(px):
                return False
    return True


@njit(nogil=True, inline="always", cache=True)
def _mbo(b, pos, inst, ts, L, O, W, top, pend, npend, stats, need, out, n):
    """An MBO record into the L3 book; its event ends with F_LAST. Returns (n, _OK or ST_ROOM_*)."""
    oid, price, size, flags, action, sidec, tr = mbo_fields(b, pos)
    if action == 65 or action == 77:  # 'A' add, 'M' modify
        st = _mbo_add(L, O, W, inst, oid, price, size, action, sidec, stats, need)
        if st != _OK:
            return n, st
    elif action == 67:  # 'C' cancel
        _mbo_cancel(L, O, W, oid, size, stats)
    elif action == 82:  # 'R' clear
        _clear(L, O, inst)
        depth.mark_stale(W, inst)  # the event's level ticks start with a clear tick
        stats[S_CLEARS] += 1
    elif action == 84:  # 'T' trade: held until the event's end
        if _trade_ok(price, size, stats):
            n = _hold_trade(L, W, inst, ts, tr, price, size, sidec, top, pend, npend, stats, out, n, _FROM_BOOK)
    elif action != 70 and action != 78:  # 'F' fill, 'N' none: no book change
        stats[S_BAD_ACTION] += 1
    if flags & F_LAST:
        n = _flush_event(L, W, inst, ts, tr, top, pend, npend, stats, out, n, _FROM_BOOK)
    return n, _OK


@njit(nogil=True, inline="always", cache=True)
def _mbp(b, pos, rt, inst, ts, N, L, W, top, pend, npend, stats, need, out, n):
    """An MBP-0 (trades), MBP-1 or MBP-10 record: it carries the touch (and levels) itself.
    Returns (n, _OK or ST_ROOM_LADDER). A record with a bad level price is rejected whole (counted
    once in bad_price), as is a trade of a bad price or size."""
    nlev = 10 if rt == RT_MBP10 else 1
    if N > 0 and rt != RT_MBP0:
        for s in range(2):  # room for the record's levels, before anything is applied
            if L[0][2 * inst + s, book.M_CAP] < nlev:
                need[0] = 2 * inst + s
                return n, ST_ROOM_LADDER
    levels_ok = rt == RT_MBP0 or _mbp_prices_ok(b, pos, nlev)
    if not levels_ok:
        stats[S_BAD_PRICE] += 1
    elif N > 0 and rt != RT_MBP0:
        _mbp_levels(L, b, pos, inst, nlev, N)
        depth.changed_all(W, inst)
    price = le64(b, pos + 16)
    size = le32(b, pos + 24)
    action = b[pos + 28]
    sidec = b[pos + 29]
    flags = b[pos + 30]
    tr = le64(b, pos + 32)
    if rt != RT_MBP0 and levels_ok:
        bp = le64(b, pos + 48)
        ap = le64(b, pos + 56)
        bq = le32(b, pos + 64)
        aq = le32(b, pos + 68)
        if bp == UNDEF_PRICE:
            bp, bq = 0, 0
        if ap == UNDEF_PRICE:
            ap, aq = 0, 0
        if bp != top[inst, 0] or bq != top[inst, 1] or ap != top[inst, 2] or aq != top[inst, 3]:
            top[inst, 0] = bp
            top[inst, 1] = bq
            top[inst, 2] = ap
            top[inst, 3] = aq
            top[inst, 4] = 1  # changed since the last quote tick
    if action == 84 and levels_ok and _trade_ok(price, size, stats):
        n = _hold_trade(L, W, inst, ts, tr, price, size, sidec, top, pend, npend, stats, out, n, _FROM_MBP)
    if flags & F_LAST or rt == RT_MBP0:
        n = _flush_event(L, W, inst, ts, tr, top, pend, npend, stats, out, n, _FROM_MBP)
    return n, _OK


@njit(nogil=True, cache=True)
def parse(b, pos, end, cfg, ids, idx, L, O, top, pend, npend, W, stats, err, need, out, n):
    """Apply DBN records b[pos:end]; returns (pos, n, status) like itch.parse. W: the depth
    windows (feeds/books/depth.py)."""
    # Every array borrowed (feeds/core/borrow.py): no reference counting of what is handed on. The
    # caller holds them all for the call.
    b, cfg, ids, idx, top = borrow(b), borrow(cfg), borrow(ids), borrow(idx), borrow(top)
    pend, npend, stats, err, need, out = borrow(pend), borrow(npend), borrow(stats), borrow(err), borrow(need), borrow(out)
    L = (borrow(L[0]), borrow(L[1]), borrow(L[2]), borrow(L[3]), borrow(L[4]))
    O = (borrow(O[0]), borrow(O[1]), borrow(O[2]))
    W = (borrow(W[0]), borrow(W[1]), borrow(W[2]), borrow(W[3]), borrow(W[4]), borrow(W[5]))
    strict = cfg[0] != 0
    auto = cfg[1] != 0
    N = W[0].shape[1]
    room = PENDING + 4 + 2 * depth.room(N)  # a record may end two events (a full trade buffer, F_LAST)
    while True:
        if end - pos < 4:
            return pos, n, ST_INPUT
        ln = np.int64(b[pos]) * 4
        if ln < 16:
            err[0] = E_SHORT
            err[1] = pos
            err[3] = ln
            return pos, n, ST_ERROR  # the framing itself is broken: no way to find the next record
        if ln > end - pos:
            return pos, n, ST_INPUT
        if n + room > out.shape[0]:
            return pos, n, ST_OUT
        rt = b[pos + 1]
        want = _MIN[rt]
        if want == 0 and rt != RT_MBP0:
            stats[S_SKIPPED] += 1
            pos += ln
            continue
        if ln < want:
            err[0] = E_BAD_LEN
            err[1] = pos
            err[2] = rt
            err[3] = ln
            if strict:
                return pos, n, ST_ERROR
            stats[S_BAD_LEN] += 1
            pos += ln
            continue
        inst = _inst(ids, idx, stats, record_instrument(b, pos), auto)
        if inst < 0:
            stats[S_UNTRACKED] += 1
            pos += ln
            continue
        ts = record_ts_event(b, pos)
        if rt == RT_MBO:
            n, st = _mbo(b, pos, inst, ts, L, O, W, top, pend, npend, stats, need, out, n)
        else:
            n, st = _mbp(b, pos, rt, inst, ts, N, L, W, top, pend, npend, stats, need, out, n)
        if st != _OK:
            return pos, n, st
        stats[S_RECORDS] += 1
        pos += ln


def read_metadata(path, head):
    """(metadata, offset of the first record) from the first bytes of a decompressed DBN file."""
    import databento_dbn as dbn
    if len(head) < 8 or head[:3] != b"DBN":
        raise U.FeedError(f"{path}: not a DBN file (no 'DBN' signature)")
    version = head[3]
    if not 1 <= version <= 3:
        raise U.FeedError(f"{path}: DBN version {version} is not supported (1-3)")
    mlen = struct.unpack_from("<I", head, 4)[0]
    if len(head) < 8 + mlen:
        raise U.FeedError(f"{path}: truncated DBN metadata ({len(head)} of {8 + mlen} bytes)")
    try:
        meta = dbn.Metadata.decode(bytes(head[:8 + mlen]))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # the decoder panics (pyo3 PanicException, a BaseException) on some bad input
        raise U.FeedError(f"{path}: bad DBN metadata: {e}") from None
    return meta, 8 + mlen


def _peek_metadata(path):
    """The file's metadata, or None when it has none to read yet (an empty or short file:
    batches() then fails with the reason, as for any bad file)."""
    head = b""
    try:
        for chunk in files.chunks(path, 1 << 16):
            head += chunk
            if len(head) >= 8 and (head[:3] != b"DBN" or len(head) >= 8 + struct.unpack_from("<I", head, 4)[0]):
                break
        return read_metadata(path, head)[0]
    except U.FeedError:
        return None


def symbol_table(meta):
    """instrument id -> raw symbol, from the metadata's mappings."""
    out = {}
    for raw, intervals in (meta.mappings or {}).items():
        for iv in intervals:
            try:
                out[int(iv["symbol"])] = raw
            except (ValueError, KeyError, TypeError):
                pass
    return out


class DbnBooks:
    """The DBN parser's state (instrument table, books, held trades, counters, depth windows) and
    its driver `_apply`: what dbn:FILE and dbn-live (feeds/databento/live.py) both are. strict: a
    malformed record stops the parse (else it is counted); auto: every instrument id is tracked
    (else only the ids the source tracks itself)."""

    def __init__(self, strict, auto, depth):
        self.cfg = np.array([1 if strict else 0, 1 if auto else 0], np.int64)
        self.ids = np.full(1 << 17, -1, np.int64)
        self.idx = np.zeros(1 << 17, np.int64)
        self.top = np.zeros((MAX_INSTRUMENTS, 5), np.int64)
        self.pend = np.zeros((PENDING, 5), np.int64)
        self.npend = np.zeros(1, np.int64)
        self.stats_a = np.zeros(NSTATS, np.int64)
        self.err = np.zeros(4, np.int64)
        self.need = np.zeros(1, np.int64)
        self.depth = depth
        self.windows = Windows(2 * MAX_INSTRUMENTS, depth)
        self._specs = venues.Specs(venues.cme)
        self.reset_books(forget=False)

    def reset_books(self, forget=True):
        """Every book empty (dbn-live after a gap: nothing built before it can be trusted; every
        window is re-sent, after a clear tick)."""
        self.ladders = Ladders(2 * MAX_INSTRUMENTS)
        self.orders = Orders(1 << 16)
        self.top[:] = 0
        self.npend[0] = 0
        if forget:
            self.windows.forget()

    def resync(self):
        """A consumer asked for every window again (feeds/process.py)."""
        self.windows.forget()

    @property
    def specs(self):
        """The instruments' records (engine/instruments.py): CME Globex futures by root symbol."""
        return self._specs.of(self.instruments)

    def stats(self):
        return {name: int(v) for name, v in zip(STAT_NAMES, self.stats_a)}

    def _apply(self, data, pos, out, n):
        if len(out) < PENDING + 4 + 2 * depth.room(self.depth):
            raise ValueError(f"a tick buffer of {len(out)} rows cannot hold one record's ticks at depth {self.depth}")
        data = read_only(data)  # (one compiled parse: a file's chunks are bytes, dbn-live's receive buffer
        # is writable, and parse was compiled for each, 5 s more on a cold cache both use)
        while True:
            pos, n, st = parse(data, pos, len(data), self.cfg, self.ids, self.idx, self.ladders.arrays(),
                               self.orders.arrays(), self.top, self.pend, self.npend, self.windows.arrays(),
                               self.stats_a, self.err, self.need, out, n)
            if st == ST_ROOM_ORDERS:
                self.orders.maybe_grow()
            elif st == ST_ROOM_LADDER:
                self.ladders.grow(int(self.need[0]))
            else:
                return pos, n, st

    def error_text(self, base):
        code, off, rt, ln = (int(x) for x in self.err)
        if code == E_SHORT:
            return f"byte {base + off}: record length {ln} is shorter than a record header (16)"
        return f"byte {base + off}: record type 0x{rt:02x} has length {ln}, its layout needs {MIN_LEN.get(rt)}"


class DbnFile(DbnBooks):
    live = False
    _inst_cache = (None,)  # (instrument count, names count) -> names: see `instruments`

    def __init__(self, u, v):
        self.uri, self.path = u, v.target
        files.check_readable(self.path)
        self.symbols = v.symbols
        self.want_depth = v.depth
        self.meta = None
        self._names = {}
        super().__init__(strict=v.on_error == "stop", auto=not self.symbols,
                         depth=self._schema_depth(_peek_metadata(self.path)))

    def _schema_depth(self, meta):
        """Levels a side to publish: what was asked, capped by what the file's schema carries
        (as asked when the schema is unknown: no metadata yet, or several schemas)."""
        if meta is None or meta.schema is None:
            return self.want_depth
        return min(self.want_depth, SCHEMA_DEPTH.get(str(meta.schema), 0))

    @property
    def instruments(self):
        """Names by dense index (from the symbology; an instrument id until its name is known).
        Asked per batch by the publisher: rebuilt only when an instrument or a name was added (a
        Python walk of the 2^17-slot id table was 16 ms a call)."""
        key = (int(self.stats_a[S_INSTRUMENTS]), len(self._names))
        if self._inst_cache[0] != key:
            sel = np.nonzero(self.ids != -1)[0]
            iids = self.ids[sel][np.argsort(self.idx[sel], kind="stable")]
            self._inst_cache = (key, [self._names.get(int(i), str(int(i))) for i in iids])
        return list(self._inst_cache[1])

    def _start(self, head):
        self.meta, off = read_metadata(self.path, head)
        self._names = symbol_table(self.meta)
        d = self._schema_depth(self.meta)
        if d != self.depth:
            self.depth, self.windows = d, Windows(2 * MAX_INSTRUMENTS, d)
        if self.symbols:
            wanted = {iid for iid, s in self._names.items() if s in self.symbols}
            missing = set(self.symbols) - set(self._names.values())
            if missing:
                raise U.FeedError(f"{self.path}: no instrument {', '.join(sorted(missing))} in this file "
                                  f"(it has {', '.join(sorted(set(self._names.values()))) or 'no symbology'})")
            self.cfg[1] = 1
            for iid in sorted(wanted):
                _inst(self.ids, self.idx, self.stats_a, iid, True)
            self.cfg[1] = 0
        return off

    OUT_ROWS = 8192  # tick batch size (tests make it small to run the out-of-room path)

    def batches(self):
        out = np.zeros((self.OUT_ROWS, 8), np.int64)
        n = 0
        carry = b""
        base = 0
        for chunk in files.chunks(self.path):
            buf = carry + chunk
            pos = 0
            if self.meta is None:
                if len(buf) < 8 or len(buf) < 8 + struct.unpack_from("<I", buf, 4)[0] and buf[:3] == b"DBN":
                    carry = buf
                    continue
                pos = self._start(buf)
            data = np.frombuffer(buf, np.uint8)
            while True:
                pos, n, st = self._apply(data, pos, out, n)
                if st == ST_OUT:
                    yield out[:n]
                    n = 0
                elif st == ST_ERROR:
                    raise U.FeedError(f"{self.path}: {self.error_text(base)}")
                else:
                    break
            carry = buf[pos:]
            base += pos
        if self.meta is None:
            self._start(carry)  # raises: too short to be DBN
        if n:
            yield out[:n]
        if carry:
            raise U.FeedError(f"{self.path}: truncated: the file ends inside a record at byte {base} "
                              f"({len(carry)} bytes of it)")
