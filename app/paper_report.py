"""--paper's report at the end of a run: the one `engine backtest` writes for the run's recording
(replay/jobs.write_report: report.md, report.json, plots, signals.parquet) in --paper-out DIR,
whole or not at all, and the `engine backtest` command whose report it is (the summary prints it)."""
import time


def write_paper_report(r):
    """The last ticks and signals of run `r` (app/live.py _Run) simulated, and its report written
    in --paper-out DIR (default beside the signal file: RUN.paper/ for RUN.sig); returns the
    summary's figures."""
    from engine.outputs import atomic_dir
    from models.artifact import uses_sigmoid
    from replay import jobs, report
    t0 = time.monotonic()
    paper, pred, strat = r.sides.paper, r.pred, r.strat
    names = r.rings.table(r.inp.multi)[0] if r.rings is not None else []
    res = paper.finish(names, r.ctl_blk.hist.copy(), r.ctl_blk.counters()["risk_blocked"])
    out = r.paper_out
    figures = res.pop("paper")
    head = {"title": "Paper trading", "model": r.model_dir, "model_id": pred.model_id,
            "backend": pred.backend, "strategy": strat.identity(), "workers": 1, "paper": figures}
    thresholds = {k: v for k, v in strat.values.items() if k in report.THRESHOLD_PARAMS}
    meta = {"engine.model_id": pred.model_id, "engine.inputs": "paper: " + " + ".join(
        u or f"ring:{n}" for u, n in zip(r.inp.feed_uris, r.inp.ring_names)), "engine.strategy": strat.describe()}
    with atomic_dir(out, "the paper trading report") as tmp:
        s = jobs.write_report(tmp, [res], paper.p, head, [],
                              {"probability": uses_sigmoid(pred)}, thresholds, t0, meta)
    return {"out": out, "pnl": s["pnl"], "pnl_gross": s["pnl_gross"], "fees": s["fees"],
            "fills": s["fills"], "signals": s["signals"], "ticks": s["ticks"],
            "max_drawdown": s.get("max_drawdown"), "backtest": backtest_command(r), **figures}


def backtest_command(r):
    """The `engine backtest` whose report the paper report is (the same ticks, signals and execution
    flags: the recording, or the tick files the run read; the run's signal file when the loop
    conflated, or the kill switch or a pause moved, which that backtest then replays), or None
    when nothing the run read can be backtested (a live feed without --record)."""
    import shlex
    from dataclasses import fields

    from .run_options import RISK_FIELDS, RunConfig
    cfg, q, uris = r.cfg, shlex.quote, r.inp.feed_uris
    if cfg.record:
        inputs = [cfg.record]
    elif all(u and u.startswith("tickfile:") for u in uris):
        inputs = ([] if len(uris) < 2 else ["--merge"]) + [u[len("tickfile:"):] for u in uris]
    else:
        return None
    cmd = ["engine", "backtest", *map(q, inputs), "--out", q(r.sig_path.rsplit(".", 1)[0] + ".backtest")]
    if cfg.strategy:
        cmd += ["--strategy", q(cfg.strategy)]
    cmd += [f"--param {q(f'{k}={v}')}" for k, v in (cfg.params or {}).items()]
    cmd += [f"--universe {q(f'{k}={v}')}" for k, v in (cfg.universe or {}).items()]
    cmd += ["--model", q(str(r.model_dir))]
    defaults = {f.name: f for f in fields(RunConfig)}
    for name in RISK_FIELDS:  # (the gate's limits, as the run had them)
        v, f = getattr(cfg, name), defaults[name]
        if v in (None, f.default, ()) or v == []:
            continue
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            cmd += [f.metadata["opt"].flag, q(f"{x:g}" if isinstance(x, float) else str(x))]
    c = r.ctl_blk.counters()
    if c["marks"] or any(c["kills"].values()) or paused_ever(r.sig_path):
        cmd += ["--conflate-as-recorded", q(r.sig_path)]
    return " ".join(cmd + ([cfg.paper_exec] if cfg.paper_exec else []))


def paused_ever(sig_path):
    """Did `engine ctl pause` move the loop in this run (a pause mark in the signal file)?"""
    from engine.signal_log import SignalLogError, read_pauses
    try:
        return bool(len(read_pauses(sig_path)))
    except (OSError, SignalLogError):
        return False
