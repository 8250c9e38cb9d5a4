"""`binance:FILE` — a raw Binance websocket capture: one line per message, the local receive time
in ns, a space, the JSON message (combined-stream form {"stream", "data"}, or a REST depth
snapshot {"lastUpdateId", "bids", "asks"}); gzip or plain.

  binance:FILE?size_unit=1e-5&on_error=stop
  size_unit  the quantity one record size unit stands for (default 1e-5, BTC's step on spot;
             quantities are kept exactly at 1e-8 in the book and divided down for the record)
  on_error   stop (default): a line that is not "<ns> <json>" is an error naming its line number;
             skip: count it and go on

The depth stream is applied to an L2 book with Binance's documented continuity checks:
- spot: after the snapshot, drop events with u <= lastUpdateId; the first applied event must
  have U <= lastUpdateId + 1 <= u, every later one U == previous u + 1;
- USD-M futures (events carry `pu`): drop u < lastUpdateId; the first applied event must have
  U <= lastUpdateId <= u, every later one pu == previous u.
Events before the snapshot are held and replayed against it. A break in continuity emits a gap
tick (price = update ids missed, or 1 when unknown), clears the book and waits for the next
snapshot in the capture. One quote tick per depth event that changes the top of book; trade
ticks from the trade stream (aggressor: sell when the buyer is the maker). bookTicker messages
do not become ticks: wherever a ticker and a depth event name the same final update id, the
ticker's best bid/ask is compared with the book's, and the agreement is counted.
"""
import numpy as np
from numba import njit

from engine.records import KIND_TRADE, SIDE_BUY, SIDE_SELL

from . import book, files, uri as U
from .book import Ladders
from .ticks import emit, emit_gap, emit_quote, touch_changed

QTY_SCALE = 10**8
HOLD_MAX = 100_000  # depth events held while waiting for a snapshot


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


@njit(nogil=True, cache=True)
def apply_levels(L, bk, px, qty, i):
    """Set levels px[i:], qty[i:] (absolute quantities, 0 removes) on book side bk. Returns the
    index it stopped at: len(px) when done, less when the side needs room first."""
    while i < px.shape[0]:
        if qty[i] > 0 and not book.has_room(L, bk):
            return i
        book.level_set(L, bk, px[i], qty[i])
        i += 1
    return i


STATS = ("lines", "depth_events", "depth_applied", "depth_dropped_old", "snapshots", "resyncs", "gaps",
         "trades", "quotes", "book_tickers", "ticker_checked", "ticker_agree", "ticker_disagree",
         "bad_lines", "other_messages", "size_saturated", "crossed_quotes", "held_overflow")


class _Instrument:
    def __init__(self, idx, symbol):
        self.idx, self.symbol = idx, symbol
        self.synced = False       # book built from a snapshot and continuous since
        self.snapshot_id = None   # lastUpdateId of the snapshot awaiting its first event
        self.last_u = None
        self.held = []            # depth events waiting for a snapshot
        self.futures = None
        self.book_tops = {}       # final update id -> (bid, bidq, ask, askq) after that event
        self.ticker_tops = {}     # ticker update ids not yet matched


class BinanceFile:
    live = False

    def __init__(self, u, path, params):
        import orjson  # noqa: F401 (fail early, with the import error, if missing)
        self.uri, self.path = u, path
        p = U.take(u, params, {"size_unit": (float, 1e-5), "on_error": (U.on_error, "stop")})
        div = p["size_unit"] * QTY_SCALE
        if p["size_unit"] <= 0 or abs(div - round(div)) > 1e-9 or round(div) < 1:
            raise U.FeedError(f"{u}: size_unit must be a power of ten between 1e-8 and 1, got {p['size_unit']}")
        self.size_div = int(round(div))
        self.strict = p["on_error"] == "stop"
        self.insts = {}
        self.ladders = Ladders(512)
        self.top = np.zeros((256, 4), np.int64)
        self.st = np.zeros(len(STATS), np.int64)
        self.counts = dict.fromkeys(STATS, 0)
        self._orphan = None

    @property
    def instruments(self):
        return [i.symbol for i in sorted(self.insts.values(), key=lambda i: i.idx)]

    def stats(self):
        c = dict(self.counts)
        c["size_saturated"] = int(self.st[0])
        return c

    def _inst(self, symbol):
        ins = self.insts.get(symbol)
        if ins is None:
            if len(self.insts) >= 256:
                raise U.FeedError(f"{self.path}: more than 256 symbols in one capture")
            ins = self.insts[symbol] = _Instrument(len(self.insts), symbol)
            if self._orphan is not None:
                self._place_snapshot(ins, self._orphan, 0, None, 0)  # nothing held yet: no ticks
                self._orphan = None
        return ins

    # -- book ---------------------------------------------------------------------------

    def _set(self, ins, side, levels):
        if not levels:
            return
        px = np.fromiter((price9(p) for p, _ in levels), np.int64, len(levels))
        qty = np.fromiter((qty8(q) for _, q in levels), np.int64, len(levels))
        bk = 2 * ins.idx + side
        i = 0
        while True:
            i = apply_levels(self.ladders.arrays(), bk, px, qty, i)
            if i == len(px):
                return
            self.ladders.grow(bk)

    def _clear(self, ins):
        book.level_clear(self.ladders.arrays(), 2 * ins.idx)
        book.level_clear(self.ladders.arrays(), 2 * ins.idx + 1)

    def _touch(self, ins):
        bp, bq = book.best(self.ladders.arrays(), 2 * ins.idx)
        ap, aq = book.best(self.ladders.arrays(), 2 * ins.idx + 1)
        return int(bp), int(bq), int(ap), int(aq)

    # -- messages -------------------------------------------------------------------------

    def _snapshot(self, d, recv, out, n):
        """A REST snapshot carries no symbol: it belongs to the capture's one symbol (the next
        one seen, when it comes first)."""
        if not self.insts:
            self._orphan = d
            return n
        if len(self.insts) != 1:
            raise U.FeedError(f"{self.path}: a depth snapshot carries no symbol and this capture has "
                              f"{len(self.insts)} symbols, so it cannot be placed")
        return self._place_snapshot(next(iter(self.insts.values())), d, recv, out, n)

    def _place_snapshot(self, ins, d, recv, out, n):
        self.counts["snapshots"] += 1
        self._clear(ins)
        self._set(ins, book.BID, d["bids"])
        self._set(ins, book.ASK, d["asks"])
        ins.snapshot_id = int(d["lastUpdateId"])
        ins.synced = False
        ins.last_u = None
        held, ins.held = ins.held, []
        for ev, _ in held:  # their effect is known only now that the snapshot is here
            n = self._depth(ins, ev, recv, out, n)
        return n

    def _depth(self, ins, d, recv, out, n):
        """One diff event: continuity, book, and a quote tick if the touch changed."""
        U_, u_ = int(d["U"]), int(d["u"])
        fut = "pu" in d
        if ins.snapshot_id is None and not ins.synced:
            if len(ins.held) >= HOLD_MAX:
                ins.held.pop(0)
                self.counts["held_overflow"] += 1
            ins.held.append((d, recv))
            return n
        if not ins.synced:
            sid = ins.snapshot_id
            if (u_ < sid) if fut else (u_ <= sid):
                self.counts["depth_dropped_old"] += 1
                return n
            ok = (U_ <= sid <= u_) if fut else (U_ <= sid + 1 <= u_)
            if not ok:  # the snapshot is older than the stream can bridge
                return self._lose(ins, d, recv, out, n, U_ - sid - 1)
            ins.synced, ins.snapshot_id = True, None
        else:
            ok = (int(d["pu"]) == ins.last_u) if fut else (U_ == ins.last_u + 1)
            if not ok:
                return self._lose(ins, d, recv, out, n, U_ - ins.last_u - 1 if not fut else 1)
        ins.last_u = u_
        self.counts["depth_applied"] += 1
        self._set(ins, book.BID, d.get("b", ()))
        self._set(ins, book.ASK, d.get("a", ()))
        top = self._touch(ins)
        ins.book_tops[u_] = top
        t = ins.ticker_tops.pop(u_, None)
        if t is not None:
            self._check(top, t)
        if touch_changed(self.ladders.arrays(), ins.idx, self.top):
            self.counts["quotes"] += 1
            if top[0] and top[2] and top[0] >= top[2]:
                self.counts["crossed_quotes"] += 1
            ts = int(d.get("T") or d["E"]) * 1_000_000
            n = emit_quote(out, n, ts, recv, ins.idx, self.top, self.st, 0, self.size_div)
        return n

    def _lose(self, ins, d, recv, out, n, missed):
        """Out of sync: a gap tick, an empty book, and wait for the next snapshot."""
        self.counts["resyncs"] += 1
        self.counts["gaps"] += 1
        self._clear(ins)
        ins.synced, ins.snapshot_id, ins.last_u = False, None, None
        ins.held = [(d, recv)]
        self.top[ins.idx] = 0
        return emit_gap(out, n, int(d["E"]) * 1_000_000, recv, max(1, missed))

    def _check(self, top, t):
        self.counts["ticker_checked"] += 1
        if top == t:
            self.counts["ticker_agree"] += 1
        else:
            self.counts["ticker_disagree"] += 1

    def _ticker(self, ins, d):
        self.counts["book_tickers"] += 1
        t = (price9(d["b"]), qty8(d["B"]), price9(d["a"]), qty8(d["A"]))
        u_ = int(d["u"])
        top = ins.book_tops.get(u_)
        if top is not None:
            self._check(top, t)
        else:
            ins.ticker_tops[u_] = t

    def _trade(self, ins, d, recv, out, n):
        self.counts["trades"] += 1
        side = SIDE_SELL if d["m"] else SIDE_BUY
        return emit(out, n, int(d["T"]) * 1_000_000, recv, ins.idx, KIND_TRADE, side, price9(d["p"]),
                    qty8(d["q"]), self.top, self.st, 0, self.size_div)

    def _line(self, line, lineno, out, n):
        import orjson
        self.counts["lines"] += 1
        ts, sep, body = line.partition(b" ")
        try:
            if not sep or not ts.isdigit():
                raise ValueError("expected '<receive ns> <json>'")
            recv = int(ts)
            msg = orjson.loads(body)
            if not isinstance(msg, dict):
                raise ValueError("the message is not a JSON object")
            d = msg.get("data", msg)
            if "lastUpdateId" in d:
                return self._snapshot(d, recv, out, n)
            kind = d.get("e")
            if kind == "depthUpdate":
                self.counts["depth_events"] += 1
                return self._depth(self._inst(d["s"]), d, recv, out, n)
            if kind == "trade":
                return self._trade(self._inst(d["s"]), d, recv, out, n)
            if kind == "bookTicker" or (kind is None and "u" in d and "b" in d and "A" in d):
                self._ticker(self._inst(d["s"]), d)
                return n
            self.counts["other_messages"] += 1
            return n
        except U.FeedError:
            raise
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
            if self.strict:
                what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                raise U.FeedError(f"{self.path}: line {lineno}: {what}") from None
            self.counts["bad_lines"] += 1
            return n

    def batches(self):
        out = np.zeros((4096, 8), np.int64)
        n = 0
        carry = b""
        lineno = 0
        for chunk in files.chunks(self.path):
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                lineno += 1
                if not line.strip():
                    continue
                n = self._line(line, lineno, out, n)
                if n + 2 > len(out):
                    yield out[:n]
                    n = 0
        if carry.strip():
            lineno += 1
            if self.strict and not carry.rstrip().endswith(b"}"):
                raise U.FeedError(f"{self.path}: truncated: the last line ({lineno}) is cut off")
            n = self._line(carry, lineno, out, n)
        if n:
            yield out[:n]
