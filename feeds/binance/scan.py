"""The Binance capture scanner: raw line bytes -> continuity checks -> L2 book -> ticks, all in
numba (feeds/binance/capture.py drives it and documents the behaviour). This is its line loop;
the parts are modules of their own: the message scanner (message.py), the depth stream's rules
(depth_events.py), bookTickers (book_ticker.py), trades (trades.py), symbols (symbols.py), held
events (held.py), the published view (view.py), the cross-check (crosscheck.py) and the state
layout (layout.py).

Why hand-written: orjson plus per-line Python ran ~180k lines/s, with the Python around the
parse costing more than the parse; a scanner for the few message shapes Binance sends (any key
order, any whitespace, unknown keys skipped; the byte primitives in feeds/core/jscan.py) parses a
bookTicker in ~130 ns and handles the spot capture at ~1.2M lines/s with its book (bench/feed_parsers.py).

Every read is bounds-checked against the line's end (numba does not check indices). A line is
handled in one step that first parses and validates everything it needs, then checks room (tick
buffer, book sides, scratch, held-event arena) and only then changes state; so a step that
returns for room (R_ROOM, R_VALS, R_HOLD) or fails (R_ERR) has changed nothing and is simply run
again (or skipped: counted in bad_lines).
"""
import numpy as np
from numba import types
from engine.jit import njit

from feeds.binance.book_ticker import ticker
from feeds.binance.depth_events import diff, gap_all, place_snapshot
from feeds.binance.held import drop_held, hold, hold_room, parse_held
from feeds.binance.layout import (AGAIN, C_BAD, C_DEPTH_EVENTS, C_LINES, C_OTHER, DEAD, E_SNAPSHOT_SYMBOLS,
                                  G_ERR_LINE, G_LINENO, G_NSYM, G_RP_CUR, G_RP_END, G_RP_INST, G_RP_RECV, G_STRICT,
                                  H_LINENO, H_OWNER, K_s, OK, ORPHAN, R_DONE, R_ERR, R_OUT, REPLAY, fail)
from feeds.binance.message import (MSG_AGG_TRADE, MSG_DEPTH, MSG_GAP, MSG_OTHER, MSG_SNAPSHOT, MSG_TICKER, kind,
                                   parse_line)
from feeds.binance.symbols import instrument_of, new_symbol
from feeds.binance.trades import trade
from feeds.books import depth
from feeds.core.borrow import arrays_at, borrow, borrow_all, data_ptr
from feeds.core.jscan import V_NONE, find_byte

# what feeds/binance/capture.py, live.py and live_protocol.py read of the scanner, from here
from feeds.binance.crosscheck import XD, XT  # noqa: F401
from feeds.binance.held import compact  # noqa: F401
from feeds.binance.layout import (G_ERR, G_ERR_KEY, G_HBYTES, G_HN, G_HOLD_MAX, G_NEED, G_QUOTE,  # noqa: F401
                                  G_SIZE_DIV, I_HELD, I_SID, I_SYNCED, MAX_SYMBOLS, NG, NI, NK, R_DEEP, R_HOLD,
                                  R_ROOM, R_VALS, STATS, SYM_LEN, errors_text)
from feeds.binance.symbols import declare, needs_snapshot  # noqa: F401


@njit(nogil=True, inline="always", cache=True)
def _step(b, s, e, lineno, L, D, W, VL, top, out, n, S, DM, TM):
    """One line b[s:e] (not blank)."""
    I, G, C, H, HB = S[0], S[1], S[2], S[5], S[6]
    F0, F1, F2 = S[7], S[8], S[9]
    err, recv, which = parse_line(b, s, e, F0, F1)
    if err:
        return fail(G, err, -1), n
    F = F0 if which == 0 else F1
    what = kind(b, F)
    if what == MSG_SNAPSHOT and F[K_s, 0] == V_NONE:  # a REST depth snapshot (the live feed's name one: "s")
        if G[G_NSYM] == 0:  # it is the book of the first symbol to come
            r = hold_room(G, H, HB, e - s)
            if r != OK:
                return r, n
            drop_held(G, H, I, np.int64(ORPHAN))
            hold(G, H, HB, I, C, np.int64(ORPHAN), b, s, e, lineno)
            C[C_LINES] += 1
            return OK, n
        if G[G_NSYM] != 1:
            return fail(G, E_SNAPSHOT_SYMBOLS, -1), n
        r, n = place_snapshot(b, F, np.int64(0), recv, L, D, W, VL, top, out, n, S)
        if r == OK:
            C[C_LINES] += 1
        return r, n
    if what == MSG_GAP:  # the live feed lost its stream
        n = gap_all(b, F, recv, L, D, W, top, out, n, S)
        C[C_LINES] += 1
        return OK, n
    if what == MSG_OTHER:
        C[C_LINES] += 1
        C[C_OTHER] += 1
        return OK, n
    err, inst = instrument_of(b, F, S)
    if err:
        return fail(G, err, K_s), n
    if inst < 0:
        r, n = new_symbol(b, F, recv, L, D, W, VL, top, out, n, S, F2)
        if r == R_ERR and G[G_STRICT] == 0 and what != MSG_SNAPSHOT:  # (the held snapshot's fault, counted;
            C[C_BAD] += 1                                                # this line runs again)
            r = AGAIN
        return r, n
    if what == MSG_SNAPSHOT:
        r, n = place_snapshot(b, F, inst, recv, L, D, W, VL, top, out, n, S)
    elif what == MSG_DEPTH:
        r, n = diff(b, s, e, F, inst, recv, lineno, L, D, W, VL, top, out, n, S, DM, TM)
        if r == OK:
            C[C_DEPTH_EVENTS] += 1
    elif what == MSG_TICKER:
        r, n = ticker(b, F, inst, recv, L, D, W, VL, top, out, n, S, DM, TM)
    else:
        r, n = trade(b, F, inst, recv, L, W, VL, top, out, n, S, what == MSG_AGG_TRADE)
    if r == OK:
        C[C_LINES] += 1
    return r, n


@njit(nogil=True, inline="always", cache=True)
def _blank(b, s, e):
    for i in range(s, e):
        c = b[i]
        if not (c == 32 or (9 <= c <= 13)):
            return False
    return True


@njit(nogil=True, cache=True)
def _replay(L, D, W, VL, top, out, n, S, DM, TM):
    """Replay one held event detached for the snapshot just placed: (status, n); R_DONE when
    none are left."""
    G, C, H, HB = S[1], S[2], S[5], S[6]
    F0, F1 = S[7], S[8]
    inst = G[G_RP_INST]
    k = G[G_RP_CUR]
    while k < G[G_RP_END] and H[k, H_OWNER] != REPLAY - inst:
        k += 1
    G[G_RP_CUR] = k
    if k >= G[G_RP_END]:
        G[G_RP_INST] = -1
        return R_DONE, n
    err, _, which, HR, s0, e0 = parse_held(H, HB, k, F0, F1)
    if err:
        r = fail(G, err, -1)
    else:
        r, n = diff(HR, s0, e0, F0 if which == 0 else F1, inst, G[G_RP_RECV], H[k, H_LINENO], L, D, W, VL,
                    top, out, n, S, DM, TM)
    if r == R_ERR:
        if G[G_STRICT] == 0:
            C[C_BAD] += 1
            r = OK
        else:
            G[G_ERR_LINE] = H[k, H_LINENO]
    if r == OK:
        H[k, H_OWNER] = DEAD  # (no compaction runs while replaying: k is still this entry)
        G[G_RP_CUR] = k + 1
    return r, n


@njit(nogil=True, cache=True)
def scan(buf, pos, end, final, L, D, W, VL, top, out, n, S, DM, TM):
    """Run the lines of buf[pos:end] (the last one only if final, else up to the last newline).
    Returns (pos, n, status): R_DONE (all of it, or all whole lines), R_OUT (out is full: take
    out[:n] and call again), R_ROOM (grow book side G[G_NEED]), R_DEEP (grow the deep levels'
    table), R_VALS (V needs G[G_NEED]
    pairs), R_HOLD (the held arena needs G[G_NEED] bytes more), R_ERR (G_ERR at line
    G_ERR_LINE), R_FATAL. On any of these, pos is the line to run again."""
    # every array borrowed (feeds/core/borrow.py): the handlers below take tuples of ~40 arrays, and
    # numba's atomic reference counts on each call were most of a ticker's or trade's time. The
    # input is a bare pointer: every helper that reads it would otherwise call into the runtime
    # (a count of a borrowed array is still a call) and wrap negative indices, on every byte
    # helper: half a ticker's parse time
    buf, top, out = data_ptr(buf), borrow(top), borrow(out)
    L, D, W, VL, S, DM, TM = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(VL), borrow_all(S), \
        borrow_all(DM), borrow_all(TM)
    G, C = S[1], S[2]
    room = 2 + depth.room(W[0].shape[1])
    while True:
        if n + room > out.shape[0]:
            return pos, n, R_OUT
        if G[G_RP_INST] >= 0:
            r, n = _replay(L, D, W, VL, top, out, n, S, DM, TM)
            if r == OK or r == R_DONE:
                continue
            return pos, n, r
        if pos >= end:
            return pos, n, R_DONE
        j = find_byte(buf, pos, end, 10)
        if j >= end and not final:
            return pos, n, R_DONE
        lineno = G[G_LINENO] + 1
        if _blank(buf, pos, j):
            r = OK
        else:
            r, n = _step(buf, pos, j, lineno, L, D, W, VL, top, out, n, S, DM, TM)
            if r == AGAIN:
                continue
            if r == R_ERR:
                if G[G_ERR_LINE] == 0:
                    G[G_ERR_LINE] = lineno
                if G[G_STRICT] == 0:
                    G[G_ERR_LINE] = 0
                    C[C_LINES] += 1
                    C[C_BAD] += 1
                    r = OK
        if r != OK:
            return pos, n, r
        G[G_LINENO] = lineno
        pos = j + 1 if j < end else end


# --- the scan through one handle table (feeds/core/borrow.py): what a live feed calls per socket read ---

_A1, _A2, _U1, _U2 = types.int64[::1], types.int64[:, ::1], types.uint8[::1], types.uint8[:, ::1]
# the state's tuples as Scanner (feeds/binance/capture.py) keeps them: ladders, deep levels, windows, view,
# state, the two cross-check rings; Scanner checks its arrays against these at start
PACKED = (types.Tuple((_A2, _A1, _A1, _A1, _A1)), types.UniTuple(_A1, 4), types.Tuple((_A2, _A2, _A1, _A2, _A1, _A1)),
          types.Tuple((_A2, _A1, _A1, _A1, _A1)), types.Tuple((_A2, _A1, _A1, _A1, _U2, _A2, _U1, _A2, _A2, _A2, _A2)),
          types.UniTuple(_A2, 2), types.UniTuple(_A2, 2))
_PL, _PD, _PW, _PV, STATE_TYPES, _PM, _PT = PACKED
_OL, _OD = 0, len(_PL)
_OW = _OD + len(_PD)
_OV = _OW + len(_PW)
STATE_AT = _OV + len(_PV)  # the state's arrays in the handle table: H[STATE_AT:], typed STATE_TYPES
_OM = STATE_AT + len(STATE_TYPES)
_OT = _OM + len(_PM)


@njit(nogil=True, cache=True)
def scan_packed(buf, pos, end, final, H, top, out, n):
    """scan() with the state's arrays given by their handles (H: borrow.handles of the PACKED
    tuples' arrays, in order): the same work for 4 arrays unboxed instead of ~45."""
    return scan(buf, pos, end, final, arrays_at(H, _OL, _PL), arrays_at(H, _OD, _PD), arrays_at(H, _OW, _PW),
                arrays_at(H, _OV, _PV), top, out, n, arrays_at(H, STATE_AT, STATE_TYPES), arrays_at(H, _OM, _PM),
                arrays_at(H, _OT, _PT))
