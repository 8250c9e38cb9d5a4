"""The backtest report: report.json (every figure), report.md and its PNGs.

The quant part (PnL net and gross of fees, trades per side and instrument, positions, drawdown,
scores with the strategy's thresholds) comes first; the engine's per-tick compute time is kept
apart at the end. Times on every axis are UTC; money is in the instruments' quote currency
(their multiplier applied: replay/costs.py), per currency when there are several (never added:
a converted total only at rates the user gave, said as such: replay/currency.py)."""
import datetime as dt
import json
import os

import numpy as np

from .currency import money_text as _money

THRESHOLD_PARAMS = ("enter_long", "exit_long", "enter_short", "exit_short", "enter", "exit", "threshold")


def _atomic(path, write):
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _utc(ns):
    return [dt.datetime.fromtimestamp(x / 1e9, dt.timezone.utc) for x in ns]


def preload():
    """Import what the plots need (a backtest does it on a thread while its loop runs)."""
    import matplotlib.dates  # noqa: F401
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401


def _figure(w, h, bottom=0.22, left=0.1):
    """A figure on the Agg canvas (no pyplot, no window), with fixed margins: tight_layout cost
    0.7 s of a backtest's 3 s."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=left, right=0.97, top=0.9, bottom=bottom)
    return fig, fig.add_subplot()


def _save(fig, out_dir, name):
    _atomic(os.path.join(out_dir, name), lambda p: fig.savefig(p, format="png", dpi=100))


def _time_axis(ax, fig):
    import matplotlib.dates as mdates
    loc = mdates.AutoDateLocator(maxticks=8)
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc, tz=dt.timezone.utc))
    ax.set_xlabel("exchange time (UTC)")
    ax.grid(alpha=0.3)


def _by_currency(s):
    """[(currency, grid, net equity, gross equity)] of the series (an older caller's single arrays: one)."""
    grid, net, gross = s["grid"], s["equity"], s["gross"]
    if isinstance(net, dict):
        return [(c, grid[c], net[c], gross[c]) for c in net] or [("quote currency", np.zeros(0), np.zeros(0),
                                                                  np.zeros(0))]
    return [("quote currency", grid, net, gross)]


def _panels(h, curves, bottom):
    """A figure with one panel per currency (money is never drawn on one axis across currencies)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    if len(curves) == 1:
        fig, ax = _figure(9, h, bottom=bottom)
        return fig, [ax]
    fig = Figure(figsize=(9, h * len(curves) * 0.8))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.1, right=0.97, top=0.93, bottom=0.08, hspace=0.5)
    return fig, [fig.add_subplot(len(curves), 1, k + 1) for k in range(len(curves))]


def _pnl(out_dir, s, summary):
    curves = _by_currency(s)
    fig, axes = _panels(3.5, curves, 0.15)
    for ax, (cur, grid, net, gross) in zip(axes, curves):
        if len(grid):
            t = _utc(grid)
            ax.plot(t, gross, lw=1, label="gross of fees")
            ax.plot(t, net, lw=1, label="net of fees")
            ax.legend(loc="best")
        ax.set_ylabel(f"cumulative PnL ({cur})")
        _time_axis(ax, fig)
    axes[0].set_title("PnL of the simulated fills, marked to mid each second"
                      + (" (per currency)" if len(curves) > 1 else ""))
    _save(fig, out_dir, "pnl.png")


def _drawdown(out_dir, s, summary):
    curves = _by_currency(s)
    fig, axes = _panels(3.0, curves, 0.17)
    for ax, (cur, grid, net, _) in zip(axes, curves):
        if len(grid):
            dd = np.maximum.accumulate(net) - net
            ax.fill_between(_utc(grid), -dd, 0, step="post", alpha=0.5)
        ax.set_ylabel(f"drawdown ({cur})")
        _time_axis(ax, fig)
    axes[0].set_title("drawdown of the net PnL from its running peak" + (" (per currency)" if len(curves) > 1 else ""))
    _save(fig, out_dir, "drawdown.png")


def _position(out_dir, s, summary):
    fig, ax = _figure(9, 3.0, bottom=0.17)
    f = s["fills"]
    for name in np.unique(f["symbol"]) if len(f) else []:
        g = f[f["symbol"] == name]
        g = g[np.argsort(g["ts_event"], kind="stable")]
        ax.step(_utc(g["ts_event"]), np.cumsum(g["qty"]), where="post", lw=1, label=str(name))
    if len(f):
        ax.legend(loc="best", fontsize="small")
    ax.set_ylabel("position (lots)")
    ax.set_title("filled position per instrument")
    _time_axis(ax, fig)
    _save(fig, out_dir, "position.png")


def _scores(out_dir, s, summary):
    fig, ax = _figure(7, 3.5, bottom=0.15, left=0.12)
    if len(s["scores"]):
        ax.hist(s["scores"], bins=100)
    for k, v in s.get("thresholds", {}).items():
        ax.axvline(v, color="red" if "enter" in k or k == "threshold" else "orange", lw=1, ls="--")
        ax.text(v, ax.get_ylim()[1] if len(s["scores"]) else 1, k, rotation=90, va="top", ha="right", fontsize=7)
    ax.set_xlabel("score (model probability of an up move)" if summary.get("probability") else "score (model margin)")
    ax.set_ylabel("scored ticks")
    ax.set_title("model score over every scored tick, with the strategy's thresholds")
    ax.set_yscale("log")
    _save(fig, out_dir, "scores.png")


def _compute_time(out_dir, s, summary):
    from engine import latency
    fig, ax = _figure(7, 3.5, left=0.12)
    h = latency.to_hdrh(s["hist"][latency.ST_TOTAL])
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
    ax.set_title("engine: per-tick compute time in the backtest (features + model + decision)")
    ax.grid(alpha=0.3, which="both")
    _save(fig, out_dir, "compute_time.png")


# every PNG by name; LOOP_PLOTS need only the loop's results (drawn while the evaluation runs)
PLOTS = {"pnl": _pnl, "drawdown": _drawdown, "position": _position, "scores": _scores, "compute_time": _compute_time}
LOOP_PLOTS = ("scores", "compute_time")


def _fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _currencies(summary):
    """{currency: its money figures}: the summary's by_currency (an older summary: its plain figures)."""
    by = summary.get("by_currency")
    if by:
        return by
    return {summary.get("currency") or "quote currency": summary}


def money_lines(summary):
    """The headline a quant reads first, printed by `engine backtest` and at the top of report.md:
    net and gross PnL side by side with the fees between them and where the fees come from, a line
    per currency (never added; a converted total only at the rates given, said so); the split
    into closed trades and positions still open at the end (with their mark); for maker orders,
    the lots that never filled and why."""
    by = _currencies(summary)
    several = len(by) > 1
    out = []
    for cur, f in by.items():
        out.append(f"pnl net {_money(f.get('pnl'))} {cur}  =  gross {_money(f.get('pnl_gross'))}  -  "
                   f"fees {_money(f.get('fees'))}" + (f"   (max drawdown {_money(f.get('max_drawdown'))}, Sharpe "
                                                      f"{_fmt(f.get('sharpe'))})" if several else ""))
    cv = summary.get("converted")
    if cv and "pnl" in cv:
        out.append(f"total pnl net {_money(cv['pnl'])} {cv['currency']}  =  gross {_money(cv['pnl_gross'])}  -  fees "
                   f"{_money(cv['fees'])}: {cv['note']}")
    elif cv:
        out.append(f"total: {cv['note']}")
    elif several:
        out.append(f"money in {len(by)} currencies ({', '.join(by)}), never added: a total in one needs the rates "
                   f"(--fx {list(by)[1]}/{list(by)[0]}=RATE)")
    srcs = sorted({str(i.get("fee_source")) for i in summary.get("instruments", {}).values()
                   if i.get("fee_source")})
    out.append("fees: " + ("; ".join(srcs) if srcs else "none (a zero-cost run: see the warnings)"))
    opened = summary.get("open_positions") or []
    for cur, f in by.items():
        mine = [o for o in opened if o.get("currency", cur) == cur]
        if mine:
            held = ", ".join(f"{o['lots']:+,} lots {o['symbol']} marked at {_fmt(o['mark'])}" for o in mine)
            out.append(f"of which closed trades {_money(f.get('pnl_closed'))}, still open at the end "
                       f"{_money(f.get('pnl_open'))}{' ' + cur if several else ''} ({held})")
    if summary.get("execution", {}).get("orders") == "maker" or summary.get("maker_cancelled_lots") \
            or summary.get("maker_unplaced_lots") or summary.get("working_lots"):
        out.append(f"maker orders: {summary.get('maker_fills', 0):,} fills; lots never filled: "
                   f"{summary.get('maker_cancelled_lots', 0):,} cancelled by a later signal, "
                   f"{summary.get('maker_unplaced_lots', 0):,} never placed (no touch to join), "
                   f"{summary.get('working_lots', 0):,} still working at the end")
    if summary.get("unfilled_lots"):
        out.append(f"taker orders: {summary['unfilled_lots']:,} lots the book's depth could not fill (cancelled)")
    d = summary.get("decisions") or {}
    if d.get("multi_leg"):  # (a UNIVERSE strategy's decide moved several instruments at once)
        if "multi_leg_net" in d:
            out.append(f"decisions: {d['decisions']:,}, {d['multi_leg']:,} of several legs (their legs together: net "
                       f"{_money(d['multi_leg_net'])}); per decision, held until the next one: win rate "
                       f"{_fmt(d['win_rate'])}, mean {_money(d['mean'])}, median {_money(d['median'])}")
        else:
            out.append(f"decisions: {d['decisions']:,}, {d['multi_leg']:,} of several legs"
                       + (f", {d['of_several_currencies']:,} with legs in several currencies (their PnL is no sum)"
                          if d.get("of_several_currencies") else ""))
            for cur, f in by.items():
                e = f.get("decisions")
                if e and e["decisions"]:
                    out.append(f"  in {cur}: {e['decisions']:,} decisions, {e['multi_leg']:,} of several legs (net "
                               f"{_money(e['multi_leg_net'])}); per decision: win rate {_fmt(e['win_rate'])}, mean "
                               f"{_money(e['mean'])}, median {_money(e['median'])}")
    return out


def _trades_table(trades, by=None):
    if not trades:
        return "(no round trips)"
    rows = ["| trades of | count | gross | fees | net | currency | win rate | mean bp | median bp |",
            "|---|---|---|---|---|---|---|---|---|"]
    several = by is not None and len(by) > 1
    one = next(iter(by)) if by and not several else ""
    items = list(trades.items())
    if several:  # (all, long, short of each currency: money is added within a currency only)
        items = items[:3] + [(f"{k} in {c}", t) for c, f in by.items() for k, t in (f.get("trades") or {}).items()] \
            + items[3:]
    for k, t in items:
        cur = t.get("currency") or (k.rsplit(" in ", 1)[1] if " in " in k else one)
        rows.append(f"| {k} | {_fmt(t['trades'])} | {_fmt(t['gross'])} | {_fmt(t['fees'])} | {_fmt(t['net'])} | "
                    f"{cur} | {_fmt(t['win_rate'])} | {_fmt(t['mean_bp'])} | {_fmt(t['median_bp'])} |")
    return "\n".join(rows)


def _currency_table(summary):
    """report.md's money per currency (several currencies only: one is the figures table's)."""
    by = _currencies(summary)
    if len(by) < 2:
        return ""
    keys = ("pnl", "pnl_gross", "fees", "pnl_closed", "pnl_open", "max_drawdown", "sharpe", "turnover_notional",
            "break_even_fee_bps", "fills")
    rows = ["| currency | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for c, f in by.items():
        rows.append(f"| {c} | " + " | ".join(_fmt(f.get(k)) for k in keys) + " |")
    cv = summary.get("converted")
    if cv and "pnl" in cv:
        rows.append(f"| {cv['currency']} (converted) | " + " | ".join(_fmt(cv.get(k)) for k in keys) + " |")
    note = f"\n\n{cv['note']}." if cv else "\n\nNever added across currencies (a total needs --fx rates)."
    return "\n## Money per currency\n\n" + "\n".join(rows) + note + "\n"


def write(out_dir, summary, series, plotter=None, drawn=()):
    """series: grid, equity (net), gross, fills (with a symbol column), hist, scores, thresholds.
    `drawn`: the plots already asked of `plotter` (replay/plotter.py), drawing beside this
    process; the others are drawn here, and the plotter's are waited for."""
    from engine import latency
    summary = dict(summary)
    summary["compute_ns"] = latency.percentiles(series["hist"][latency.ST_TOTAL])
    _atomic(os.path.join(out_dir, "report.json"),
            lambda p: open(p, "w").write(json.dumps(summary, indent=2, default=str) + "\n"))
    for name in PLOTS:
        if name not in drawn:
            PLOTS[name](out_dir, series, summary)
    md = _markdown(summary)
    _atomic(os.path.join(out_dir, "report.md"), lambda p: open(p, "w").write(md))
    if plotter is not None:
        plotter.finish()


def _figure_rows(summary):
    """report.md's figures table's rows (money figures there only when there is one currency)."""
    keys = ["files", "ticks", "scored", "signals"] + [k for k in summary if k.startswith(("hit_rate", "flat_share"))] + \
        ["ic", "ic_pairs", "pnl", "pnl_gross", "fees", "pnl_closed", "pnl_open", "break_even_fee_bps", "fills",
         "maker_fills", "unfilled_lots", "maker_cancelled_lots", "maker_unplaced_lots", "working_lots",
         "turnover_units", "turnover_notional", "max_drawdown", "sharpe", "sharpe_calendar"]
    if len(_currencies(summary)) > 1:  # (money is per currency: its own table)
        from .evaluate import MONEY
        keys = [k for k in keys if k not in MONEY and k != "sharpe_calendar"]
    from engine import signal_counts
    sc, cut = summary.get("signal_counts"), signal_counts.cuts((summary.get("risk") or {}).get("blocked", {}))
    shown = {"signals": signal_counts.detail(sc) if sc else summary.get("signals"), "risk cuts": cut}
    if cut:
        keys.insert(keys.index("signals") + 1, "risk cuts")
    return "\n".join(f"| {k} | {shown[k] if k in shown else _fmt(summary.get(k))} |" for k in keys)


def _markdown(summary):
    """report.md's text."""
    cur = ", ".join(_currencies(summary))
    rows = _figure_rows(summary)
    ex = summary.get("execution", {})
    warn = summary.get("warnings", [])
    warn_md = ("\n## Warnings\n\n" + "\n".join(f"- **{w}**" for w in warn) + "\n") if warn else ""
    notes = "\n".join(f"- {n}" for n in summary.get("notes", []))
    notes = ("\n## Notes\n\n" + notes + "\n") if notes else ""
    sharpe_note = f" (no Sharpe: {summary['sharpe_reason']})" if summary.get("sharpe") is None and \
        summary.get("sharpe_reason") else ""
    headline = "\n".join(f"- {x}" for x in money_lines(summary))
    loop = "live loop's per-tick time (tick to signal)" if summary.get("paper") else \
        "backtest loop's per-tick compute time (features + model + decision)"
    md = f"""# {summary.get('title', 'Backtest')}

Model `{summary.get('model')}` ({summary.get('backend')}); strategy {summary.get('strategy', {}).get('name', '')};
{summary.get('files')} file(s): {', '.join(summary.get('inputs', []))}.

{headline}
{warn_md}{_currency_table(summary)}
## Figures

| figure | value |
|---|---|
{rows}

Money in {cur}{" (each figure in money per currency: see above)" if "," in cur else ""}.
Execution: {ex.get('orders', 'taker')} orders, entry latency {_fmt(ex.get('entry_ns'))} ns,
response {_fmt(ex.get('response_ns'))} ns, queue model power {_fmt(ex.get('queue_power'))}; fees per
instrument in report.json (`instruments`). Hit rate: share of entries whose forward mid move had
their sign, at each horizon (moves of zero in flat_share). IC: Spearman correlation of the margin
with the forward return on every scored tick. PnL: the simulated fills' cash plus the position
marked to mid (gross: before fees). Break-even fee: the fee, in bp of every fill's notional, that
would take all the gross PnL. Sharpe: 1-minute equity changes annualised by the instrument's
calendar ({summary.get('sharpe_calendar') or "each currency's instruments': see above"}){sharpe_note}.

![cumulative PnL](pnl.png)

![drawdown](drawdown.png)

![position](position.png)

## Trades (flat to flat)

{_trades_table(summary.get('trades'), summary.get('by_currency'))}

Per trade in bp: net PnL over the notional it was opened with.

![score histogram](scores.png)
{notes}
## Engine

The {loop}, not a market figure:
{_fmt(summary.get('loop_ticks_per_s'))} ticks/s through the loop, {_fmt(summary.get('wall_seconds'))} s for the
whole command.

![compute time percentiles](compute_time.png)
"""
    return md
