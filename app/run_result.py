"""What `engine run` hands back at its end (RunResult, printed by app/run_summary.py): its counters,
latency and loop, and in words every input or output that is incomplete; why it ended early, if it
did; and --signals-out X.parquet's tables, written from the signal files once the run stopped."""
from dataclasses import dataclass, field

from engine import control as C
from engine import latency

from .run_options import RunConfig
from .strategy_thread import LEASE_NS


@dataclass
class RunResult:
    counters: dict
    drops: int
    core: int | None
    policy: str
    wait: str
    choice: str
    conflate: bool
    backpressure: bool
    backend: str
    latency: dict
    signals_path: str
    model_dir: str
    strategy: dict
    run_seconds: float
    notes: list = field(default_factory=list)
    swaps: list = field(default_factory=list)
    warnings: list = field(default_factory=list)  # incomplete inputs and outputs, in words (report.warnings)
    error: str | None = None        # an output that could not be written: the run stopped, exit non-zero
    preempted: dict | None = None   # {count, wait_ms}: how often and how long other work held the core
    isolation: str | None = None    # --isolate: what was moved off the core
    feed_counters: dict = field(default_factory=dict)  # the feed's own (engine/feed_stats.py), over its restarts
    conflate_warn: float = RunConfig.conflate_warn  # (the run's, for the summary's warnings)
    crossed_after: float = RunConfig.crossed_after
    abnormal: str | None = None     # why the run ended early (the strategy raised or hung, ...): exit non-zero
    unread: int = 0                 # ticks in the ring the loop never read (its write cursor - our read cursor)
    sources: dict | None = None     # several sources (or --record): each one's feed and counters, by label
    record: dict | None = None      # --record: {out, ticks, gaps, lost, error}
    paper: dict | None = None       # --paper: the paper trader's figures (app/paper.py finish), {out, ...}
    shadows: list | None = None     # --shadow: each shadow's figures (app/shadow.py finish)
    drift: dict | None = None       # --drift: the last drift figures (app/drift_monitor.py)


def run_result(r):
    """Run `r`'s (app/live.py _Run) RunResult; the first cleanup error raised instead."""
    thread, sides = r.thread, r.sides
    if r.cleanup_errors:
        raise r.cleanup_errors[0]
    warnings = list(r.inp.warnings) + list(getattr(r.plane, "warnings", []))
    error = output_warnings(r, warnings)
    sig_path = r.sig_path
    if r.parquet_out:
        sig_path, error = write_tables(r, sig_path, error, warnings)
    sources = r.plane.source_status() if r.plane is not None else None
    for label, st in (sources or {}).items():  # each feed as it was before the run stopped it
        st["feed"] = r.source_feeds.get(label, st["feed"])
        st["ready"] = st["feed"] in ("ok", "finished")
    record = sides.recorder.summary() if sides.recorder is not None else None
    lost = side_warnings(sides, record, warnings)
    error = error or lost
    c = r.choice
    return RunResult(counters=r.ctl_blk.counters(), drops=r.sring.drops, core=thread.core,
                     policy=thread.policy, wait=c.wait.name, choice=c.reason, conflate=r.inp.conflate,
                     backpressure=r.inp.file_feed, backend=r.pred.backend,
                     latency=latency.summary(r.ctl_blk.hist), signals_path=sig_path,
                     model_dir=r.model_dir, strategy=r.strat.identity(),
                     run_seconds=r.t_stop - r.t_start, notes=r.notes + thread.notes, swaps=r.swaps,
                     warnings=warnings, error=error, preempted=thread.preempted(),
                     isolation=r.isolation.text if r.isolation is not None else None,
                     feed_counters=r.plane.feeds.feed_counters() if r.plane is not None else {},
                     conflate_warn=r.cfg.conflate_warn, crossed_after=r.cfg.crossed_after,
                     abnormal=r.abnormal[1] if r.abnormal else None, unread=r.unread,
                     sources=sources, record=record, paper=sides.paper_result,
                     shadows=sides.shadow_results, drift=sides.drift_result)


def output_warnings(r, warnings):
    """The signal file and the latency log, incomplete (and the drain stuck at the end), in words;
    returns the run's error (an output not written) or None."""
    slog, sig_path, plane, error = r.slog, r.sig_path, r.plane, None
    if slog.error is not None:
        error = str(slog.error)
        warnings.append(f"signal file {sig_path} is incomplete: the writer stopped at record {slog.count:,} "
                        f"({slog.error.reason}); {slog.unwritten:,} records not written (marked in its header: "
                        "`engine signals show` says so)")
    paper = r.sides.paper
    if plane is not None and plane.drain.stuck:
        late = paper.after_end if paper is not None else 0
        warnings.append(f"the drain thread was stuck writing {sig_path} at the end: the last signals are not in it"
                        + (" nor in the paper trading report" if paper is not None else "")
                        + (f" ({late:,} reached the paper trader after its end)" if late else ""))
    hl = getattr(plane, "hlog", None)
    if hl is not None and hl.error is not None:
        warnings.append(f"latency log {hl.path} is incomplete after {hl.intervals} intervals: {hl.error.reason}")
        error = error or str(hl.error)
    return error


def side_warnings(sides, record, warnings):
    """The tap readers' losses and failures in words (app/tap_sides.py); returns the recording's
    error or None."""
    error = None
    if record is not None:
        if record["error"]:
            error = record["error"]
            warnings.append(f"recording {record['out']} is incomplete: {record['error']}")
        elif record["gaps"]:
            warnings.append(f"recording {record['out']}: the recorder fell a tap ring behind the loop and lost "
                            f"{record['lost']:,} ticks in {record['gaps']:,} gaps (marked in the file): its "
                            "backtest is not this run's")
    dr = sides.drift_result or {}
    if dr.get("record_error"):
        warnings.append(f"drift record not written: {dr['record_error']}")
    if dr.get("lost"):
        warnings.append(f"drift: the monitor fell a tap ring behind the loop {dr['gaps']:,} times and never binned "
                        f"{dr['lost']:,} ticks: its figures are of part of the run")
    pp = sides.paper_result
    if pp is not None and pp.get("unmatched_signals"):
        warnings.append(f"paper trading: {pp['unmatched_signals']:,} signals name ticks it never read (it read "
                        f"{pp['ticks_read']:,}): they are not in its figures")
    if pp is not None and (pp["gaps"] or pp["error"] or pp["online"]["late_orders"]):
        warnings.append("paper trading: " + (f"stopped: {pp['error']}; " if pp["error"] else "")
                        + (f"it fell a tap ring behind the loop {pp['gaps']:,} times (ticks lost): its figures are "
                           "not the run's; " if pp["gaps"] else "")
                        + (f"{pp['online']['late_orders']:,} orders came after their tick was simulated "
                           "(conflation held their decisions): the live figures differed from the end's"
                           if pp["online"]["late_orders"] else "").rstrip("; "))
    for sh in sides.shadow_results or []:
        if sh["error"] or sh["gaps"]:
            warnings.append(f"shadow {sh['name']}: " + (f"stopped: {sh['error']}" if sh["error"] else
                            f"it fell a tap ring behind the loop {sh['gaps']:,} times (ticks lost): its signals "
                            "are not the recording's backtest"))
    return error


def abnormal_end(r):
    """Why run `r` ended early, if it did: (a short reason for the signal file's header, the words
    for the summary); None for a run that ended as asked (duration, signal, end of input)."""
    thread, plane = r.thread, r.plane
    if thread is None or not r.running:
        return None
    if thread.error is not None:
        e, path = thread.error, r.strat.path
        said = f"{e}" if str(e).startswith(path) else f"strategy {path} raised {type(e).__name__}: {e}"  # (--check)
        return f"raised {type(e).__name__}", f"the strategy loop stopped: {said}"
    if plane is not None and plane.abnormal:
        return plane.abnormal
    if thread.exit_state == C.LOOP_LEASE_EXPIRED:
        return ("lease expired", f"the strategy loop stopped itself: the control thread did not renew its lease "
                                 f"for {LEASE_NS / 1e9:.0f} s while the loop ran (starved or hung?)")
    return None


def write_tables(r, sig_path, error, warnings):
    """--signals-out X.parquet: the table from the signal file (and each shadow's beside it, from
    its own: X.shadow-NAME.parquet), whole or not at all; returns (the signals' path for the
    summary, the run's error)."""
    import json

    from engine.instruments import dump
    parquet_out = r.parquet_out
    names, specs = (r.plane.table.names, r.plane.table.specs) if r.plane is not None else (None, None)
    meta = {"engine.instruments": json.dumps(dump(names, specs))} if names and specs is not None else {}
    for sh in r.sides.shadow_results or []:  # (a shadow's file: in the run's format, as its signals are)
        if not sh["error"] and sh["signals_out"].endswith(".sig"):
            out = sh["signals_out"][:-len(".sig")] + ".parquet"
            if write_table(sh["signals_out"], out, names, meta, warnings) is None:
                sh["signals_out"] = out
    if r.slog.error is not None:
        warnings.append(f"signal table {parquet_out} not written: the signal file is incomplete")
        return sig_path, error
    if r.abnormal:  # the table's end mark, as the signal file's header
        meta = {**meta, "engine.abnormal_end": r.abnormal[1]}
    e = write_table(sig_path, parquet_out, names, meta, warnings)
    return (sig_path, error or e) if e else (parquet_out, error)


def write_table(sig_path, parquet_out, names, meta, warnings):
    """One signal table; None when written, else the error (said in warnings)."""
    from engine.outputs import OutputError
    from engine.signal_log import read_signals, write_signals_parquet
    try:
        write_signals_parquet(parquet_out, read_signals(sig_path), tables=[names], metadata=meta)
        return None
    except OutputError as e:  # nothing left at its name: written whole or not at all
        warnings.append(f"signal table {parquet_out} not written ({e.reason}); the signals are in {sig_path}")
        return str(e)
