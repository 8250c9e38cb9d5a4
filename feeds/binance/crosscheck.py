"""The bookTicker cross-check: per instrument, two rings in update-id order.

R[inst * K + j] = (u, bid px, bid qty, ask px, ask qty), X[inst] = (first, count), K = the ring's
size (R's rows / X's rows). DR: the diffs' touches (a ticker looks for its id among them); TR: the
tickers no diff has matched yet. Both streams' ids only grow (a repeat is dropped before here), so
a ticker finds its diff, if any, among the newest few, and a diff drops every waiting ticker below
its id (no later diff can match them) and takes the one at its id: every step touches the ends of
two rings, cache lines already warm. (Two hash maps with a window of 50k entries were a cache miss
per ticker on a futures stream, whose ids jump by ~70 a ticker: a tenth of the scan, perf.)
"""
import numpy as np
from engine.jit import njit

from feeds.binance.layout import C_AGREE, C_CHECKED, C_DISAGREE

XD, XT = 256, 1024  # ring sizes per instrument: recent diffs, waiting tickers (the oldest forgotten)


@njit(nogil=True, inline="always", cache=True)
def _row(inst, K, j):
    """R's row of inst's ring slot j (j < 2K: first + count, wrapped)."""
    return inst * K + (j - K if j >= K else j)


@njit(nogil=True, inline="always", cache=True)
def _push(R, X, inst, u, bp, bq, ap, aq):
    K = R.shape[0] // X.shape[0]
    h, c = X[inst, 0], X[inst, 1]
    if c == K:  # full: the oldest goes
        h = h + 1 if h + 1 < K else 0
        c -= 1
    r = _row(inst, K, h + c)
    R[r, 0] = u
    R[r, 1] = bp
    R[r, 2] = bq
    R[r, 3] = ap
    R[r, 4] = aq
    X[inst, 0] = h
    X[inst, 1] = c + 1


@njit(nogil=True, inline="always", cache=True)
def _diff_row(DR, DX, inst, u):
    """The row of inst's diff with id u, or -1 (newest first, down to the first id below u)."""
    K = DR.shape[0] // DX.shape[0]
    h, c = DX[inst, 0], DX[inst, 1]
    while c > 0:
        c -= 1
        r = _row(inst, K, h + c)
        v = DR[r, 0]
        if v <= u:
            return r if v == u else -1
    return -1


@njit(nogil=True, inline="always", cache=True)
def _take_ticker(TR, TX, inst, u):
    """The row of inst's waiting ticker with id u, or -1; every waiting ticker up to u leaves."""
    K = TR.shape[0] // TX.shape[0]
    h, c = TX[inst, 0], TX[inst, 1]
    r = np.int64(-1)
    while c > 0:
        q = inst * K + h
        v = TR[q, 0]
        if v > u:
            break
        if v == u:
            r = q
        h = h + 1 if h + 1 < K else 0
        c -= 1
    TX[inst, 0] = h
    TX[inst, 1] = c
    return r


@njit(nogil=True, inline="always", cache=True)
def _newest(R, X, inst):
    """The newest id in inst's ring, or -1."""
    K = R.shape[0] // X.shape[0]
    c = X[inst, 1]
    if c == 0:
        return np.int64(-1)
    return R[_row(inst, K, X[inst, 0] + c - 1), 0]


@njit(nogil=True, inline="always", cache=True)
def _check(C, R, p, bp, bq, ap, aq):
    C[C_CHECKED] += 1
    if R[p, 1] == bp and R[p, 2] == bq and R[p, 3] == ap and R[p, 4] == aq:
        C[C_AGREE] += 1
    else:
        C[C_DISAGREE] += 1


@njit(nogil=True, inline="always", cache=True)
def diff_touch(DR, DX, TR, TX, C, inst, u, bp, bq, ap, aq):
    """A diff applied at update id u, its book's touch (bp, bq, ap, aq): remembered under u and
    compared with a ticker waiting at u (the tickers below u stop waiting)."""
    _push(DR, DX, inst, u, bp, bq, ap, aq)
    p = _take_ticker(TR, TX, inst, u)
    if p >= 0:
        _check(C, TR, p, bp, bq, ap, aq)


@njit(nogil=True, inline="always", cache=True)
def ticker_touch(DR, DX, TR, TX, C, inst, u, bp, bq, ap, aq):
    """A bookTicker at update id u, its touch (bp, bq, ap, aq): compared with the diff at u, else
    left waiting for it."""
    p = _diff_row(DR, DX, inst, u)
    if p >= 0:
        _check(C, DR, p, bp, bq, ap, aq)
    elif u > _newest(TR, TX, inst):  # (a repeat waits once)
        _push(TR, TX, inst, u, bp, bq, ap, aq)
