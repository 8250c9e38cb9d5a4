"""What a backtest charges and counts in money for each instrument, read from one place.

1. The instrument's record (engine/instruments.py): what one lot is worth (multiplier), currency,
   calendar, carried by the tick file from its source (feeds/core/venues.py made it: a Binance lot is
   the capture's size_unit of the base asset, ES is 50 USD a point, a stock is a share). An older
   file that has names only is described from its source URI as that source would today.
2. Fees: the venue's published standard tier (feeds/core/venues.py FEES: Binance spot, USD-M and COIN-M
   maker/taker; CME exchange + NFA fees per contract), with its source and date in the report.
   Where no fee is known (synthetic data, Nasdaq, an unknown root) the run is a zero-cost run,
   and the summary says so loudly.
3. A TOML file (`--instruments FILE`) by symbol or prefix, the venue's symbol or VENUE:SYMBOL
   (the name a run with several sources gives it; the longest pattern that matches wins):

       ["ES*"]             # a symbol, or a prefix ending in *; "CME:ES*" is ES at CME only
       multiplier = 50
       per_lot = 1.18      # currency per lot per fill (exchange + clearing + broker)
       ["BTCUSDT"]
       maker_bps = 2.0
       taker_bps = 5.0     # (on the command line: --fee-bps)
       currency = "USDT"

4. The run's `--maker-bps`, `--fee-bps` (taker) and `--per-lot`, for every instrument.
"""
import math

import numpy as np

from engine.instruments import CALENDARS
from engine.toml_file import read_toml

from .execsim import SP_MAKER_BPS, SP_MULT, SP_PER_LOT, SP_TAKER_BPS

# trading minutes a year, for annualising 1-minute Sharpe ratios
CALENDAR_MINUTES = {"crypto": 365 * 24 * 60, "cme": 252 * 23 * 60, "us_equities": 252 * 390}
assert set(CALENDAR_MINUTES) == set(CALENDARS)
KEYS = ("multiplier", "maker_bps", "taker_bps", "per_lot", "currency", "calendar")
FEE_KEYS = ("maker_bps", "taker_bps", "per_lot")


class InstrumentsError(ValueError):
    pass


def load_file(path):
    """{pattern: {key: value}} from a TOML file; one line naming the file on any problem."""
    raw = read_toml(path, "an instruments file", InstrumentsError, f"--instruments {path}")
    out = {}
    for pat, t in raw.items():
        if not isinstance(t, dict):
            raise InstrumentsError(f"--instruments {path}: [{pat}] must be a table of {', '.join(KEYS)}")
        for k, v in t.items():
            if k not in KEYS:
                raise InstrumentsError(f"--instruments {path}: [{pat}] unknown key {k!r} (known: {', '.join(KEYS)})")
            if k in ("currency", "calendar"):
                if k == "calendar" and v not in CALENDAR_MINUTES:
                    raise InstrumentsError(f"--instruments {path}: [{pat}] calendar must be one of "
                                           f"{', '.join(CALENDAR_MINUTES)}")
                if not isinstance(v, str):
                    raise InstrumentsError(f"--instruments {path}: [{pat}] {k} must be text")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
                    (k == "multiplier" and v <= 0):
                raise InstrumentsError(f"--instruments {path}: [{pat}] {k} must be a finite number"
                                       + (" > 0" if k == "multiplier" else "") + f", got {v!r}")
        out[pat] = {"__file__": str(path), **t}
    return out


def _match(table, spec):
    """The TOML table's entry for an instrument record: a pattern with a colon is matched against
    VENUE:SYMBOL, one without against the venue's symbol (a run's name CME:ESH4 is ESH4 to "ES*"),
    so an entry means the same instrument whichever path named it. An exact name wins over a
    prefix, and of two the longer (VENUE:SYMBOL over SYMBOL)."""
    from engine.universe import run_name, venue_symbol
    sym = venue_symbol(spec)
    full = run_name(sym, spec["venue"])
    best, rank = {}, (0, 0)
    for pat, t in table.items():
        name = full if ":" in pat else sym
        r = (2, len(pat)) if pat == name else (1, len(pat)) if pat.endswith("*") and name.startswith(pat[:-1]) \
            else (0, 0)
        if r > rank:
            best, rank = t, r
    return best


def file_specs(tf, names):
    """The tick file's instrument records for `names` (the loop's table, which may run past the
    file's own with indices as names): the file's, else its source's (feeds/core/venues.py)."""
    from engine.instruments import unknown
    from feeds.core.venues import of_file
    by_name = {s["symbol"]: s for s in of_file(tf)}
    return [by_name.get(str(n)) or unknown(str(n)) for n in names]


def resolve(specs, table=None, overrides=None):
    """[{key: value}] per instrument record: the record's money facts, the venue's standard fees,
    then the TOML table's, then run-wide overrides (maker_bps, taker_bps, per_lot given on the
    command line). `fee_source` says where the fees came from (None: nobody: zero cost)."""
    from feeds.core.venues import fees
    out = []
    for spec in specs:
        d = {k: spec[k] for k in ("symbol", "venue", "multiplier", "currency", "calendar", "tick_size", "lot_size",
                                  "inverse", "known", "source") if k in spec}  # (source: a run's, its clocks)
        f = fees(spec)
        d.update({k: (f[k] if f else 0.0) for k in FEE_KEYS}, fee_source=f["source"] if f else None)
        m = _match(table or {}, spec)
        d.update({k: v for k, v in m.items() if k in KEYS})
        if "multiplier" in m:
            d["known"] = True
        if any(k in m for k in FEE_KEYS):
            d["fee_source"] = f"--instruments {m['__file__']}"
        given = {k: v for k, v in (overrides or {}).items() if v is not None}
        if given:
            d.update(given)
            d["fee_source"] = "the command line (" + ", ".join(f"{_FLAG[k]} {v:g}" for k, v in given.items()) + ")"
        out.append(d)
    return out


_FLAG = {"maker_bps": "--maker-bps", "taker_bps": "--fee-bps", "per_lot": "--per-lot"}


def warnings(specs, traded):
    """What the summary must say loudly about the money (one line per kind, naming the instruments):
    instruments nothing describes (a lot priced at 1.0), inverse contracts reported as linear, and
    instruments traded at no cost."""
    by = {}
    for s in specs:
        if s["symbol"] not in traded:
            continue
        if not s["known"]:
            by.setdefault("unknown", []).append(s["symbol"])
        if s["inverse"]:
            by.setdefault("inverse", []).append(s["symbol"])
        if not (s["maker_bps"] or s["taker_bps"] or s["per_lot"]):
            why = "as given" if s["fee_source"] else f"no published fee known for venue {s['venue'] or 'unknown'}"
            by.setdefault(why, []).append(s["symbol"])
    out = []
    for why, syms in by.items():
        names = ", ".join(syms)
        if why == "unknown":
            out.append(f"{names}: nothing says what one lot is worth (no instrument record in the file, and its "
                       f"source is not a venue the engine knows): PnL counts a lot as 1.0 a point; give the "
                       f"multiplier with --instruments FILE")
        elif why == "inverse":
            out.append(f"{names}: inverse contracts (COIN-M): their PnL is settled in the coin and is not linear in "
                       f"price; these figures treat it as linear")
        else:
            out.append(f"{names}: zero trading costs ({why}): net PnL = gross; give fees with --fee-bps, "
                       f"--maker-bps, --per-lot or --instruments FILE")
    return out


def spec_array(specs):
    """float64[n, 4] as replay/execsim.py reads it."""
    a = np.zeros((max(len(specs), 1), 4))
    a[:, SP_MULT] = 1.0
    for i, d in enumerate(specs):
        a[i, SP_MULT], a[i, SP_MAKER_BPS], a[i, SP_TAKER_BPS], a[i, SP_PER_LOT] = (
            d["multiplier"], d["maker_bps"], d["taker_bps"], d["per_lot"])
    return a


def described(specs, traded):
    """The report's `instruments`: each instrument decided on (by name) and what it is and costs;
    one nothing decided on, or a run's unnamed id between two sources' blocks, is not listed."""
    return {s["symbol"]: {k: v for k, v in s.items() if k != "symbol"} for s in specs
            if s["symbol"] and s["symbol"] in traded}
