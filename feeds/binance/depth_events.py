"""The depth stream's rules: a REST snapshot becomes a book, each diff is checked for continuity
(U/u on spot, pu on futures: feeds/binance/capture.py documents them) before it is applied, and
a break (or binance-live's gap line) empties the books until the next snapshot.

Each handler first parses and checks everything it needs, then room (book sides, scratch, the
held arena), and only then changes state: a return for room or an error has changed nothing.
"""
import numpy as np
from engine.jit import njit

from feeds.binance import crosscheck
from feeds.binance.held import drop_held, hold, hold_room, start_replay
from feeds.binance.layout import (C_BAD_LEVELS, C_DEPTH_APPLIED, C_DEPTH_DUP, C_DROPPED_OLD, C_GAPS, C_RESYNCS, C_SAT,
                                  C_SNAPSHOTS, C_STREAM_GAPS, G_NEED, G_NSYM, G_SIZE_DIV, I_BOOKU, I_LAST, I_OVU,
                                  I_SID, I_SYNCED, I_TS, K_E, K_U, K_a, K_asks, K_b, K_bids, K_last, K_pu, K_u, OK,
                                  R_DEEP, R_ROOM, R_VALS, fail)
from feeds.binance.message import book_levels, int_field, ts_field
from feeds.binance.view import book_event_ticks, build_view
from feeds.books import book, book_deep as deep, depth
from feeds.books.ticks import emit_gap, touch_changed
from feeds.core.borrow import borrow, borrow_all
from feeds.core.jscan import V_NONE, V_NUM, uint as _uint


@njit(nogil=True, cache=True)
def _need_room(L, D, G, b, V, off, k, cleared):
    """OK, or R_ROOM (G_NEED = side b) / R_DEEP when book side b cannot take the k levels at V
    pairs off.. (those with q > 0 may be new; `cleared`: the side is emptied first)."""
    L, D, G, V = borrow_all(L), borrow_all(D), borrow(G), borrow(V)
    new = np.int64(0)
    for j in range(off, off + k):
        if V[2 * j + 1] > 0:
            new += 1
    r = deep.room(L, D, b, new, cleared)
    if r == 1:
        G[G_NEED] = b
        return R_ROOM
    return R_DEEP if r == 2 else OK


@njit(nogil=True, inline="always", cache=True)
def _read_levels(b, F, kb, ka, V, L, D, G, inst, snapshot):
    """Both sides' levels (keys kb, ka) into V and room for them on inst's book (a snapshot's:
    required, each side emptied first): (OK, bids, asks, levels left out: counted in
    depth_bad_levels once the rest are applied), or the status to return with G_NEED or G_ERR set."""
    r, key, nb, na, nbad = book_levels(b, F, kb, ka, V, snapshot)
    if r == R_VALS:
        G[G_NEED] = key
        return R_VALS, nb, na, nbad
    if r:
        return fail(G, r, key), nb, na, nbad
    for s in range(2):
        r = _need_room(L, D, G, 2 * inst + s, V, 0 if s == 0 else nb, nb if s == 0 else na, snapshot)
        if r != OK:
            return r, nb, na, nbad
    return OK, nb, na, nbad


@njit(nogil=True, inline="always", cache=True)
def _apply_levels(L, D, W, V, inst, nb, na):
    """The parsed levels (nb bids, then na asks, in V) set on inst's book sides (room checked)."""
    for j in range(nb + na):
        depth.changed(W, 2 * inst + (book.BID if j < nb else book.ASK), V[2 * j])
    deep.set_levels(L, D, 2 * inst, V, np.int64(0), nb)
    deep.set_levels(L, D, 2 * inst + 1, V, nb, na)


@njit(nogil=True, cache=True)
def place_snapshot(b, F, inst, recv, L, D, W, VL, top, out, n, S):
    """A depth snapshot becomes inst's book; its held events are then replayed against it."""
    L, D, W, VL, S = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(VL), borrow_all(S)
    I, G, C, V, H = S[0], S[1], S[2], S[3], S[5]
    err, sid = int_field(b, F, K_last)
    if err:
        return fail(G, err, K_last), n
    r, nb, na, nbad = _read_levels(b, F, np.int64(K_bids), np.int64(K_asks), V, L, D, G, inst, np.bool_(True))
    if r != OK:
        return r, n
    size_div = G[G_SIZE_DIV]
    C[C_BAD_LEVELS] += nbad
    deep.clear(L, D, 2 * inst)
    deep.clear(L, D, 2 * inst + 1)
    _apply_levels(L, D, W, V, inst, nb, na)
    I[inst, I_OVU] = -1
    if W[0].shape[1] > 0:  # a clear tick, the whole window, a book tick with the touch
        depth.mark_stale(W, inst)
        n, nl = depth.publish(W, L, inst, recv, recv, out, n, C, C_SAT, size_div)
        touch_changed(L, inst, top)
        n = depth.emit_book(out, n, recv, recv, inst, top, C, C_SAT, size_div)
    for k in range(4):
        top[inst, k] = -1  # so the first event applied after it always quotes
    C[C_SNAPSHOTS] += 1
    I[inst, I_SID] = sid
    I[inst, I_SYNCED] = 0
    I[inst, I_LAST] = -1
    I[inst, I_BOOKU] = sid
    start_replay(G, H, I, inst, recv)
    return OK, n


# _continuity's verdicts besides OK (dropped and counted) and an error's status
_APPLY, _WAIT, _BREAK = 110, 111, 112


@njit(nogil=True, inline="always", cache=True)
def _continuity(src, F, I, G, C, inst):
    """Diff F against inst's book: (verdict, its u, update ids missed). _APPLY; _WAIT (no snapshot
    yet: hold it); _BREAK (the stream does not continue the book); OK (older than the book, or
    already in it: dropped, counted); or an error's status."""
    zero = np.int64(0)
    err, U_ = int_field(src, F, K_U)
    if err:
        return fail(G, err, K_U), zero, zero
    err, u_ = int_field(src, F, K_u)
    if err:
        return fail(G, err, K_u), zero, zero
    fut = F[K_pu, 0] != V_NONE
    synced = I[inst, I_SYNCED] != 0
    sid = I[inst, I_SID]
    if sid < 0 and not synced:
        return _WAIT, u_, zero
    if not synced:
        if (u_ < sid) if fut else (u_ <= sid):
            C[C_DROPPED_OLD] += 1
            return OK, u_, zero
        if not ((U_ <= sid <= u_) if fut else (U_ <= sid + 1 <= u_)):
            return _BREAK, u_, U_ - sid - 1  # the snapshot is older than the stream bridges
    elif u_ <= I[inst, I_LAST]:  # a diff the book already has (a duplicate, or a new connection's overlap)
        C[C_DEPTH_DUP] += 1
        return OK, u_, zero
    elif fut:
        err, pu = int_field(src, F, K_pu)
        if err:
            return fail(G, err, K_pu), zero, zero
        if pu != I[inst, I_LAST]:
            return _BREAK, u_, np.int64(1)
    elif U_ != I[inst, I_LAST] + 1:
        return _BREAK, u_, U_ - I[inst, I_LAST] - 1
    return _APPLY, u_, zero


@njit(nogil=True, inline="always", cache=True)
def _unsync(L, D, G, H, I, top, inst):
    """inst waits for a new snapshot: its book, held events and published touch gone."""
    I[inst, I_SYNCED] = 0
    I[inst, I_SID] = -1
    I[inst, I_LAST] = -1
    I[inst, I_BOOKU] = -1
    I[inst, I_OVU] = -1
    drop_held(G, H, I, inst)
    deep.clear(L, D, 2 * inst)
    deep.clear(L, D, 2 * inst + 1)
    for k in range(4):
        top[inst, k] = 0


@njit(nogil=True, cache=True)
def _resync(src, s, e, F, inst, recv, lineno, L, D, W, top, out, n, S, missed):
    """A break in inst's diffs: a gap tick, an empty book, and a wait for the next snapshot
    (holding this event)."""
    L, D, W, S = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(S)
    F, top, out = borrow(F), borrow(top), borrow(out)
    I, G, C, H, HB = S[0], S[1], S[2], S[5], S[6]
    err, E = int_field(src, F, K_E)
    if err:
        return fail(G, err, K_E), n
    r = hold_room(G, H, HB, e - s)
    if r != OK:
        return r, n
    C[C_RESYNCS] += 1
    C[C_GAPS] += 1
    _unsync(L, D, G, H, I, top, inst)
    hold(G, H, HB, I, C, inst, src, s, e, lineno)
    n = emit_gap(out, n, E * 1_000_000, recv, max(np.int64(1), missed))
    depth.forget(W)  # the consumer voids every book: every window is re-sent
    return OK, n


@njit(nogil=True, cache=True)
def diff(src, s, e, F, inst, recv, lineno, L, D, W, VL, top, out, n, S, DM, TM):
    """One diff event of a known instrument: continuity, then the book, ticks and the cross-check."""
    L, D, W, VL, S, DM, TM = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(VL), borrow_all(S), \
        borrow_all(DM), borrow_all(TM)
    F, top, out = borrow(F), borrow(top), borrow(out)
    I, G, C, V, H, HB = S[0], S[1], S[2], S[3], S[5], S[6]
    r, u_, missed = _continuity(src, F, I, G, C, inst)
    if r == _WAIT:  # no snapshot yet: hold it
        r = hold_room(G, H, HB, e - s)
        if r == OK:
            hold(G, H, HB, I, C, inst, src, s, e, lineno)
        return r, n
    if r == _BREAK:
        return _resync(src, s, e, F, inst, recv, lineno, L, D, W, top, out, n, S, missed)
    if r != _APPLY:
        return r, n
    err, key, ts = ts_field(src, F)
    if err:
        return fail(G, err, key), n
    r, nb, na, nbad = _read_levels(src, F, np.int64(K_b), np.int64(K_a), V, L, D, G, inst, np.bool_(False))
    if r != OK:
        return r, n
    # -- from here on, state changes
    C[C_BAD_LEVELS] += nbad
    if I[inst, I_SYNCED] == 0:
        I[inst, I_SYNCED] = 1
        I[inst, I_SID] = -1
    _apply_levels(L, D, W, V, inst, nb, na)
    I[inst, I_LAST] = u_
    I[inst, I_BOOKU] = u_
    if ts > I[inst, I_TS]:
        I[inst, I_TS] = ts
    C[C_DEPTH_APPLIED] += 1
    view = False
    if I[inst, I_OVU] >= 0:
        if u_ >= I[inst, I_OVU]:  # the diff reaches the ticker: the diff's book replaces it
            I[inst, I_OVU] = -1
        else:  # an older diff: the newer ticker's touch stays over it
            build_view(L, D, VL, I, inst, True, True)
            view = True
        depth.changed_all(W, inst)
    if view:
        n = book_event_ticks(VL, W, inst, ts, recv, out, n, top, C, G[G_SIZE_DIV], False)
    else:
        n = book_event_ticks(L, W, inst, ts, recv, out, n, top, C, G[G_SIZE_DIV], False)
    bp, bq = book.best(L, 2 * inst)  # the cross-check: the diff book's touch under this update id
    ap, aq = book.best(L, 2 * inst + 1)
    crosscheck.diff_touch(DM[0], DM[1], TM[0], TM[1], C, inst, u_, bp, bq, ap, aq)
    return OK, n


@njit(nogil=True, cache=True)
def gap_all(b, F, recv, L, D, W, top, out, n, S):
    """A `{"e":"gap","E":ms}` line (binance-live writes one when its connection is lost, so its
    recording replays the same ticks): every instrument waits for a new snapshot, its held events
    and book dropped, and one gap tick voids every book downstream."""
    L, D, W, S = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(S)
    I, G, C, H = S[0], S[1], S[2], S[5]
    ts = recv
    if F[K_E, 0] == V_NUM:
        t = _uint(b, F[K_E, 1], F[K_E, 2])
        if t > 0:
            ts = t * 1_000_000
    for inst in range(G[G_NSYM]):
        _unsync(L, D, G, H, I, top, np.int64(inst))
    C[C_GAPS] += 1
    C[C_STREAM_GAPS] += 1
    n = emit_gap(out, n, ts, recv, np.int64(1))
    depth.forget(W)
    return n
