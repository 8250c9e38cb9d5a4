"""A run's risk limits, each named once: the fields of Limits, what the gate is given (engine/risk.py
configure), with each limit's unit and meaning. From them come `engine run`'s and `engine
backtest`'s --risk-* flags, their help and the config file's [risk] keys (app/run_options.py),
the names --risk-instrument takes, and the log line. (Neither numba nor numpy here: the command
line reads this while it builds its parser.)
"""
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Limit:
    unit: str           # the flag's metavar
    help: str           # what it limits (the flag's help)
    run_as: str | None  # None: each instrument's (--risk-instrument may set it for one); else the run's,
    #                     given to the run's row of the limits as this keyword (engine/risk.py set_limits)


def _limit(unit, help, run_as=None):
    return field(default=None, metadata={"limit": Limit(unit, help, run_as)})


@dataclass(frozen=True)
class Limits:
    """A run's limits (None: none). The instruments' hold for every instrument unless `instruments`
    ((symbol, {name: value}), ...) says otherwise for one; the run's for the run as a whole. mode:
    clip, refuse or off (off: limits not applied; a kill still stops entries)."""
    mode: str = "clip"
    max_position: float | None = _limit("UNITS", "largest |target position| per instrument, in units")
    max_notional: float | None = _limit(
        "MONEY", "largest |position| x multiplier x mid per instrument, in its quote currency; an instrument "
                 "with no known multiplier or mid is refused new exposure")
    max_gross: float | None = _limit("MONEY", "largest notional of the whole run, every instrument's summed",
                                     run_as="max_notional")
    max_rate: float | None = _limit("PER_S", "signals per second per instrument (a token bucket of a second's "
                                             "worth); over it a new entry is refused, a reduction still goes")
    max_rate_total: float | None = _limit("PER_S", "signals per second of the whole run", run_as="max_rate")
    min_flip_ms: float | None = _limit("MS", "least time between two reversals (long to short or back) of an "
                                             "instrument; a quicker one is cut to flat")
    instruments: tuple = ()

    def values(self):
        """{name: value} of the limits set."""
        return {name: getattr(self, name) for name, _ in LIMITS if getattr(self, name) is not None}

    def any(self):
        return bool(self.values()) or bool(self.instruments)

    def describe(self):
        """One line for the log: what is limited, or that nothing is."""
        if not self.any():
            return "risk: no limits (kill switch only)"
        parts = [_said(k, v) for k, v in self.values().items()]
        parts += [f"{sym}: " + ", ".join(_said(k, v) for k, v in d.items()) for sym, d in self.instruments]
        return f"risk ({self.mode}): " + "; ".join(parts)


def _said(name, value):
    return f"{name.replace('_', ' ')} {value:g}"


# (name, Limit) of every limit, in the order --help lists them
LIMITS = tuple((f.name, f.metadata["limit"]) for f in fields(Limits) if "limit" in f.metadata)
PER_INSTRUMENT = tuple(name for name, lim in LIMITS if lim.run_as is None)


def parse_instrument(text):
    """--risk-instrument SYMBOL:NAME=VALUE[,NAME=VALUE...] -> (symbol, {name: value}); ValueError
    saying what is wrong."""
    sym, sep, rest = str(text).rpartition(":")
    if not sep or not sym.strip() or not rest.strip():
        raise ValueError(f"{text!r}: expected SYMBOL:NAME=VALUE[,NAME=VALUE], NAME one of {', '.join(PER_INSTRUMENT)}")
    out = {}
    for item in rest.split(","):
        k, eq, v = item.partition("=")
        k = k.strip().replace("-", "_")
        if not eq or k not in PER_INSTRUMENT:
            raise ValueError(f"{text!r}: {item.strip()!r} is not NAME=VALUE with NAME one of {', '.join(PER_INSTRUMENT)}")
        try:
            x = float(v)
        except ValueError:
            raise ValueError(f"{text!r}: {k} must be a number, got {v.strip()!r}") from None
        if not x >= 0 or x == float("inf"):
            raise ValueError(f"{text!r}: {k} must be a finite number >= 0, got {v.strip()!r}")
        out[k] = x
    return sym.strip(), out
