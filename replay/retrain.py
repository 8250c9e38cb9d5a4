"""`engine train --recordings DIR --since 7d`: retraining on the recorder's daily tick files, with a
validation gate before a model reaches the registry.

The files are the ones `engine record --out DIR` writes (app/daily_files.py: DIR/<label>/DATE.ticks
and DATE.N.ticks, DATE the UTC day). Of the complete days within --since of now (UTC; today's
file, still being written, is not one), the last
--holdout-days are held out; the model is trained on the others (engine train's own split by
time inside them), then the gate backtests the candidate and the incumbent (the registry's live
version of NAME, or --incumbent) on the held-out days in the same backtest (the same files,
execution options and risk limits: replay/jobs.py) and passes the candidate only if its metric
beats the incumbent's by more than --gate-margin. A candidate that passes is registered (its
training data's identity: every file's name, size and sha256; the gate's figures) and, with
--promote, promoted; one that fails stays in --out, unregistered. No incumbent: the first version
passes.
"""
import hashlib
import os
import re
import time

SINCE = re.compile(r"(\d+)([hdw])")
UNIT_S = {"h": 3600, "d": 86400, "w": 7 * 86400}
DAY_FILE = re.compile(r"(\d{4}-\d\d-\d\d)(?:\.(\d+))?\.ticks")


def parse_since(s):
    """--since 7d / 36h / 2w -> seconds; ValueError saying the form."""
    m = SINCE.fullmatch(str(s).strip())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"--since {s!r}: expected a count and a unit, e.g. 7d, 36h, 2w")
    return int(m.group(1)) * UNIT_S[m.group(2)]


def day_files(root, since_s, now=None):
    """{day: [tick files]} of the recordings under root (root/<label>/DAY[.N].ticks, or DAY files in
    root itself): the complete UTC days of the `since_s` before now (7d at 00:30 on the 27th: the
    20th .. the 26th), each day's files in label then piece order. Today's file is left out: the
    recorder is still writing it (a timer at 00:30 would hold out half an hour and train on none
    of yesterday's gate)."""
    now = time.time() if now is None else now
    first = time.strftime("%Y-%m-%d", time.gmtime(now - since_s))
    today = time.strftime("%Y-%m-%d", time.gmtime(now))
    if not os.path.isdir(root):
        raise ValueError(f"--recordings {root}: not a directory")
    dirs = [root] + sorted(os.path.join(root, d) for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    found = {}
    for d in dirs:
        for name in os.listdir(d):
            m = DAY_FILE.fullmatch(name)
            if m and first <= m.group(1) < today:
                found.setdefault(m.group(1), []).append(((d, int(m.group(2) or 0)), os.path.join(d, name)))
    return {day: [p for _, p in sorted(v)] for day, v in sorted(found.items())}


def identity(paths):
    """The training data's identity: each file's name, size and sha256."""
    out = []
    for p in paths:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out.append({"file": os.path.abspath(p), "bytes": os.path.getsize(p), "sha256": h.hexdigest()})
    return out


def split_days(days, holdout):
    """(training days, held-out days): the last `holdout` days held out; ValueError when too few."""
    days = sorted(days)
    if len(days) < holdout + 1:
        raise ValueError(f"{len(days)} complete day(s) of recordings in range ({', '.join(days) or 'none'}; today's, "
                         f"still being recorded, is never used): --holdout-days {holdout} needs at least {holdout + 1} "
                         "(one to train on)")
    return days[:-holdout], days[-holdout:]


def gate_figures(model, files, p, metric):
    """The backtest of `model` over the held-out files: its summary's `metric` and the figures kept."""
    import dataclasses

    from replay.jobs import merge, run_tasks
    q = dataclasses.replace(p, model=str(model))
    _, _, s, _ = merge(run_tasks(files, q, progress=False), q)
    keep = {k: s.get(k) for k in ("pnl", "pnl_gross", "fees", "fills", "signals", "sharpe", "max_drawdown")}
    if s.get(metric) is None:
        raise ValueError(f"--gate-metric {metric}: the backtest of {model} on the held-out days gives none "
                         f"(figures: {', '.join(k for k, v in s.items() if isinstance(v, (int, float)))})")
    return float(s[metric]), keep


def gate(candidate, incumbent, files, p, metric="pnl", margin=0.0):
    """{"metric", "margin", "candidate", "incumbent", "passed", "held_out": files, figures}: the
    candidate passes when it beats the incumbent by more than margin (no incumbent: it passes)."""
    c, cf = gate_figures(candidate, files, p, metric)
    out = {"metric": metric, "margin": margin, "candidate": c, "candidate_figures": cf, "held_out": list(files)}
    if incumbent is None:
        return {**out, "incumbent": None, "passed": True, "why": "no incumbent: the first version"}
    i, inf = gate_figures(incumbent, files, p, metric)
    passed = c > i + margin
    why = (f"candidate {metric} {c:,.4f} {'beats' if passed else 'does not beat'} the incumbent's {i:,.4f} by more "
           f"than {margin:g}")
    return {**out, "incumbent": i, "incumbent_model": str(incumbent), "incumbent_figures": inf, "passed": passed,
            "why": why}
