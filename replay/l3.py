"""Exact FIFO fills for maker orders on market-by-order data (Databento DBN MBO: CME Globex).

With every order's id on every add, cancel, modify and fill, our order's place in its queue
needs no model. Our order joins the back of its price level when it arrives; an order is ahead
of it when it got its priority earlier. Priority (CME's FIFO, Databento's MBO semantics): an add
gets it; a modify that lowers the size at the same price keeps it; a modify to another price or
a larger size loses it (the order goes behind us). Then, per record at our price and side:
  F (a resting order filled): an order ahead of us takes the fill; an order behind us filled
    means the aggressor reached past us: we take that fill first (up to what we have left);
  C / M of an order ahead of us: `ahead` shrinks by what left the queue, less what its F
    records already took (the book change that follows a fill is not a cancel);
  T at a price through ours (a sell below our bid, a buy above our ask): all we have left fills.
Taker orders walk the aggregate book at arrival (every level, not a window). Latency, fees,
position sizing and cancels on a newer signal are as in replay/execsim.py, whose fill layout
and spec columns this shares; records play the role ticks play there (an order arrives before
the first record of a later event whose exchange time is at or after its arrival).
"""
import numpy as np
from engine.jit import njit

from engine import levelbook
from engine.intrinsics import borrow, borrow_all
from engine.levelbook import SZ
from feeds.books import book as B
from feeds.core import files
from feeds.databento.dbn import (MIN_LEN, RT_MBO, UNDEF_PRICE, mbo_fields, read_metadata, record_instrument, record_ts_event,
                       symbol_table)
from feeds.core.uri import FeedError

from .execsim import (FILL_WORDS, O_ACTIVE, O_PX, O_REM, O_SIDE, O_SIG, U_ORDERED, U_TAKER, U_UNPLACED, fills_table,
                      maker_fill, order_inputs, send, unfilled_info)

MBO_LEN = MIN_LEN[RT_MBO]
# record columns
R_TS, R_RECV, R_OID, R_PX, R_SIZE, R_ACTION, R_SIDE, R_INST, R_FLAGS = range(9)
# order table: oid -> (side 0 bid / 1 ask, price, size); a second table: oid -> (priority, filled, 0)
MAXLV = 4096  # levels a side of the aggregate book (engine/levelbook.py takes the array's own width)
# working order columns
W_ACTIVE, W_SIDE, W_PX, W_REM, W_SIG = O_ACTIVE, O_SIDE, O_PX, O_REM, O_SIG  # execsim's working-order columns
W_PRIO, W_AHEAD = 5, 6


class L3Error(ValueError):
    pass


@njit(nogil=True, cache=True)
def _decode(b, off, cols):
    """MBO records of b[off:] into cols (int64[n, 9]); returns (rows, bad offset or -1)."""
    n = 0
    pos = off
    end = b.shape[0]
    while end - pos >= 4:
        ln = np.int64(b[pos]) * 4
        if ln < 16 or ln > end - pos:
            return n, pos
        if b[pos + 1] == RT_MBO:
            if ln < MBO_LEN:
                return n, pos
            r = cols[n]
            r[R_TS] = record_ts_event(b, pos)
            r[R_INST] = record_instrument(b, pos)
            r[R_OID], r[R_PX], r[R_SIZE], r[R_FLAGS], r[R_ACTION], r[R_SIDE], r[R_RECV] = mbo_fields(b, pos)
            n += 1
        pos += ln
    return n, (-1 if pos == end else pos)


def load(path, names):
    """MBO records of a DBN file as int64[n, 9], instrument ids mapped to the indices of `names`
    (the tick file's instruments; -1 for others)."""
    try:
        raw = b"".join(files.chunks(path))  # the feeds' reader: a cut-off or corrupt zstd file is an error
    except FeedError as e:
        raise L3Error(f"--l3 {e}") from None
    try:
        meta, off = read_metadata(path, raw)
    except Exception as e:  # the metadata decoder's own error types
        raise L3Error(f"--l3 {path}: not DBN: {e}") from None
    if str(meta.schema) != "mbo":
        raise L3Error(f"--l3 {path}: schema {meta.schema}, exact FIFO needs mbo")
    b = np.frombuffer(raw, np.uint8)
    cols = np.zeros(((len(raw) - off) // MBO_LEN + 1, 9), np.int64)
    n, bad = _decode(b, off, cols)
    if bad >= 0:
        raise L3Error(f"--l3 {path}: a broken record at byte {bad}")
    cols = cols[:n]
    sym = symbol_table(meta)
    index = {name: i for i, name in enumerate(names)}
    ids = np.unique(cols[:, R_INST]) if n else np.zeros(0, np.int64)
    mapped = np.full(n, -1, np.int64)
    for iid in ids:
        mapped[cols[:, R_INST] == iid] = index.get(sym.get(int(iid), str(int(iid))), -1)
    cols[:, R_INST] = mapped
    return cols


@njit(nogil=True, cache=True)
def _level_add(book, ln, inst, side, px, dq):
    """Aggregate size at (side, px) += dq; levels kept best first (at most MAXLV a side)."""
    j, found = levelbook.find(book, ln, inst, side, px)
    if found:
        book[inst, side, SZ, j] += dq
        if book[inst, side, SZ, j] <= 0:
            levelbook.remove(book, ln, inst, side, j)
    elif dq > 0:
        levelbook.insert(book, ln, inst, side, j, px, dq)


@njit(nogil=True, cache=True)
def _arrive(k, j, ts, sig, W, pos, book, ln, spec, resp, fills, fees, nf, unfilled, prio):
    nf, joined = send(k, j, ts, sig, W, pos, book, ln, spec, resp, fills, fees, nf, unfilled)
    if joined >= 0:
        W[sig[k, 0], W_PRIO] = prio  # every order with an earlier priority is ahead of us
        W[sig[k, 0], W_AHEAD] = joined
    return nf


@njit(nogil=True, inline="always", cache=True)
def _arrivals(k, m, j, ts, recv, sig, arrival, sig_recv, resp, W, pos, book, ln, spec, fills, fees, nf, unfilled, prio):
    """Signals from k on that reach the exchange by record j's time, their ticks received before
    it, arrive (each takes the next priority). Returns (the next signal, fills written, priority)."""
    while k < m and arrival[k] <= ts and sig_recv[k] < recv:
        nf = _arrive(k, j, ts, sig, W, pos, book, ln, spec, resp[k], fills, fees, nf, unfilled, prio)
        prio += 1
        k += 1
    return k, nf, prio


@njit(nogil=True, inline="always", cache=True)
def _on_add(O, P, book, ln, inst, oid, side, px, sz, prio):
    """A new resting order: in the tables with the next priority, its size on its level."""
    B.order_insert(O, oid, side, px, sz)
    B.order_insert(P, oid, prio, 0, 0)
    _level_add(book, ln, inst, side, px, sz)
    return prio + 1


@njit(nogil=True, inline="always", cache=True)
def _on_fill(O, P, W, pos, inst, oid, sz, w_on, w_side, j, ts, rr, spec, fills, fees, nf):
    """'F', a resting order filled (its book change follows as C or M): at our price, one ahead
    of us shrinks `ahead`, one behind us means the aggressor reached past us (we fill first); at
    a price through ours on our side, all we have left fills."""
    s = B.order_find(O, oid)
    if s < 0 or not w_on:
        return nf
    q = B.order_find(P, oid)
    o_side, o_px = O[1][s, B.O_BOOK], O[1][s, B.O_PRICE]
    if o_side == w_side and o_px == W[inst, W_PX]:
        if P[1][q, 0] < W[inst, W_PRIO]:
            W[inst, W_AHEAD] -= sz
            P[1][q, 1] += sz
        else:  # behind us: the aggressor reached past us
            nf = maker_fill(W, inst, min(sz, W[inst, W_REM]), j, ts, rr, spec, fills, fees, nf, pos)
            P[1][q, 1] += sz
    elif W[inst, W_ACTIVE] != 0 and o_side == w_side and \
            (o_px < W[inst, W_PX] if w_side == 0 else o_px > W[inst, W_PX]):
        nf = maker_fill(W, inst, W[inst, W_REM], j, ts, rr, spec, fills, fees, nf, pos)  # through us
    return nf


@njit(nogil=True, inline="always", cache=True)
def _on_cancel_modify(O, P, W, book, ln, inst, act, oid, side, px, sz, w_on, w_side, prio):
    """'C' cancel (size = what left) or 'M' modify (size = new size): what leaves the queue
    ahead of us, less what its fills took already, shrinks `ahead`; the order's level and
    priority follow (a new price or a larger size: behind everyone, us included)."""
    s = B.order_find(O, oid)
    if s < 0:
        if act == 77 and side >= 0 and px != UNDEF_PRICE:  # a modify of an order we never saw: an add
            prio = _on_add(O, P, book, ln, inst, oid, side, px, sz, prio)
        return prio
    q = B.order_find(P, oid)
    o_side, o_px, o_sz = O[1][s, B.O_BOOK], O[1][s, B.O_PRICE], O[1][s, B.O_QTY]
    new_px = o_px if act == 67 else px
    new_sz = o_sz - sz if act == 67 else sz
    if new_sz < 0:
        new_sz = 0
    left_q = o_sz - new_sz if (new_px == o_px and new_sz <= o_sz) else o_sz  # what leaves the queue
    ahead_of_us = w_on and o_side == w_side and o_px == W[inst, W_PX] and P[1][q, 0] < W[inst, W_PRIO]
    if ahead_of_us:
        filled = P[1][q, 1]
        take = left_q - filled if left_q > filled else 0
        P[1][q, 1] = filled - left_q if filled > left_q else 0
        W[inst, W_AHEAD] -= take
    else:
        P[1][q, 1] = 0
    _level_add(book, ln, inst, o_side, o_px, -o_sz)
    if new_sz > 0 and px != UNDEF_PRICE:
        O[1][s, B.O_PRICE], O[1][s, B.O_QTY] = new_px, new_sz
        _level_add(book, ln, inst, o_side, new_px, new_sz)
        if new_px != o_px or new_sz > o_sz:  # priority lost: behind everyone, us included
            P[1][q, 0] = prio
            prio += 1
    else:
        B.order_remove(O, s)
        B.order_remove(P, q)
    return prio


@njit(nogil=True, inline="always", cache=True)
def _on_trade(W, pos, inst, side, px, w_side, j, ts, rr, spec, fills, fees, nf):
    """'T' (side is the aggressor's): a trade against our side at a price through ours fills all
    we have left."""
    hits_us = side != w_side
    through = (px < W[inst, W_PX]) if w_side == 0 else (px > W[inst, W_PX])
    if hits_us and through:
        nf = maker_fill(W, inst, W[inst, W_REM], j, ts, rr, spec, fills, fees, nf, pos)
    return nf


@njit(nogil=True, cache=True)
def simulate(rec, j, k, sig, arrival, sig_recv, resp, spec, O, P, W, pos, book, ln, fills, fees, unfilled, prio):
    """From record j and signal k on: (j, k, fills written, next priority). Returns early when
    fills is nearly full or the order tables need room (the caller grows them and calls again).
    sig: execsim.order_inputs' (instrument, target, maker, tick); sig_recv: each signal's tick ts_recv.
    book, ln: the aggregate book (engine/levelbook.py). Every array is borrowed, as in execsim.simulate."""
    rec, sig, arrival, sig_recv, resp, spec = borrow(rec), borrow(sig), borrow(arrival), borrow(sig_recv), \
        borrow(resp), borrow(spec)
    O, P, W, pos, book, ln = borrow_all(O), borrow_all(P), borrow(W), borrow(pos), borrow(book), borrow(ln)
    fills, fees, unfilled = borrow(fills), borrow(fees), borrow(unfilled)
    n = rec.shape[0]
    m = sig.shape[0]
    nf = 0
    cap = fills.shape[0] - MAXLV - 4
    while j < n:
        if nf >= cap or O[2][0] * 3 >= O[0].shape[0] or P[2][0] * 3 >= P[0].shape[0]:
            return j, k, nf, prio
        r = rec[j]
        ts = r[R_TS]
        k, nf, prio = _arrivals(k, m, j, ts, r[R_RECV], sig, arrival, sig_recv, resp, W, pos, book, ln, spec, fills,
                                fees, nf, unfilled, prio)
        inst = r[R_INST]
        if inst < 0 or inst >= W.shape[0]:
            j += 1
            continue
        act = r[R_ACTION]
        side = 0 if r[R_SIDE] == 66 else (1 if r[R_SIDE] == 65 else -1)  # 'B' bid, 'A' ask
        oid, px, sz = r[R_OID], r[R_PX], r[R_SIZE]
        w_on = W[inst, W_ACTIVE] != 0
        w_side = 0 if W[inst, W_SIDE] > 0 else 1
        rr = resp[W[inst, W_SIG]] if w_on else 0
        if act == 82:  # 'R': the instrument's book is cleared (its orders are gone)
            levelbook.clear(book, ln, inst)
        elif act == 65 and side >= 0 and px != UNDEF_PRICE:  # 'A'
            if B.order_find(O, oid) < 0:
                prio = _on_add(O, P, book, ln, inst, oid, side, px, sz, prio)
        elif act == 70:  # 'F'
            nf = _on_fill(O, P, W, pos, inst, oid, sz, w_on, w_side, j, ts, rr, spec, fills, fees, nf)
        elif act == 67 or act == 77:  # 'C', 'M'
            prio = _on_cancel_modify(O, P, W, book, ln, inst, act, oid, side, px, sz, w_on, w_side, prio)
        elif act == 84 and w_on and side >= 0:  # 'T'
            nf = _on_trade(W, pos, inst, side, px, w_side, j, ts, rr, spec, fills, fees, nf)
        if W[inst, W_AHEAD] < 0:
            W[inst, W_AHEAD] = 0
        j += 1
    while k < m:  # orders arriving after the last record meet no book
        unfilled[U_TAKER if sig[k, 2] == 0 else U_UNPLACED] += abs(sig[k, 1] - pos[sig[k, 0]])
        unfilled[U_ORDERED] += abs(sig[k, 1] - pos[sig[k, 0]])
        k += 1
    return j, k, nf, prio


def run(rec, words, signals, n_inst, spec, p):
    """Fills (execsim.FILL_DTYPE; `tick` holds the record index) of the signals on MBO records."""
    sig, arrival, resp, comparable, skew = order_inputs(words, signals, p)
    m = len(sig)
    sig_recv = words[sig[:, 3], 2]
    n_inst = max(n_inst, int(sig[:, 0].max()) + 1 if m else 1)
    O, P = B.Orders(1 << 16), B.Orders(1 << 16)
    W = np.zeros((n_inst, 7), np.int64)
    pos = np.zeros(n_inst, np.int64)
    book = np.zeros((n_inst, 2, 2, MAXLV), np.int64)  # engine/levelbook.py's layout
    ln = np.zeros((n_inst, 2), np.int64)
    unfilled = np.zeros(4, np.int64)
    spec = np.ascontiguousarray(spec, np.float64)
    buf = np.zeros((max(4096, 4 * m + MAXLV + 8), FILL_WORDS), np.int64)
    fee = np.zeros(len(buf), np.float64)
    out, fout, j, k, prio = [], [], 0, 0, 1
    while True:
        j, k, nf, prio = simulate(rec, j, k, sig, arrival, sig_recv, resp, spec, O.arrays(), P.arrays(), W, pos,
                                  book, ln, buf, fee, unfilled, prio)
        out.append(buf[:nf].copy())
        fout.append(fee[:nf].copy())
        if j >= len(rec):
            break
        O.maybe_grow()
        P.maybe_grow()
    return fills_table(out, fout), unfilled_info(unfilled, W, comparable, skew)
