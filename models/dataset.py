"""Data sets: a strategy's feature rows (through its compiled host, the same code the live loop
runs), labels from future mid moves, and time splits."""
import numpy as np


def featurize(host, words, n_instruments, levels, names=None, specs=None, where="the input"):
    """Feature rows for every tick the strategy scores (what the live loop would score); names,
    specs: the instruments (a UNIVERSE strategy's members are bound to them).

    Returns X (float32 [m, F]), instrument, mid (float64, 1e-9 units), tick index.
    """
    return host.featurize(words, n_instruments, levels, names, specs, where)


NO_LABEL = -128  # rows without a label (flat binary moves, the end of the data)


def _future_mid_by_time(inst, mid, ts, horizon_ns):
    """Mid of the same instrument at the first scored tick at least horizon_ns later (NaN if none)."""
    fut = np.full(len(mid), np.nan)
    for i in np.unique(inst):
        rows = np.flatnonzero(inst == i)
        j = np.searchsorted(ts[rows], ts[rows] + horizon_ns, side="left")
        ok = j < len(rows)
        fut[rows[ok]] = mid[rows[j[ok]]]
    return fut


def _future_mid_by_ticks(inst, mid, horizon):
    fut = np.full(len(mid), np.nan)
    for i in np.unique(inst):
        rows = np.flatnonzero(inst == i)
        if len(rows) > horizon:
            fut[rows[:-horizon]] = mid[rows[horizon:]]
    return fut


def binary_labels_time(inst, mid, ts, horizon_ns):
    """As binary_labels, with the horizon in exchange time."""
    move = _future_mid_by_time(inst, mid, ts, horizon_ns) - mid
    return np.where(move > 0, 1, np.where(move < 0, 0, NO_LABEL)).astype(np.int8)


def ternary_labels(inst, mid, ts, horizon, unit, dead_band_bps):
    """+1 up, -1 down, 0 within the dead band (|move| <= dead_band_bps of the mid)."""
    fut = (_future_mid_by_ticks(inst, mid, horizon) if unit == "ticks"
           else _future_mid_by_time(inst, mid, ts, int(horizon * 1e6)))
    bps = (fut - mid) / mid * 1e4
    y = np.where(bps > dead_band_bps, 1, np.where(bps < -dead_band_bps, -1, 0)).astype(np.int8)
    y[np.isnan(fut)] = NO_LABEL
    return y


def binary_labels(inst, mid, horizon):
    """1 if the instrument's mid is higher `horizon` of its scored ticks later, 0 if lower,
    NO_LABEL where flat or past the end (those rows are not trained on)."""
    move = _future_mid_by_ticks(inst, mid, horizon) - mid
    return np.where(move > 0, 1, np.where(move < 0, 0, NO_LABEL)).astype(np.int8)


def time_split(n, fractions=(0.7, 0.15, 0.15), embargo=0):
    """Index ranges (train, valid, test) in time order with `embargo` rows dropped between."""
    a = int(n * fractions[0])
    b = a + int(n * fractions[1])
    return (np.arange(0, max(0, a - embargo)), np.arange(a, max(a, b - embargo)), np.arange(b, n))


def auc(y, p):
    """ROC AUC of scores p for 0/1 labels y (the rank-sum form; NaN when one class is absent)."""
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)) if n1 and n0 else float("nan")
