"""`binance:FILE` — a raw Binance websocket capture: one line per message, the local receive time
in ns, a space, the JSON message (combined-stream form {"stream", "data"}, or a REST depth
snapshot {"lastUpdateId", "bids", "asks"}); gzip or plain.

  binance:FILE?size_unit=1e-5&market=auto&on_error=stop&depth=10
  size_unit  the quantity one record size unit stands for (default 1e-5, BTC's step on spot;
             quantities are kept exactly at 1e-8 in the book and divided down for the record):
             one lot of the tick stream, so what a backtest's position of 1 is worth
  market     spot, usdm (USD-M futures) or coinm (COIN-M futures); auto (default): futures when
             the capture's depth diffs carry `pu` (COIN-M for symbols like BTCUSD_PERP), else spot.
             It names the venue in the instrument records (engine/instruments.py), hence the fees
  on_error   stop (default): a line that is not "<ns> <json>" is an error naming its line number;
             skip: count it and go on
  depth      book levels per side published as level ticks, 0..32 (default 10; 0 = none)
  book_ticker  quote (default): bookTicker messages become quote ticks (below); check: they are
             only cross-checked against the book and counted (binance-live:// takes the same
             values, and off: not subscribing to the stream)

The depth stream is applied to an L2 book (its top levels in a sorted ladder, the thousands below
in a hash table: feeds/books/book_deep.py) with Binance's documented continuity checks:
- spot: after the snapshot, drop events with u <= lastUpdateId; the first applied event must
  have U <= lastUpdateId + 1 <= u, every later one U == previous u + 1;
- USD-M futures (events carry `pu`): drop u < lastUpdateId; the first applied event must have
  U <= lastUpdateId <= u, every later one pu == previous u.
Events before the snapshot are held and replayed against it. A break in continuity emits a gap
tick (price = update ids missed, or 1 when unknown), clears the book and waits for the next
snapshot in the capture. One quote tick per depth event that changes the top of book; trade
ticks from the trade stream (aggressor: sell when the buyer is the maker).

bookTicker messages are ordered against the depth diffs by update id. One older than the book
(u <= the last update id the book applied: a diff's u or the snapshot's lastUpdateId) is
dropped (ticker_dropped_old; ticker_no_book while there is no book). A newer one puts its best
bid/ask over the book's touch: levels better than (or at) its prices go and its levels are the
best, in the published window and the quote tick (ticker_quotes counts those), until a diff
reaches its update id and the diff's book replaces it; an older diff still updates the book
underneath, with the newer touch kept over it. Spot tickers carry no event time: they take the
instrument's latest exchange time seen. Wherever a ticker and a depth event name the same final
update id, the ticker's best bid/ask is compared with the diff book's, and the agreement is
counted (ticker_checked, ticker_agree, ticker_disagree); a symbol's last 256 diffs and its 1024
newest unmatched tickers are remembered for it (binance_scan.XD, XT).

Bad values are rejected and counted, never reaching the book or a tick (feeds/books/ticks.py price_ok:
a price is above 0 and at most MAX_PRICE): a trade of such a price (negative, 0) or of a size of 0
or below (trade_bad_price, trade_bad_size; its trade id is not taken), a bookTicker with a negative
size or a bad price on a side that has a size (ticker_bad_size, ticker_bad_price; 0 with size 0 is
an empty side), and a depth level at price 0 (or beyond MAX_PRICE) in a diff or a snapshot: left
out, the event's other levels applied (depth_bad_levels).

Depth (engine/records.py): each depth event is a book event (level ticks, then the quote or a
book tick). A snapshot emits a clear tick, its whole window and a book tick carrying the book's
touch (stamped with the capture's receive time: a REST snapshot has no event time). A gap tick
voids every book downstream, so every window is re-sent (after a clear tick) by its
instrument's next event; a trade is an event too, so a stale window goes out before it.

The lines are scanned as bytes in numba (feeds/binance/scan.py: the message shapes Binance sends,
any key order or whitespace, every read bounds-checked), continuity checks, book and ticks
included; Python only hands it decompressed chunks and grows buffers when it asks. With
book_ticker=check the ticks are byte for byte those of the orjson reader it replaced
(tests/helpers/binance_orjson.py, tests/test_binance.py).
"""
import numba
import numpy as np

from engine.readonly import read_only

from feeds.binance import scan as S

from feeds.books import depth

from feeds.core import files, uri as U, venues
from feeds.core.borrow import handles
from feeds.books.book import Ladders
from feeds.books.book_deep import Deep
from feeds.books.depth import Windows

QTY_SCALE = 10**8
HOLD_MAX = 100_000  # depth events held while waiting for a snapshot (per instrument)
STATS = S.STATS


def fixed(s, scale_digits):
    """A decimal string -> int at 10^-scale_digits, exactly (no float on the way)."""
    ip, _, fp = s.partition(".")
    if len(fp) > scale_digits:
        if fp[scale_digits:].strip("0"):
            raise ValueError(f"{s!r} has more than {scale_digits} decimals")
        fp = fp[:scale_digits]
    neg = ip.startswith("-")
    v = int(ip or "0") * 10**scale_digits + (int(fp.ljust(scale_digits, "0")) if fp else 0) * (-1 if neg else 1)
    return v


def price9(s):
    return fixed(s, 9)


def qty8(s):
    return fixed(s, 8)


def _futures_capture(path, limit=1 << 24):
    """Is this a futures capture? Its depth diffs carry `pu` (spot's do not), and its bookTickers an
    event type; looked for in the first lines that say either way (up to 16 MB)."""
    seen = 0
    for chunk in files.chunks(path):
        for key in (b'"depthUpdate"', b'"e":"bookTicker"'):
            at = chunk.find(key)
            if at >= 0:
                if key == b'"e":"bookTicker"':
                    return True
                line = chunk[chunk.rfind(b"\n", 0, at) + 1:chunk.find(b"\n", at)]
                return b'"pu":' in line
        seen += len(chunk)
        if seen >= limit:
            break
    return False


def _check_ring(k):
    """A cross-check ring of k entries per symbol (binance_scan.XD, XT)."""
    return np.zeros((S.MAX_SYMBOLS * k, 5), np.int64), np.zeros((S.MAX_SYMBOLS, 2), np.int64)


class Scanner:
    """The scanner's state (books, windows, symbols, held events, counters) and its driver: run
    line bytes through binance_scan.scan, growing buffers when it asks. BinanceFile feeds it a
    capture's chunks; binance-live (feeds/binance/live.py) feeds it the frames it receives, as lines
    of the same format, so a live run and a replay of its recording give the same ticks."""

    def __init__(self, what, *, strict, quote, size_div, depth):
        self.what = what  # names the input in errors (a path, a URI)
        self.strict = strict
        self.depth = depth
        nbooks = 2 * S.MAX_SYMBOLS
        self.ladders = Ladders(nbooks)
        self.deep = Deep(nbooks)
        self.windows = Windows(nbooks, self.depth)
        k = max(self.depth, 1) + 1  # the view's levels a side: the window and the ticker's touch
        self.view = (np.zeros((nbooks, 3), np.int64), np.zeros(nbooks * k, np.int64), np.zeros(nbooks * k, np.int64),
                     np.zeros(nbooks * k, np.int64), np.zeros(1, np.int64))
        self.top = np.zeros((S.MAX_SYMBOLS, 4), np.int64)
        G = np.zeros(S.NG, np.int64)
        G[S.G_RP_INST] = -1
        G[S.G_STRICT] = strict
        G[S.G_QUOTE] = quote
        G[S.G_SIZE_DIV] = size_div
        G[S.G_HOLD_MAX] = HOLD_MAX
        F = lambda: np.zeros((S.NK, 3), np.int64)  # noqa: E731
        # state (binance_scan): instruments, globals, counters, level scratch, symbols, held
        # entries and their bytes, four parsed-field tables
        self.state = [np.zeros((S.MAX_SYMBOLS, S.NI), np.int64), G, np.zeros(len(STATS), np.int64),
                      np.zeros(1 << 14, np.int64), np.zeros((S.MAX_SYMBOLS, S.SYM_LEN + 1), np.uint8),
                      np.zeros((64, 4), np.int64), np.zeros(1 << 16, np.uint8), F(), F(), F(), F()]
        self.dmap, self.tmap = _check_ring(S.XD), _check_ring(S.XT)
        self.n = 0
        self._names = []  # the symbols' names, as far as they are known
        self._H = None  # the handle table of every state array (None: to build; a grown array voids it)
        for t, want in zip(self._tuples(), S.PACKED):
            if numba.typeof(t) != want:
                raise TypeError(f"the scanner's state {numba.typeof(t)} is not binance_scan.PACKED's {want}")

    def _tuples(self):
        return (self.ladders.arrays(), self.deep.arrays(), self.windows.arrays(), self.view, tuple(self.state),
                self.dmap, self.tmap)

    def declare(self, names):
        """Give `names` the first ids, in this order, before any line is read (binance-live: its
        URI's symbols, so the run knows them at start)."""
        I, G, SYM = self.state[0], self.state[1], self.state[4]
        for name in names:
            if S.declare(I, G, SYM, np.frombuffer(name.encode(), np.uint8)) < 0:
                raise ValueError(f"cannot declare symbol {name!r} (1 to {S.SYM_LEN} bytes, at most {S.MAX_SYMBOLS})")

    @property
    def instruments(self):
        n = int(self.state[1][S.G_NSYM])
        if len(self._names) != n:  # (asked per batch by the publisher: decoded once per new symbol)
            sym = self.state[4]
            self._names = [bytes(sym[i, :sym[i, S.SYM_LEN]]).decode("utf-8", "replace") for i in range(n)]
        return list(self._names)

    def stats(self):
        return dict(zip(STATS, (int(x) for x in self.state[2])))

    def _grow(self, i, need):
        a = self.state[i]
        size = a.shape[0]
        while size < need:
            size *= 2
        b = np.zeros((size,) + a.shape[1:], a.dtype)
        b[:a.shape[0]] = a
        self.state[i] = b

    def table(self):
        """The handle table of every state array (feeds/core/borrow.py), built again after one was replaced."""
        if self._H is None:
            self._H = handles([a for t in self._tuples() for a in t])
        return self._H

    def scan(self, buf, pos, final, out):
        """Run buf[pos:] through the scanner, yielding full tick batches (out[:k]; self.n ticks are
        left in out when it returns); returns where it stopped (the start of an unfinished line)."""
        G = self.state[1]
        buf = read_only(buf)  # one compiled scan: a capture's chunks are bytes (read-only), a live
        # feed's a bytearray; typed apart, the first live batch compiled anew
        while True:
            pos, self.n, r = S.scan_packed(buf, pos, len(buf), final, self.table(), self.top, out, self.n)
            if r == S.R_DONE:
                return pos
            if r in (S.R_ROOM, S.R_DEEP, S.R_VALS, S.R_HOLD):
                self._H = None  # (an array is about to be replaced)
            if r == S.R_OUT:
                yield out[:self.n]
                self.n = 0
            elif r == S.R_ROOM:
                self.ladders.grow(int(G[S.G_NEED]))
            elif r == S.R_DEEP:
                self.deep.grow()
            elif r == S.R_VALS:
                self._grow(3, 2 * int(G[S.G_NEED]) + 2)
            elif r == S.R_HOLD:
                self._grow(5, len(self.state[5]) + 1)
                self._grow(6, int(G[S.G_HBYTES] + G[S.G_NEED]))
            else:
                msg = S.errors_text(int(G[S.G_ERR]), int(G[S.G_ERR_KEY]), self.strict)
                if r == S.R_ERR:
                    raise U.FeedError(f"{self.what}: line {int(G[S.G_ERR_LINE])}: {msg}")
                raise U.FeedError(f"{self.what}: {msg}")


def size_divisor(u, size_unit):
    """Record size units per 1e-8 of the base asset, from `size_unit` (a power of ten, 1e-8..1)."""
    div = size_unit * QTY_SCALE
    if size_unit <= 0 or abs(div - round(div)) > 1e-9 or round(div) < 1:
        raise U.FeedError(f"{u}: size_unit must be a power of ten between 1e-8 and 1, got {size_unit}")
    return int(round(div))


class ScannedSource:
    """What binance:FILE and binance-live (feeds/binance/live.py) say of their instruments: the
    symbols their `scanner` has met, in id order, and their records (`_specs`: venues.Specs)."""

    @property
    def instruments(self):
        return self.scanner.instruments

    @property
    def specs(self):
        """The instruments' records (engine/instruments.py), in the order of `instruments`."""
        return self._specs.of(self.instruments)


class BinanceFile(ScannedSource):
    live = False

    def __init__(self, u, v):
        self.uri, self.path = u, v.target
        path = v.target
        files.check_readable(path)
        self.size_div = size_divisor(u, v.size_unit)
        self.size_unit = v.size_unit
        futures = _futures_capture(path) if v.market == "auto" else v.market != "spot"
        self._specs = venues.Specs(lambda s: venues.binance(
            s, self.size_unit, v.market if v.market != "auto" else
            ("coinm" if "_" in s else "usdm") if futures else "spot"))
        self.strict = v.on_error == "stop"
        self.depth = v.depth
        self.scanner = Scanner(path, strict=self.strict, quote=v.book_ticker == "quote", size_div=self.size_div,
                               depth=self.depth)

    @property
    def state(self):
        return self.scanner.state

    def resync(self):
        """A consumer asked for every window again (feeds/process.py)."""
        self.scanner.windows.forget()

    def stats(self):
        return self.scanner.stats()

    def _scan(self, buf, pos, final, out):
        return self.scanner.scan(buf, pos, final, out)

    OUT_ROWS = 4096  # tick batch size (tests make it small to run the out-of-room path)

    def batches(self):
        if self.OUT_ROWS < 2 + depth.room(self.depth):
            raise ValueError(f"a tick buffer of {self.OUT_ROWS} rows cannot hold one event's ticks "
                             f"at depth {self.depth}")
        out = np.zeros((self.OUT_ROWS, 8), np.int64)
        self.scanner.n = 0
        carry = b""
        for chunk in files.chunks(self.path):
            data = carry + chunk if carry else chunk
            pos = yield from self._scan(np.frombuffer(data, np.uint8), 0, False, out)
            carry = data[pos:]
        C, G = self.state[2], self.state[1]
        if not C[S.C_LINES] and not carry.strip():
            raise U.FeedError(f"{self.path}: empty: no messages")
        if carry.strip() and self.strict and not carry.rstrip().endswith(b"}"):
            raise U.FeedError(f"{self.path}: truncated: the last line ({int(G[S.G_LINENO]) + 1}) is cut off")
        yield from self._scan(np.frombuffer(carry, np.uint8), 0, True, out)
        if self.scanner.n:
            yield out[:self.scanner.n]
