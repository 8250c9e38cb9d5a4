"""What a backtest needs to know about each instrument to put PnL in money: its multiplier
(quote currency per 1.0 of price per lot, the tick sizes' unit), fees, trading calendar.

Defaults, by what the tick file says of itself (its source URI and symbols):
  - CME futures by root symbol (ES 50 USD a point, MES 5, NQ 20, MNQ 2, YM 5, RTY 50, CL 1000,
    GC 100, ZN 1000, 6E 125000), calendar `cme` (Globex: 23 h a day, 5 days a week);
  - Binance: a lot is the source's `size_unit` of the base asset (engine convert's
    `?size_unit=1e-3`: 0.001 BTC), so the multiplier is size_unit, currency the quote asset
    (BTCUSDT: USDT), calendar `crypto` (24 x 7);
  - ITCH: 1 (a share), USD, calendar `us_equities` (6.5 h, 252 days); synthetic: 1, calendar
    `crypto` (it never closes).
Fees default to 0 (they depend on the account): give them per run (`--maker-bps`,
`--taker-bps`, `--per-lot`) or per instrument in a TOML file (`--instruments FILE`):

    ["ES*"]             # a symbol, or a prefix ending in *
    multiplier = 50
    per_lot = 1.18      # currency per lot per fill (exchange + clearing + broker)
    ["BTCUSDT"]
    maker_bps = 2.0
    taker_bps = 5.0
    currency = "USDT"
"""
import re
import tomllib
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from .execsim import SP_MAKER_BPS, SP_MULT, SP_PER_LOT, SP_TAKER_BPS

CME_MULT = {"ES": 50.0, "MES": 5.0, "NQ": 20.0, "MNQ": 2.0, "YM": 5.0, "MYM": 0.5, "RTY": 50.0, "M2K": 5.0,
            "CL": 1000.0, "MCL": 100.0, "GC": 100.0, "MGC": 10.0, "ZN": 1000.0, "ZB": 1000.0, "6E": 125000.0}
# trading minutes a year, for annualising 1-minute Sharpe ratios
CALENDAR_MINUTES = {"crypto": 365 * 24 * 60, "cme": 252 * 23 * 60, "us_equities": 252 * 390}
KEYS = ("multiplier", "maker_bps", "taker_bps", "per_lot", "currency", "calendar")


class InstrumentsError(ValueError):
    pass


def _cme_root(sym):
    m = re.match(r"^([A-Z0-9]{1,3}?)[FGHJKMNQUVXZ]\d{1,2}$", sym)
    return m.group(1) if m else None


def default(symbol, source):
    """The defaults for one symbol of a file whose metadata says `source` (its URI)."""
    scheme = (source or "").split(":", 1)[0].lower()
    d = {"multiplier": 1.0, "maker_bps": 0.0, "taker_bps": 0.0, "per_lot": 0.0, "currency": "quote currency",
         "calendar": "crypto"}
    if scheme == "binance":
        q = dict(parse_qsl(urlsplit(source.split(":", 1)[1]).query))
        try:
            d["multiplier"] = float(q.get("size_unit", 1.0))
        except ValueError:
            pass
        for quote in ("USDT", "USDC", "FDUSD", "BUSD", "BTC", "ETH"):
            if symbol.upper().endswith(quote) and len(symbol) > len(quote):
                d["currency"] = quote
                break
    elif scheme == "dbn":
        d["calendar"], d["currency"] = "cme", "USD"
        root = _cme_root(symbol)
        if root in CME_MULT:
            d["multiplier"] = CME_MULT[root]
    elif scheme in ("itch", "moldudp64"):
        d["calendar"], d["currency"] = "us_equities", "USD"
    return d


def load_file(path):
    """{pattern: {key: value}} from a TOML file; one line naming the file on any problem."""
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise InstrumentsError(f"--instruments {path}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InstrumentsError(f"--instruments {path}: not TOML: {e}") from None
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
            elif not isinstance(v, (int, float)) or (k == "multiplier" and v <= 0):
                raise InstrumentsError(f"--instruments {path}: [{pat}] {k} must be a number"
                                       + (" > 0" if k == "multiplier" else ""))
        out[pat] = t
    return out


def _match(table, symbol):
    best = None
    for pat, t in table.items():
        if pat == symbol:
            return t
        if pat.endswith("*") and symbol.startswith(pat[:-1]) and (best is None or len(pat) > len(best[0])):
            best = (pat, t)
    return best[1] if best else {}


def resolve(names, source, table=None, overrides=None):
    """[{key: value}] per instrument: defaults, then the file's table, then run-wide overrides
    (maker_bps, taker_bps, per_lot given on the command line)."""
    out = []
    for name in names:
        d = default(str(name), source)
        d.update(_match(table or {}, str(name)))
        d.update({k: v for k, v in (overrides or {}).items() if v is not None})
        out.append(d)
    return out


def spec_array(specs):
    """float64[n, 4] as replay/execsim.py reads it."""
    a = np.zeros((max(len(specs), 1), 4))
    a[:, SP_MULT] = 1.0
    for i, d in enumerate(specs):
        a[i, SP_MULT], a[i, SP_MAKER_BPS], a[i, SP_TAKER_BPS], a[i, SP_PER_LOT] = (
            d["multiplier"], d["maker_bps"], d["taker_bps"], d["per_lot"])
    return a
