"""What a backtest's signals were worth, per file (so files can be evaluated on Dask workers and
merged): forward returns, hit rates, information coefficient, and what the signals' orders filled.

- Forward return at horizon h of an event at exchange time t on instrument i: the mid of i's
  first two-sided quote at or after t + h over its mid at t, in basis points.
- Hit rate at h: of the signals that enter a position (long or short), the share whose forward
  return has the position's sign; signals whose mid did not move are counted apart (`flat`).
- IC: Spearman rank correlation between the model's margin on every scored tick and that tick's
  forward return at the middle horizon.
- Execution: each signal sets the target position (signed lots); replay/execsim.py fills the
  orders (taker orders walking the depth window, or maker orders with a queue model, after the
  order-entry latency, paying fees). Equity, in currency (the instrument's multiplier), is the
  fills' cash plus the position marked to the mid on a 1-second exchange-time grid; round trips
  (flat to flat) give PnL per trade, long and short, per instrument; Sharpe is the mean over the
  standard deviation of 1-minute equity changes times sqrt(trading minutes in a year of the
  instruments' calendar: 365 x 24 h for crypto, 252 x 23 h for CME futures, 252 x 6.5 h for US
  equities); none under ten minutes of data, with the reason.
- Money is never added across currencies: every figure in money is per currency (`by_currency`:
  the instruments priced in it), and the run's plain figures (pnl, fees, ...) are that currency's
  when there is one, None when there are several (replay/currency.py converts them at rates the
  user gives). Each instrument's own figures are in `by_instrument`.
"""
import numpy as np
from engine.jit import njit

from engine import signal_counts
from engine.records import KIND_QUOTE, PRICE_SCALE, tick_instrument, tick_instruments, tick_kind

DEFAULT_HORIZONS_MS = (100, 1_000, 10_000)
MINUTES_PER_YEAR = 365 * 24 * 60  # 24 x 7 markets; others: replay/costs.py CALENDAR_MINUTES


@njit(nogil=True, cache=True)
def _mids(words, ts, inst, mid):
    n = 0
    for i in range(words.shape[0]):
        w = words[i]
        if tick_kind(w) == KIND_QUOTE and w[4] > 0 and w[5] > 0:
            ts[n] = w[1]
            inst[n] = tick_instrument(w)
            mid[n] = (w[4] + w[5]) / 2.0
            n += 1
    return n


def mids(words):
    """(ts_event, instrument, mid) of every two-sided quote tick, in file order (one pass over the
    mapped file, not three strided numpy passes: a fifth of a short backtest's evaluation)."""
    n = len(words)
    ts, inst, mid = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.float64)
    k = _mids(words, ts, inst, mid) if n else 0
    return ts[:k], inst[:k], mid[:k]


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


def execution(words, signals, n_inst, depth, xp=None, spec=None, l3_records=None, groups=None):
    """Fills of the signals through the execution simulator (replay/execsim.py; with MBO records,
    replay/l3.py's exact FIFO) and its counters. xp: execsim.ExecParams (default: taker orders,
    no latency); spec: float64[n_inst, 4] (multiplier, maker bps, taker bps, per lot; default
    1, 0, 0, 0); groups: each instrument's source (execsim.order_inputs), None: one."""
    from . import execsim
    xp = xp or execsim.ExecParams()
    if spec is None:
        spec = np.zeros((max(n_inst, 1), 4))
        spec[:, execsim.SP_MULT] = 1.0
    # a record that moves no target (a decision the risk gate refused: position == prev_position)
    # sends no order: the simulators see the target changes only, and their fills name the records
    keep = np.flatnonzero(signals["position"] != signals["prev_position"]) if len(signals) else np.zeros(0, np.int64)
    if len(keep) < len(signals):
        if np.ndim(xp.maker) and np.size(xp.maker) == len(signals):
            import dataclasses
            xp = dataclasses.replace(xp, maker=np.asarray(xp.maker)[keep])
        fills, info = execution(words, signals[keep], n_inst, depth, xp, spec, l3_records, groups)
        fills["signal"] = keep[fills["signal"]] if len(fills) else fills["signal"]
        return fills, info
    if l3_records is not None:
        from . import l3
        return l3.run(l3_records, words, signals, n_inst, spec, xp)
    return execsim.run(words, signals, n_inst, spec, xp, depth, groups)


MAX_GRID = 2_000_000  # equity points (a week at 1 s is 604,800)


def equity_curve(words, fills, mi, mult, step_ns=None, span=None):
    """(grid ts, equity in currency) of the fills, marked to mid every step_ns (default 1 s, finer
    for files under 1000 s so a plot has points, coarser past MAX_GRID seconds) from the first
    tick's exchange time to the last's (span: (first, last) of some instruments' ticks); mult:
    currency per 1.0 of price per lot, per instrument."""
    if not len(words):
        return np.zeros(0, np.int64), np.zeros(0)
    t0, t1 = span if span is not None else (int(words[:, 1].min()), int(words[:, 1].max()))
    if step_ns is None:
        step_ns = min(1_000_000_000, max(1_000_000, (t1 - t0) // 1000))
    # at most MAX_GRID points, however long the span (exchange times years apart, as a replayed old
    # capture's beside live-stamped messages, asked for 10^8 seconds: gigabytes)
    step_ns = max(step_ns, -(-(t1 - t0) // MAX_GRID))
    grid = np.arange(t0, t1 + step_ns, step_ns, dtype=np.int64)
    eq = np.zeros(len(grid))
    for i in np.unique(fills["instrument"]) if len(fills) else []:
        eq += _equity_at(fills, i, mult[i], mi, grid)
    return grid, eq


def _equity_at(fills, i, mult_i, mi, t):
    """Instrument i's equity at times t: the cash of its fills done by then (net of their fees)
    plus the position they left marked to the mid."""
    f = fills[fills["instrument"] == i]
    f = f[np.argsort(f["ts_event"], kind="stable")]
    k = np.searchsorted(f["ts_event"], t, side="right")  # fills done by each time
    pos = np.concatenate([[0], np.cumsum(f["qty"])])[k]
    cash = np.concatenate([[0.0], np.cumsum(-f["qty"] * (f["price"] / PRICE_SCALE) * mult_i - f["fee"])])[k]
    m = mi.at(int(i), t)
    m = np.where(np.isnan(m), 0.0, m) / PRICE_SCALE
    return cash + pos * m * mult_i


UNKNOWN_CURRENCY = "quote currency"  # (a part made without instrument records)
MONEY = ("pnl", "pnl_gross", "fees", "pnl_closed", "pnl_open", "turnover_notional", "break_even_fee_bps",
         "max_drawdown", "sharpe")


def _curves(p):
    """{currency: (grid, equity, fee curve)} of a part (one of an older part: its totals)."""
    if "money" in p:
        return {c: (m["grid"], m["equity"], m["fee_curve"]) for c, m in p["money"].items()}
    return {UNKNOWN_CURRENCY: (p["grid"], p["equity"], p.get("fee_curve", np.zeros(len(p["grid"]))))}


def _of(p, key, cur):
    """A part's figure `key` in currency cur (a part's `money`; an older part's totals are in its
    one unknown currency)."""
    if "money" in p:
        return p["money"].get(cur, {}).get(key, 0)
    return p[key] if cur == UNKNOWN_CURRENCY else 0


def _money(parts, cur, calendar):
    """One currency's money over every part: net, gross, fees, drawdown, Sharpe, turnover; and its
    grid, net and gross equity."""
    from .costs import CALENDAR_MINUTES
    curves = [c for c in (_curves(p).get(cur) for p in parts) if c is not None]
    grid_all = np.concatenate([c[0] for c in curves]) if curves else np.zeros(0, np.int64)
    inc = np.concatenate([np.diff(c[1], prepend=0.0) for c in curves]) if curves else np.zeros(0)
    finc = np.concatenate([np.diff(c[2], prepend=0.0) for c in curves]) if curves else np.zeros(0)
    order = np.argsort(grid_all, kind="stable")
    grid_all = grid_all[order]
    equity = np.cumsum(inc[order])
    gross = equity + np.cumsum(finc[order])
    out = {"pnl": round(float(equity[-1]), 6) if len(equity) else 0.0}  # net of fees, marked to mid
    out["fees"] = round(sum(_of(p, "fees", cur) for p in parts), 6)
    out["pnl_gross"] = round(out["pnl"] + out["fees"], 6)
    out["fills"] = sum(_of(p, "fills", cur) for p in parts)
    out["turnover_notional"] = round(sum(_of(p, "turnover_notional", cur) for p in parts), 6)
    # the fee (bp of notional, every fill) at which the gross PnL would all go in fees
    out["break_even_fee_bps"] = round(out["pnl_gross"] / out["turnover_notional"] * 1e4, 4) \
        if out["turnover_notional"] else None
    out["max_drawdown"] = round(float(np.max(np.maximum.accumulate(equity) - equity)), 6) if len(equity) else 0.0
    out["sharpe"], reason = sharpe(grid_all, equity, CALENDAR_MINUTES[calendar])
    out["sharpe_calendar"] = calendar
    if reason:
        out["sharpe_reason"] = reason
    return out, grid_all, equity, gross


def summarize(parts, horizons_ms, calendar="crypto", fx=None):
    """Merge per-file evaluations (dicts from evaluate_file) into the report's figures; Sharpe
    annualised by `calendar`'s trading minutes (replay/costs.py), each currency's by its own
    instruments' when there are several; fx: rates the user gave (replay/currency.py) for a
    converted total (`converted`). Returns (figures, {currency: grid}, {currency: net equity},
    {currency: gross equity}): each currency's curves on its own grid."""
    out = {"files": len(parts), "ticks": sum(p["ticks"] for p in parts), "scored": sum(p["scored"] for p in parts),
           "signals": sum(p["signals"] for p in parts),
           "signal_counts": {k: sum(p["signal_counts"][k] for p in parts) for k in signal_counts.KINDS}}
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
    # the currencies of the instruments traded (none traded: of those described; an id nothing
    # describes, as a run's unused ids between two sources' blocks, names no currency)
    curs = sorted({c for p in parts for c in _curves(p) if _of(p, "fills", c)}) or \
        sorted({c for p in parts for c in _curves(p)}) or [UNKNOWN_CURRENCY]
    cals = {}
    for p in parts:
        for c, m in p.get("money", {}).items():
            for cal, n in m["calendars"].items():
                cals.setdefault(c, {}).setdefault(cal, 0)
                cals[c][cal] += n
    by, grid, equity, gross = {}, {}, {}, {}
    for c in curs:  # (one currency: the run's calendar, as before; several: each its instruments')
        cal = calendar if len(curs) == 1 or c not in cals else max(sorted(cals[c]), key=cals[c].get)
        by[c], grid[c], equity[c], gross[c] = _money(parts, c, cal)
    out["fills"] = sum(p["fills"] for p in parts)
    out["maker_fills"] = sum(p.get("maker_fills", 0) for p in parts)
    out["exec_seconds"] = round(sum(p.get("exec_seconds", 0.0) for p in parts), 4)
    for k in UNFILLED:
        out[k] = sum(p.get(k, 0) for p in parts)
    out["open_positions"] = [o for p in parts for o in p.get("open", [])]
    out["turnover_units"] = sum(p["turnover_units"] for p in parts)
    rts = [p["rt"] for p in parts if "rt" in p]
    if rts:
        rt = {k: np.concatenate([r[k] for r in rts]) for k in rts[0]}
        out["trades"] = trade_stats(rt, several=len(curs) > 1)
        if "currency" in rt:
            for c in curs:
                sel = rt["currency"] == c
                by[c]["trades"] = trade_stats({k: v[sel] for k, v in rt.items()}, per_name=False)
    if any("dec_pnl" in p for p in parts):
        d = [p for p in parts if "dec_pnl" in p]
        legs, pnl = np.concatenate([p["dec_legs"] for p in d]), np.concatenate([p["dec_pnl"] for p in d])
        dcur = np.concatenate([p.get("dec_cur", np.full(len(p["dec_pnl"]), curs[0], object)) for p in d])
        if len(curs) == 1:
            out["decisions"] = decision_stats(legs, pnl)
        else:  # (a decision's legs in one currency are added; one of several currencies' is counted apart)
            out["decisions"] = {"decisions": int(len(pnl)), "multi_leg": int((legs > 1).sum()),
                                "of_several_currencies": int((dcur == "").sum())}
            for c in curs:
                by[c]["decisions"] = decision_stats(legs[dcur == c], pnl[dcur == c])
    for c in curs:  # the net PnL is the closed trades' plus what the positions still open at the end are marked at
        by[c]["pnl_closed"] = round(by[c]["trades"]["all"]["net"], 6) if "trades" in by[c] else \
            round(out["trades"]["all"]["net"], 6) if "trades" in out and len(curs) == 1 else 0.0
        by[c]["pnl_open"] = round(by[c]["pnl"] - by[c]["pnl_closed"], 6)
    out["currencies"] = curs
    out["by_currency"] = by
    out["by_instrument"] = _by_instrument(parts)
    one = by[curs[0]] if len(curs) == 1 else None
    out["currency"] = curs[0] if one else None
    for k in MONEY:  # a run's figure in money is its one currency's; with several there is none (never a sum)
        out[k] = one.get(k) if one else None
    out["sharpe_calendar"] = one["sharpe_calendar"] if one else None
    if one and one.get("sharpe_reason"):
        out["sharpe_reason"] = one["sharpe_reason"]
    elif not one:
        out["sharpe_reason"] = f"money in {len(curs)} currencies: see by_currency"
    if fx:
        from .currency import convert
        out["converted"] = convert(by, fx, {c: (grid[c], equity[c]) for c in curs})
    return out, grid, equity, gross


def _by_instrument(parts):
    """Each instrument's own figures, over every part it is in (by name)."""
    out = {}
    for p in parts:
        for name, b in p.get("by_instrument", {}).items():
            o = out.setdefault(name, {"currency": b["currency"], "fills": 0, "fees": 0.0, "pnl": 0.0, "pnl_gross": 0.0})
            o["fills"] += b["fills"]
            o["fees"] = round(o["fees"] + b["fees"], 6)
            o["pnl"] = round(o["pnl"] + b["pnl"], 6)
            o["pnl_gross"] = round(o["pnl"] + o["fees"], 6)
    return out


def sharpe(grid, equity, minutes_per_year=MINUTES_PER_YEAR):
    """(annualised Sharpe of 1-minute equity changes, None) or (None, why there is none)."""
    if len(grid) < 3:
        return None, "under three equity points"
    minute = 60_000_000_000
    edges = np.arange(grid[0], grid[-1] + minute, minute)
    j = np.searchsorted(grid, edges, side="right") - 1
    d = np.diff(equity[np.clip(j, 0, len(equity) - 1)])
    if len(d) < 10:
        return None, f"{len(d)} minutes of equity changes (a Sharpe needs at least 10)"
    if d.std() == 0:
        return None, "the equity never changed"
    return round(float(d.mean() / d.std() * np.sqrt(minutes_per_year)), 3), None


def _ranks(a):
    """Ranks 1..n with ties given their average rank (as Spearman's coefficient wants)."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    first = np.concatenate([[True], s[1:] != s[:-1]])
    grp = np.cumsum(first) - 1
    starts = np.nonzero(first)[0]
    ends = np.append(starts[1:], len(a))
    r = np.empty(len(a))
    r[order] = ((starts + ends + 1) / 2.0)[grp]  # the mean of ranks start+1 .. end
    return r


def spearman(x, y):
    """Spearman's rank correlation of the finite pairs (None under 3 pairs or without spread)."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3:
        return None
    rx, ry = _ranks(x), _ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    den = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return None if den == 0 else round(float((rx * ry).sum() / den), 4)


UNFILLED = ("ordered_lots", "unfilled_lots", "maker_unplaced_lots", "maker_cancelled_lots", "working_lots")


def open_positions(fills, mi, mult, names, words, currencies=None):
    """The positions the fills leave open at the end of a file: [{symbol, lots, mark (the last
    mid, price units), value (lots x mark x multiplier, in the instrument's currency)}]."""
    out = []
    if not len(fills) or not len(words):
        return out
    t_end = int(words[:, 1].max())
    for i in np.unique(fills["instrument"]):
        lots = int(fills["qty"][fills["instrument"] == i].sum())
        if lots:
            m = float(mi.at(int(i), np.array([t_end]))[0]) / PRICE_SCALE
            out.append({"symbol": names[i] if i < len(names) else str(int(i)), "lots": lots,
                        "mark": round(m, 9) if np.isfinite(m) else None,
                        "value": round(lots * m * float(mult[i]), 6) if np.isfinite(m) else None})
            if currencies is not None:
                out[-1]["currency"] = str(currencies[i])
    return out


def round_trips(fills, mult):
    """Flat-to-flat trades per instrument from fills (a fill that flips the position closes one
    trade and opens the next): int64 [instrument, sign (+1 long / -1 short), lots at most,
    entry ts], float64 [net PnL, fees, entry notional], all in currency."""
    ints, flts = [], []
    for i in np.unique(fills["instrument"]) if len(fills) else []:
        f = fills[fills["instrument"] == i]
        f = f[np.argsort(f["ts_event"], kind="stable")]
        pos, cash, fee, notional, most, t0 = 0, 0.0, 0.0, 0.0, 0, 0
        for q, px, fe, ts in zip(f["qty"].tolist(), (f["price"] / PRICE_SCALE * mult[i]).tolist(), f["fee"].tolist(),
                                 f["ts_event"].tolist()):
            while q:
                if pos == 0:
                    t0, cash, fee, notional, most = ts, 0.0, 0.0, 0.0, 0
                # the part of q that moves the position toward (or away from) zero without crossing it
                part = q if pos == 0 or (pos > 0) == (q > 0) or abs(q) <= abs(pos) else -pos
                share = part / q
                cash -= part * px
                fee += fe * share
                fe -= fe * share
                if pos == 0 or (pos > 0) == (part > 0):
                    notional += abs(part) * px
                pos += part
                most = max(most, abs(pos))
                q -= part
                if pos == 0:
                    sign = 1 if part < 0 else -1  # closing with a sale: it was long
                    ints.append((int(i), sign, most, t0))
                    flts.append((cash - fee, fee, notional))
    return np.array(ints, np.int64).reshape(-1, 4), np.array(flts, np.float64).reshape(-1, 3)


def trade_stats(rt, several=False, per_name=True):
    """The report's trade figures from round trips (concatenated over files: rt = {"name", "sign",
    "net", "fee", "notional", "currency"}): per side (long/short) and per instrument, PnL in
    currency, net PnL per trade in bp of its entry notional. several: the trades are in several
    currencies, so all, long and short have counts, win rates and bp but no sums of money."""
    n_all = len(rt["sign"])
    out = {}
    groups = [("all", np.ones(n_all, bool)), ("long", rt["sign"] > 0), ("short", rt["sign"] < 0)]
    if per_name:
        groups += [(str(name), rt["name"] == name) for name in np.unique(rt["name"])]
    for g, (key, sel) in enumerate(groups):
        n = int(sel.sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            bp = rt["net"][sel] / rt["notional"][sel] * 1e4
        out[key] = {"trades": n, "net": round(float(rt["net"][sel].sum()), 6), "fees": round(float(rt["fee"][sel].sum()), 6),
                    "gross": round(float((rt["net"][sel] + rt["fee"][sel]).sum()), 6),
                    "win_rate": round(float((rt["net"][sel] > 0).mean()), 4) if n else None,
                    "mean_bp": round(float(np.nanmean(bp)), 3) if n and np.isfinite(bp).any() else None,
                    "median_bp": round(float(np.nanmedian(bp)), 3) if n and np.isfinite(bp).any() else None}
        if g < 3 and several:
            out[key].update(net=None, fees=None, gross=None)
        elif g >= 3 and "currency" in rt and n:
            out[key]["currency"] = str(rt["currency"][sel][0])
    return out


def _rt_columns(fills, mult, names, currencies):
    from engine.records import symbol_column
    ti, tf = round_trips(fills, mult)
    nm = symbol_column(names, ti[:, 0])
    return {"name": nm, "sign": ti[:, 1], "net": tf[:, 0], "fee": tf[:, 1], "notional": tf[:, 2],
            "currency": np.asarray(currencies, object)[ti[:, 0]] if len(ti) else np.zeros(0, object)}


def _signal_quality(words, res, sig, fwd, horizons_ms, entering, ic_horizon_ms, ic_max_pairs, mi):
    """Hits, decided and flat entries per horizon, and the IC's pairs (every scored tick's margin
    and forward return, subsampled evenly when there are very many)."""
    hits, decided, flat = {}, {}, {}
    for h in horizons_ms:
        r = fwd[h][entering]
        s = sig["side"][entering]
        ok = np.isfinite(r)
        moved = ok & (r != 0)
        hits[h] = int(np.sum(np.sign(r[moved]) == s[moved]))
        decided[h] = int(moved.sum())
        flat[h] = int((ok & (r == 0)).sum())
    h_ic = ic_horizon_ms or horizons_ms[len(horizons_ms) // 2]
    scored = np.nonzero(np.isfinite(res.margins))[0]
    if len(scored) > ic_max_pairs:
        scored = scored[np.linspace(0, len(scored) - 1, ic_max_pairs).astype(np.int64)]
    inst = tick_instruments(words[scored]).astype(np.int64)
    ic_y = forward_returns(words, inst, words[scored, 1], (h_ic,), mi)[h_ic]
    return {"hits": hits, "decided": decided, "flat": flat, "ic_x": res.margins[scored].astype(np.float64),
            "ic_y": ic_y}


def _instrument_columns(specs, n_inst):
    """Per instrument id below n_inst, from the resolved records: currency (unknown past them),
    calendar, each one's source group (None: one source), and whether described (without
    records: all of them, in their one unknown currency)."""
    specs = list(specs or [])[:n_inst]
    cur = np.array([s["currency"] for s in specs] + [UNKNOWN_CURRENCY] * (n_inst - len(specs)), object)
    cal = [s["calendar"] for s in specs]
    src = [s.get("source", "") for s in specs]
    groups = np.unique(src + [""] * (n_inst - len(src)), return_inverse=True)[1] if len(set(src)) > 1 else None
    known = np.array([bool(s["known"]) for s in specs] + [False] * (n_inst - len(specs)), bool) if specs else \
        np.ones(n_inst, bool)
    return cur, cal, groups, known


def _fill_columns(sig, fills):
    """Per signal: lots filled, their average price, the first fill's exchange time."""
    filled = np.zeros(len(sig), np.int64)
    value = np.zeros(len(sig), np.float64)
    fill_ts = np.zeros(len(sig), np.int64)
    if len(fills):
        np.add.at(filled, fills["signal"], fills["qty"])
        np.add.at(value, fills["signal"], fills["qty"] * fills["price"].astype(np.float64))
        first = np.unique(fills["signal"], return_index=True)
        fill_ts[first[0]] = fills["ts_event"][first[1]]
    with np.errstate(invalid="ignore", divide="ignore"):
        px = np.where(filled != 0, value / np.where(filled != 0, filled, 1), 0).astype(np.int64)
    return {"fill_px": px, "fill_qty": filled, "fill_ts_event": fill_ts}


def _execution_part(part, words, res, sig, acts, fills, info, mi, mult, cur, cal, known):
    """The execution's figures of a file into part: money per currency, per instrument, fills,
    unfilled lots, open positions, round trips and decisions."""
    names = list(res.instruments or [])
    part["money"] = _money_of(words, fills, mi, mult, cur, cal, known)
    part["by_instrument"] = _instruments_of(words, fills, mi, mult, cur, names)
    part["fills"] = len(fills)
    part["maker_fills"] = int(fills["maker"].sum()) if len(fills) else 0
    for k in UNFILLED:
        part[k] = info[k]
    part["open"] = open_positions(fills, mi, mult, names, words, cur)
    part["turnover_units"] = int(np.abs(fills["qty"]).sum()) if len(fills) else 0
    if len(part["money"]) == 1:  # (a file's totals where they are one currency's; summarize reads `money`)
        (m,) = part["money"].values()
        part["grid"], part["equity"], part["fees"], part["turnover_notional"] = m["grid"], m["equity"], m["fees"], \
            m["turnover_notional"]
    part["clocks_comparable"] = info["clocks_comparable"]
    part["rt"] = _rt_columns(fills, mult, names, cur)
    _, part["dec_legs"], part["dec_pnl"], part["dec_cur"] = decision_pnl(
        sig[acts], fills, mi, mult, int(words[:, 1].max()) if len(words) else 0, cur)
    part["fills_table"] = fills


def evaluate_file(words, res, horizons_ms=DEFAULT_HORIZONS_MS, latency_ns=0, fee_bps=0.0, ic_horizon_ms=None,
                  ic_max_pairs=200_000, depth=0, xp=None, spec=None, l3_records=None, mi=None, specs=None):
    """Per-file figures and series for `summarize`, plus per-signal columns for signals.parquet.
    Fills come from the execution simulator (xp, spec: see `execution`); without xp, taker orders
    arriving latency_ns after their tick and paying fee_bps. mi: the file's MidIndex when it
    was built already (a backtest builds it beside its loop). specs: the instruments' resolved
    records (replay/costs.py resolve, by id): their currencies and calendars, their sources'
    clocks, and `spec` when it is not given; without them one unknown currency."""
    mi = mi or MidIndex(words)
    sig = res.signals
    sig_inst = sig["instrument"].astype(np.int64)
    fwd = forward_returns(words, sig_inst, sig["ts_event"], horizons_ms, mi)
    acts = sig["position"] != sig["prev_position"]  # (else a decision the risk gate refused: no order)
    entering = (sig["side"] != 0) & acts
    counts = signal_counts.of_records(sig["flags"])  # (published, clipped, refused, killed: one definition)
    part = {"ticks": res.ticks, "scored": res.scored, "signals": counts["published"], "signal_counts": counts}
    part.update(_signal_quality(words, res, sig, fwd, horizons_ms, entering, ic_horizon_ms, ic_max_pairs, mi))
    from . import execsim
    n_inst = max(int(res.instruments and len(res.instruments) or 0), int(sig_inst.max()) + 1 if len(sig) else 1, 1)
    if spec is None and specs is not None:
        from .costs import spec_array
        spec = spec_array(specs)
    if spec is None:
        spec = np.zeros((n_inst, 4))
        spec[:, execsim.SP_MULT] = 1.0
        spec[:, execsim.SP_TAKER_BPS] = fee_bps
    if xp is None:
        xp = execsim.ExecParams(entry_ns=latency_ns)
    import time
    t0 = time.perf_counter()
    cur, cal, groups, known = _instrument_columns(specs, n_inst)
    fills, info = execution(words, sig, n_inst, depth, xp, spec, l3_records, groups)
    part["exec_seconds"] = time.perf_counter() - t0
    part["maker_orders"] = bool(np.any(xp.maker))
    _execution_part(part, words, res, sig, acts, fills, info, mi, spec[:, execsim.SP_MULT], cur, cal, known)
    cols = {f"fwd_bps_{h}ms": fwd[h].astype(np.float32) for h in horizons_ms}
    cols.update(_fill_columns(sig, fills))
    return part, cols


def decision_pnl(sig, fills, mi, mult, t_end, currencies=None):
    """Each decision's PnL, its legs together (a pair's long and short as one): each leg from its
    signal's tick until its instrument's next signal (else t_end), the change of that instrument's
    equity (cash from the fills done by then, net of their fees, plus the position marked to the
    mid). Every instrument's time from its first signal on belongs to one decision, so the
    decisions add up to the run's PnL. Returns (decision ids, legs, PnL in currency, its
    currency: "" for a decision whose legs are in several, whose PnL is no sum), in decision order."""
    if not len(sig):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, object)
    dec = sig["decision"].astype(np.int64)
    inst = sig["instrument"].astype(np.int64)
    ts = sig["ts_event"].astype(np.int64)
    # each signal's end: the next signal of its instrument that belongs to another decision
    nxt = np.full(len(sig), t_end, np.int64)
    for i in np.unique(inst):
        rows = np.flatnonzero(inst == i)  # (in seq order; a decision moves an instrument once)
        nxt[rows[:-1]] = ts[rows[1:]]
    ids, legs = np.unique(dec, return_counts=True)
    where = np.searchsorted(ids, dec)
    pnl = np.zeros(len(ids))
    for i in np.unique(inst):
        j = np.flatnonzero(inst == i)  # the legs on i
        np.add.at(pnl, where[j], _equity_at(fills, i, mult[i], mi, nxt[j]) - _equity_at(fills, i, mult[i], mi, ts[j]))
    cur = np.full(len(sig), UNKNOWN_CURRENCY, object) if currencies is None else \
        np.asarray(currencies, object)[np.minimum(inst, len(currencies) - 1)]  # (each leg's)
    first = np.full(len(ids), None, object)
    first[where[::-1]] = cur[::-1]  # (each decision's first leg's currency)
    mixed = np.zeros(len(ids), bool)
    np.logical_or.at(mixed, where, cur != first[where])
    first[mixed] = ""
    return ids, legs, pnl, first


def _money_of(words, fills, mi, mult, cur, cal, known):
    """A file's money per currency: {currency: net equity and fee curve on the file's grid, fees,
    fills, turnover notional, and its instruments' calendars (counts)}, for the currencies of the
    instruments traded and of those described (known)."""
    out = {}
    traded = np.zeros(len(cur), bool)
    traded[np.unique(fills["instrument"])[np.unique(fills["instrument"]) < len(cur)]] = True
    if (traded | known).any():  # (an instrument nothing describes and never traded: no currency)
        cur = np.where(traded | known, cur, None)
    several = len(set(cur) - {None}) > 1
    inst = tick_instruments(words) if several and len(words) else None
    for c in sorted(set(cur) - {None}):
        ids = set(np.flatnonzero(cur == c).tolist())
        mine = np.isin(fills["instrument"], list(ids)) if len(fills) else np.zeros(0, bool)
        f = fills[mine]
        span = None  # (one currency: the file's; several: each the span of its instruments' ticks, as a file of them)
        if several:
            ts = words[np.isin(inst, list(ids)), 1]
            span = (int(ts.min()), int(ts.max())) if len(ts) else (int(words[0, 1]), int(words[0, 1]))
        grid, eq = equity_curve(words, f, mi, mult, span=span)
        f = f[np.argsort(f["ts_event"], kind="stable")] if len(f) else f
        fee_curve = np.concatenate([[0.0], np.cumsum(f["fee"])])[np.searchsorted(f["ts_event"], grid, side="right")] \
            if len(f) else np.zeros(len(grid))
        cals = {}
        for i in ids:
            if i < len(cal):
                cals[cal[i]] = cals.get(cal[i], 0) + 1
        out[str(c)] = {"grid": grid, "equity": eq, "fee_curve": fee_curve,
                       "fees": float(f["fee"].sum()) if len(f) else 0.0,
                       "fills": int(len(f)), "calendars": cals,
                       "turnover_notional": float((np.abs(f["qty"]) * f["price"] / PRICE_SCALE
                                                   * mult[f["instrument"]]).sum()) if len(f) else 0.0}
    return out


def _instruments_of(words, fills, mi, mult, cur, names):
    """Each traded instrument's own figures in its currency: fills, fees, net PnL marked to its
    last mid (what a file of its ticks alone gives, to the last digit)."""
    out = {}
    if not len(fills) or not len(words):
        return out
    t_end = np.array([int(words[:, 1].max())])
    for i in np.unique(fills["instrument"]):
        f = fills[fills["instrument"] == i]
        name = names[i] if i < len(names) else str(int(i))
        out[str(name)] = {"currency": str(cur[i]), "fills": int(len(f)), "fees": float(f["fee"].sum()),
                          "pnl": float(_equity_at(fills, i, mult[i], mi, t_end)[0])}
    return out


def decision_stats(legs, pnl):
    """The report's decision figures: how many, of several legs, and their PnL."""
    n = len(pnl)
    multi = legs > 1
    return {"decisions": int(n), "multi_leg": int(multi.sum()), "net": round(float(pnl.sum()), 6),
            "multi_leg_net": round(float(pnl[multi].sum()), 6),
            "win_rate": round(float((pnl > 0).mean()), 4) if n else None,
            "mean": round(float(pnl.mean()), 6) if n else None,
            "median": round(float(np.median(pnl)), 6) if n else None}
