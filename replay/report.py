"""The backtest report: report.json (every figure), three PNGs and report.md embedding them."""
import datetime as dt
import json
import os

import numpy as np

PCTS = (0, 50, 90, 99, 99.9, 99.99, 99.999)


def _atomic(path, write):
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _plots(out_dir, grid, equity, hist, scores):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from engine import latency
    fig, ax = plt.subplots(figsize=(9, 3.5))
    if len(grid):
        t = [dt.datetime.fromtimestamp(x / 1e9, dt.timezone.utc) for x in grid]
        ax.plot(t, equity, lw=1)
    ax.set_title("cumulative PnL of the taker strategy (price units, 1 unit positions)")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    _atomic(os.path.join(out_dir, "pnl.png"), lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    h = latency.to_hdrh(hist[latency.ST_TOTAL])
    if h.get_total_count():
        ps = np.array([50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999])
        vals = [h.get_value_at_percentile(p) for p in ps]
        ax.plot(1 / (1 - ps / 100), vals, marker="o")
        ax.set_xscale("log")
        ax.set_xticks(1 / (1 - ps / 100))
        ax.set_xticklabels([f"{p:g}" for p in ps], rotation=45)
    ax.set_yscale("log")
    ax.set_xlabel("percentile")
    ax.set_ylabel("ns")
    ax.set_title("per-tick compute time in the backtest (features + model + decision)")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    _atomic(os.path.join(out_dir, "latency.png"), lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    if len(scores):
        ax.hist(scores, bins=100)
    ax.set_title("model score over every scored tick")
    ax.set_yscale("log")
    fig.tight_layout()
    _atomic(os.path.join(out_dir, "scores.png"), lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)


def _fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def write(out_dir, summary, grid, equity, hist, scores):
    from engine import latency
    summary = dict(summary)
    summary["compute_ns"] = latency.percentiles(hist[latency.ST_TOTAL])
    _atomic(os.path.join(out_dir, "report.json"),
            lambda p: open(p, "w").write(json.dumps(summary, indent=2, default=str) + "\n"))
    _plots(out_dir, grid, equity, hist, scores)
    keys = ["files", "ticks", "scored", "signals"] + [k for k in summary if k.startswith(("hit_rate", "flat_share"))] + \
        ["ic", "ic_pairs", "pnl", "fees", "fills", "turnover_units", "turnover_notional", "sharpe", "max_drawdown",
         "latency_ns", "fee_bps", "loop_ticks_per_s", "wall_seconds", "backend", "model_id"]
    rows = "\n".join(f"| {k} | {_fmt(summary.get(k))} |" for k in keys)
    notes = "\n".join(f"- {n}" for n in summary.get("notes", []))
    notes = ("\n## Notes\n\n" + notes + "\n") if notes else ""
    md = f"""# Backtest

Model `{summary.get('model')}`; {summary.get('files')} file(s): {', '.join(summary.get('inputs', []))}.

| figure | value |
|---|---|
{rows}

Hit rate: share of entries (long/short signals) whose forward mid move had their sign, at each
horizon (moves of zero are counted in flat_share instead). IC: Spearman correlation of the margin
with the forward return on every scored tick. PnL: a taker holding -1/0/+1 unit as the signals
say, filling at the touch `latency_ns` after each signal, paying `fee_bps`; Sharpe from 1-minute
equity changes, annualised over 365 x 24 h.

![cumulative PnL](pnl.png)

![compute time percentiles](latency.png)

![score histogram](scores.png)
{notes}"""
    _atomic(os.path.join(out_dir, "report.md"), lambda p: open(p, "w").write(md))
