"""The execution simulator: what a backtest's signals would have filled, order by order.

Each signal sets an instrument's target position (signed lots, the tick sizes' unit). The
simulator turns it into an order for `target - position`, sent when the signal's tick was
received and arriving at the exchange `entry` ns later (the order-entry latency; a later signal
for the same instrument cancels a working order when it arrives). Arrival is in exchange time:
the signal tick's receive time plus the entry latency when the data's receive and exchange clocks
are comparable (recorded captures: feed latency is then the data's own ts_recv - ts_event, the
receive clock moved forward when it ran behind the exchange's: `clock_skew`),
else its exchange time plus a constant feed latency; each source's clocks are its own (a merged
file's or a run's sources: `groups`). The order meets its instrument's book (as the ticks before
it left it) at the first tick of that instrument after its signal's whose exchange time is at or
after its arrival, in file order (the exchange's sequence). Nothing of one instrument moves
another's orders, so each instrument's fills are those of a file of its ticks alone (a merged
file is the sum of its parts).

Orders (per signal: the strategy's `maker` param, 0 or 1, or `engine backtest --orders`):
- taker: crosses the spread at arrival and walks the book's depth window for its size (buys take
  asks from the best up); what the window cannot fill is cancelled (IOC) and counted unfilled
  (`unfilled_lots`).
- maker: joins its own side's touch at arrival with `ahead` = the level's size then (it is last
  in the queue). Queue model on aggregate (L2) data, the estimator of Rigtorp's note that
  hftbacktest's probabilistic models also follow:
    * a trade at our price hitting our side fills what exceeds `ahead`; `ahead` shrinks by the
      trade's size;
    * a trade through our price, or the other side's touch or a level at or through our price,
      fills all that is left (that counterparty had to meet us first);
    * a decrease of our level's size that trades of the same event do not explain is a cancel,
      taken from ahead of us with probability f(ahead) / (f(ahead) + f(behind)), f(x) = x ** n
      (`queue_power`, default 3: cancels come mostly from the back of a long queue); increases
      join behind us;
    * if our price leaves the touch for a worse one (depth 0 data), everything ahead of us left.
  A maker order works until it fills or a later signal for its instrument arrives; what it had
  left then is counted cancelled (`maker_cancelled_lots`), one with no touch to join never placed
  (`maker_unplaced_lots`), and what still works when the data ends `working_lots`.
- Fills are known to the trader `response` ns after they happen (ts_local); the position an
  order is sized from is the one the exchange knows (an exact order manager).
The book an order meets: the depth window's levels (level ticks), or for data without them (depth
0, or an instrument whose source sends none, merged with a deeper one) the touch its quotes carry.
Fees per fill: `maker_bps` / `taker_bps` of the notional plus `per_contract` a lot; notional and
PnL in currency use the instrument's `multiplier` (currency per 1.0 of price per lot: ES is 50).

Everything runs in one pass over the file (numba), linear in ticks + signals.
"""
from dataclasses import dataclass

import numpy as np
from engine.jit import njit

from engine import levelbook
from engine.intrinsics import borrow
from engine.levelbook import PX, SZ
from engine.records import (KIND_BOOK, KIND_LEVEL, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL, tick_ask_sz, tick_bid_sz,
                            tick_instrument, tick_instruments, tick_kind, tick_side, tick_size)

MAXLV = 32   # book levels a side the simulator keeps (the most a depth window carries)
# spec columns (float64 per instrument)
SP_MULT, SP_MAKER_BPS, SP_TAKER_BPS, SP_PER_LOT = range(4)
# order state columns (int64 per instrument): working order
O_ACTIVE, O_SIDE, O_PX, O_REM, O_SIG, O_POS = range(6)
# float state columns per instrument
F_AHEAD, F_LVL, F_DEC, F_TRADED = range(4)
# lots that never filled, by why (int64 counters): a taker's remainder the book could not fill (IOC);
# a maker order that had no touch to join (or arrived after the data); a maker's remainder a later
# signal cancelled. (A maker still working at the end of the data: `working_lots`.) U_ORDERED: every
# order's lots, so ordered = filled + the three + working.
U_TAKER, U_UNPLACED, U_CANCELLED, U_ORDERED = range(4)

FILL_DTYPE = np.dtype([("signal", "i8"), ("tick", "i8"), ("ts_event", "i8"), ("ts_local", "i8"), ("instrument", "i8"),
                       ("qty", "i8"), ("price", "i8"), ("maker", "i8"), ("fee", "f8")])
FILL_WORDS = 8  # the int64 columns, in order; fees (currency) in a float64 column beside them


@dataclass
class ExecParams:
    entry_ns: object = 0            # int, or int64 array: per-order entry latencies (used in order, cycled)
    response_ns: object = 0
    feed_ns: int = 0                # used only when the data's clocks are not comparable
    maker: object = False           # bool, or bool array per signal
    queue_power: float = 3.0


def _lat(v, k):
    """Latencies for k orders: a constant, or recorded/sampled values used in order (cycled)."""
    a = np.asarray(v, np.int64).reshape(-1)
    if a.size == 0:
        return np.zeros(k, np.int64)
    return np.resize(a, k) if a.size > 1 else np.full(k, int(a[0]), np.int64)


def clocks_comparable(words):
    """Do ts_recv and ts_event share an epoch (a capture's wall-clock receive stamps), so their
    difference is the feed latency? Live recordings stamp CLOCK_MONOTONIC: not comparable."""
    if not len(words):
        return False
    d = words[:: max(1, len(words) // 1000), 2] - words[:: max(1, len(words) // 1000), 1]
    return bool(np.abs(np.median(d)) < 3_600_000_000_000)


def clock_skew(words):
    """How far the receiving clock ran behind the exchange's (ns, >= 0): a receive stamp before
    its own exchange stamp is skew, not negative latency; receive times are moved forward by it
    so the smallest feed latency in the file is 0 (hftbacktest's converter does the same)."""
    if not len(words):
        return 0
    return max(0, -int(_min_latency(words)))


@njit(nogil=True, cache=True)
def _min_latency(words):
    """min(ts_recv - ts_event) in one pass (numpy would build a whole column of differences)."""
    m = words[0, 2] - words[0, 1]
    for i in range(1, words.shape[0]):
        d = words[i, 2] - words[i, 1]
        if d < m:
            m = d
    return m


@njit(nogil=True, cache=True)
def _better(side, a, b):
    """Is price a better than b for book side (0 bid, 1 ask)?"""
    return a > b if side == 0 else a < b


@njit(nogil=True, cache=True)
def _set_touch(book, bn, inst, side, px, sz):
    """A touch from a quote (depth-0 data): the book is that one level."""
    if px > 0 and sz > 0:
        book[inst, side, PX, 0] = px
        book[inst, side, SZ, 0] = sz
        bn[inst, side] = 1
    else:
        bn[inst, side] = 0


@njit(nogil=True, inline="always", cache=True)
def fee_of(spec, inst, qty, px, maker):
    """What a fill of qty lots at px (price units) costs: bps of its notional and a fee per lot."""
    notional = abs(qty) * (px / 1e9) * spec[inst, SP_MULT]
    bps = spec[inst, SP_MAKER_BPS] if maker else spec[inst, SP_TAKER_BPS]
    return notional * bps / 1e4 + abs(qty) * spec[inst, SP_PER_LOT]


@njit(nogil=True, cache=True)
def fees_of(rows, spec, out):
    """fee_of for fill rows (FILL_WORDS columns) into out: the fees at another spec (app/paper.py
    prices fills again when an instrument's record arrives after them)."""
    for n in range(rows.shape[0]):
        out[n] = fee_of(spec, rows[n, 4], rows[n, 5], rows[n, 6], rows[n, 7] != 0)


@njit(nogil=True, cache=True)
def _emit(fills, fees, nf, k, j, ts, resp, inst, qty, px, spec, maker):
    fees[nf] = fee_of(spec, inst, qty, px, maker)
    r = fills[nf]
    r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] = k, j, ts, ts + resp, inst, qty, px, 1 if maker else 0
    return nf + 1


@njit(nogil=True, cache=True)
def maker_fill(O, inst, qty, j, ts, resp, spec, fills, fees, nf, pos):
    """Fill `qty` lots of the working maker order (O's first five columns) at its price."""
    side = O[inst, O_SIDE]
    signed = qty if side > 0 else -qty
    nf = _emit(fills, fees, nf, O[inst, O_SIG], j, ts, resp, inst, signed, O[inst, O_PX], spec, True)
    pos[inst] += signed
    O[inst, O_REM] -= qty
    if O[inst, O_REM] <= 0:
        O[inst, O_ACTIVE] = 0
    return nf


@njit(nogil=True, cache=True)
def send(k, j, ts, sig, O, pos, book, bn, spec, resp, fills, fees, nf, unfilled):
    """Signal k's order arrives: a taker walks the other side's levels now (what they cannot fill
    is counted unfilled); a maker becomes the instrument's working order at its own touch.
    Returns (fills written, size of the level the maker joined, or -1)."""
    inst = sig[k, 0]
    if O[inst, O_ACTIVE] != 0 and O[inst, O_REM] > 0:
        unfilled[U_CANCELLED] += O[inst, O_REM]
    O[inst, O_ACTIVE] = 0
    delta = sig[k, 1] - pos[inst]
    if delta == 0:
        return nf, -1
    unfilled[U_ORDERED] += abs(delta)
    book_side = 1 if delta > 0 else 0  # a buy meets the asks; a maker buy joins the bids
    if sig[k, 2] == 0:
        left = abs(delta)
        q = 0
        while left > 0 and q < bn[inst, book_side]:
            take = min(left, book[inst, book_side, SZ, q])
            if take > 0:
                signed = take if delta > 0 else -take
                nf = _emit(fills, fees, nf, k, j, ts, resp, inst, signed, book[inst, book_side, PX, q], spec, False)
                pos[inst] += signed
                left -= take
            q += 1
        unfilled[U_TAKER] += left
        return nf, -1
    own = 1 - book_side
    if bn[inst, own] == 0:  # no touch to join: nothing to price it from
        unfilled[U_UNPLACED] += abs(delta)
        return nf, -1
    O[inst, O_ACTIVE] = 1
    O[inst, O_SIDE] = 1 if delta > 0 else -1
    O[inst, O_PX] = book[inst, own, PX, 0]
    O[inst, O_REM] = abs(delta)
    O[inst, O_SIG] = k
    return nf, book[inst, own, SZ, 0]


@njit(nogil=True, cache=True)
def _flush(O, F, inst, power):
    """End of a book event at our price: decreases not explained by trades were cancels."""
    dec, traded = F[inst, F_DEC], F[inst, F_TRADED]
    F[inst, F_DEC] = 0.0
    F[inst, F_TRADED] = 0.0
    c = dec - traded
    if c <= 0 or O[inst, O_ACTIVE] == 0:
        return
    ahead = F[inst, F_AHEAD]
    behind = F[inst, F_LVL] + c - ahead  # the level before the cancel, less what is ahead of us
    if behind < 0:
        behind = 0.0
    fa, fb = ahead ** power, behind ** power
    p = fa / (fa + fb) if fa + fb > 0 else 1.0
    ahead -= c * p
    if ahead > F[inst, F_LVL]:
        ahead = F[inst, F_LVL]
    F[inst, F_AHEAD] = ahead if ahead > 0 else 0.0


@njit(nogil=True, cache=True)
def _arrive(k, j, ts, sig, O, F, pos, book, bn, spec, resp, fills, fees, nf, unfilled):
    """Signal k's order reaches the exchange before tick j: cancel what works, send the new one."""
    inst = sig[k, 0]
    F[inst, F_DEC] = 0.0
    F[inst, F_TRADED] = 0.0
    nf, joined = send(k, j, ts, sig, O, pos, book, bn, spec, resp, fills, fees, nf, unfilled)
    if joined >= 0:  # last in its queue: everything at the level is ahead
        F[inst, F_AHEAD] = joined
        F[inst, F_LVL] = joined
    return nf


@njit(nogil=True, cache=True)
def _crossed(O, inst, px):
    """Is a resting price on the other side at or through our working price?"""
    return px > 0 and (px <= O[inst, O_PX] if O[inst, O_SIDE] > 0 else px >= O[inst, O_PX])


def queues(inst, n_inst):
    """Each instrument's orders in emission order as linked lists: (head int64[n_inst], the
    instrument's next order to arrive or -1; nxt int64[m], the order after each of its instrument's;
    tail int64[n_inst], its last order). `enqueue` adds orders to them."""
    head, tail = np.full(max(1, n_inst), -1, np.int64), np.full(max(1, n_inst), -1, np.int64)
    nxt = np.full(len(inst), -1, np.int64)
    enqueue(head, tail, nxt, np.asarray(inst, np.int64), 0)
    return head, nxt, tail


@njit(nogil=True, cache=True)
def enqueue(head, tail, nxt, inst, start):
    """Orders start, start+1, ... (of instruments inst) join their instruments' lists."""
    for n in range(inst.shape[0]):
        k, i = start + n, inst[n]
        nxt[k] = -1
        if head[i] < 0:
            head[i] = k
        else:
            nxt[tail[i]] = k
        tail[i] = k


@njit(nogil=True, inline="always", cache=True)
def _arrivals(k, nxt, j, ts, sig, arrival, resp, O, F, pos, book, bn, spec, fills, fees, nf, unfilled):
    """Orders from k on (its instrument's list) that reach the exchange by tick j's time, decided
    before tick j, arrive. Returns (the first still to arrive, or -1; fills written)."""
    while k >= 0 and arrival[k] <= ts and sig[k, 3] < j:  # (decided after its tick)
        nf = _arrive(k, j, ts, sig, O, F, pos, book, bn, spec, resp[k], fills, fees, nf, unfilled)
        k = nxt[k]
    return k, nf


@njit(nogil=True, inline="always", cache=True)
def _on_level(w, j, ts, inst, tside, act, r, depth, O, F, pos, book, bn, lv, spec, fills, fees, nf):
    """A level tick: the book's level set (or the book cleared); at our price and side, the
    level's size followed (its decreases netted against trades at the event's end); a level on
    the other side at or through our price fills what we have left."""
    if lv[inst] == 0 and depth > 0:  # its first level tick: the levels' book, not a touch from quotes
        lv[inst] = 1
        levelbook.clear(book, bn, inst)
    bs = 0 if tside == SIDE_BUY else 1
    if tside != SIDE_BUY and tside != SIDE_SELL:  # a clear tick
        levelbook.clear(book, bn, inst)
        return nf
    px, sz = w[3], tick_size(w)
    # strictly inside the window (or a window not full): a size-0 tick there means the level emptied;
    # at the worst of a full window it may only have been pushed out by a better one
    inside = bn[inst, bs] < depth or _better(bs, px, book[inst, bs, PX, bn[inst, bs] - 1])
    levelbook.set_level(book, bn, inst, bs, px, sz)
    if act:
        own = 0 if O[inst, O_SIDE] > 0 else 1
        if bs == own and px == O[inst, O_PX]:
            lvl = F[inst, F_LVL]
            if sz > 0 or inside:  # size 0 at a price inside the window: emptied
                if sz < lvl:
                    F[inst, F_DEC] += lvl - sz
                F[inst, F_LVL] = sz
        elif bs != own and sz > 0 and _crossed(O, inst, px):
            nf = maker_fill(O, inst, O[inst, O_REM], j, ts, r, spec, fills, fees, nf, pos)
    return nf


@njit(nogil=True, inline="always", cache=True)
def _on_trade(w, j, ts, inst, tside, r, O, F, pos, spec, fills, fees, nf):
    """A trade hitting our working order's side: at our price it fills what exceeds `ahead` (and
    shrinks it); through our price it fills all we have left."""
    hits_us = (tside == SIDE_SELL) if O[inst, O_SIDE] > 0 else (tside == SIDE_BUY)
    px, sz = w[3], tick_size(w)
    if hits_us and px == O[inst, O_PX]:
        ahead = F[inst, F_AHEAD]
        fill = sz - ahead
        F[inst, F_AHEAD] = ahead - sz if ahead > sz else 0.0
        F[inst, F_TRADED] += sz
        if fill >= 1:
            q = min(np.int64(fill), O[inst, O_REM])
            nf = maker_fill(O, inst, q, j, ts, r, spec, fills, fees, nf, pos)
    elif hits_us and ((O[inst, O_SIDE] > 0 and px < O[inst, O_PX]) or
                      (O[inst, O_SIDE] < 0 and px > O[inst, O_PX])):
        nf = maker_fill(O, inst, O[inst, O_REM], j, ts, r, spec, fills, fees, nf, pos)
    return nf


@njit(nogil=True, inline="always", cache=True)
def _on_touch(w, j, ts, inst, kind, r, depth, power, O, F, pos, book, bn, lv, spec, fills, fees, nf):
    """A tick carrying the touch (quote, trade, book): the book's touch where the instrument has
    no levels; the other side at or through our price fills all we have left; else our level's
    size followed on the touch, and an event's end (a quote or book tick) nets its decreases
    against its trades."""
    bid, ask = w[4], w[5]
    bsz_, asz_ = tick_bid_sz(w), tick_ask_sz(w)
    touch = depth == 0 or lv[inst] == 0  # (no levels of this instrument: its book is the touch)
    if touch:
        _set_touch(book, bn, inst, 0, bid, bsz_)
        _set_touch(book, bn, inst, 1, ask, asz_)
    if O[inst, O_ACTIVE] != 0:
        buy = O[inst, O_SIDE] > 0
        own_px, own_sz = (bid, bsz_) if buy else (ask, asz_)
        other = ask if buy else bid
        if _crossed(O, inst, other):
            nf = maker_fill(O, inst, O[inst, O_REM], j, ts, r, spec, fills, fees, nf, pos)
        elif touch:
            if own_px == O[inst, O_PX]:
                if own_sz < F[inst, F_LVL]:
                    F[inst, F_DEC] += F[inst, F_LVL] - own_sz
                F[inst, F_LVL] = own_sz
            elif own_px > 0 and _better(0 if buy else 1, O[inst, O_PX], own_px):
                F[inst, F_AHEAD] = 0.0  # our price emptied: the touch is worse now
                F[inst, F_LVL] = 0.0
        if O[inst, O_ACTIVE] != 0 and kind != KIND_TRADE:  # an event ends: net its trades
            _flush(O, F, inst, power)
    return nf


@njit(nogil=True, inline="always", cache=True)
def _never_arrived(head, nxt, sig, pos, unfilled):
    """Orders still to arrive after their instrument's last tick: counted unfilled, lists emptied."""
    for i in range(head.shape[0]):
        k = head[i]
        while k >= 0:
            unfilled[U_TAKER if sig[k, 2] == 0 else U_UNPLACED] += abs(sig[k, 1] - pos[sig[k, 0]])
            unfilled[U_ORDERED] += abs(sig[k, 1] - pos[sig[k, 0]])
            k = nxt[k]
        head[i] = -1


@njit(nogil=True, cache=True)
def simulate(words, j, head, nxt, sig, arrival, resp, spec, power, depth, O, F, pos, book, bn, lv, fills, fees,
             unfilled, final=True):
    """From tick j on, each instrument's orders from its `head` on (`queues`; moved as they
    arrive): returns (j, fills written). Stops early when `fills` is nearly full (the caller
    grows it and calls again: every piece of state is in the arrays).
    final: words is the whole file, so orders still to arrive after their instrument's last tick
    are counted unfilled; not final (paper trading, app/paper.py): more ticks and signals come,
    the call resumes where this one stopped.
    sig: int64[m, 4] (instrument, target position, maker 0/1, tick index); arrival: exchange ns per signal.
    lv: int64 per instrument, 1 once a level tick of it came: its book is its levels' from then on,
    its quotes' touch before (a source without levels, merged with a deeper one, keeps its touch).
    Every array is borrowed (the caller holds them): the inlined steps (this file's per-tick
    helpers, levelbook's) would otherwise count their references on every tick."""
    words, head, nxt, sig, arrival, resp = borrow(words), borrow(head), borrow(nxt), borrow(sig), borrow(arrival), \
        borrow(resp)
    spec, O, F, pos, book, bn, lv = borrow(spec), borrow(O), borrow(F), borrow(pos), borrow(book), borrow(bn), borrow(lv)
    fills, fees, unfilled = borrow(fills), borrow(fees), borrow(unfilled)
    n = words.shape[0]
    nf = 0
    cap = fills.shape[0] - 2 * MAXLV - 4
    while j < n:
        if nf >= cap:
            return j, nf
        w = words[j]
        ts = w[1]
        inst = tick_instrument(w)
        kind = tick_kind(w)
        tside = tick_side(w)
        if inst >= O.shape[0] or inst >= head.shape[0]:
            j += 1
            continue
        head[inst], nf = _arrivals(head[inst], nxt, j, ts, sig, arrival, resp, O, F, pos, book, bn, spec, fills, fees,
                                   nf, unfilled)
        act = O[inst, O_ACTIVE] != 0
        r = resp[O[inst, O_SIG]] if act else 0
        if kind == KIND_LEVEL:
            nf = _on_level(w, j, ts, inst, tside, act, r, depth, O, F, pos, book, bn, lv, spec, fills, fees, nf)
        elif kind == KIND_TRADE and act:
            nf = _on_trade(w, j, ts, inst, tside, r, O, F, pos, spec, fills, fees, nf)
        if kind == KIND_QUOTE or kind == KIND_TRADE or kind == KIND_BOOK:  # they carry the touch
            nf = _on_touch(w, j, ts, inst, kind, r, depth, power, O, F, pos, book, bn, lv, spec, fills, fees, nf)
        j += 1
    if final:
        _never_arrived(head, nxt, sig, pos, unfilled)
    return j, nf


def order_inputs(words, signals, p, groups=None):
    """The simulators' view of one file's signals (SIGNAL_DTYPE, file order): int64[m, 4]
    (instrument, target position, maker 0/1, tick index), each order's arrival in exchange time
    and its response latency, and whether the file's clocks are comparable (and their skew: the
    largest). groups: int64 per instrument id, its source (a merged file's or a run's sources
    each have their own clocks: whether they are comparable and their skew are each one's own);
    None: one source."""
    m = len(signals)
    sig = np.zeros((m, 4), np.int64)
    if m:
        sig[:, 0] = signals["instrument"]
        sig[:, 1] = signals["position"]
        sig[:, 2] = np.resize(np.asarray(p.maker, np.int64).reshape(-1), m) if np.ndim(p.maker) else int(bool(p.maker))
        sig[:, 3] = signals["tick_seq"]
    idx = sig[:, 3]
    if groups is None or len(np.unique(groups)) < 2:
        comparable = clocks_comparable(words)
        skew = clock_skew(words) if comparable else 0
        base = words[idx, 2] + skew if comparable else words[idx, 1] + int(p.feed_ns)
        return sig, base + _lat(p.entry_ns, m), _lat(p.response_ns, m), comparable, skew
    groups = np.asarray(groups, np.int64)
    tick_group = groups[np.minimum(tick_instruments(words), len(groups) - 1)] if len(words) else np.zeros(0, np.int64)
    sig_group = tick_group[idx]
    base = np.zeros(m, np.int64)
    all_comparable, most = True, 0
    for g in np.unique(groups):
        own = words[tick_group == g]
        comparable = clocks_comparable(own)
        skew = clock_skew(own) if comparable else 0
        all_comparable, most = all_comparable and comparable, max(most, skew)
        sel = sig_group == g
        base[sel] = words[idx[sel], 2] + skew if comparable else words[idx[sel], 1] + int(p.feed_ns)
    return sig, base + _lat(p.entry_ns, m), _lat(p.response_ns, m), all_comparable, most


def fills_table(rows, fees):
    """FILL_DTYPE records from the simulators' int64 rows and float64 fees (lists of chunks)."""
    rows = np.concatenate(rows) if rows else np.zeros((0, FILL_WORDS), np.int64)
    fills = np.zeros(len(rows), FILL_DTYPE)
    for c, name in enumerate(FILL_DTYPE.names[:FILL_WORDS]):
        fills[name] = rows[:, c]
    fills["fee"] = np.concatenate(fees) if fees else 0.0
    return fills


def run(words, signals, n_inst, spec, p, depth, groups=None):
    """Fills (FILL_DTYPE) and counters for one file's signals (SIGNAL_DTYPE, file order); groups:
    each instrument's source (`order_inputs`)."""
    sig, arrival, resp, comparable, skew = order_inputs(words, signals, p, groups)
    m = len(sig)
    n_inst = max(n_inst, int(sig[:, 0].max()) + 1 if m else 1)
    head, nxt, _ = queues(sig[:, 0], n_inst)
    O = np.zeros((n_inst, 6), np.int64)
    F = np.zeros((n_inst, 4), np.float64)
    pos = np.zeros(n_inst, np.int64)
    book = np.zeros((n_inst, 2, 2, MAXLV), np.int64)  # engine/levelbook.py's layout
    bn = np.zeros((n_inst, 2), np.int64)
    lv = np.zeros(n_inst, np.int64)
    unfilled = np.zeros(4, np.int64)
    spec = np.ascontiguousarray(spec, np.float64)
    buf = np.zeros((max(1024, 4 * m + 2 * MAXLV + 8), FILL_WORDS), np.int64)
    fee = np.zeros(len(buf), np.float64)
    out, fout, j = [], [], 0
    while True:  # (simulate stops early only when buf is nearly full; past the last tick it is done)
        j, nf = simulate(words, j, head, nxt, sig, arrival, resp, spec, float(p.queue_power), int(depth), O, F, pos,
                         book, bn, lv, buf, fee, unfilled)
        out.append(buf[:nf].copy())
        fout.append(fee[:nf].copy())
        if j >= len(words):
            break
    return fills_table(out, fout), unfilled_info(unfilled, O, comparable, skew)


def unfilled_info(unfilled, O, comparable, skew):
    """The simulators' counters: lots that never filled, by why, and the clocks' relation."""
    return {"unfilled_lots": int(unfilled[U_TAKER]), "maker_unplaced_lots": int(unfilled[U_UNPLACED]),
            "maker_cancelled_lots": int(unfilled[U_CANCELLED]), "ordered_lots": int(unfilled[U_ORDERED]),
            "working_lots": int(np.abs(O[:, O_REM] * (O[:, O_ACTIVE] != 0)).sum()),
            "clocks_comparable": comparable, "clock_skew_ns": skew}
