"""What a run's and a backtest's signal counts mean: one definition for every place that shows them
(the run summary, `engine stats`, /status, /metrics' engine_signals_total{kind}, the backtest's
summary, report.md and report.json).

Every decision the strategy makes that would move a target makes a signal record (the risk gate,
engine/risk.py, may cut it; engine/records.py SIGNAL_FLAG_*):

    published  records that went out: a target moved, as decided or clipped, and the kill
               switch's flattening signals. What `signals` counts everywhere.
    clipped    published records the gate cut down to what fits a limit (flag CLIPPED)
    refused    records of a decision the gate stopped whole: nothing went out (flag REFUSED;
               position == prev_position; once per wanted target, not per tick)
    killed     records made while the run was killed (flag KILLED): its flattening signals
               (published) and decisions refused because of it (refused too)

So published + refused is every record of the signal file but its marks, and clipped and killed
overlap the others. The live loop counts them as it makes them (engine.risk.count_record, into the
control block), a backtest from its records: the same code, the same numbers.
"""
import numpy as np

from .records import SIGNAL_FLAG_CLIPPED, SIGNAL_FLAG_KILLED, SIGNAL_FLAG_MARK, SIGNAL_FLAG_REFUSED

KINDS = ("published", "clipped", "refused", "killed")


def of_counters(records, clipped, refused, killed):
    """The counts from the loop's: every record it made (marks aside), and the three by flag."""
    return {"published": records - refused, "clipped": clipped, "refused": refused, "killed": killed}


def of_records(flags):
    """The counts of signal records by their flags (a signal file's or a backtest's; marks left out)."""
    f = np.asarray(flags, np.int64)
    f = f[(f & SIGNAL_FLAG_MARK) == 0]
    refused = int(np.count_nonzero(f & SIGNAL_FLAG_REFUSED))
    return of_counters(len(f), int(np.count_nonzero(f & SIGNAL_FLAG_CLIPPED)), refused,
                       int(np.count_nonzero(f & SIGNAL_FLAG_KILLED)))


def detail(c):
    """The counts in words: '854 (3 clipped), 13 refused, 2 killed' (the kinds that are not 0)."""
    return (f"{c['published']:,}" + (f" ({c['clipped']:,} clipped)" if c["clipped"] else "")
            + "".join(f", {c[k]:,} {k}" for k in ("refused", "killed") if c[k]))


def line(c):
    """As the summaries print them: 'signals 854 (3 clipped), 13 refused, 2 killed'."""
    return f"signals {detail(c)}"


def cuts(blocked):
    """The risk gate's cuts by rule in words ('flip 17, rate 3'), or None when it cut nothing."""
    return ", ".join(f"{r} {n:,}" for r, n in blocked.items() if n) or None
