"""The orjson Binance capture reader that feeds/binance/capture.py replaced (kept verbatim as the reference
its numba scanner must match tick for tick with book_ticker=check; imports made absolute).

`binance:FILE` — a raw Binance websocket capture: one line per message, the local receive time
in ns, a space, the JSON message (combined-stream form {"stream", "data"}, or a REST depth
snapshot {"lastUpdateId", "bids", "asks"}); gzip or plain.

  binance:FILE?size_unit=1e-5&on_error=stop&depth=10
  size_unit  the quantity one record size unit stands for (default 1e-5, BTC's step on spot;
             quantities are kept exactly at 1e-8 in the book and divided down for the record)
  on_error   stop (default): a line that is not "<ns> <json>" is an error naming its line number;
             skip: count it and go on
  depth      book levels per side published as level ticks, 0..32 (default 10; 0 = none)

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

Depth (engine/records.py): each depth event is a book event (level ticks, then the quote or a
book tick). A snapshot emits a clear tick, its whole window and a book tick carrying the book's
touch (stamped with the capture's receive time: a REST snapshot has no event time). A gap tick
voids every book downstream, so every window is re-sent (after a clear tick) by its
instrument's next event; a trade is an event too, so a stale window goes out before it.

JSON is parsed per line in Python (orjson) along with the continuity checks; what touches the
book or writes a tick becomes a command in a queue that numba runs in batches of thousands of
lines, so no per-message Python->numba call is paid.
"""
from itertools import chain

import numpy as np
from numba import njit

from engine.records import KIND_TRADE, SIDE_BUY, SIDE_SELL

from feeds.books import book, depth

from feeds.core import files, uri as U
from feeds.core.params import DEPTH, ON_ERROR, SIZE_UNIT, Kind
from feeds.books.book import Ladders
from feeds.books.depth import Windows
from feeds.books.ticks import emit, emit_gap, emit_quote, touch_changed

QTY_SCALE = 10**8
HOLD_MAX = 100_000  # depth events held while waiting for a snapshot
MATCH_WINDOW = 50_000  # update ids remembered for the book-ticker cross-check


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
def parse_levels(b, vals):
    """Parse "p,q,p,q,..." (ASCII decimals) into vals: prices at 1e-9, quantities at 1e-8, exactly.
    Returns how many numbers, or -1 if one is malformed (not digits[.digits], too many decimals,
    too long) or vals is too small."""
    k = 0
    i = 0
    n = b.shape[0]
    while i < n:
        if k >= vals.shape[0]:
            return -1
        scale = 9 if (k & 1) == 0 else 8
        v = np.int64(0)
        digits = 0
        frac = -1
        while i < n and b[i] != 44:  # ','
            c = b[i]
            if c == 46 and frac < 0:  # '.'
                frac = 0
            elif 48 <= c <= 57:
                if frac >= 0:
                    if frac >= scale:
                        if c != 48:
                            return -1  # more precision than the fixed point holds
                        i += 1
                        continue
                    frac += 1
                digits += 1
                if digits > 17:
                    return -1
                v = v * 10 + (c - 48)
            else:
                return -1
            i += 1
        if digits == 0:
            return -1
        if frac < 0:
            frac = 0
        for _ in range(scale - frac):
            v *= 10
        vals[k] = v
        k += 1
        i += 1  # the comma
    return k


# commands: [op, inst, a, b, ts, recv, c, d]
OP_DEPTH, OP_SNAPSHOT, OP_TRADE, OP_GAP = 1, 2, 3, 4
# OP_DEPTH / OP_SNAPSHOT: a = levels offset in vals (pairs), b = bid levels, c = all levels
# OP_TRADE: a = price, b = qty, c = side;  OP_GAP: a = update ids missed
R_DONE, R_OUT, R_ROOM = 0, 1, 2
Q_CMDS = 4096
(ST_SAT, ST_QUOTES, ST_CROSSED, NST) = range(4)


@njit(nogil=True, cache=True)
def run(L, cmds, ncmd, vals, top, tops, prog, W, out, n, stats, size_div):
    """Run commands prog[0].. in order (prog[1] = levels already applied of the current one),
    writing ticks to out[n:]; tops[i] gets the touch after depth command i. W: the depth windows.
    Returns (n, R_DONE | R_OUT | R_ROOM); on R_ROOM prog[2] is the book side that needs room
    (nothing of the command was written yet: its ticks come once all its levels are in)."""
    room = 2 + depth.room(W[0].shape[1])
    i = prog[0]
    while i < ncmd:
        if n + room > out.shape[0]:
            prog[0] = i
            return n, R_OUT
        c = cmds[i]
        op = c[0]
        inst = c[1]
        if op == OP_DEPTH or op == OP_SNAPSHOT:
            if op == OP_SNAPSHOT and prog[1] == 0:
                book.level_clear(L, 2 * inst)
                book.level_clear(L, 2 * inst + 1)
            off, nbid, nlev = c[2], c[3], c[6]
            j = prog[1]
            while j < nlev:
                bk = 2 * inst + (book.BID if j < nbid else book.ASK)
                q = vals[2 * (off + j) + 1]
                if q > 0 and not book.has_room(L, bk):
                    prog[0] = i
                    prog[1] = j
                    prog[2] = bk
                    return n, R_ROOM
                book.level_set(L, bk, vals[2 * (off + j)], q)
                depth.changed(W, bk, vals[2 * (off + j)])
                j += 1
            prog[1] = 0
            if op == OP_SNAPSHOT:
                if W[0].shape[1] > 0:  # a clear tick, the whole window, a book tick with the touch
                    depth.mark_stale(W, inst)
                    n, nl = depth.publish(W, L, inst, c[4], c[5], out, n, stats, ST_SAT, size_div)
                    touch_changed(L, inst, top)
                    n = depth.emit_book(out, n, c[4], c[5], inst, top, stats, ST_SAT, size_div)
                for k in range(4):
                    top[inst, k] = -1  # so the first event applied after it always quotes
            else:
                n, nl = depth.publish(W, L, inst, c[4], c[5], out, n, stats, ST_SAT, size_div)
                if touch_changed(L, inst, top):
                    stats[ST_QUOTES] += 1
                    if top[inst, 0] != 0 and top[inst, 2] != 0 and top[inst, 0] >= top[inst, 2]:
                        stats[ST_CROSSED] += 1
                    n = emit_quote(out, n, c[4], c[5], inst, top, stats, ST_SAT, size_div)
                elif nl:
                    n = depth.emit_book(out, n, c[4], c[5], inst, top, stats, ST_SAT, size_div)
            bp, bq = book.best(L, 2 * inst)
            ap, aq = book.best(L, 2 * inst + 1)
            tops[i, 0] = bp
            tops[i, 1] = bq
            tops[i, 2] = ap
            tops[i, 3] = aq
        elif op == OP_TRADE:
            n, nl = depth.publish(W, L, inst, c[4], c[5], out, n, stats, ST_SAT, size_div)  # stale only
            n = emit(out, n, c[4], c[5], inst, KIND_TRADE, c[6], c[2], c[3], top, stats, ST_SAT, size_div)
            if nl:
                n = depth.emit_book(out, n, c[4], c[5], inst, top, stats, ST_SAT, size_div)
        elif op == OP_GAP:
            book.level_clear(L, 2 * inst)
            book.level_clear(L, 2 * inst + 1)
            for k in range(4):
                top[inst, k] = 0
            n = emit_gap(out, n, c[4], c[5], c[2])
            depth.forget(W)  # the consumer voids every book: every window is re-sent
        i += 1
    prog[0] = i
    return n, R_DONE


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
        self.book_tops = {}       # final update id -> (bid, bidq, ask, askq) after that event
        self.ticker_tops = {}     # ticker update ids not yet matched


# what this reader takes: the shared parameters of binance:FILE (feeds/core/params.py), no more
KIND = Kind("binance", "FILE", "", "", (SIZE_UNIT, ON_ERROR, DEPTH), "")


class BinanceFile:
    live = False

    def __init__(self, u, path, params):
        import orjson  # noqa: F401 (fail early, with the import error, if missing)
        self.uri, self.path = u, path
        files.check_readable(path)
        p = KIND.parse(u, path, params)
        div = p.size_unit * QTY_SCALE
        if abs(div - round(div)) > 1e-9 or round(div) < 1:
            raise U.FeedError(f"{u}: size_unit must be a power of ten between 1e-8 and 1, got {p.size_unit}")
        self.size_div = int(round(div))
        self.strict = p.on_error == "stop"
        self.insts = {}
        self.ladders = Ladders(512)
        self.depth = p.depth
        self.windows = Windows(512, self.depth)
        self.top = np.zeros((256, 4), np.int64)
        self.st = np.zeros(NST, np.int64)
        self.counts = dict.fromkeys(STATS, 0)
        self._orphan = None
        # the command queue
        self.cmds = np.zeros((Q_CMDS, 8), np.int64)
        self.tops = np.zeros((Q_CMDS, 4), np.int64)
        self.vals = np.zeros(1 << 16, np.int64)
        self.ncmd = 0
        self.nvals = 0            # level pairs queued
        self.depth_ids = []       # (command index, instrument, u) of queued depth commands
        self.prog = np.zeros(3, np.int64)

    @property
    def instruments(self):
        return [i.symbol for i in sorted(self.insts.values(), key=lambda i: i.idx)]

    def resync(self):
        """A consumer asked for every window again (feeds/process.py)."""
        self.windows.forget()

    def stats(self):
        c = dict(self.counts)
        c["size_saturated"] = int(self.st[ST_SAT])
        c["quotes"] = int(self.st[ST_QUOTES])
        c["crossed_quotes"] = int(self.st[ST_CROSSED])
        return c

    def _inst(self, symbol):
        ins = self.insts.get(symbol)
        if ins is None:
            if len(self.insts) >= 256:
                raise U.FeedError(f"{self.path}: more than 256 symbols in one capture")
            ins = self.insts[symbol] = _Instrument(len(self.insts), symbol)
            if self._orphan is not None:
                self._place_snapshot(ins, *self._orphan)
                self._orphan = None
        return ins

    # -- the queue ------------------------------------------------------------------------

    def _cmd(self, op, inst, a=0, b=0, ts=0, recv=0, c=0):
        if self.ncmd == len(self.cmds):  # a snapshot replaying many held events: grow
            self.cmds = np.concatenate([self.cmds, np.zeros_like(self.cmds)])
            self.tops = np.concatenate([self.tops, np.zeros_like(self.tops)])
        cm = self.cmds[self.ncmd]
        cm[0], cm[1], cm[2], cm[3], cm[4], cm[5], cm[6] = op, inst, a, b, ts, recv, c
        self.ncmd += 1

    def _levels_cmd(self, op, ins, bids, asks, ts, recv):
        """Queue a depth/snapshot command with its levels parsed into vals (ValueError if any
        level is malformed: then nothing is queued)."""
        nlev = len(bids) + len(asks)
        need = 2 * (self.nvals + nlev)
        if need > len(self.vals):
            self.vals = np.concatenate([self.vals, np.zeros(max(need, len(self.vals)), np.int64)])
        joined = ",".join(chain.from_iterable(chain(bids, asks))).encode()
        if parse_levels(np.frombuffer(joined, np.uint8), self.vals[2 * self.nvals:]) != 2 * nlev:
            raise ValueError('a price level is not ["price", "quantity"] in decimals')
        self._cmd(op, ins.idx, self.nvals, len(bids), ts, recv, nlev)
        self.nvals += nlev

    def _run(self, out, n):
        """Run the queue; yields full tick batches; returns the ticks left in out."""
        self.prog[:] = 0
        while True:
            n, r = run(self.ladders.arrays(), self.cmds, self.ncmd, self.vals, self.top, self.tops, self.prog,
                       self.windows.arrays(), out, n, self.st, self.size_div)
            if r == R_ROOM:
                self.ladders.grow(int(self.prog[2]))
            elif r == R_OUT:
                yield out[:n]
                n = 0
            else:
                break
        for i, ins, u_ in self.depth_ids:  # the book-ticker cross-check, in queue order
            top = tuple(int(x) for x in self.tops[i])
            ins.book_tops[u_] = top
            if len(ins.book_tops) > MATCH_WINDOW:  # a ticker matches a depth event near it in time
                del ins.book_tops[next(iter(ins.book_tops))]
            t = ins.ticker_tops.pop(u_, None)
            if t is not None:
                self._check(top, t)
        self.ncmd = self.nvals = 0
        self.depth_ids.clear()
        return n

    # -- messages -------------------------------------------------------------------------

    def _snapshot(self, d, recv):
        """A REST snapshot carries no symbol: it belongs to the capture's one symbol (the next
        one seen, when it comes first)."""
        if not self.insts:
            self._orphan = (d, recv)
            return
        if len(self.insts) != 1:
            raise U.FeedError(f"{self.path}: a depth snapshot carries no symbol and this capture has "
                              f"{len(self.insts)} symbols, so it cannot be placed")
        self._place_snapshot(next(iter(self.insts.values())), d, recv)

    def _place_snapshot(self, ins, d, recv):
        sid = int(d["lastUpdateId"])
        self._levels_cmd(OP_SNAPSHOT, ins, d["bids"], d["asks"], recv, recv)  # no event time: the capture's
        self.counts["snapshots"] += 1
        ins.snapshot_id, ins.synced, ins.last_u = sid, False, None
        held, ins.held = ins.held, []
        for ev, _ in held:  # their effect is known only now that the snapshot is here
            self._depth(ins, ev, recv)

    def _depth(self, ins, d, recv):
        """One diff event: continuity, then the book and maybe a quote tick (queued)."""
        U_, u_ = int(d["U"]), int(d["u"])
        fut = "pu" in d
        if ins.snapshot_id is None and not ins.synced:
            if len(ins.held) >= HOLD_MAX:
                ins.held.pop(0)
                self.counts["held_overflow"] += 1
            ins.held.append((d, recv))
            return
        if not ins.synced:
            sid = ins.snapshot_id
            if (u_ < sid) if fut else (u_ <= sid):
                self.counts["depth_dropped_old"] += 1
                return
            if not ((U_ <= sid <= u_) if fut else (U_ <= sid + 1 <= u_)):
                return self._lose(ins, d, recv, U_ - sid - 1)  # the snapshot is older than the stream bridges
            ins.synced, ins.snapshot_id = True, None
        elif not ((int(d["pu"]) == ins.last_u) if fut else (U_ == ins.last_u + 1)):
            return self._lose(ins, d, recv, U_ - ins.last_u - 1 if not fut else 1)
        ts = int(d.get("T") or d["E"]) * 1_000_000
        self._levels_cmd(OP_DEPTH, ins, d.get("b", ()), d.get("a", ()), ts, recv)
        self.depth_ids.append((self.ncmd - 1, ins, u_))
        ins.last_u = u_
        self.counts["depth_applied"] += 1

    def _lose(self, ins, d, recv, missed):
        """Out of sync: a gap tick, an empty book, and wait for the next snapshot."""
        self.counts["resyncs"] += 1
        self.counts["gaps"] += 1
        ins.synced, ins.snapshot_id, ins.last_u = False, None, None
        ins.held = [(d, recv)]
        self._cmd(OP_GAP, ins.idx, max(1, missed), 0, int(d["E"]) * 1_000_000, recv)

    def _check(self, top, t):
        self.counts["ticker_checked"] += 1
        if top == (price9(t[0]), qty8(t[1]), price9(t[2]), qty8(t[3])):
            self.counts["ticker_agree"] += 1
        else:
            self.counts["ticker_disagree"] += 1

    def _ticker(self, ins, d):
        self.counts["book_tickers"] += 1
        t = (d["b"], d["B"], d["a"], d["A"])  # parsed only if a depth event shares its id
        u_ = int(d["u"])
        top = ins.book_tops.get(u_)
        if top is not None:
            self._check(top, t)
        else:
            ins.ticker_tops[u_] = t
            if len(ins.ticker_tops) > MATCH_WINDOW:
                del ins.ticker_tops[next(iter(ins.ticker_tops))]

    def _trade(self, ins, d, recv):
        self.counts["trades"] += 1
        self._cmd(OP_TRADE, ins.idx, price9(d["p"]), qty8(d["q"]), int(d["T"]) * 1_000_000, recv,
                  SIDE_SELL if d["m"] else SIDE_BUY)

    def _line(self, line, lineno):
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
                return self._snapshot(d, recv)
            kind = d.get("e")
            if kind == "depthUpdate":
                self.counts["depth_events"] += 1
                return self._depth(self._inst(d["s"]), d, recv)
            if kind == "trade":
                return self._trade(self._inst(d["s"]), d, recv)
            if kind == "bookTicker" or (kind is None and "u" in d and "b" in d and "A" in d):
                return self._ticker(self._inst(d["s"]), d)
            self.counts["other_messages"] += 1
        except U.FeedError:
            raise
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as e:
            if self.strict:
                what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                raise U.FeedError(f"{self.path}: line {lineno}: {what}") from None
            self.counts["bad_lines"] += 1

    OUT_ROWS = 4096  # tick batch size (tests make it small to run the out-of-room path)

    def batches(self):
        if self.OUT_ROWS < 2 + depth.room(self.depth):
            raise ValueError(f"a tick buffer of {self.OUT_ROWS} rows cannot hold one event's ticks "
                             f"at depth {self.depth}")
        out = np.zeros((self.OUT_ROWS, 8), np.int64)
        n = 0
        carry = b""
        lineno = 0
        for chunk in files.chunks(self.path):
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                lineno += 1
                if line.strip():
                    self._line(line, lineno)
                    if self.ncmd >= Q_CMDS:
                        n = yield from self._run(out, n)
            n = yield from self._run(out, n)
        if not self.counts["lines"] and not carry.strip():
            raise U.FeedError(f"{self.path}: empty: no messages")
        if carry.strip():
            lineno += 1
            if self.strict and not carry.rstrip().endswith(b"}"):
                raise U.FeedError(f"{self.path}: truncated: the last line ({lineno}) is cut off")
            self._line(carry, lineno)
        n = yield from self._run(out, n)
        if n:
            yield out[:n]
