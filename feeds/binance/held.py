"""Held events: depth diffs that came before their instrument's snapshot (or a snapshot before any
symbol), kept as raw line bytes in an arena (H: entries, HB: bytes) and replayed against the
snapshot when it comes (feeds/binance/scan.py)."""
from engine.jit import njit

from feeds.binance.layout import (C_HELD_OVERFLOW, DEAD, G_HBYTES, G_HN, G_HOLD_MAX, G_NEED, G_RP_CUR, G_RP_END,
                                  G_RP_INST, G_RP_RECV, H_LEN, H_LINENO, H_OWNER, H_START, I_HELD, I_HFIRST, OK, R_HOLD,
                                  REPLAY)
from feeds.binance.message import parse_line
from feeds.core.borrow import data_ptr


@njit(nogil=True, cache=True)
def compact(G, H, HB):
    """Drop dead entries and their bytes (replay cursors follow)."""
    w = 0
    pos = 0
    cur, end = G[G_RP_CUR], G[G_RP_END]
    ncur, nend = 0, 0
    for k in range(G[G_HN]):
        if k == cur:
            ncur = w
        if k == end:
            nend = w
        if H[k, H_OWNER] == DEAD:
            continue
        s, ln = H[k, H_START], H[k, H_LEN]
        for j in range(ln):
            HB[pos + j] = HB[s + j]
        H[w, H_OWNER] = H[k, H_OWNER]
        H[w, H_START] = pos
        H[w, H_LEN] = ln
        H[w, H_LINENO] = H[k, H_LINENO]
        pos += ln
        w += 1
    if cur >= G[G_HN]:
        ncur = w
    if end >= G[G_HN]:
        nend = w
    G[G_RP_CUR], G[G_RP_END] = ncur, nend
    G[G_HN] = w
    G[G_HBYTES] = pos


@njit(nogil=True, cache=True)
def hold_room(G, H, HB, ln):
    """Room for one more held line of ln bytes (compacting first if that makes it)? Else R_HOLD."""
    if G[G_HN] < H.shape[0] and G[G_HBYTES] + ln <= HB.shape[0]:
        return OK
    if G[G_RP_INST] < 0:  # (not while replaying: the line being replayed lives in the arena)
        compact(G, H, HB)
    if G[G_HN] < H.shape[0] and G[G_HBYTES] + ln <= HB.shape[0]:
        return OK
    G[G_NEED] = ln
    return R_HOLD


@njit(nogil=True, cache=True)
def hold(G, H, HB, I, C, owner, src, s, e, lineno):
    """Append a held line (room checked by hold_room). An instrument holds at most G_HOLD_MAX:
    past that its oldest goes (counted)."""
    if owner >= 0:
        if I[owner, I_HELD] >= G[G_HOLD_MAX]:
            k = I[owner, I_HFIRST]
            while k < G[G_HN] and H[k, H_OWNER] != owner:
                k += 1
            if k < G[G_HN]:
                H[k, H_OWNER] = DEAD
                I[owner, I_HFIRST] = k + 1
                I[owner, I_HELD] -= 1
                C[C_HELD_OVERFLOW] += 1
        I[owner, I_HELD] += 1
    k = G[G_HN]
    p = G[G_HBYTES]
    for j in range(e - s):
        HB[p + j] = src[s + j]
    H[k, H_OWNER] = owner
    H[k, H_START] = p
    H[k, H_LEN] = e - s
    H[k, H_LINENO] = lineno
    G[G_HN] = k + 1
    G[G_HBYTES] = p + (e - s)


@njit(nogil=True, cache=True)
def drop_held(G, H, I, owner):
    for k in range(G[G_HN]):
        if H[k, H_OWNER] == owner:
            H[k, H_OWNER] = DEAD
    if owner >= 0:
        I[owner, I_HELD] = 0
        I[owner, I_HFIRST] = 0


@njit(nogil=True, inline="always", cache=True)
def parse_held(H, HB, k, F0, F1):
    """Held entry k's line parsed (message.parse_line): (error, recv, which F holds the message,
    the arena as the scanner's input, the line's start and end in it)."""
    s0, e0 = H[k, H_START], H[k, H_START] + H[k, H_LEN]
    HR = data_ptr(HB)  # (the input's type: one compiled parser)
    err, recv, which = parse_line(HR, s0, e0, F0, F1)
    return err, recv, which, HR, s0, e0


@njit(nogil=True, inline="always", cache=True)
def start_replay(G, H, I, inst, recv):
    """inst's held events detached for replay against the snapshot just placed (a gap while
    replaying holds afresh, as a new list); scan replays them next."""
    if I[inst, I_HELD] > 0:
        for k in range(G[G_HN]):
            if H[k, H_OWNER] == inst:
                H[k, H_OWNER] = REPLAY - inst
        I[inst, I_HELD] = 0
        I[inst, I_HFIRST] = 0
        G[G_RP_INST] = inst
        G[G_RP_CUR] = 0
        G[G_RP_END] = G[G_HN]
        G[G_RP_RECV] = recv
