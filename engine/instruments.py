"""What an instrument is, beside its name: the facts that turn a tick's price and size into money.

One record per instrument, in the stream's instrument order (its index in the tick's word 7). A
source makes them (feeds/core/venues.py knows each venue), and they travel with the ticks: the ring's
instrument table (engine/tickring.py), every tick file's header (engine/tickfile.py: `specs`,
beside `instruments`), Parquet outputs (`engine.instruments`); backtests read them from the file
(replay/costs.py adds fees and overrides), so a file made by `engine convert` and one made
by `engine record` from a ring of the same feed say the same thing.

    symbol      the venue's name for it; in a run with several sources, a merge and their recordings
                the run's, VENUE:SYMBOL (engine/universe.py run_name; venue_symbol gives the venue's
                back: what the venue says of it, its fees, is looked up by that)
    venue       BINANCE (spot), BINANCE-F (USD-M futures), BINANCE-D (COIN-M futures), CME, NASDAQ,
                SYNTHETIC, or "" when the source cannot tell
    multiplier  quote currency per 1.0 of price per lot (a lot is one unit of a tick's size): ES 50,
                a Binance lot of size_unit 1e-5 BTC 1e-5, a share 1
    currency    what PnL and fees are in (USD, USDT, ...): money of two currencies is never added
    calendar    crypto (24 x 7), cme (Globex, 23 x 5), us_equities (6.5 h x 252): Sharpe annualisation
    tick_size   the venue's price increment in price units (0.25 for ES; 0 when the data does not say)
    lot_size    how much of the instrument one size unit is (1e-5 BTC, 1 contract, 1 share)
    inverse     an inverse contract (COIN-M): PnL is not linear in price and is reported as if it were
    known       False when nothing says what the instrument is (its values are placeholders: a lot = 1.0)
    source      (optional) which of a run's sources it came from (`engine run --feed A --feed B`: the
                source's label), in the records of a run with several sources and its recording
"""

CALENDARS = ("crypto", "cme", "us_equities")
FIELDS = ("symbol", "venue", "multiplier", "currency", "calendar", "tick_size", "lot_size", "inverse", "known")
OPTIONAL = ("source",)  # kept when present (text), never required: files without them read as before
_NUMBERS = ("multiplier", "tick_size", "lot_size")


class InstrumentError(ValueError):
    pass


def make(symbol, venue="", multiplier=1.0, currency="quote currency", calendar="crypto", tick_size=0.0,
         lot_size=1.0, inverse=False, known=True):
    """One instrument record (a plain dict: JSON as it is), checked."""
    return check({"symbol": str(symbol), "venue": venue, "multiplier": float(multiplier), "currency": currency,
                  "calendar": calendar, "tick_size": float(tick_size), "lot_size": float(lot_size),
                  "inverse": bool(inverse), "known": bool(known)})


def unknown(symbol):
    """A record for an instrument nothing describes: a lot is worth 1.0, said wherever it is used."""
    return make(symbol, known=False)


def check(d):
    """d when it is a whole, sane record; InstrumentError naming what is wrong otherwise (a table
    read from a file or a ring is checked before it prices anything)."""
    if not isinstance(d, dict):
        raise InstrumentError(f"an instrument record must be a table, got {type(d).__name__}")
    missing = [k for k in FIELDS if k not in d]
    if missing:
        raise InstrumentError(f"instrument {d.get('symbol', '?')!r}: missing {', '.join(missing)}")
    for k in _NUMBERS:
        v = d[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v == v or v < 0 or v == float("inf"):
            raise InstrumentError(f"instrument {d['symbol']!r}: {k} must be a finite number >= 0, got {v!r}")
    if d["multiplier"] <= 0:
        raise InstrumentError(f"instrument {d['symbol']!r}: multiplier must be > 0, got {d['multiplier']!r}")
    if d["calendar"] not in CALENDARS:
        raise InstrumentError(f"instrument {d['symbol']!r}: calendar must be one of {', '.join(CALENDARS)}, "
                              f"got {d['calendar']!r}")
    for k in ("symbol", "venue", "currency"):
        if not isinstance(d[k], str):
            raise InstrumentError(f"instrument {d['symbol']!r}: {k} must be text")
    out = {k: d[k] for k in FIELDS}
    for k in OPTIONAL:
        if k in d:
            if not isinstance(d[k], str):
                raise InstrumentError(f"instrument {d['symbol']!r}: {k} must be text")
            out[k] = d[k]
    return out


def table(names, specs=None):
    """A record per name, in order: `specs` where it has one for that index and symbol, else an
    unknown record (an older file or ring carries names only)."""
    specs = list(specs or [])
    out = []
    for i, n in enumerate(names or []):
        s = specs[i] if i < len(specs) else None
        out.append(check(s) if isinstance(s, dict) and s.get("symbol") == str(n) else unknown(n))
    return out


def parse(obj):
    """(names, specs or None) from a stored instrument table: a list of names (older writers) or
    {"names": [...], "specs": pack's form}."""
    if isinstance(obj, dict):
        names = [str(n) for n in obj.get("names") or []]
        return names, (unpack(names, obj["specs"]) if obj.get("specs") is not None else None)
    if isinstance(obj, list):
        return [str(n) for n in obj], None
    raise InstrumentError("an instrument table must be a list of names or {names, specs}")


def dump(names, specs):
    """The stored form of a table (the inverse of `parse`)."""
    return {"names": list(names), "specs": pack(table(names, specs)) if specs is not None else None}


def pack(specs):
    """The stored form of a table's records: each distinct record once (without its symbol) and
    an index per instrument, so a day of 9,000 stocks that share one record costs two bytes each
    in a tick file's header."""
    kinds, index, seen = [], [], {}
    for s in specs:
        body = tuple((k, s[k]) for k in FIELDS + OPTIONAL if k != "symbol" and k in s)
        if body not in seen:
            seen[body] = len(kinds)
            kinds.append(dict(body))
        index.append(seen[body])
    return {"kinds": kinds, "index": index}


def unpack(names, packed):
    """The records of `names` from `pack`'s form (checked; an index past the kinds is an error)."""
    if not isinstance(packed, dict) or not isinstance(packed.get("kinds"), list) \
            or not isinstance(packed.get("index"), list):
        raise InstrumentError("a stored instrument table must be {kinds, index}")
    kinds, index = packed["kinds"], packed["index"]
    out = []
    for n, k in zip(names, index):
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(kinds) or not isinstance(kinds[k], dict):
            raise InstrumentError(f"instrument {n!r}: record {k!r} is not in the table")
        out.append(check({**kinds[k], "symbol": str(n)}))
    return out + [unknown(n) for n in list(names)[len(out):]]
