"""The feed's crossed-book watch: a book whose best bid stays at or above its best ask for longer
than a limit is counted (once per episode) and held as "crossed now" until it uncrosses.

A crossed book for long is lost data (an ITCH feed that missed deletes: the orders stay in the
book) or a broken source, never a market: the run's summary warns, /metrics exports it
(engine_feed_crossed_books_total, engine_feed_crossed_instruments) and an alert fires.
Time is the exchange's (ts_event), so a file replayed flat out is judged as it happened; the
clock is the newest ts_event of any instrument. Runs in the feed process once per batch.
"""
import numpy as np
from engine.jit import njit

from engine.records import KIND_BOOK, KIND_QUOTE, KIND_TRADE, MAX_INSTRUMENTS, tick_instrument, tick_kind

N_INSTRUMENTS = MAX_INSTRUMENTS  # every index the tick's instrument field holds
OK, CROSSED, LONG = 0, 1, 2  # per instrument: not crossed, crossed, crossed for longer than the limit


@njit(nogil=True, cache=True)
def scan_crossed(ticks, n, limit_ns, state, since, clist, cpos, c):
    """c: [books crossed past the limit (episodes), instruments crossed past it now, how many
    in clist (crossed, not yet past it), newest ts_event]."""
    for i in range(n):
        kind = tick_kind(ticks[i])
        if kind != KIND_QUOTE and kind != KIND_TRADE and kind != KIND_BOOK:
            continue
        inst = tick_instrument(ticks[i])
        ts = ticks[i, 1]
        if ts > c[3]:
            c[3] = ts
        bid, ask = ticks[i, 4], ticks[i, 5]
        if bid != 0 and ask != 0 and bid >= ask:
            if state[inst] == OK:
                state[inst], since[inst] = CROSSED, ts
                cpos[inst], clist[c[2]] = c[2], inst
                c[2] += 1
        elif state[inst] != OK:
            if state[inst] == LONG:
                c[1] -= 1
            else:
                _drop(inst, clist, cpos, c)
            state[inst] = OK
    j = 0
    while j < c[2]:  # the crossed ones, against the newest time seen
        inst = clist[j]
        if c[3] - since[inst] > limit_ns:
            state[inst] = LONG
            c[0] += 1
            c[1] += 1
            _drop(inst, clist, cpos, c)  # (the last one moved to j: look at j again)
        else:
            j += 1


@njit(nogil=True, inline="always", cache=True)
def _drop(inst, clist, cpos, c):
    c[2] -= 1
    last = clist[c[2]]
    clist[cpos[inst]] = last
    cpos[last] = cpos[inst]


class CrossedWatch:
    """watch(ticks) after each batch; counts() -> {"crossed_books", "crossed_instruments"}."""

    def __init__(self, limit_s):
        self.limit_ns = int(limit_s * 1e9)
        self.state = np.zeros(N_INSTRUMENTS, np.int8)
        self.since = np.zeros(N_INSTRUMENTS, np.int64)
        self.clist = np.zeros(N_INSTRUMENTS, np.int64)
        self.cpos = np.zeros(N_INSTRUMENTS, np.int64)
        self.c = np.zeros(4, np.int64)
        self.c[3] = np.iinfo(np.int64).min

    def watch(self, ticks):
        if self.limit_ns > 0 and len(ticks):
            scan_crossed(ticks, len(ticks), self.limit_ns, self.state, self.since, self.clist, self.cpos, self.c)

    def counts(self):
        return {"crossed_books": int(self.c[0]), "crossed_instruments": int(self.c[1])}
