"""A pure-Python depth-window consumer (engine/records.py) and the checks the depth tests share.

`DepthBooks` applies level, clear and gap ticks to per-instrument dict books, as a strategy loop
would. `windows(ticks, depth)` runs a whole stream through it, checks the protocol at every tick,
and returns the *window history*: per terminal tick (quote, book, trade), what the consumer then
holds. Reference books built independently from the raw data produce the same history, so the two
are compared entry by entry.
"""
import bisect

from engine.records import (KIND_BOOK, KIND_GAP, KIND_LEVEL, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_NONE, SIDE_SELL,
                            TICK_DTYPE)

U32_MAX = 0xFFFFFFFF


class ProtocolError(AssertionError):
    pass


_F = {name: k for k, name in enumerate(TICK_DTYPE.names)}
F_KIND, F_INST, F_SIDE, F_PRICE, F_SIZE = _F["kind"], _F["instrument"], _F["side"], _F["price"], _F["size"]
F_BID, F_BSZ, F_ASK, F_ASZ = _F["bid_px"], _F["bid_sz"], _F["ask_px"], _F["ask_sz"]


class DepthBooks:
    """Per instrument: ({bid price: size}, {ask price: size}). strict: a removal of a price the
    book does not hold, or a side growing past `depth`, is a protocol error."""

    def __init__(self, depth, strict=True):
        self.depth, self.strict = depth, strict
        self.books = {}

    def apply(self, r):
        """Apply one tick: a TICK_DTYPE record or the tuple `.tolist()` gives for one."""
        r = r.tolist() if hasattr(r, "tolist") else r
        kind = r[F_KIND]
        if kind == KIND_GAP:
            self.books.clear()
            return
        if kind != KIND_LEVEL:
            return
        inst, side, px, sz = r[F_INST], r[F_SIDE], r[F_PRICE], r[F_SIZE]
        if side == SIDE_NONE:
            if self.strict and (px != 0 or sz != 0):
                raise ProtocolError(f"clear tick with price {px} size {sz}")
            self.books.pop(inst, None)
            return
        if side not in (SIDE_BUY, SIDE_SELL):
            raise ProtocolError(f"level tick with side {side}")
        if r[F_BID] or r[F_ASK] or r[F_BSZ] or r[F_ASZ]:
            raise ProtocolError("a level tick carries bid/ask fields")
        book = self.books.setdefault(inst, ({}, {}))[side - 1]
        if sz:
            book[px] = sz
            if self.strict and len(book) > self.depth:
                raise ProtocolError(f"instrument {inst} side {side}: {len(book)} levels > depth {self.depth}")
        elif px in book:
            del book[px]
        elif self.strict:
            raise ProtocolError(f"instrument {inst}: removal of {px}, which the window does not hold")

    def window(self, inst):
        """((bid px, size) best first, (ask px, size) best first), at most depth each."""
        bids, asks = self.books.get(inst, ({}, {}))
        return (tuple(sorted(bids.items(), reverse=True)[:self.depth]),
                tuple(sorted(asks.items())[:self.depth]))


class Side:
    """One side of a reference book: price -> size, with its prices kept sorted (bisect), so the
    top N is cheap however deep the book is."""

    def __init__(self, bid):
        self.bid, self.q, self.px = bid, {}, []

    def add(self, price, dq):
        self.set(price, self.q.get(price, 0) + dq)

    def set(self, price, q):
        if q > 0:
            if price not in self.q:
                bisect.insort(self.px, price)
            self.q[price] = q
        elif price in self.q:
            del self.q[price]
            del self.px[bisect.bisect_left(self.px, price)]

    def clear(self):
        self.q, self.px = {}, []

    def top(self, n, size=lambda q: q):
        ps = self.px[::-1][:n] if self.bid else self.px[:n]
        return tuple((p, size(self.q[p])) for p in ps)


def side_pair():
    return Side(True), Side(False)


def window_of(bids, asks, depth, size=lambda q: q):
    """A reference book's window in the same form (two Sides; sizes as the feed publishes them)."""
    return bids.top(depth, size), asks.top(depth, size)


def check_window(w, depth):
    bids, asks = w
    assert len(bids) <= depth and len(asks) <= depth
    assert all(q > 0 for _, q in bids + asks), w
    assert all(bids[i][0] > bids[i + 1][0] for i in range(len(bids) - 1)), bids
    assert all(asks[i][0] < asks[i + 1][0] for i in range(len(asks) - 1)), asks


def touch_of(w):
    bids, asks = w
    return ((bids[0] if bids else (0, 0)) + (asks[0] if asks else (0, 0)))


class History:
    """The window history: ("w", inst, window) when an instrument's window changed at a quote or
    book tick, ("t", inst, window) at every trade."""

    def __init__(self):
        self.items, self.last = [], {}

    def event(self, inst, w):
        if self.last.get(inst, ((), ())) != w:
            self.last[inst] = w
            self.items.append(("w", inst, w))

    def trade(self, inst, w):
        self.items.append(("t", inst, w))

    def void(self):
        self.last.clear()


def windows(ticks, depth, strict=True, touch=True):
    """Run a stream through DepthBooks, checking at every quote, book and trade tick that the
    window is well formed (<= depth a side, bids strictly descending, asks ascending, no size 0)
    and, at quote and book ticks, that level 0 is the touch the tick carries. Returns the
    History. touch=False skips the level-0 check (for streams where the feed says it differs)."""
    books, h = DepthBooks(depth, strict), History()
    for k, r in enumerate(ticks.tolist()):
        kind = r[F_KIND]
        books.apply(r)
        if kind == KIND_GAP:
            h.void()
            continue
        if kind not in (KIND_QUOTE, KIND_BOOK, KIND_TRADE):
            continue
        inst = r[F_INST]
        w = books.window(inst)
        check_window(w, depth)
        if touch and kind != KIND_TRADE:
            have = touch_of(w)
            carried = (r[F_BID], r[F_BSZ], r[F_ASK], r[F_ASZ])
            if have != carried:
                raise ProtocolError(f"tick {k} ({kind}): level 0 {have} but the tick carries {carried}")
        if kind == KIND_TRADE:
            h.trade(inst, w)
        else:
            h.event(inst, w)
    return h


def same_history(got, want):
    """Equal entry by entry (the first difference named)."""
    for k, (a, b) in enumerate(zip(got.items, want.items)):
        assert a == b, f"history entry {k}: stream {a} != reference {b}"
    assert len(got.items) == len(want.items), (len(got.items), len(want.items))


def quotes_and_trades(a):
    return a[(a["kind"] == KIND_QUOTE) | (a["kind"] == KIND_TRADE) | (a["kind"] == KIND_GAP)]


def sat_size(q, div=1):
    """A reference level size as a feed publishes it (feeds/books/depth.py)."""
    q //= div
    return U32_MAX if q > U32_MAX else (1 if q <= 0 else q)

