"""`engine backtest FILE... --model DIR --out DIR`: one file per task, in process or on Dask,
merged in file order into signals.parquet and a report."""
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from engine.risk import RULES as RISK_RULES
from models.cluster import dask_client
from .evaluate import DEFAULT_HORIZONS_MS


@dataclass
class Params:
    model: str | None = None          # None: the strategy's default model
    backend: str = "auto"
    strategy: str | None = None       # a built-in name or a .py file (default: microstructure)
    params: dict = field(default_factory=dict)  # strategy parameter overrides
    universe: dict = field(default_factory=dict)  # --universe: role -> instrument
    horizons_ms: tuple = DEFAULT_HORIZONS_MS
    latency_ns: int = 0               # order entry latency (constant), unless `latency` says otherwise
    fee_bps: float | None = None      # taker fee, bp of notional (None: --instruments', else the venue's standard)
    extra: dict = field(default_factory=dict)
    marks: object = None              # int64 [m, 2]: a live run's conflation marks (--conflate-as-recorded)
    kills: object = None              # int64 [k, 3]: its kill switch moves (engine.signal_log.read_kills)
    pauses: object = None             # int64 [p, 2]: its pauses and resumes (engine.signal_log.read_pauses)
    risk: object = None               # engine.risk.Limits: the gate's limits (--risk-*), None: none
    # execution (replay/execsim.py, replay/l3.py)
    orders: str = "strategy"          # taker | maker | strategy (its `maker` param; taker without one)
    latency: object = None            # None, "lognormal:MEDIAN_US,SIGMA", "uniform:LO_US,HI_US", or int64 ns values
    response_ns: int = 0
    feed_ns: int = 0                  # feed latency when the file's receive and exchange clocks differ
    queue_power: float = 3.0
    maker_bps: float | None = None
    per_lot: float | None = None
    instruments: dict = field(default_factory=dict)  # replay/costs.py load_file
    fx: dict | None = None            # --fx: rates for a converted total (replay/currency.py parse_fx)
    l3: str | None = None             # a DBN MBO file: exact FIFO for maker orders
    seed: int = 0                     # for sampled latencies


_MODELS = {}


def host_of(p):
    """The strategy compiled into the host loops (once per process per strategy and parameters)."""
    from engine.strategy_build import loaded_host
    return loaded_host(p.strategy, p.params, p.universe)


def _model(p):
    """The verified model, for this strategy, loaded once per process (each Dask worker verifies
    it itself)."""
    host = host_of(p)
    if p.model is None:
        from models.default import default_model_dir
        p.model = str(default_model_dir(host.strategy))
    key = (os.path.realpath(p.model), p.backend, host.strategy.sha256, tuple(host.strategy.members or ()))
    if key not in _MODELS:
        import fpga.backend  # noqa: F401  (registers backend="fpga-sim" with models.artifact)
        from models import artifact
        _MODELS[key] = artifact.load(p.model, backend=p.backend, strategy=host.strategy)
    return _MODELS[key]


def bound_model(p, path):
    """_model, a UNIVERSE strategy's members bound first to the instruments of tick file `path` (a
    model is trained for those members, and refused for others)."""
    host = host_of(p)
    if host.strategy.universe:
        from engine.tickfile import TickFile

        from .backtest import bind
        tf = TickFile(path, verify=False)
        bind(host, tf)
        tf.close()
    return _model(p)


class EntryLatencies:
    """Order-entry latencies (ns) handed out in order as orders come: order i of file number k gets
    what entry_latencies gives it (a paper run's orders, a few at a time, meet the latencies a
    backtest of its recording draws at once: the seeded draws are the same sequence either way)."""

    def __init__(self, p, k=0):
        self.spec, self.const, self.i = p.latency, np.int64(p.latency_ns), 0
        if isinstance(self.spec, str):
            self.kind, _, args = self.spec.partition(":")
            self.a, self.b = (float(x) for x in args.split(","))
            self.rng = np.random.default_rng([p.seed, k])

    def take(self, m):
        """int64 ns for the next m orders."""
        if self.spec is None:
            return np.full(m, self.const, np.int64)
        if not isinstance(self.spec, str):  # recorded values, used in order, cycled
            a = np.asarray(self.spec, np.int64)
            out = a[(self.i + np.arange(m)) % len(a)]
            self.i += m
            return out
        if self.kind == "lognormal":
            return (self.rng.lognormal(np.log(self.a), self.b, m) * 1000).astype(np.int64)
        return (self.rng.uniform(self.a, self.b, m) * 1000).astype(np.int64)


def entry_latencies(p, m, k):
    """Per-order entry latencies (ns) for m orders of file number k: a constant, recorded values
    (used in order, cycled), or draws from a distribution seeded by (seed, file)."""
    if p.latency is None:
        return np.int64(p.latency_ns)
    if not isinstance(p.latency, str):
        return np.asarray(p.latency, np.int64)
    return EntryLatencies(p, k).take(m)


def fee_overrides(p):
    """The run-wide fees given on the command line (costs.resolve's overrides)."""
    return {"taker_bps": p.fee_bps, "maker_bps": p.maker_bps, "per_lot": p.per_lot}


def maker_orders(p, values):
    """Are the orders maker orders: --orders, or the strategy's `maker` param (values)."""
    return p.orders == "maker" or (p.orders == "strategy" and bool(values.get("maker", 0.0)))


def exec_setup(p, values, tf, res, k):
    """(ExecParams, spec array, per-instrument specs) for one file's signals (values: the
    strategy's parameters, its `maker`)."""
    from engine.records import symbols

    from . import costs, execsim
    top = int(res.signals["instrument"].max()) + 1 if len(res.signals) else 1
    names = list(symbols(res.instruments or tf.instruments, top))
    specs = costs.resolve(costs.file_specs(tf, names), p.instruments, fee_overrides(p))
    xp = execsim.ExecParams(entry_ns=entry_latencies(p, len(res.signals), k), response_ns=p.response_ns,
                            feed_ns=p.feed_ns, maker=maker_orders(p, values),
                            queue_power=p.queue_power)
    return xp, costs.spec_array(specs), specs


def backtest_one(path, p, k=0, progress=False, looped=None):
    """Backtest and evaluate one tick file (file number k); a picklable dict (runs on a Dask
    worker as is). looped(hist, scores): called between the loop and the evaluation."""
    from models.artifact import uses_sigmoid
    from engine.tickfile import TickFile, TickFileError

    from .backtest import bind, file_depth, run_file, warm_up
    from .evaluate import MidIndex, evaluate_file
    host = host_of(p)
    try:
        tf = TickFile(path, verify=False)  # (structure checked here; the CRCs beside the loop)
    except TickFileError as e:
        raise ValueError(str(e)) from None
    bind(host, tf)  # (before the model: one trained for another universe is refused)
    pred = _model(p)
    cfg = host.loop_cfg(sigmoid=uses_sigmoid(pred))
    warm_up(pred, host, cfg)
    # every block's CRC is checked once, on a thread while the loop runs (zlib and the loop both
    # release the GIL); nothing the loop computed is used unless the file passed. The evaluation's
    # mid series, which needs only the file, is built there too.
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        check = ex.submit(tf.verify)
        mids = ex.submit(MidIndex, tf.words)
        t0 = time.perf_counter()
        res = run_file(tf, pred, host, cfg, p.marks, progress=progress, risk=p.risk, kills=p.kills, pauses=p.pauses)
        loop_s = time.perf_counter() - t0
        try:
            check.result()
        except TickFileError as e:
            raise ValueError(str(e)) from None
        mi = mids.result()
    scores = _score_sample(res.margins, uses_sigmoid(pred))
    if looped is not None:
        looped(res.hist, scores)
    xp, spec, specs = exec_setup(p, host.strategy.values, tf, res, k)
    rec = None
    if p.l3:
        from . import l3
        rec = l3.load(p.l3, list(res.instruments or tf.instruments or []))
    t1 = time.perf_counter()
    part, cols = evaluate_file(tf.words, res, p.horizons_ms, depth=file_depth(tf), xp=xp, spec=spec, l3_records=rec,
                               mi=mi, specs=specs)
    return {"path": str(path), "instruments": res.instruments, "signals": res.signals, "cols": cols, "part": part,
            "hist": res.hist, "notes": res.notes, "loop_seconds": loop_s, "eval_seconds": time.perf_counter() - t1,
            "backend": pred.backend, "model_id": pred.model_id, "specs": specs, "risk": res.risk,
            "scores": scores}


def _score_sample(margins, sigmoid, k=100_000):
    m = margins[np.isfinite(margins)]
    if len(m) > k:
        m = m[np.linspace(0, len(m) - 1, k).astype(np.int64)]
    return (1 / (1 + np.exp(-m.astype(np.float64)))).astype(np.float32) if sigmoid else m


def _say(msg):
    print(f"[backtest] {msg}", file=sys.stderr, flush=True)


def run_tasks(files, p, workers=1, scheduler=None, progress=True, looped=None):
    """Results in file order: in this process, or on Dask (a LocalCluster of `workers`
    single-threaded processes, or the cluster at `scheduler`). looped(hists, scores): called
    once every file's loop has run (in process: before the last file is evaluated)."""
    say = _say if progress else (lambda m: None)
    looped = looped or (lambda hists, scores: None)
    if workers <= 1 and not scheduler:
        out = []
        for k, f in enumerate(files):
            last = None
            if k == len(files) - 1:
                def last(h, s):
                    looped([r["hist"] for r in out] + [h], [r["scores"] for r in out] + [s])
            out.append(backtest_one(f, p, k, progress, last))
            say(f"{k + 1}/{len(files)} files: {f} ({out[-1]['part']['ticks']:,} ticks, "
                f"{len(out[-1]['signals']):,} signals)")
        return out
    from dask.distributed import as_completed
    with dask_client(workers, scheduler) as client:
        say(f"{len(files)} files on {len(client.scheduler_info()['workers'])} Dask workers ({client.scheduler.address})")
        futs = [client.submit(backtest_one, f, p, k, key=f"backtest-{k}-{os.path.basename(f)}", pure=False)
                for k, f in enumerate(files)]
        where = {f.key: k for k, f in enumerate(futs)}
        out = [None] * len(files)
        for done, fut in enumerate(as_completed(futs), 1):
            r = fut.result()  # a worker's exception is raised here, naming its file
            out[where[fut.key]] = r
            say(f"{done}/{len(files)} files: {r['path']} ({r['part']['ticks']:,} ticks, {len(r['signals']):,} signals)")
        looped([r["hist"] for r in out], [r["scores"] for r in out])
        return out


def _names(r):
    """A file's symbol per instrument index."""
    from engine.records import symbols
    return symbols(r["instruments"], int(r["signals"]["instrument"].max()) + 1 if len(r["signals"]) else 0)


def merge(results, p):
    """One signals table and the report's figures from per-file results, in file order."""
    from engine.latency import new_counts

    from .evaluate import summarize
    sigs = np.concatenate([r["signals"] for r in results]) if results else np.zeros(0)
    extra = {"file": np.concatenate([np.full(len(r["signals"]), i, np.int32) for i, r in enumerate(results)]),
             "symbol": np.concatenate([_names(r)[r["signals"]["instrument"].astype(np.int64)] for r in results])
             if results else np.zeros(0, object)}
    for name in (results[0]["cols"] if results else {}):
        extra[name] = np.concatenate([r["cols"][name] for r in results])
    specs = [s for r in results for s in r.get("specs", [])]
    cals = [s["calendar"] for s in specs]
    calendar = max(set(cals), key=cals.count) if cals else "crypto"
    summary, grid, equity, gross = summarize([r["part"] for r in results], p.horizons_ms, calendar, p.fx)
    from . import costs
    traded = {str(x) for x in extra["symbol"]}
    summary["instruments"] = costs.described(specs, traded)
    summary["money_warnings"] = costs.warnings(list({s["symbol"]: s for s in specs}.values()), traded)
    if p.latency is None and not p.latency_ns and len(sigs):
        summary["money_warnings"].append("order-entry latency 0 (--latency-us): every order reaches the book at its "
                                         "signal tick's receive time, sooner than any real one: fills are optimistic")
    summary["eval_seconds"] = round(sum(r.get("eval_seconds", 0.0) for r in results), 4)
    fills = _fills_table(results)
    hist = sum((r["hist"] for r in results), new_counts())
    scores = np.concatenate([r["scores"] for r in results]) if results else np.zeros(0, np.float32)
    summary["loop_seconds"] = round(sum(r["loop_seconds"] for r in results), 4)
    summary["loop_ticks_per_s"] = round(summary["ticks"] / summary["loop_seconds"]) if summary["loop_seconds"] else None
    series = {"grid": grid, "equity": equity, "gross": gross, "fills": fills, "hist": hist, "scores": scores}
    return sigs, extra, summary, series


def _fills_table(results):
    """Every file's fills with a symbol column (for the position plot)."""
    from .execsim import FILL_DTYPE
    from engine.records import symbol_column
    dt = np.dtype(FILL_DTYPE.descr + [("symbol", object)])
    parts = []
    for r in results:
        f = r["part"].get("fills_table")
        if f is None or not len(f):
            continue
        t = np.zeros(len(f), dt)
        for name in FILL_DTYPE.names:
            t[name] = f[name]
        t["symbol"] = symbol_column(r["instruments"], f["instrument"])
        parts.append(t)
    return np.concatenate(parts) if parts else np.zeros(0, dt)


FEW_TREES = 20
MERGED = "merge: "  # a merged tick file's source: "merge: A + B" (replay/merged.py)


def _source_paths(uri):
    """The file paths a source URI (scheme:PATH?params) names, resolved."""
    if not isinstance(uri, str) or ":" not in uri:
        return set()
    if uri.startswith(MERGED):  # (replay/merged.py: the files it merged)
        return set().union(*(_source_paths(f"tickfile:{f}") for f in uri[len(MERGED):].split(" + ")))
    path = uri.split(":", 1)[1].split("?", 1)[0]
    return {os.path.realpath(path)} if path and not path.startswith("//") else set()


def model_warnings(manifest, files):
    """Loud warnings a quant must see: a backtest on the data the model was trained on, a model
    that kept very few trees."""
    out = []
    tr = manifest.get("training") or {}
    srcs = tr.get("sources") or ([tr["source"]] if tr.get("source") else [])
    trained = set().union(*(_source_paths(u) for u in srcs)) if srcs else set()
    from engine.tickfile import TickFile, TickFileError
    for f in files:
        mine = {os.path.realpath(f)}
        try:
            t = TickFile(f, verify=False)
            mine |= _source_paths(t.source)
            t.close()
        except TickFileError:
            pass
        both = mine & trained
        if both:
            out.append(f"{f}: the model was trained on this data ({', '.join(sorted(both))}): the backtest is "
                       f"in-sample and flatters the model")
    n = manifest.get("num_trees")
    if isinstance(n, int) and n < FEW_TREES:
        out.append(f"the model kept only {n} trees (early stopping found little to learn): expect weak signals")
    return out


def backtest(files, out_dir, p, workers=1, scheduler=None, progress=True):
    """Check inputs, run, merge, write out_dir/{signals.parquet, report.json, report.md, *.png}:
    built in a temporary directory beside it and renamed into place, so a failure (a full disk)
    leaves no partial report and names what could not be written."""
    from engine.outputs import atomic_dir, check_writable
    from engine.tickfile import TickFile, TickFileError

    from .plotter import Plotter
    check_writable(out_dir, "the backtest report", directory=True)
    for f in files:  # every input is a tick file before any work starts (its CRCs: where it is read)
        try:
            TickFile(f, verify=False).close()
        except TickFileError as e:
            raise ValueError(str(e)) from None
    plotter = Plotter()  # (forked first, while this process is small and single-threaded)
    try:
        return _backtest(files, out_dir, p, workers, scheduler, progress, plotter, atomic_dir)
    finally:
        plotter.close()


def _backtest(files, out_dir, p, workers, scheduler, progress, plotter, atomic_dir):
    from models.artifact import uses_sigmoid

    from . import report
    host = host_of(p)  # a broken strategy or a model trained for another one: a clear error now
    pred = bound_model(p, files[0])  # verified (and loaded once when the files run here)
    host.strategy.check_scale(uses_sigmoid(pred))
    shown = {"probability": uses_sigmoid(pred)}
    thresholds = {k: v for k, v in host.strategy.values.items() if k in report.THRESHOLD_PARAMS}
    t0 = time.monotonic()
    import threading  # the plotting library loads here too while the loop runs: 0.3 s
    threading.Thread(target=report.preload, daemon=True, name="preload-matplotlib").start()
    with atomic_dir(out_dir, "the backtest report") as tmp:  # renamed into place once all is written
        def looped(hists, scores):  # the loop's plots are drawn while the evaluation runs
            from engine.latency import new_counts
            plotter.draw(report.LOOP_PLOTS, tmp, {"hist": sum(hists, new_counts()), "scores": np.concatenate(scores),
                                                  "thresholds": thresholds}, shown)
        results = run_tasks(files, p, workers, scheduler, progress, looped)
        head = {"model": p.model, "model_id": pred.model_id, "backend": results[0]["backend"] if results else None,
                "strategy": host.strategy.identity(), "workers": workers}
        meta = {"engine.model_id": pred.model_id, "engine.inputs": ",".join(files),
                "engine.strategy": host.strategy.describe()}
        summary = write_report(tmp, results, p, head, model_warnings(pred.manifest, files), shown, thresholds, t0,
                               meta, plotter, drawn=report.LOOP_PLOTS)
    return summary


def execution_info(p, results):
    """The report's `execution`: how orders were simulated."""
    return {"orders": "maker" if results and results[0]["part"].get("maker_orders") else "taker",
            "entry_ns": p.latency if isinstance(p.latency, str) else p.latency_ns, "response_ns": p.response_ns,
            "queue_power": p.queue_power, "exact_fifo": p.l3}


def write_report(tmp, results, p, head, warned, shown, thresholds, t0, meta, plotter=None, drawn=()):
    """signals.parquet, report.json, report.md and the plots of `results` (backtest_one's dicts, in
    file order) into the directory tmp: a backtest's, or a paper run's (app/paper.py). head: the
    summary's model, model_id, backend, strategy, workers; warned: warnings about the model; meta:
    the table's metadata; plotter: draws beside this process (the plots in `drawn` asked of it
    already), None: drawn here. Returns the summary."""
    from engine.signal_log import write_signals_parquet

    from . import report
    sigs, extra, summary, series = merge(results, p)
    notes = [n for r in results for n in r["notes"]]
    summary.update(head, execution=execution_info(p, results), horizons_ms=list(p.horizons_ms),
                   wall_seconds=round(time.monotonic() - t0, 3), inputs=[r["path"] for r in results], notes=notes,
                   risk={"blocked": {k: sum(r["risk"].get(k, 0) for r in results) for k in RISK_RULES}},
                   # what the printed summary warns of: incomplete inputs, their unchecked records
                   warnings=summary["money_warnings"] + list(warned) + notes, **shown)
    series["thresholds"] = thresholds
    if plotter is not None:
        market = ("pnl", "drawdown")  # drawn beside this process while it writes the rest
        plotter.draw(market, tmp, series, summary)
        drawn = tuple(drawn) + market
    # the table is written on a thread (Arrow releases the GIL) while the report is drawn
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="signals-parquet") as ex:
        table = ex.submit(write_signals_parquet, os.path.join(tmp, "signals.parquet"), sigs, extra, metadata=meta,
                          tables=[list(_names(r)) for r in results])
        report.write(tmp, summary, series, plotter, drawn=drawn)
        table.result()
    return summary
