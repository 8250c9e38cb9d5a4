"""What a backtest's signals were worth, per file (so files can be evaluated on Dask workers and
merged): forward returns, hit rates, information coefficient, and a simple taker strategy.

- Forward return at horizon h of an event at exchange time t on instrument i: the mid of i's
  first two-sided quote at or after t + h over its mid at t, in basis points.
- Hit rate at h: of the signals that enter a position (long or short), the share whose forward
  return has the position's sign; signals whose mid did not move are counted apart (`flat`).
- IC: Spearman rank correlation between the model's margin on every scored tick and that tick's
  forward return at the middle horizon.
- Taker strategy: each signal sets the target position (signed units of the instrument); the
  order fills at the touch of the first tick of that instrument received `latency_ns` or more
  after the signal's tick (buys at the ask, sells at the bid) and pays `fee_bps` of the notional.
  Equity is marked to the mid on a 1-second exchange-time grid; Sharpe is the mean over the
  standard deviation of 1-minute equity changes times sqrt(minutes in a year, 365 x 24 h), the
  convention for markets that trade around the clock (none under ten minutes of data).
"""
import numpy as np

from engine.records import KIND_QUOTE, PRICE_SCALE

DEFAULT_HORIZONS_MS = (100, 1_000, 10_000)
MINUTES_PER_YEAR = 365 * 24 * 60


def mids(words):
    """(ts_event, instrument, mid) of every two-sided quote tick, in file order."""
    kind = (words[:, 7] >> 48) & 0xFF
    inst = (words[:, 7] >> 32) & 0xFFFF
    ok = (kind == KIND_QUOTE) & (words[:, 4] > 0) & (words[:, 5] > 0)
    return words[ok, 1], inst[ok], (words[ok, 4] + words[ok, 5]) / 2.0


class MidIndex:
    """Per-instrument mid series, sorted by exchange time, for fast look-ups."""

    def __init__(self, words):
        ts, inst, mid = mids(words)
        self.series = {}
        for i in np.unique(inst):
            sel = inst == i
            t, m = ts[sel], mid[sel]
            order = np.argsort(t, kind="stable")
            self.series[int(i)] = (t[order], m[order])

    def at(self, inst, t, after=False):
        """Mid of `inst` at times t (the last quote at or before t; with after=True the first
        at or after t); NaN where there is none."""
        t = np.asarray(t, np.int64)
        out = np.full(t.shape, np.nan)
        s = self.series.get(int(inst))
        if s is None:
            return out
        ts, m = s
        if after:
            j = np.searchsorted(ts, t, side="left")
            ok = j < len(ts)
        else:
            j = np.searchsorted(ts, t, side="right") - 1
            ok = j >= 0
        out[ok] = m[j[ok]]
        return out

    def forward_bps(self, inst, t, h_ns):
        now = self.at(inst, t)
        later = self.at(inst, np.asarray(t, np.int64) + h_ns, after=True)
        return (later / now - 1.0) * 1e4


def forward_returns(words, sig_inst, sig_ts, horizons_ms, mi=None):
    """{h: bps array} for events (instrument, exchange time)."""
    mi = mi or MidIndex(words)
    out = {}
    for h in horizons_ms:
        r = np.full(len(sig_ts), np.nan)
        for i in np.unique(sig_inst):
            sel = sig_inst == i
            r[sel] = mi.forward_bps(int(i), sig_ts[sel], int(h * 1e6))
        out[h] = r
    return out


def _by_instrument(words):
    """instrument -> its tick indices, ordered by receive time."""
    inst = (words[:, 7] >> 32) & 0xFFFF
    order = np.lexsort((words[:, 2], inst))
    cuts = np.nonzero(np.diff(inst[order]))[0] + 1
    return {int(inst[g[0]]): g for g in np.split(order, cuts) if len(g)}


def taker_fills(words, signals, latency_ns, fee_bps):
    """Fills of the taker strategy: a structured array (signal row, fill ts_event, ts_recv,
    instrument, qty (+ buy / - sell), price (1e-9), fee in price units x 1e9). A signal whose
    instrument has no two-sided tick late enough does not fill."""
    by_inst = _by_instrument(words) if len(signals) else {}
    recv = {i: words[idx, 2] for i, idx in by_inst.items()}  # once per instrument, not per signal
    pos = {}
    rows = []
    for k, s in enumerate(signals):
        i = int(s["instrument"])
        delta = int(s["position"]) - pos.get(i, 0)
        idx = by_inst.get(i)
        if delta == 0 or idx is None:
            continue
        j = int(np.searchsorted(recv[i], int(s["ts_recv"]) + latency_ns, side="left"))
        while j < len(idx) and (words[idx[j], 4] <= 0 or words[idx[j], 5] <= 0):
            j += 1  # a one-sided touch cannot fill a taker order
        if j >= len(idx):
            continue
        w = words[idx[j]]
        px = int(w[5]) if delta > 0 else int(w[4])
        rows.append((k, int(w[1]), int(w[2]), i, delta, px, abs(delta) * px * fee_bps / 1e4))
        pos[i] = int(s["position"])
    dt = np.dtype([("signal", "i8"), ("ts_event", "i8"), ("ts_recv", "i8"), ("instrument", "i8"), ("qty", "i8"),
                   ("price", "i8"), ("fee", "f8")])
    return np.array(rows, dt)


def equity_curve(words, fills, mi, step_ns=1_000_000_000):
    """(grid ts, equity in price units) of the taker strategy, marked to mid every step_ns."""
    if not len(words):
        return np.zeros(0, np.int64), np.zeros(0)
    t0, t1 = int(words[:, 1].min()), int(words[:, 1].max())
    grid = np.arange(t0, t1 + step_ns, step_ns, dtype=np.int64)
    eq = np.zeros(len(grid))
    for i in np.unique(fills["instrument"]) if len(fills) else []:
        f = fills[fills["instrument"] == i]
        order = np.argsort(f["ts_event"], kind="stable")
        f = f[order]
        k = np.searchsorted(f["ts_event"], grid, side="right")  # fills done by each grid time
        pos = np.concatenate([[0], np.cumsum(f["qty"])])[k]
        cash = np.concatenate([[0.0], np.cumsum(-f["qty"] * f["price"].astype(np.float64) - f["fee"])])[k]
        m = mi.at(int(i), grid)
        m = np.where(np.isnan(m), 0.0, m)
        eq += cash + pos * m
    return grid, eq / PRICE_SCALE


def summarize(parts, horizons_ms):
    """Merge per-file evaluations (dicts from evaluate_file) into the report's figures."""
    out = {"files": len(parts), "ticks": sum(p["ticks"] for p in parts), "scored": sum(p["scored"] for p in parts),
           "signals": sum(p["signals"] for p in parts)}
    for h in horizons_ms:
        hits = sum(p["hits"][h] for p in parts)
        n = sum(p["decided"][h] for p in parts)
        flat = sum(p["flat"][h] for p in parts)
        out[f"hit_rate_{h}ms"] = round(hits / n, 4) if n else None
        out[f"flat_share_{h}ms"] = round(flat / (n + flat), 4) if n + flat else None
    pairs_x = np.concatenate([p["ic_x"] for p in parts]) if parts else np.zeros(0)
    pairs_y = np.concatenate([p["ic_y"] for p in parts]) if parts else np.zeros(0)
    out["ic"] = spearman(pairs_x, pairs_y)
    out["ic_pairs"] = int(len(pairs_x))
    grid = np.concatenate([p["grid"] for p in parts]) if parts else np.zeros(0, np.int64)
    inc = np.concatenate([np.diff(p["equity"], prepend=0.0) for p in parts]) if parts else np.zeros(0)
    order = np.argsort(grid, kind="stable")
    grid, equity = grid[order], np.cumsum(inc[order])
    out["pnl"] = round(float(equity[-1]), 6) if len(equity) else 0.0
    out["fees"] = round(sum(p["fees"] for p in parts), 6)
    out["fills"] = sum(p["fills"] for p in parts)
    out["turnover_units"] = sum(p["turnover_units"] for p in parts)
    out["turnover_notional"] = round(sum(p["turnover_notional"] for p in parts), 6)
    out["max_drawdown"] = round(float(np.max(np.maximum.accumulate(equity) - equity)), 6) if len(equity) else 0.0
    out["sharpe"] = sharpe(grid, equity)
    return out, grid, equity


def sharpe(grid, equity):
    if len(grid) < 3:
        return None
    minute = 60_000_000_000
    edges = np.arange(grid[0], grid[-1] + minute, minute)
    j = np.searchsorted(grid, edges, side="right") - 1
    d = np.diff(equity[np.clip(j, 0, len(equity) - 1)])
    if len(d) < 10 or d.std() == 0:
        return None  # under ten minutes of equity changes: no Sharpe worth quoting
    return round(float(d.mean() / d.std() * np.sqrt(MINUTES_PER_YEAR)), 3)


def spearman(x, y):
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3:
        return None
    from scipy.stats import spearmanr
    r = spearmanr(x, y).statistic
    return None if not np.isfinite(r) else round(float(r), 4)


def evaluate_file(words, res, horizons_ms=DEFAULT_HORIZONS_MS, latency_ns=0, fee_bps=0.0, ic_horizon_ms=None,
                  ic_max_pairs=200_000):
    """Per-file figures and series for `summarize`, plus per-signal columns for signals.parquet."""
    mi = MidIndex(words)
    sig = res.signals
    sig_inst = sig["instrument"].astype(np.int64)
    fwd = forward_returns(words, sig_inst, sig["ts_event"], horizons_ms, mi)
    entering = sig["side"] != 0
    part = {"ticks": res.ticks, "scored": res.scored, "signals": len(sig), "hits": {}, "decided": {}, "flat": {}}
    for h in horizons_ms:
        r = fwd[h][entering]
        s = sig["side"][entering]
        ok = np.isfinite(r)
        moved = ok & (r != 0)
        part["hits"][h] = int(np.sum(np.sign(r[moved]) == s[moved]))
        part["decided"][h] = int(moved.sum())
        part["flat"][h] = int((ok & (r == 0)).sum())
    # IC on every scored tick (subsampled evenly when there are very many)
    h_ic = ic_horizon_ms or horizons_ms[len(horizons_ms) // 2]
    scored = np.nonzero(np.isfinite(res.margins))[0]
    if len(scored) > ic_max_pairs:
        scored = scored[np.linspace(0, len(scored) - 1, ic_max_pairs).astype(np.int64)]
    inst = ((words[scored, 7] >> 32) & 0xFFFF).astype(np.int64)
    ic_y = forward_returns(words, inst, words[scored, 1], (h_ic,), mi)[h_ic]
    part["ic_x"], part["ic_y"] = res.margins[scored].astype(np.float64), ic_y
    fills = taker_fills(words, sig, latency_ns, fee_bps)
    grid, eq = equity_curve(words, fills, mi)
    part["grid"], part["equity"] = grid, eq
    part["fills"] = len(fills)
    part["fees"] = float(fills["fee"].sum() / PRICE_SCALE) if len(fills) else 0.0
    part["turnover_units"] = int(np.abs(fills["qty"]).sum()) if len(fills) else 0
    part["turnover_notional"] = float((np.abs(fills["qty"]) * fills["price"]).sum() / PRICE_SCALE) if len(fills) else 0.0
    cols = {f"fwd_bps_{h}ms": fwd[h].astype(np.float32) for h in horizons_ms}
    fill_px = np.zeros(len(sig), np.int64)
    fill_ts = np.zeros(len(sig), np.int64)
    if len(fills):
        fill_px[fills["signal"]] = fills["price"]
        fill_ts[fills["signal"]] = fills["ts_event"]
    cols["fill_px"] = fill_px
    cols["fill_ts_event"] = fill_ts
    return part, cols
