"""`engine shadow report RUN.sig`: the run's shadow models (app/shadow.py) against its live model,
on the same ticks.

Per shadow, against the live signal file:
  signals      decisions each wrote (marks left out)
  agreement    at every tick where either changed an instrument's target, the share where both
               hold the same target after it (a target holds until the next signal)
  score_corr   Pearson correlation of the two models' scores on the ticks both wrote a signal for
               (a signal carries its score; ticks where neither decided carry none), with how many
  pnl          with --ticks REC (the run's recording): each file's signals through the backtest's
               execution simulator and money (replay/evaluate.py), the execution flags of engine
               backtest: net and gross PnL, fees, fills (per currency when there are several:
               never added; a total only at --fx rates)
The live file was cut by the live loop's conflation and kill switch, the shadows' were not
(app/shadow.py): the report says when the live run conflated or was killed.
"""
import glob
import os

import numpy as np

_KEY = 1 << 20  # (inst < 2^20: a (tick, instrument) pair in one int64)


def shadow_files(sig_path):
    """{name: path} of the shadows beside a live run's signal file."""
    stem = sig_path.rsplit(".", 1)[0]
    out = {}
    for p in sorted(glob.glob(glob.escape(stem) + ".shadow-*.sig")):
        out[os.path.basename(p)[len(os.path.basename(stem)) + len(".shadow-"):-len(".sig")]] = p
    return out


def _keys(s):
    return s["tick_seq"].astype(np.int64) * _KEY + s["instrument"].astype(np.int64)


def _held(s, keys):
    """The target each instrument holds after each (tick, instrument) of keys (sorted), per s."""
    out = np.zeros(len(keys), np.int64)
    inst = keys % _KEY
    for i in np.unique(inst):
        mine = s[s["instrument"] == i]
        mine = mine[np.argsort(mine["tick_seq"], kind="stable")]  # (a conflation flush decides on older ticks)
        at = np.searchsorted(mine["tick_seq"], keys[inst == i] // _KEY, side="right") - 1
        out[inst == i] = np.where(at >= 0, mine["position"][np.maximum(at, 0)], 0)
    return out


def compare(live, shadow):
    """agreement and score correlation of two decision sets (SIGNAL_DTYPE, in tick order)."""
    ka, kb = _keys(live), _keys(shadow)
    points = np.union1d(ka, kb)
    agree = float((_held(live, points) == _held(shadow, points)).mean()) if len(points) else None
    # the last score per (tick, instrument) in each (several signals of one tick: legs, a flush)
    ua, ia = np.unique(ka[::-1], return_index=True)
    ub, ib = np.unique(kb[::-1], return_index=True)
    common, xa, xb = np.intersect1d(ua, ub, return_indices=True)
    sa = live["score"][::-1][ia[xa]].astype(np.float64)
    sb = shadow["score"][::-1][ib[xb]].astype(np.float64)
    ok = np.isfinite(sa) & np.isfinite(sb)
    corr = None
    if ok.sum() >= 3 and sa[ok].std() > 0 and sb[ok].std() > 0:
        corr = float(np.corrcoef(sa[ok], sb[ok])[0, 1])
    return {"signals": int(len(shadow)), "agreement": agree, "points": int(len(points)), "score_corr": corr,
            "common_ticks": int(ok.sum())}


def money(ticks, sigs, p, values):
    """What a signal set earns on a tick file through the backtest's execution and money: pnl,
    pnl_gross, fees (None with several currencies), fills, and each currency's (by_currency; with
    --fx, the converted total) (replay/jobs.Params p: the execution flags; values: the strategy's
    parameters, its `maker`)."""
    from replay.backtest import FileResult, file_depth
    from replay.evaluate import evaluate_file, summarize
    from replay.jobs import exec_setup
    res = FileResult(ticks.path, ticks.instruments, len(ticks.words), 0, sigs,
                     np.full(len(ticks.words), np.nan, np.float32), None)
    xp, spec, specs = exec_setup(p, values, ticks, res, 0)
    part, _ = evaluate_file(ticks.words, res, p.horizons_ms, depth=file_depth(ticks), xp=xp, spec=spec, specs=specs)
    s = summarize([part], p.horizons_ms, fx=p.fx)[0]
    out = {k: s.get(k) for k in ("pnl", "pnl_gross", "fees", "fills")}
    out["by_currency"] = {c: {k: f[k] for k in ("pnl", "pnl_gross", "fees")} for c, f in s["by_currency"].items()}
    if "converted" in s:
        out["converted"] = s["converted"]
    return out


def report(sig_path, ticks_path=None, p=None, values=None):
    """The report's dict: the live file's figures, then each shadow's (compare, and money with a
    tick file). ValueError when the run has no shadows."""
    shadows = shadow_files(sig_path)
    if not shadows:
        raise ValueError(f"{sig_path}: no shadow signal files beside it ({sig_path.rsplit('.', 1)[0]}.shadow-*.sig): "
                         "was the run given --shadow MODEL?")
    from engine.signal_log import read_kills, read_marks, read_pauses, read_records, read_signals
    recs = read_records(sig_path)  # (once: the decisions and each kind of mark)
    live = read_signals(recs)
    out = {"live": {"path": sig_path, "signals": int(len(live)), "conflation_marks": len(read_marks(recs)),
                    "kill_moves": len(read_kills(recs)), "pause_moves": len(read_pauses(recs))}, "shadows": {}}
    tf = None
    if ticks_path:
        from engine.tickfile import TickFile, TickFileError
        try:
            tf = TickFile(ticks_path)
        except TickFileError as e:
            raise ValueError(str(e)) from None
        out["ticks"] = ticks_path
        out["live"].update(money(tf, live, p, values))
    for name, path in shadows.items():
        sh = read_signals(path)
        row = {"path": path, **compare(live, sh)}
        if tf is not None:
            row.update(money(tf, sh, p, values))
        out["shadows"][name] = row
    return out


def lines(rep):
    """The report for people."""
    lv = rep["live"]
    money = "pnl" in lv

    def cash(r):
        if not money:
            return ""
        from replay.currency import per_currency
        cv = r.get("converted") or {}
        total = f"; total {cv['pnl']:,.2f} {cv['currency']} ({cv['note']})" if "pnl" in cv else ""
        if r["pnl"] is not None and len(r.get("by_currency") or {}) <= 1:
            return f"   pnl {r['pnl']:,.2f} (gross {r['pnl_gross']:,.2f}, fees {r['fees']:,.2f}, " \
                f"{r['fills']:,} fills)" + total
        return f"   pnl {per_currency(r['by_currency'])}, {r['fills']:,} fills{total}"
    out = [f"live   {lv['signals']:,} signals{cash(lv)}   ({lv['path']})"]
    if lv["conflation_marks"] or lv["kill_moves"] or lv["pause_moves"]:
        out.append(f"       the live loop conflated ({lv['conflation_marks']:,} windows), was killed "
                   f"({lv['kill_moves']:,} moves) or paused ({lv['pause_moves']:,} moves); the shadows scored every tick")
    for name, r in rep["shadows"].items():
        agree = f"{r['agreement']:.1%}" if r["agreement"] is not None else "n/a"
        corr = f"{r['score_corr']:.4f}" if r["score_corr"] is not None else "n/a"
        out.append(f"{name}   {r['signals']:,} signals   agreement {agree} of {r['points']:,} decision points   "
                   f"score corr {corr} on {r['common_ticks']:,} common ticks{cash(r)}")
    if not money:
        out.append("(give --ticks RUN's recording for each model's PnL through the backtest's execution)")
    return out
