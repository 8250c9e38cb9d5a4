"""The scanner's symbols: each message's "s" -> its instrument (a new symbol registered, with the
snapshot that came before any symbol as its book), the symbols a live source declares at start,
and whether any needs a depth snapshot."""
from engine.jit import njit

from feeds.binance.depth_events import place_snapshot
from feeds.binance.held import parse_held
from feeds.binance.layout import (AGAIN, DEAD, E_MISSING, E_SYMBOL, E_TOO_MANY_SYMBOLS, G_ERR_LINE, G_HN, G_LAST_SYM,
                                  G_NSYM, G_STRICT, H_LINENO, H_OWNER, I_BOOKU, I_LAST, I_OVU, I_SID, I_SYNCED, I_TID,
                                  K_s, MAX_SYMBOLS, NI, OK, ORPHAN, R_DEEP, R_ERR, R_ROOM, R_VALS, SYM_LEN, fail)
from feeds.core.borrow import borrow, borrow_all
from feeds.core.jscan import V_NONE, V_STR


@njit(nogil=True, inline="always", cache=True)
def _named(SYM, i, b, s, ln):
    """Is symbol row i the name b[s:s + ln]?"""
    if SYM[i, SYM_LEN] != ln:
        return False
    for j in range(ln):
        if SYM[i, j] != b[s + j]:
            return False
    return True


@njit(nogil=True, cache=True)
def instrument_of(b, F, S):
    """The instrument of the message's "s": (error, index or -1 when new)."""
    F, S = borrow(F), borrow_all(S)
    G, SYM = S[1], S[4]
    if F[K_s, 0] == V_NONE:
        return E_MISSING, -1
    ln = F[K_s, 2] - F[K_s, 1] - 2
    if F[K_s, 0] != V_STR or ln < 1 or ln > SYM_LEN:
        return E_SYMBOL, -1
    s = F[K_s, 1] + 1
    last = G[G_LAST_SYM]
    for a in range(G[G_NSYM]):
        i = (last + a) % G[G_NSYM]  # the last one seen first
        if _named(SYM, i, b, s, ln):
            G[G_LAST_SYM] = i
            return 0, i
    return 0, -1


@njit(nogil=True, inline="always", cache=True)
def _stage_symbol(I, SYM, inst, b, s, ln):
    """Symbol row `inst` is b[s:s + ln], its instrument row fresh (no book, nothing seen)."""
    for j in range(ln):
        SYM[inst, j] = b[s + j]
    SYM[inst, SYM_LEN] = ln
    for k in range(NI):
        I[inst, k] = 0
    I[inst, I_SID] = -1
    I[inst, I_LAST] = -1
    I[inst, I_BOOKU] = -1
    I[inst, I_OVU] = -1
    I[inst, I_TID] = -1


@njit(nogil=True, cache=True)
def needs_snapshot(I, G, nsym):
    """Does a symbol need a depth snapshot: fewer than nsym symbols known yet, or one neither synced
    nor holding a snapshot (I_SID < 0: none placed, or a gap took it)? binance-live asks then."""
    k = G[G_NSYM]
    if k < nsym:
        return True
    for i in range(k):
        if I[i, I_SYNCED] == 0 and I[i, I_SID] < 0:
            return True
    return False


@njit(nogil=True, cache=True)
def declare(I, G, SYM, name):
    """Register the symbol `name` (uint8) before any line names it, as the next instrument (a live
    source knows its symbols at start: their ids are then fixed, in the order given). Returns its
    index, or -1 when the table is full or the name is not 1..SYM_LEN bytes."""
    ln = name.shape[0]
    if ln < 1 or ln > SYM_LEN:
        return -1
    for i in range(G[G_NSYM]):
        if _named(SYM, i, name, 0, ln):
            return i
    if G[G_NSYM] >= MAX_SYMBOLS:
        return -1
    inst = G[G_NSYM]
    _stage_symbol(I, SYM, inst, name, 0, ln)
    G[G_NSYM] = inst + 1
    return inst


@njit(nogil=True, cache=True)
def new_symbol(b, F, recv, L, D, W, VL, top, out, n, S, F2):
    """Register the message's symbol; a snapshot that came before any symbol is its book."""
    I, G, SYM, H, HB = S[0], S[1], S[4], S[5], S[6]
    if G[G_NSYM] >= MAX_SYMBOLS:
        return fail(G, E_TOO_MANY_SYMBOLS, -1), n
    inst = G[G_NSYM]
    # staged first (unseen until G_NSYM moves on), so a return for room changes nothing
    _stage_symbol(I, SYM, inst, b, F[K_s, 1] + 1, F[K_s, 2] - F[K_s, 1] - 2)
    orphan = -1
    for k in range(G[G_HN]):
        if H[k, H_OWNER] == ORPHAN:
            orphan = k
    r = OK
    if orphan >= 0:
        F3 = S[10]
        err, orecv, which, HR, _, _ = parse_held(H, HB, orphan, F2, F3)
        if err == 0:
            r, n = place_snapshot(HR, F2 if which == 0 else F3, inst, orecv, L, D, W, VL, top, out, n, S)
            if r == R_ROOM or r == R_VALS or r == R_DEEP:
                return r, n
        else:
            r = fail(G, err, -1)
        if r == R_ERR and G[G_STRICT] != 0:
            G[G_ERR_LINE] = H[orphan, H_LINENO]
        H[orphan, H_OWNER] = DEAD
    G[G_NSYM] = inst + 1
    G[G_LAST_SYM] = inst
    return (r if r == R_ERR else AGAIN), n
