"""`engine backtest FILE... --model DIR --out DIR`: one file per task, in process or on Dask,
merged in file order into signals.parquet and a report."""
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .evaluate import DEFAULT_HORIZONS_MS


@dataclass
class Params:
    model: str | None = None          # None: the strategy's default model
    backend: str = "auto"
    strategy: str | None = None       # a built-in name or a .py file (default: microstructure)
    params: dict = field(default_factory=dict)  # strategy parameter overrides
    horizons_ms: tuple = DEFAULT_HORIZONS_MS
    latency_ns: int = 0
    fee_bps: float = 0.0
    extra: dict = field(default_factory=dict)
    marks: object = None              # int64 [m, 2]: a live run's conflation marks (--conflate-as-recorded)


_MODELS = {}


def _host(p):
    """The strategy compiled into the host loops (once per process per strategy)."""
    from engine.strategy_build import load_host
    return load_host(p.strategy, p.params)


def _model(p):
    """The verified model, for this strategy, loaded once per process (each Dask worker verifies
    it itself)."""
    host = _host(p)
    if p.model is None:
        from models.default import default_model_dir
        p.model = str(default_model_dir(host.strategy))
    key = (os.path.realpath(p.model), p.backend, host.strategy.sha256)
    if key not in _MODELS:
        from models import artifact
        _MODELS[key] = artifact.load(p.model, backend=p.backend, strategy=host.strategy)
    return _MODELS[key]


def backtest_one(path, p):
    """Backtest and evaluate one tick file; a picklable dict (runs on a Dask worker as is)."""
    from engine.runner import uses_sigmoid
    from engine.tickfile import TickFile, TickFileError

    from .backtest import run_file, warm_up
    from .evaluate import evaluate_file
    host = _host(p)
    pred = _model(p)
    cfg = host.loop_cfg(sigmoid=uses_sigmoid(pred))
    warm_up(pred, host, cfg)
    try:
        tf = TickFile(path)  # every block's CRC checked here, once, where the file is read
    except TickFileError as e:
        raise ValueError(str(e)) from None
    t0 = time.perf_counter()
    res = run_file(tf, pred, host, cfg, p.marks)
    loop_s = time.perf_counter() - t0
    part, cols = evaluate_file(tf.words, res, p.horizons_ms, p.latency_ns, p.fee_bps)
    return {"path": str(path), "instruments": res.instruments, "signals": res.signals, "cols": cols, "part": part,
            "hist": res.hist, "notes": res.notes, "loop_seconds": loop_s, "backend": pred.backend,
            "model_id": pred.model_id, "scores": _score_sample(res.margins, uses_sigmoid(pred))}


def _score_sample(margins, sigmoid, k=100_000):
    m = margins[np.isfinite(margins)]
    if len(m) > k:
        m = m[np.linspace(0, len(m) - 1, k).astype(np.int64)]
    return (1 / (1 + np.exp(-m.astype(np.float64)))).astype(np.float32) if sigmoid else m


def _say(msg):
    print(f"[backtest] {msg}", file=sys.stderr, flush=True)


def run_tasks(files, p, workers=1, scheduler=None, progress=True):
    """Results in file order: in this process, or on Dask (a LocalCluster of `workers`
    single-threaded processes, or the cluster at `scheduler`)."""
    say = _say if progress else (lambda m: None)
    if workers <= 1 and not scheduler:
        out = []
        for k, f in enumerate(files):
            out.append(backtest_one(f, p))
            say(f"{k + 1}/{len(files)} files: {f} ({out[-1]['part']['ticks']:,} ticks, "
                f"{len(out[-1]['signals']):,} signals)")
        return out
    from dask.distributed import Client, LocalCluster, as_completed
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=40)
        client = Client(cluster)
    try:
        say(f"{len(files)} files on {len(client.scheduler_info()['workers'])} Dask workers ({client.scheduler.address})")
        futs = [client.submit(backtest_one, f, p, key=f"backtest-{k}-{os.path.basename(f)}", pure=False)
                for k, f in enumerate(files)]
        where = {f.key: k for k, f in enumerate(futs)}
        out = [None] * len(files)
        for done, fut in enumerate(as_completed(futs), 1):
            r = fut.result()  # a worker's exception is raised here, naming its file
            out[where[fut.key]] = r
            say(f"{done}/{len(files)} files: {r['path']} ({r['part']['ticks']:,} ticks, {len(r['signals']):,} signals)")
        return out
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def merge(results, p):
    """One signals table and the report's figures from per-file results, in file order."""
    from engine.latency import new_counts

    from .evaluate import summarize
    sigs = np.concatenate([r["signals"] for r in results]) if results else np.zeros(0)
    extra = {"file": np.concatenate([np.full(len(r["signals"]), i, np.int32) for i, r in enumerate(results)]),
             "symbol": np.concatenate([np.array([(r["instruments"][i] if i < len(r["instruments"]) else str(i))
                                                 for i in r["signals"]["instrument"]], dtype=object)
                                       for r in results]) if results else np.zeros(0, object)}
    for name in (results[0]["cols"] if results else {}):
        extra[name] = np.concatenate([r["cols"][name] for r in results])
    summary, grid, equity = summarize([r["part"] for r in results], p.horizons_ms)
    hist = sum((r["hist"] for r in results), new_counts())
    scores = np.concatenate([r["scores"] for r in results]) if results else np.zeros(0, np.float32)
    summary["loop_seconds"] = round(sum(r["loop_seconds"] for r in results), 4)
    summary["loop_ticks_per_s"] = round(summary["ticks"] / summary["loop_seconds"]) if summary["loop_seconds"] else None
    return sigs, extra, summary, grid, equity, hist, scores


def backtest(files, out_dir, p, workers=1, scheduler=None, progress=True):
    """Check inputs, run, merge, write out_dir/{signals.parquet, report.json, report.md, *.png}:
    built in a temporary directory beside it and renamed into place, so a failure (a full disk)
    leaves no partial report and names what could not be written."""
    from engine.outputs import atomic_dir, check_writable
    from engine.signal_log import write_signals_parquet
    from engine.tickfile import TickFile, TickFileError

    from . import report
    check_writable(out_dir, "the backtest report", directory=True)
    for f in files:  # every input is a tick file before any work starts (its CRCs: where it is read)
        try:
            TickFile(f, verify=False).close()
        except TickFileError as e:
            raise ValueError(str(e)) from None
    host = _host(p)  # a broken strategy or a model trained for another one: a clear error now
    pred = _model(p)  # verified (and loaded once when the files run here)
    from engine.runner import uses_sigmoid
    host.strategy.check_scale(uses_sigmoid(pred))
    t0 = time.monotonic()
    results = run_tasks(files, p, workers, scheduler, progress)
    sigs, extra, summary, grid, equity, hist, scores = merge(results, p)
    notes = [n for r in results for n in r["notes"]]
    summary.update({"model": p.model, "model_id": pred.model_id, "backend": results[0]["backend"] if results else None,
                    "latency_ns": p.latency_ns, "fee_bps": p.fee_bps, "horizons_ms": list(p.horizons_ms),
                    "strategy": host.strategy.identity(), "workers": workers, "wall_seconds": round(time.monotonic() - t0, 3),
                    "inputs": [r["path"] for r in results], "notes": notes,
                    # what the printed summary warns of: incomplete inputs, their unchecked records
                    "warnings": notes})
    with atomic_dir(out_dir, "the backtest report") as tmp:  # only once every file ran: a bad input leaves nothing
        write_signals_parquet(os.path.join(tmp, "signals.parquet"), sigs, extra,
                              metadata={"engine.model_id": pred.model_id, "engine.inputs": ",".join(files),
                                        "engine.strategy": host.strategy.describe()})
        report.write(tmp, summary, grid, equity, hist, scores)
    return summary
