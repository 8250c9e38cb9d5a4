"""Source URIs: `scheme:PATH?key=value&...` (or `scheme://HOST:PORT?...`), checked strictly."""
import datetime as dt
import math
from urllib.parse import parse_qsl


class FeedError(ValueError):
    """Bad source or bad input data: the message names what and where (one line)."""


def split(uri):
    """(scheme, target, params dict) of a URI."""
    scheme, sep, rest = uri.partition(":")
    if not sep or not scheme.replace("-", "").isalnum():
        raise FeedError(f"{uri!r} is not a source URI (e.g. itch:FILE, dbn:FILE, binance:FILE, "
                        "moldudp64://HOST:PORT, binance-live://MARKET?symbols=..., dbn-live://DATASET?..., synthetic://?...)")
    target, _, query = rest.partition("?")
    if target.startswith("//"):
        target = target[2:]
    return scheme, target, dict(parse_qsl(query, keep_blank_values=True))


def symbols(s):
    """A comma-separated symbol list (empty = all)."""
    return tuple(x.strip() for x in s.split(",") if x.strip())


def date_ns(s):
    """YYYY-MM-DD -> ns since the epoch at midnight UTC."""
    d = dt.date.fromisoformat(s)
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=dt.timezone.utc).timestamp()) * 10**9


def hostport(s, what="HOST:PORT"):
    host, sep, port = s.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FeedError(f"{s!r} is not {what}")
    return host.strip("[]"), int(port)


MAX_DEPTH = 32  # most book levels per side a source publishes (records.py, KIND_LEVEL)
DEFAULT_DEPTH = 10


def depth(s):
    """Levels per side in the published depth window: 0 (none) .. MAX_DEPTH."""
    d = int(s)
    if not 0 <= d <= MAX_DEPTH:
        raise ValueError(f"must be 0..{MAX_DEPTH}")
    return d


# Casts for `take`: a value a parameter cannot sensibly take (nan, inf, a negative time or CPU) is
# refused here, one rule for every source, the rule in the message.

def checked(cast, s, rule, ok):
    """cast(s) when it is a finite number that ok() takes, else ValueError with the rule."""
    try:
        v = cast(s)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and ok(v)):
        raise ValueError(f"must be {rule}")
    return v


def finite_pos(s):
    """A finite number > 0 (a duration, a unit)."""
    return checked(float, s, "a finite number > 0", lambda v: v > 0)


def finite_nonneg(s):
    """A finite number >= 0 (a duration where 0 means none)."""
    return checked(float, s, "a finite number >= 0", lambda v: v >= 0)


def nonneg_int(s):
    """An integer >= 0 (a CPU number)."""
    return checked(int, s, "an integer >= 0", lambda v: v >= 0)


def pos_int(s):
    """An integer >= 1."""
    return checked(int, s, "an integer >= 1", lambda v: v >= 1)


def int_in(lo, hi):
    """An integer lo..hi."""
    return lambda s: checked(int, s, f"an integer {lo}..{hi}", lambda v: lo <= v <= hi)


def float_in(lo, hi):
    """A finite number lo..hi."""
    return lambda s: checked(float, s, f"a number {lo:g}..{hi:g}", lambda v: lo <= v <= hi)
