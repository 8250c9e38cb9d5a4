"""A synthetic market: several instruments, each a ladder of price levels a side, and trades.

Each instrument keeps LEVELS price levels a side (contiguous ticks away from the touch, with
holes where a level was cancelled away). A latent order-flow pressure per instrument (AR(1))
tilts trade direction, and which side gets orders and which gets cancels, at the touch and
deeper in the book alike. A trade that takes out the touch (or a cancel that empties it) makes
level 1 the touch, so its size, built up by that tilted flow, becomes the new touch size; someone
then joins the other side at the vacated price (the mid moves a tick). So touch imbalance,
microprice, depth imbalance (levels 1..9: it integrates the pressure for longer than the touch,
which every take-out resets) and trade flow carry real, learnable information about the next mid
moves, while the mid still walks randomly. Deterministic under a seed: the same URI yields the
same ticks (ts_recv aside, which the publisher stamps); the market does not depend on `depth`,
only what is published of it does.

The URI's parameters are declared in feeds/synthetic/params.py (engine sources synthetic).
rate and count count every tick, level and book ticks included. An event writes its level
ticks, its trade, then a quote if the touch changed or a book tick if only deeper levels did
(engine/records.py); an event deeper than the window writes nothing.

rate is a pace, not part of the market: the commands that hand ticks on in real time keep it
(engine feed and engine run publish at it, engine record records at it: `paced`); those that read
a source as fast as they can refuse a rate other than 0 (app/source_params.py).
"""
import math
import time

import numpy as np
from engine.jit import njit

from engine.records import KIND_TRADE, PRICE_SCALE, SIDE_BUY, SIDE_SELL

from feeds.books import book, depth as D

from feeds.core import venues
from feeds.synthetic import rng
from feeds.books.book import Ladders
from feeds.books.ticks import emit, emit_quote, touch_changed
from feeds.core.uri import MAX_DEPTH, FeedError
from feeds.synthetic.params import SYNTHETIC

TICK_SIZE = round(venues.SYNTHETIC_TICK * PRICE_SCALE)  # (its venue's fact, in 1e-9 fixed point)
EPOCH_START_NS = 1_700_000_000_000_000_000  # simulated exchange clock starts here
LEVELS = 32   # price levels a side the market keeps (the most a window can publish)
# how the pressure p tilts flow: P(buy, add on the bid, cancel on the ask) = sigmoid(tilt * p)
TILT_TRADE, TILT_TOUCH, TILT_DEEP = 2.5, 0.5, 5.0
DEEP_CANCEL = 0.8  # a cancel behind the touch takes up to this fraction of its level
JOIN_MEAN = 15.0   # mean size joining the vacated price after a take-out
REFILL_MIN, REFILL_MEAN = 5, 25.0  # size of a fresh level at the back
CAP = 36      # ladder room a side: LEVELS plus the few an event inserts before the trim

# global int64 state: clock, staged event ticks [pos, n), events so far
G_CLOCK, G_POS, G_N, G_EVENTS = 0, 1, 2, 3


def parse_uri(uri):
    """The typed value (feeds/synthetic/params.py) of a synthetic:// URI; FeedError naming the bad part."""
    from feeds.core.sources import parse
    u, v, kind = parse(uri)
    if kind is not SYNTHETIC:
        raise FeedError(f"not a synthetic source: {uri!r}")
    return v


def paced(batches, rate, step_s=0.05):
    """A source's batches at `rate` ticks a second (slices of each batch, consumed before the next
    is asked for): the k-th tick from the start is handed on no earlier than k / rate seconds in,
    its ts_recv the wall clock then (a paced simulation is received when its ticks are due, as the
    feed process stamps them), with an empty batch after each wait of at most step_s, so a
    consumer that stops or cuts files between batches is never held up by the pace."""
    t0 = None
    k = 0
    try:
        for b in batches:
            if t0 is None:  # from the first batch: making it may have compiled the simulator first
                t0 = time.monotonic()
            i = 0
            while i < len(b):
                ahead = (k - (time.monotonic() - t0) * rate) / rate  # seconds until tick k is due
                if ahead > 0:
                    time.sleep(min(ahead, step_s))
                    yield b[:0]
                    continue
                j = min(len(b), i + 1 + int(-ahead * rate))  # every tick due by now
                b[i:j, 2] = time.time_ns()
                yield b[i:j]
                k += j - i
                i = j
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


class Simulator:
    """Holds the market and generator state; `generate(out)` fills int64[n, 8] tick words (an
    event's ticks may straddle two calls: the rest waits in `stage`)."""

    def __init__(self, params):
        self.params = params
        k = params.instruments
        self.ladders = Ladders(2 * k, pool=2 * k * CAP)
        self.ladders.meta[:, book.M_OFF] = np.arange(2 * k) * CAP  # fixed room per side: never grows
        self.ladders.meta[:, book.M_CAP] = CAP
        self.ladders.used[0] = 2 * k * CAP
        self.top = np.zeros((k, 4), np.int64)  # last published touch (feeds/books/ticks.py layout)
        self.windows = D.Windows(2 * k, params.depth)
        self.pressure = np.zeros(k, np.float64)
        self.g = np.zeros(4, np.int64)
        self.rs = rng.new_state(params.seed)
        self.fparams = np.array([params.trade_prob, params.gap_us * 1000.0], np.float64)
        self.stage = np.zeros((D.room(MAX_DEPTH) + 4, 8), np.int64)
        self.stats = np.zeros(1, np.int64)
        _init(self.ladders.arrays(), self.rs)

    def generate(self, out):
        _generate(self.ladders.arrays(), self.top, self.windows.arrays(), self.pressure, self.g, self.rs,
                  self.fparams, self.stage, self.stats, out)
        return out

    def resync(self):
        """Every instrument's next event re-sends its window (after a clear tick)."""
        self.windows.forget()

    def book(self, inst, side):
        """(prices, sizes) of one side of the market's own book, best first (all LEVELS)."""
        px, q, _ = self.ladders.side(2 * inst + side)
        return px, q


@njit(nogil=True, inline="always", cache=True)
def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(nogil=True, inline="always", cache=True)
def _away(b, price, d):
    """The price d ticks behind `price` on book side b (lower for bids, higher for asks)."""
    return price - d * TICK_SIZE if (b & 1) == book.BID else price + d * TICK_SIZE


@njit(nogil=True, cache=True)
def _trim(L, b):
    """Drop the worst levels beyond LEVELS (the worst is first)."""
    meta, px, qty, cnt = L[0], L[1], L[2], L[3]
    off = meta[b, book.M_OFF]
    while meta[b, book.M_LEN] > LEVELS:
        n = meta[b, book.M_LEN]
        for j in range(off, off + n - 1):
            px[j] = px[j + 1]
            qty[j] = qty[j + 1]
            cnt[j] = cnt[j + 1]
        meta[b, book.M_LEN] = n - 1


@njit(nogil=True, cache=True)
def _refill(L, rs, b):
    """Keep LEVELS levels: trim the worst beyond them, add fresh ones at the back."""
    meta, px, qty, cnt = L[0], L[1], L[2], L[3]
    off = meta[b, book.M_OFF]
    _trim(L, b)
    while meta[b, book.M_LEN] < LEVELS:
        n = meta[b, book.M_LEN]
        for j in range(off + n, off, -1):
            px[j] = px[j - 1]
            qty[j] = qty[j - 1]
            cnt[j] = cnt[j - 1]
        px[off] = _away(b, px[off + 1], 1)
        qty[off] = REFILL_MIN + np.int64(rng.exponential(rs, REFILL_MEAN))
        cnt[off] = 1
        meta[b, book.M_LEN] = n + 1


@njit(nogil=True, cache=True)
def _init(L, rs):
    meta, px, qty = L[0], L[1], L[2]
    for i in range(meta.shape[0] // 2):
        bid = (100 + 25 * i) * 100 * TICK_SIZE
        for s in range(2):
            b = 2 * i + s
            off = meta[b, book.M_OFF]
            px[off] = bid if s == book.BID else bid + TICK_SIZE  # the touch; the rest behind it
            qty[off] = 100
            L[3][off] = 1
            meta[b, book.M_LEN] = 1
            _refill(L, rs, b)


@njit(nogil=True, cache=True)
def _level_of(L, b, d):
    """(price, size) of the d-th best level of side b (d clamped to what the side has)."""
    meta = L[0]
    n = meta[b, book.M_LEN]
    if d > n - 1:
        d = n - 1
    j = meta[b, book.M_OFF] + n - 1 - d
    return L[1][j], L[2][j]


@njit(nogil=True, inline="always", cache=True)
def _pick_level(rs):
    """How deep an add or cancel lands: the touch half the time, else mostly the next few levels."""
    if rng.uniform(rs) < 0.5:
        return 0
    d = 1 + np.int64(rng.exponential(rs, 3.0))
    return d if d < LEVELS else LEVELS - 1


@njit(nogil=True, cache=True)
def _step(L, rs, pressure, fp, i):
    """One market event on instrument i. Returns (traded, aggressor side, price, size)."""
    trade_prob = fp[0]
    p = 0.97 * pressure[i] + 0.25 * rng.normal(rs)
    pressure[i] = p
    pb = _sigmoid(TILT_TRADE * p)
    bb, ab = 2 * i, 2 * i + 1
    if rng.uniform(rs) < trade_prob:
        buy = rng.uniform(rs) < pb
        size = 1 + np.int64(rng.exponential(rs, 20.0))
        rest, agg = (ab, bb) if buy else (bb, ab)
        tp, tq = book.best(L, rest)
        if size >= tq:  # the touch is taken out: level 1 is the touch now
            size = tq
            book.level_add(L, rest, tp, -tq, -1)
            book.level_add(L, agg, tp, 1 + np.int64(rng.exponential(rs, JOIN_MEAN)), 1)  # joins at the vacated price
        else:
            book.level_add(L, rest, tp, -size, 0)
        _fix_spread(L, rs, bb, ab, size)
        _refill(L, rs, bb)
        _refill(L, rs, ab)
        return True, SIDE_BUY if buy else SIDE_SELL, tp, size
    amount = 1 + np.int64(rng.exponential(rs, 15.0))
    d = _pick_level(rs)
    # deep flow follows the pressure more closely than the busy touch does
    pb = _sigmoid((TILT_DEEP if d > 0 else TILT_TOUCH) * p)
    spread = (book.best(L, ab)[0] - book.best(L, bb)[0]) // TICK_SIZE
    if rng.uniform(rs) < 0.55:  # an add, on the side pressure favours
        b = bb if rng.uniform(rs) < pb else ab
        if spread > 1 and rng.uniform(rs) < 0.4:  # improve inside the spread: a new front level
            book.level_add(L, b, _away(b, book.best(L, b)[0], -1), amount, 1)
        else:  # at the touch or behind it (filling a hole makes a level)
            book.level_add(L, b, _away(b, book.best(L, b)[0], d), amount, 1)
    else:  # a cancel, on the side pressure disfavours
        b = ab if rng.uniform(rs) < pb else bb
        px, q = _level_of(L, b, d)
        if d > 0:  # deep interest is pulled in chunks: depth keeps up with the recent pressure
            amount = 1 + np.int64(rng.uniform(rs) * DEEP_CANCEL * q)
        book.level_add(L, b, px, -(amount if amount < q else q), -1 if amount >= q else 0)
    _fix_spread(L, rs, bb, ab, amount)
    _refill(L, rs, bb)
    _refill(L, rs, ab)
    return False, 0, np.int64(0), np.int64(0)


@njit(nogil=True, cache=True)
def _fix_spread(L, rs, bb, ab, amount):
    """Keep the spread sane: past 4 ticks someone quotes inside."""
    while (book.best(L, ab)[0] - book.best(L, bb)[0]) // TICK_SIZE > 4:
        b = bb if rng.uniform(rs) < 0.5 else ab
        book.level_add(L, b, _away(b, book.best(L, b)[0], -1), amount, 1)
        _trim(L, b)  # (a wide spread takes several: the side stays within its room)


@njit(nogil=True, cache=True)
def _event(L, top, W, pressure, rs, fp, i, ts, stage, stats):
    """Run one event and write its ticks to stage: levels, the trade, a quote or book tick."""
    traded, side, price, size = _step(L, rs, pressure, fp, i)
    D.changed_all(W, i)  # (the market does not track which levels an event touched)
    n, nl = D.publish(W, L, i, ts, ts, stage, 0, stats, 0, 1)
    changed = touch_changed(L, i, top)  # trade ticks carry the touch after the trade
    if traded:
        n = emit(stage, n, ts, ts, i, KIND_TRADE, side, price, size, top, stats, 0, 1)
    if changed:
        n = emit_quote(stage, n, ts, ts, i, top, stats, 0, 1)
    elif nl:
        n = D.emit_book(stage, n, ts, ts, i, top, stats, 0, 1)
    return n


@njit(nogil=True, cache=True)
def _generate(L, top, W, pressure, g, rs, fp, stage, stats, out):
    mean_gap = fp[1]
    k = top.shape[0]
    j = 0
    while j < out.shape[0]:
        if g[G_POS] < g[G_N]:  # ts_recv = ts_event here; the publisher stamps its own clock when live
            s = stage[g[G_POS]]
            for q in range(8):
                out[j, q] = s[q]
            g[G_POS] += 1
            j += 1
            continue
        g[G_CLOCK] += 1 + np.int64(rng.exponential(rs, mean_gap))
        i = np.int64(rng.uniform(rs) * k)
        if i >= k:
            i = k - 1
        g[G_N] = _event(L, top, W, pressure, rs, fp, i, EPOCH_START_NS + g[G_CLOCK], stage, stats)
        g[G_POS] = 0
        g[G_EVENTS] += 1
    return out.shape[0]
