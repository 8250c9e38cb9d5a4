"""What is shown of `engine run --paper` (app/paper.py) while it runs and at its end: /status and
`engine stats` (`paper_status`, `stats_lines`) and the run summary's line (`summary_line`); its
Prometheus families are app/prom.py's. Money is per currency (a figure per currency: never a sum
across currencies); a converted total only at the rates the user gave (--fx), said so. Light on
imports: `engine stats` prints these lines."""


def traded(p):
    """The instruments the paper trader has filled or holds (one never traded has nothing to show)."""
    return [i for i in range(len(p["position"])) if p["fills_by"][i] or p["position"][i]]


def paper_status(paper, names):
    """--paper's figures now, for /status and `engine stats` (None without --paper): per currency
    (`by_currency`; pnl_net, pnl_gross, fees and drawdown plain where the run has one currency,
    None where it has several: never a sum), the converted total with --fx, and each instrument's
    that has traded (by name, in its currency)."""
    if paper is None:
        return None
    p = paper.pnl()
    name = (lambda i: names[i] if i < len(names) and names[i] else str(i))
    r = (lambda v: round(float(v), 6))
    by = {c: {"pnl_net": r(f["net"]), "pnl_gross": r(f["gross"]), "fees": r(f["fees"]), "drawdown": r(f["drawdown"]),
              "fills": f["fills"]} for c, f in p["by_currency"].items()}
    one = next(iter(by.items())) if len(by) == 1 else None
    out = {"currency": one[0] if one else None, "fills": p["fills"], "by_currency": by,
           **{k: (one[1][k] if one else None if by else 0.0) for k in ("pnl_net", "pnl_gross", "fees", "drawdown")},
           "positions": {name(i): int(v) for i, v in enumerate(p["position"]) if v},
           "instruments": {name(i): {"currency": str(p["currency"][i]), "position": int(p["position"][i]),
                                     "fills": int(p["fills_by"][i]), "pnl_net": r(p["net"][i]),
                                     "pnl_gross": r(p["gross"][i]), "fees": r(p["fees"][i]),
                                     "drawdown": r(p["drawdown_by"][i])}
                           for i in traded(p)}}
    cv = p["converted"]
    if cv is not None:
        from replay.currency import flag
        out["converted"] = {"currency": cv["currency"], "rates": cv["rates"], "pnl_net": r(cv["net"]),
                            "pnl_gross": r(cv["gross"]), "fees": r(cv["fees"]), "drawdown": r(cv["drawdown"]),
                            "note": f"converted at the rates given ({flag(getattr(paper.p, 'fx'))}), not market rates"}
    return out


def _m(v):
    from replay.currency import money_text  # (as the backtest's summary prints money)
    return money_text(v)


def stats_lines(pp):
    """`engine stats`' paper lines from /status' `paper`: the run's money per currency, fills and
    positions, then a line per instrument traded (in its currency)."""
    by = pp.get("by_currency")
    if by is None:  # (an engine from before: its one figure)
        by = {"": pp}
    money = "; ".join(f"pnl net {_m(f['pnl_net'])}{' ' + c if c else ''} (gross {_m(f['pnl_gross'])}, fees "
                      f"{_m(f['fees'])}), drawdown {_m(f['drawdown'])}" for c, f in by.items()) or "pnl net 0.00"
    cv = pp.get("converted")
    if cv:
        money += f"; total {_m(cv['pnl_net'])} {cv['currency']} ({cv['note']})"
    out = [f"  paper: {money}, {pp['fills']:,} fills; positions "
           + (", ".join(f"{k} {v:+,}" for k, v in pp["positions"].items()) or "flat")]
    for k, v in (pp.get("instruments") or {}).items():  # (an engine from before: totals only)
        c = f" {v['currency']}" if v.get("currency") else ""
        out.append(f"    {k}: position {v['position']:+,}, {v['fills']:,} fills, pnl net {_m(v['pnl_net'])}{c} "
                   f"(gross {_m(v['pnl_gross'])}, fees {_m(v['fees'])}), drawdown {_m(v['drawdown'])}")
    return out


def summary_line(pp):
    """The run summary's paper line (app/run_summary.py) from the run's paper result: its report's
    money per currency (never one sum; the converted total with --fx), fills, where the report is."""
    by = pp.get("by_currency") or {"": {"pnl": pp["pnl"], "pnl_gross": pp["pnl_gross"], "fees": pp["fees"]}}
    money = "; ".join(f"pnl net {_m(f['pnl'])}{' ' + c if c else ''} (gross {_m(f['pnl_gross'])}, fees "
                      f"{_m(f['fees'])})" for c, f in by.items())
    cv = pp.get("converted")
    if cv and "pnl" in cv:
        money += f"; total {_m(cv['pnl'])} {cv['currency']} ({cv['note']})"
    line = f"  paper: {money}, {pp['fills']:,} fills -> {pp['out']}"
    if "backtest" in pp:  # (what reproduces it: the same figures, to the last digit)
        line += ("\n  paper: its backtest: " + pp["backtest"] if pp["backtest"] else
                 "\n  paper: a live feed's ticks: record the run (--record FILE) to backtest these figures")
    return line
