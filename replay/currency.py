"""Money in several currencies: never added, converted only at rates the user gives.

A run's money is per currency (replay/evaluate.py `by_currency`, app/paper.py): USD of ES and USDT
of BTCUSDT are two figures. `--fx BASE/QUOTE=RATE` (repeatable, the market's notation: EUR/USD=1.08
is 1 EUR = 1.08 USD) gives the rates of a converted total, in QUOTE: every rate names the same
QUOTE, and a total is converted only when every currency of the run is QUOTE or has a rate. What
is converted says so, with its rates (`converted`).
"""
import re

# the figures that are sums of money (a converted total is the sum of each currency's at its rate)
LINEAR = ("pnl", "pnl_gross", "fees", "pnl_closed", "pnl_open", "turnover_notional")
_PAIR = re.compile(r"^\s*([A-Za-z0-9]{2,12})\s*/\s*([A-Za-z0-9]{2,12})\s*=\s*(\S+)\s*$")


class FxError(ValueError):
    pass


def parse_fx(items):
    """["USDT/USD=1.0", ...] (--fx) -> {"to": "USD", "rates": {"USDT": 1.0}}, or None for none.
    FxError naming the option on anything else."""
    if not items:
        return None
    to, rates = None, {}
    for it in items:
        m = _PAIR.match(str(it))
        if not m:
            raise FxError(f"--fx {it!r}: expected BASE/QUOTE=RATE (1 BASE is RATE QUOTE), e.g. USDT/USD=1.0")
        base, quote, v = m.group(1).upper(), m.group(2).upper(), m.group(3)
        try:
            rate = float(v)
        except ValueError:
            rate = -1.0
        if not rate > 0 or rate == float("inf"):
            raise FxError(f"--fx {it!r}: the rate must be a positive number")
        if base == quote:
            raise FxError(f"--fx {it!r}: a currency against itself")
        if to is not None and quote != to:
            raise FxError(f"--fx {it!r}: every rate converts to one currency, and {items[0]!r} converts to {to}")
        if base in rates and rates[base] != rate:
            raise FxError(f"--fx {it!r}: {base} is given two rates")
        to = quote
        rates[base] = rate
    return {"to": to, "rates": rates}


def flag(fx):
    """The --fx flags that say fx (for the report)."""
    return " ".join(f"--fx {c}/{fx['to']}={r:g}" for c, r in fx["rates"].items())


def rate(fx, cur):
    """How much of fx's currency one `cur` is (None: no rate given)."""
    return 1.0 if cur.upper() == fx["to"] else fx["rates"].get(cur.upper())


def convert(by_currency, fx, curves=None):
    """The run's total converted at fx's rates: {currency, rates, note, pnl, pnl_gross, fees,
    pnl_closed, pnl_open, turnover_notional, max_drawdown (of the converted equity, with curves:
    {currency: (grid, net equity)}, each held from one point to the next)}; or {currency, missing,
    note} when a currency has no rate."""
    used = {c: rate(fx, c) for c in by_currency}
    missing = sorted(c for c, r in used.items() if r is None)
    head = {"currency": fx["to"], "rates": {c: r for c, r in used.items() if r is not None and c.upper() != fx["to"]}}
    if missing:
        return {**head, "missing": missing,
                "note": f"not converted: no rate to {fx['to']} for {', '.join(missing)} "
                        f"(--fx {missing[0]}/{fx['to']}=RATE)"}
    out = {**head, "note": f"converted to {fx['to']} at the rates given ({flag(fx)}), not market rates"}
    for k in LINEAR:
        vals = [by_currency[c].get(k) for c in by_currency]
        out[k] = None if any(v is None for v in vals) else \
            round(sum(used[c] * by_currency[c][k] for c in by_currency), 6)
    if curves is not None:
        import numpy as np
        t = np.unique(np.concatenate([np.asarray(g, np.int64) for g, _ in curves.values()] or [np.zeros(0, np.int64)]))
        eq = np.zeros(len(t))
        for c, (g, e) in curves.items():  # (each currency's equity at every time of the others' grids)
            j = np.searchsorted(g, t, side="right") - 1
            eq += used[c] * np.where(j >= 0, np.asarray(e, np.float64)[np.maximum(j, 0)], 0.0)
        out["max_drawdown"] = round(float(np.max(np.maximum.accumulate(eq) - eq)), 6) if len(eq) else 0.0
    return out


def money_text(v):
    """An amount as the summaries print it."""
    return "n/a" if v is None else f"{v:,.2f}" if abs(v) >= 1 else f"{v:,.6g}"


def per_currency(figures, what=("pnl", "pnl_gross", "fees")):
    """'net N CUR (gross G, fees F); ...' per currency of {currency: {pnl, pnl_gross, fees}} (one line's worth)."""
    return "; ".join(f"net {money_text(f.get(what[0]))} {c} (gross {money_text(f.get(what[1]))}, fees "
                     f"{money_text(f.get(what[2]))})" for c, f in figures.items())
