"""`engine sweep`: a backtest per cell of a parameter grid, over files, on Dask.

A grid names the strategy's PARAMS and these backtest knobs (a model's own hyper-parameters,
such as its label horizon, need `engine train` per value):
  latency_us, response_us, queue_power, fee_bps, maker_bps, per_lot, maker (0 taker, 1 maker)
Values: `lo:hi:step` (hi included) or `v1|v2|v3`; cells are the cross product:
    --grid 'enter_long=0.6:0.8:0.05,latency_us=0|100|500'
A cell is one (parameter set, file) backtest; its figures are cached in OUT/cells/KEY.json, KEY a
hash of the parameters, the file (path, size, mtime), the model and the execution settings, so a
rerun (after a crash, or with a larger grid) computes only what is missing. Results: OUT/sweep.parquet
(one row per parameter set, the files merged as `engine backtest` merges them) and
OUT/heatmap.png (net PnL over the first two grid parameters).
"""
import dataclasses
import hashlib
import itertools
import json
import os
import sys

import numpy as np

KNOBS = ("latency_us", "response_us", "queue_power", "fee_bps", "maker_bps", "per_lot", "maker")
FIGURES = ("ticks", "signals", "fills", "maker_fills", "unfilled_lots", "pnl", "pnl_gross", "fees",
           "break_even_fee_bps", "max_drawdown", "sharpe", "turnover_units", "ic")


class SweepError(ValueError):
    pass


def _values(name, text):
    try:
        if "|" in text or ":" not in text:
            return [float(v) for v in text.split("|")]
        lo, hi, step = (float(v) for v in text.split(":"))
    except ValueError:
        raise SweepError(f"--grid {name}={text}: expected lo:hi:step or v1|v2|...") from None
    if step <= 0 or hi < lo:
        raise SweepError(f"--grid {name}={text}: needs step > 0 and hi >= lo")
    n = int(np.floor((hi - lo) / step + 1e-9)) + 1
    if n > 1000:
        raise SweepError(f"--grid {name}={text}: {n} values; at most 1000 a parameter")
    return [round(lo + k * step, 10) for k in range(n)]


def parse_grid(text, param_names):
    """{name: [values]} in the order given; names must be strategy PARAMS or KNOBS."""
    grid = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        name, eq, vals = part.partition("=")
        if not eq:
            raise SweepError(f"--grid: {part!r} is not NAME=VALUES")
        if name not in param_names and name not in KNOBS:
            raise SweepError(f"--grid: unknown parameter {name!r} (the strategy's: {', '.join(param_names) or 'none'}; "
                             f"backtest knobs: {', '.join(KNOBS)})")
        grid[name] = _values(name, vals)
    if not grid:
        raise SweepError("--grid: no parameters")
    return grid


def cells(grid):
    names = list(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def cell_params(base, combo):
    """A runner.Params for one parameter set: strategy params overridden, knobs applied."""
    p = dataclasses.replace(base, params={**base.params, **{k: v for k, v in combo.items() if k not in KNOBS}})
    if "latency_us" in combo:
        p.latency_ns, p.latency = int(combo["latency_us"] * 1000), None
    if "response_us" in combo:
        p.response_ns = int(combo["response_us"] * 1000)
    for k in ("queue_power", "fee_bps", "maker_bps", "per_lot"):
        if k in combo:
            setattr(p, k, combo[k])
    if "maker" in combo:
        p.orders = "maker" if combo["maker"] else "taker"
    return p


def cell_key(combo, path, p, model_id):
    st = os.stat(path)
    desc = {"combo": combo, "file": [os.path.realpath(path), st.st_size, st.st_mtime_ns], "model": model_id,
            "strategy": p.strategy, "params": p.params, "universe": p.universe,
            "exec": [p.orders, p.latency_ns, str(p.latency), p.response_ns, p.feed_ns, p.queue_power, p.fee_bps,
                     p.maker_bps, p.per_lot, p.l3, p.seed, sorted(p.instruments.items()) if p.instruments else None],
            "horizons": list(p.horizons_ms)}
    return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:24]


def run_cell(combo, path, k, base):
    """One backtest; its `part` (the evaluation merge needs) without the bulky per-signal columns."""
    from .jobs import backtest_one
    r = backtest_one(path, cell_params(base, combo), k)
    part = dict(r["part"])
    part.pop("fills_table", None)
    return {"part": part, "specs": r["specs"]}


def _save_cell(path, res):
    import pickle
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        pickle.dump(res, f, protocol=5)
    os.replace(tmp, path)


def sweep(files, out_dir, base, grid, workers=1, scheduler=None, progress=True):
    """Run every missing (cell, file), merge per cell, write sweep.parquet and heatmap.png;
    returns (table rows, computed, cached)."""
    import pickle

    from .evaluate import summarize
    from .jobs import bound_model, host_of
    host = host_of(base)  # a broken strategy or model: one line now, not on every worker
    pred = bound_model(base, files[0])
    combos = cells(grid)
    cdir = os.path.join(out_dir, "cells")
    os.makedirs(cdir, exist_ok=True)
    jobs, done = [], {}
    for ci, combo in enumerate(combos):
        for k, f in enumerate(files):
            key = cell_key(combo, f, base, pred.model_id)
            path = os.path.join(cdir, key + ".pkl")
            if os.path.exists(path):
                try:
                    with open(path, "rb") as fh:
                        done[(ci, k)] = pickle.load(fh)
                    continue
                except (OSError, pickle.UnpicklingError, EOFError):
                    pass  # a damaged cell is recomputed
            jobs.append((ci, k, combo, f, path))
    cached = len(done)
    _run(jobs, done, base, workers, scheduler, progress)
    rows = []
    for ci, combo in enumerate(combos):
        parts = [done[(ci, k)]["part"] for k in range(len(files))]
        specs = [s for k in range(len(files)) for s in done[(ci, k)]["specs"]]
        cals = [s["calendar"] for s in specs]
        summary = summarize(parts, base.horizons_ms, max(set(cals), key=cals.count) if cals else "crypto")[0]
        rows.append({**combo, **{f: summary.get(f) for f in FIGURES}})
    _write(out_dir, rows, list(grid), host.strategy.describe(), pred.model_id)
    return rows, len(jobs), cached


def _run(jobs, done, base, workers, scheduler, progress):
    from tqdm import tqdm
    bar = tqdm(total=len(jobs), unit=" cells", file=sys.stderr, disable=not progress or not jobs or not sys.stderr.isatty())
    if workers <= 1 and not scheduler:
        for ci, k, combo, f, path in jobs:
            res = run_cell(combo, f, k, base)
            _save_cell(path, res)
            done[(ci, k)] = res
            bar.update(1)
        bar.close()
        return
    from dask.distributed import as_completed

    from models.cluster import dask_client
    try:
        with dask_client(workers, scheduler) as client:
            futs = {client.submit(run_cell, combo, f, k, base, pure=False): (ci, k, path)
                    for ci, k, combo, f, path in jobs}
            for fut in as_completed(futs):
                ci, k, path = futs[fut]
                res = fut.result()
                _save_cell(path, res)  # saved as it finishes: an interrupted sweep resumes from here
                done[(ci, k)] = res
                bar.update(1)
    finally:
        bar.close()


def _write(out_dir, rows, names, strategy, model_id):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.outputs import atomic_file
    table = pa.Table.from_pylist(rows).replace_schema_metadata(
        {"engine.strategy": strategy, "engine.model_id": model_id, "engine.grid": ",".join(names)})
    with atomic_file(os.path.join(out_dir, "sweep.parquet"), "the sweep table") as tmp:
        pq.write_table(table, tmp)
    _heatmap(out_dir, rows, names)


def _heatmap(out_dir, rows, names):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from engine.outputs import atomic_file
    x = names[0]
    y = names[1] if len(names) > 1 else None
    xs = sorted({r[x] for r in rows})
    ys = sorted({r[y] for r in rows}) if y else [0.0]
    z = np.full((len(ys), len(xs)), np.nan)
    for r in rows:  # with more than two parameters: the best net PnL over the others
        i, j = ys.index(r[y]) if y else 0, xs.index(r[x])
        v = r["pnl"] if r["pnl"] is not None else np.nan
        z[i, j] = v if np.isnan(z[i, j]) else max(z[i, j], v)
    fig, ax = plt.subplots(figsize=(1.2 + 0.7 * len(xs), 1.5 + 0.5 * len(ys)))
    im = ax.imshow(z, origin="lower", aspect="auto", cmap="RdYlGn")
    ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs], rotation=45)
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys] if y else [""])
    ax.set_xlabel(x)
    if y:
        ax.set_ylabel(y)
    for i in range(len(ys)):
        for j in range(len(xs)):
            if np.isfinite(z[i, j]):
                ax.text(j, i, f"{z[i, j]:.3g}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, label="net PnL" + (" (best over the other parameters)" if len(names) > 2 else ""))
    ax.set_title("net PnL per parameter set, all files")
    fig.tight_layout()
    with atomic_file(os.path.join(out_dir, "heatmap.png"), "the sweep heat map") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
