"""`dbn-live://DATASET` — Databento's live subscription gateway, spoken natively (a TCP socket in
the feed process; no asyncio, no official client), its records decoded by feeds/databento/dbn.py's parser.

  dbn-live://GLBX.MDP3?schema=mbo&symbols=ESH4,ESM4&snapshot=1&depth=10
  symbols        raw symbols to subscribe to (required; stype_in=raw_symbol)
  schema         mbo (default), mbp-10, mbp-1, tbbo or trades
  snapshot       1: with mbo, ask for a book snapshot on every (re)subscription (default 0)
  start          intraday replay from this time (ns since the epoch or ISO 8601), first session only
  gateway        HOST:PORT (default <dataset, dots as dashes, lower case>.lsg.databento.com:13000,
                 as the official client computes it)
  key_file       file holding the API key (owned by you, mode 0600); default: $DATABENTO_API_KEY
  heartbeat_s    heartbeat interval asked of the gateway (default 30)
  timeout_s      silence (no byte, not even a heartbeat) that makes the connection dead
                 (default heartbeat_s + 10, the official client's margin)
  backoff_s, backoff_max_s   reconnect delay: backoff_s * 2^attempt capped at backoff_max_s, times
                 a random 0.5-1 (jitter), reset once a session delivers data (default 0.5, 30)
  idle_s         stop after this many seconds without a data record (default 0 = never)
  depth          as for dbn:FILE (capped by the schema)

In layers, each its own module: gateway_link.py (the TCP connection), gateway_protocol.py (the
gateway's handshake: greeting, CRAM, subscriptions, start_session), live_stream.py (the DBN
stream after it: metadata, the scan for control records, what those do), gateway_session.py
(reconnects, backoff, silence, gaps), api_key.py (the key). This source joins them to the parser
of dbn:FILE (feeds/databento/dbn.py DbnBooks): data records go through dbn.parse, so the ticks
are the same and bad values are rejected alike (ts_recv is the record's). The URI's symbols are
its instruments, ids 0..n-1 in its order from the start (specs from feeds/venues.cme); records of
ids not mapped to them are counted in untracked. Without a snapshot an MBO book restarts empty
after a gap (cancels of orders it never saw are counted in unknown_order): use snapshot=1; each
instrument's snapshot starts with an R record, so its window is re-sent after a clear tick.

The first connection is made when the source is opened: an unreachable gateway or a bad key is an
error at once. While connecting or waiting, batches() yields empty batches so the ring's
heartbeat stays fresh.

Raw recording: `raw_sink`, if set to a callable, is given every DBN byte received, metadata first
(the first session's only) then complete records as received: their concatenation is a DBN file
that dbn:FILE reads (instruments are then named by id: live metadata has no symbology).
"""
import sys
import time

import numpy as np

from feeds.core import uri as U
from feeds.books.book import Orders, rehash
from feeds.books.ticks import emit_gap
from feeds.core.feed_latency import comparable_stats
from feeds.core.venue_text import escape
from feeds.databento.api_key import read_key
from feeds.databento.dbn import S_INSTRUMENTS, SCHEMA_DEPTH, ST_ERROR, ST_OUT, DbnBooks, inst_at, read_metadata
from feeds.databento.gateway_link import POLL_MS, Dropped, run_blocking
from feeds.databento.gateway_protocol import Subscription, default_gateway
from feeds.databento.gateway_session import YIELD_EVERY_S, Backoff, GatewaySession
from feeds.databento.live_stream import (ACC_DATA, ACC_LAST_OFF, ACC_LAST_TS, ACC_OFF, ACC_SNAPSHOT, HEARTBEAT,
                                         LAT_BINS, NACC, SC_BROKEN, SC_DATA, ControlRecords, metadata_size,
                                         percentile_us, scan)

RX_BYTES = 1 << 20      # receive buffer (grown for a larger metadata header)
RECV_BYTES = 1 << 16    # read at most this much at once: a burst is parsed and handed on in slices
                        # (bench/_live_dbn.py: flat out, 1 MiB reads held ticks ~20 ms)
LIVE_STATS = ("sessions", "reconnects", "gaps", "heartbeats", "gateway_errors", "system_msgs", "timeouts",
              "connect_failures", "bad_framing", "snapshot_records", "bytes", "unsubscribed_mappings",
              "mapping_conflicts", "log_suppressed")


def _check(u, v):
    """The dataset named by the URI; FeedError for what its declaration cannot refuse alone."""
    dataset = v.target.strip("/")
    if not dataset or not all(c.isalnum() or c in ".-_" for c in dataset):
        raise U.FeedError(f"{u}: no dataset named (e.g. dbn-live://GLBX.MDP3?symbols=ESH4)")
    if not v.symbols:
        raise U.FeedError(f"{u}: symbols= is required (raw symbols, e.g. symbols=ESH4,ESM4)")
    if any(not s.isprintable() or "|" in s for s in v.symbols):
        raise U.FeedError(f"{u}: a symbol may not contain '|' or control characters")
    if v.snapshot and v.schema != "mbo":
        raise U.FeedError(f"{u}: snapshot=1 needs schema=mbo (Databento sends snapshots of MBO books only)")
    if v.snapshot and v.start is not None:
        raise U.FeedError(f"{u}: snapshot=1 and start= cannot be combined (a replay rebuilds the book itself)")
    return dataset


def _while_waiting(gen, empty):
    """Run a session generator inside batches(): an empty batch for each of its waits (the ring's
    heartbeat); returns its value."""
    try:
        while True:
            try:
                next(gen)
            except StopIteration as e:
                return e.value
            yield empty
    finally:
        gen.close()


class DbnLive(DbnBooks):
    live = True
    instruments_at_open = True  # its URI's symbols, ids in that order (app/multi_rings.py fixed_instruments)
    raw_suffix = ".dbn"
    OUT_ROWS = 4096

    def __init__(self, u, v):
        self.uri = u
        self.dataset = _check(u, v)
        self.schema, self.symbols, self.snapshot, self.start = v.schema, v.symbols, bool(v.snapshot), v.start
        self.gateway = v.gateway or default_gateway(self.dataset)
        self.heartbeat_s = v.heartbeat_s
        self.timeout_s = v.timeout_s or self.heartbeat_s + 10.0
        self.idle_s, self.connect_timeout = v.idle_s, v.connect_timeout_s or 10.0
        key = read_key(u, v.key_file)
        self.want_depth = v.depth
        # live never stops on one bad record (counted), and tracks only the ids mapped to its symbols
        super().__init__(strict=False, auto=False, depth=min(self.want_depth, SCHEMA_DEPTH.get(self.schema, 0)))
        self.meta = None
        self.counts = dict.fromkeys(LIVE_STATS, 0)
        self.say = lambda m: print(f"[feed] {m}", file=sys.stderr, flush=True)
        self.control = ControlRecords(u, self.symbols, self.counts, self._bind, self.say)
        self.stats_a[S_INSTRUMENTS] = len(self.control.declared)
        self.hist = np.zeros(LAT_BINS, np.int64)
        self.acc = np.zeros(NACC, np.int64)  # scan()'s (live_stream.ACC_*)
        self.raw_sink = None
        self.raw_meta = None
        self.stopped = False
        self.rx = np.zeros(RX_BYTES, np.uint8)
        self.recv_bytes = RECV_BYTES
        self.have = 0           # bytes in rx
        self.kick = False       # rx holds bytes that came with the handshake: apply them first
        self.rx_ns = 0          # CLOCK_MONOTONIC of the receive being parsed (bench: bytes -> tick latency)
        self.last_ts_event = 0
        sub = Subscription(self.dataset, self.schema, self.symbols, self.heartbeat_s, self.start, self.snapshot)
        self.session = GatewaySession(u, self.gateway, key, sub, Backoff(v.backoff_s, v.backoff_max_s), self.counts,
                                      self.say, lambda: self.stopped, connect_timeout_s=self.connect_timeout,
                                      timeout_s=self.timeout_s, idle_s=self.idle_s)
        self._compile()  # before we connect: records that come while a parser compiles wait in the socket
        try:
            self._begin(run_blocking(self.session.open(first=True)))
        except Dropped as e:
            raise U.FeedError(f"{u}: {e}") from None

    def raw_restart(self):
        """The bytes a new piece of a raw recording starts with (app/recorder.py): the stream's
        metadata, since a DBN file begins with it (empty before the first session sent it)."""
        return self.raw_meta or b""

    @property
    def instruments(self):
        """Names by dense index: the URI's symbols, the only instruments."""
        return list(self.control.declared)

    @property
    def last_error(self):
        """The gateway's last error message (escaped)."""
        return escape(self.control.last_error)

    @property
    def sock(self):
        """The connection's socket (None between sessions): a process that opened the source only
        to look at it closes it (app/run_input.py)."""
        return self.session.link.sock if self.session.link is not None else None

    def _bind(self, iid, k):
        inst_at(self.ids, self.idx, iid, k)

    def _compile(self):
        """Everything a record can reach that numba compiles on first use (cached after a first run)."""
        out = np.zeros((self.OUT_ROWS, 8), np.int64)
        self._apply(self.rx[:0], 0, out, 0)
        scan(self.rx, 0, 0, self.hist, self.acc)
        emit_gap(out, 0, 0, 0, 0)
        inst_at(np.full(8, -1, np.int64), np.zeros(8, np.int64), 1, 0)
        o = Orders(8)
        rehash(o.keys, o.vals, o.keys.copy(), o.vals.copy())

    def stats(self):
        self.counts["log_suppressed"] = self.control.suppressed
        st = {**super().stats(), **self.counts}
        st.update(comparable_stats("feed_latency", int(self.hist.sum()), int(self.acc[ACC_OFF]),
                                   int(self.acc[ACC_LAST_OFF]), lambda p: percentile_us(self.hist, p / 100)))
        return st

    def stop(self):
        self.stopped = True

    # -- the stream ------------------------------------------------------------------------

    def batches(self):
        out = np.zeros((self.OUT_ROWS, 8), np.int64)
        empty = out[:0]
        n = 0
        last_yield = time.monotonic()
        s = self.session
        try:
            while not self.stopped:
                self.control.tick()
                if s.link is None:
                    if n:
                        yield out[:n]
                        n = 0
                    head = yield from _while_waiting(s.reconnect(), empty)
                    if head is None:
                        continue
                    self._begin(head)
                try:
                    got = self._receive(0 if n else POLL_MS)
                except Dropped as e:
                    n = self._lost(str(e), out, n)
                    continue
                now = time.monotonic()
                if got:
                    self.rx_ns = time.monotonic_ns()
                    s.heard(now, max(got, 0))
                    try:
                        n = yield from self._consume(out, n)
                    except Dropped as e:
                        n = self._lost(str(e), out, n)
                        continue
                else:
                    why = s.silence(now)
                    if why:
                        n = self._lost(why, out, n)
                        continue
                if not got and s.idle(time.monotonic()):
                    break  # (only after a poll found nothing: our own stall, a compile, is not the venue idling)
                if n:
                    yield out[:n]  # a live feed does not sit on ticks: what one receive held is a batch
                    n, last_yield = 0, now
                elif not got or now - last_yield > YIELD_EVERY_S:
                    yield empty
                    last_yield = now
            if n:
                yield out[:n]
        finally:
            self.control.flush()
            s.close()

    def _begin(self, head):
        """A session is open: `head`, what came with its handshake, is the start of its stream."""
        self.rx[:len(head)] = np.frombuffer(head, np.uint8)
        self.have = len(head)
        self.kick = self.have > 0

    def _receive(self, wait_ms):
        """Read into rx: how many bytes came (-1: the ones that came with the handshake, first)."""
        if self.kick:
            self.kick = False
            return -1
        got = self.session.link.receive(memoryview(self.rx)[self.have:self.have + self.recv_bytes], wait_ms)
        self.have += got
        return got

    def _lost(self, why, out, n):
        """The connection is gone: if it had streamed, one gap tick and every book cleared.
        Returns n."""
        self.have = 0
        if self.session.lost(why):
            n = emit_gap(out, n, self.last_ts_event, self.last_ts_event, 0)
            self.reset_books()
        return n

    def _consume(self, out, n):
        """Apply what rx holds (a generator yielding full batches; returns the ticks left in out)."""
        pos = 0
        if not self.session.streamed:
            pos = self._stream_start()
            if pos is None:
                return n
        rx = self.rx
        start = pos
        seen = int(self.acc[ACC_DATA])
        while True:
            stop, what = scan(rx, pos, self.have, self.hist, self.acc)
            while pos < stop:
                pos, n, st = self._apply(rx[:stop], pos, out, n)
                if st == ST_OUT:
                    yield out[:n]
                    n = 0
                elif st == ST_ERROR:  # (only a broken framing stops the parser when it skips bad records)
                    what = SC_BROKEN
                    break
            if what == SC_DATA:
                break
            if what == SC_BROKEN:
                self.counts["bad_framing"] += 1
                self._sink(start, pos)
                raise Dropped(f"a record at stream byte {pos} is shorter than its header: the DBN framing is lost")
            end = pos + int(rx[pos]) * 4
            if self.control.apply(rx[pos:end].tobytes()) == HEARTBEAT:
                self.session.backoff.reset()  # a session that answers: the next drop starts the backoff again
            pos = end
        if self.acc[ACC_DATA] != seen:
            self.last_ts_event = int(self.acc[ACC_LAST_TS])
            self.session.delivered(time.monotonic())
        self.counts["snapshot_records"] = int(self.acc[ACC_SNAPSHOT])
        self._sink(start, pos)
        left = self.have - pos
        if left:
            rx[:left] = rx[pos:self.have]
        self.have = left
        return n

    def _stream_start(self):
        """A session's metadata, once rx holds all of it: the offset of its first record (None:
        not all here yet). Its ids are mapped afresh."""
        if self.have < 8:
            return None
        try:
            need = metadata_size(self.rx[:8], self.session.where)
        except ValueError as e:
            raise U.FeedError(f"{self.uri}: {e}") from None
        if need > len(self.rx):
            bigger = np.zeros(max(need, 2 * len(self.rx)), np.uint8)
            bigger[:self.have] = self.rx[:self.have]
            self.rx = bigger
        if self.have < need:
            return None
        head = bytes(self.rx[:need])
        self.meta, pos = read_metadata(self.uri, head)
        self.ids[:] = -1
        self.control.new_session(head[3])
        if self.raw_meta is None:  # the first session's: the recording is one DBN stream
            self.raw_meta = head
            if self.raw_sink is not None:
                self.raw_sink(head)
        self.session.streamed = True
        return pos

    def _sink(self, a, b):
        """Complete records rx[a:b] to the raw recording, as received."""
        if self.raw_sink is not None and b > a:
            self.raw_sink(self.rx[a:b].tobytes())
