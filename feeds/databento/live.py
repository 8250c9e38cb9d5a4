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

Session (as Databento's docs and client define it): the gateway greets (`lsg_version=`), sends a
CRAM challenge (`cram=`); we answer `auth=<sha256 of "challenge|key">-<last 5 characters of the
key: its bucket id>` with the dataset, encoding=dbn and the heartbeat interval; it answers
`success=1|session_id=...` (or `success=0|error=...`: one line naming the URI, exit 2, never the
key). We send the subscription lines (symbols in batches of 500, `is_last` on the final one) and
`start_session`; the gateway then streams DBN: metadata (no symbology in live), then records.
SymbolMappingMsg gives instrument_id -> raw symbol: only the URI's symbols are instruments (named
so; specs from feeds/venues.cme), each with the first id the session maps it to. A mapping of
another symbol is ignored (unsubscribed_mappings), and so is one that would give a symbol a second
id or an id a second symbol (mapping_conflicts: two books never merge); records of ids not mapped
are counted in untracked. A new session maps afresh. SystemMsg (heartbeats included) and ErrorMsg
are counted, and the messages that are not heartbeats are printed, escaped, at most
venue_text.LINES every PER_S seconds (the rest counted in log_suppressed and said as a number:
feeds/core/venue_text.py; refused mappings are said likewise, within a budget of their own). Data
records go through dbn.parse (the numba parser of dbn:FILE, so the ticks are the same and bad
values are rejected alike; ts_recv is the record's). A scan in numba finds the control records
between runs of data records and feeds the latency histogram (ts_recv - ts_event of records that
are not snapshot records: feed_latency_p50_us / p99_us / p999_us, or feed_latency_clock_offset_us
when the two clocks are not comparable: feeds/core/feed_latency.py).

Faults: a closed or reset connection, a gateway silent for timeout_s (a half-open TCP looks the
same; TCP keepalive is on too), a broken record framing: the connection is dropped, ONE gap tick
is published, every book is cleared (what was built before the gap cannot be trusted), and we
reconnect with backoff, subscribe again (no `start`: a replay is not repeated) and, with
snapshot=1 on mbo, rebuild the books from the snapshot (each instrument's snapshot starts with an
R record: its window is re-sent after a clear tick). Without a snapshot an MBO book restarts empty
(cancels of orders it never saw are counted in unknown_order): use snapshot=1. A failed attempt
(refused, no greeting) waits and tries again; a failed authentication stops the feed. The first
connection is made when the source is opened: an unreachable gateway or a bad key is an error at
once. While connecting or waiting, batches() yields empty batches so the ring's heartbeat stays
fresh.

Raw recording: `raw_sink`, if set to a callable, is given every DBN byte received, metadata first
(the first session's only) then complete records as received: their concatenation is a DBN file
that dbn:FILE reads (instruments are then named by id: live metadata has no symbology).
"""
import datetime as dt
import hashlib
import os
import random
import select
import socket
import stat
import struct
import sys
import time

import numpy as np
from engine.jit import njit

from engine.records import MAX_INSTRUMENTS

from feeds.core import uri as U
from feeds.books.book import Ladders, Orders, _rehash
from feeds.databento.dbn import (NSTATS, PENDING, RT_MBO, RT_MBP0, RT_MBP1, RT_MBP10, SCHEMA_DEPTH, ST_ERROR,
                  S_INSTRUMENTS, ST_OUT, DbnFile, _inst_at, le32, le64, read_metadata)
from feeds.core.venue_text import Limit, escape
from feeds.books.depth import Windows
from feeds.core.feed_latency import comparable_stats, on_one_clock
from feeds.books.ticks import emit_gap

DEFAULT_PORT = 13000
BUCKET_ID_LENGTH = 5   # the API key's last characters: its bucket id, sent in clear after the CRAM hash
SYMBOL_BATCH = 500     # symbols a subscription line carries
RT_ERROR, RT_SYMBOL_MAPPING, RT_SYSTEM = 0x15, 0x16, 0x17
F_SNAPSHOT, F_BAD_TS_RECV = 0x20, 0x08
SCHEMAS = ("mbo", "mbp-10", "mbp-1", "tbbo", "trades")
CLIENT = "signal-engine dbn-live"
RX_BYTES = 1 << 20      # receive buffer (grown for a larger metadata header)
RECV_BYTES = 1 << 16    # read at most this much at once: a burst is parsed and handed on in slices
                        # (bench/_live_dbn.py: flat out, 1 MiB reads held ticks ~20 ms)
MAX_META = 64 << 20
POLL_MS = 20            # however the gateway sends, an (empty) batch at least this often
YIELD_EVERY_S = 0.02
LAT_BINS = 1024         # latency histogram: 16 bins an octave (6% resolution)
LIVE_STATS = ("sessions", "reconnects", "gaps", "heartbeats", "gateway_errors", "system_msgs", "timeouts",
              "connect_failures", "bad_framing", "snapshot_records", "bytes", "unsubscribed_mappings",
              "mapping_conflicts", "log_suppressed")

# scan() results
SC_DATA, SC_CONTROL, SC_BROKEN = 0, 1, 2


class _Dropped(Exception):
    """The connection is gone (or never came up): reconnect."""


@njit(nogil=True, cache=True)
def _lat_bin(v):
    if v < 0:
        v = 0
    e = 0
    while v >= 32:
        v >>= 1
        e += 1
    return e * 16 + v


@njit(nogil=True, cache=True)
def scan(b, pos, end, hist, acc):
    """Walk the complete records of b[pos:end]: returns (offset, what): SC_CONTROL at the first
    error / symbol mapping / system record, SC_BROKEN at a record shorter than its header (the
    stream's framing is lost), else SC_DATA at the end of the last complete record. Data records
    that are not snapshot records add ts_recv - ts_event to `hist` (_lat_bin), or when the two
    clocks are not comparable (feeds/core/feed_latency.py on_one_clock) count it in acc; acc: the last
    data record's ts_event, snapshot records, data records, records off the clock, the last one's
    difference (ns)."""
    while end - pos >= 2:
        ln = np.int64(b[pos]) * 4
        if ln < 16:
            return pos, SC_BROKEN
        if ln > end - pos:
            break
        rt = b[pos + 1]
        if rt == RT_ERROR or rt == RT_SYMBOL_MAPPING or rt == RT_SYSTEM:
            return pos, SC_CONTROL
        if rt == RT_MBO and ln >= 48:
            fl, tr = b[pos + 36], pos + 40
        elif (rt == RT_MBP0 or rt == RT_MBP1 or rt == RT_MBP10) and ln >= 40:
            fl, tr = b[pos + 30], pos + 32
        else:
            pos += ln  # a record the parser skips (or counts as too short)
            continue
        acc[0] = le64(b, pos + 8)
        acc[2] += 1
        if (fl & (F_SNAPSHOT | F_BAD_TS_RECV)) == 0:
            d = le64(b, tr) - acc[0]
            if on_one_clock(d):
                hist[_lat_bin(d)] += 1
            else:
                acc[3] += 1
                acc[4] = d
        elif fl & F_SNAPSHOT:
            acc[1] += 1
        pos += ln
    return pos, SC_DATA


def _bin_value(k):
    """The middle of latency bin k, in ns."""
    e, v = (k // 16 - 1, k - 16 * (k // 16 - 1)) if k >= 32 else (0, k)
    return (v + 0.5) * (1 << e) if e else float(k)


def percentile_us(hist, q):
    """The q-quantile (0-1) of the latency histogram, in microseconds (0 when empty)."""
    total = int(hist.sum())
    if not total:
        return 0
    k = int(np.searchsorted(np.cumsum(hist), q * total))
    return int(round(_bin_value(min(k, len(hist) - 1)) / 1000))


# -- the gateway's control lines -------------------------------------------------------------

def control_line(**fields):
    """`key=value|key=value\\n`, fields in the order given, None left out."""
    return ("|".join(f"{k}={v}" for k, v in fields.items() if v is not None) + "\n").encode()


def parse_control(line):
    return dict(t.partition("=")[::2] for t in line.decode("utf-8", "replace").strip().split("|"))


def cram_response(challenge, key):
    """The answer to the gateway's CRAM challenge: sha256("challenge|key") and the key's bucket id."""
    return hashlib.sha256(f"{challenge}|{key}".encode()).hexdigest() + "-" + key[-BUCKET_ID_LENGTH:]


def default_gateway(dataset):
    return f"{dataset.lower().replace('.', '-')}.lsg.databento.com", DEFAULT_PORT


def read_key(u, key_file):
    """The API key: from key_file (ours, no group/other access) or $DATABENTO_API_KEY. Errors name
    the URI and the file, never the key."""
    if key_file:
        try:
            fd = os.open(key_file, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise U.FeedError(f"{u}: key_file {key_file}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISREG(st.st_mode):
                raise U.FeedError(f"{u}: key_file {key_file} must be a file owned by you with mode 0600 "
                                  f"(it is {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}): "
                                  f"chmod 600 {key_file}")
            key = os.read(fd, 4096).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
        where = f"key_file {key_file}"
    else:
        key = os.environ.get("DATABENTO_API_KEY", "").strip()
        where = "DATABENTO_API_KEY"
        if not key:
            raise U.FeedError(f"{u}: no API key: set DATABENTO_API_KEY or give key_file=PATH")
    if len(key) <= BUCKET_ID_LENGTH or not key.isascii() or not key.isprintable() or "|" in key:
        raise U.FeedError(f"{u}: the API key in {where} is not a Databento key (printable ASCII, no '|')")
    return key


def _start_ns(s):
    if s.isdigit():
        return int(s)
    t = dt.datetime.fromisoformat(s)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 10**9 + t.microsecond * 1000


def _schema(s):
    if s not in SCHEMAS:
        raise ValueError(f"must be one of {', '.join(SCHEMAS)}")
    return s


def _cstr(b):
    return bytes(b).split(b"\0", 1)[0].decode("utf-8", "replace")


class DbnLive(DbnFile):
    live = True
    instruments_at_open = True  # its URI's symbols, ids in that order (app/multi_rings.py fixed_instruments)
    raw_suffix = ".dbn"

    def raw_restart(self):
        """The bytes a new piece of a raw recording starts with (app/recorder.py): the stream's
        metadata, since a DBN file begins with it (empty before the first session sent it)."""
        return self.raw_meta or b""
    OUT_ROWS = 4096

    def __init__(self, u, target, params):
        self.uri = u
        p = U.take(u, params, {
            "symbols": (U.symbols, ()), "schema": (_schema, "mbo"), "snapshot": (int, 0), "start": (_start_ns, None),
            "gateway": (U.hostport, None), "key_file": (str, ""), "heartbeat_s": (U.pos_int, 30),
            "timeout_s": (U.finite_nonneg, 0.0), "backoff_s": (U.finite_nonneg, 0.5),
            "backoff_max_s": (U.finite_nonneg, 30.0), "idle_s": (U.finite_nonneg, 0.0),
            "connect_timeout_s": (U.finite_nonneg, 10.0), "depth": (U.depth, U.DEFAULT_DEPTH)})
        self.dataset = target.strip("/")
        if not self.dataset or not all(c.isalnum() or c in ".-_" for c in self.dataset):
            raise U.FeedError(f"{u}: no dataset named (e.g. dbn-live://GLBX.MDP3?symbols=ESH4)")
        if not p["symbols"]:
            raise U.FeedError(f"{u}: symbols= is required (raw symbols, e.g. symbols=ESH4,ESM4)")
        if any(not s.isprintable() or "|" in s for s in p["symbols"]):
            raise U.FeedError(f"{u}: a symbol may not contain '|' or control characters")
        self.schema, self.symbols = p["schema"], p["symbols"]
        self.snapshot = bool(p["snapshot"])
        if p["snapshot"] not in (0, 1):
            raise U.FeedError(f"{u}: snapshot must be 0 or 1")
        if self.snapshot and self.schema != "mbo":
            raise U.FeedError(f"{u}: snapshot=1 needs schema=mbo (Databento sends snapshots of MBO books only)")
        if self.snapshot and p["start"] is not None:
            raise U.FeedError(f"{u}: snapshot=1 and start= cannot be combined (a replay rebuilds the book itself)")
        self.start = p["start"]
        self.gateway = p["gateway"] or default_gateway(self.dataset)
        self.heartbeat_s = p["heartbeat_s"]
        self.timeout_s = p["timeout_s"] or self.heartbeat_s + 10.0
        self.backoff_s, self.backoff_max_s = max(p["backoff_s"], 0.001), p["backoff_max_s"]
        self.idle_s, self.connect_timeout = p["idle_s"], p["connect_timeout_s"] or 10.0
        self._key = read_key(u, p["key_file"])
        self.want_depth = p["depth"]
        self.depth = min(self.want_depth, SCHEMA_DEPTH.get(self.schema, 0))
        # the parser's state, as DbnFile has it: live never stops on one bad record (counted), and
        # tracks only the ids mapped to its symbols (_control)
        self.cfg = np.array([0, 0], np.int64)
        self.ids = np.full(1 << 17, -1, np.int64)
        self.idx = np.zeros(1 << 17, np.int64)
        self.top = np.zeros((MAX_INSTRUMENTS, 5), np.int64)
        self.pend = np.zeros((PENDING, 5), np.int64)
        self.npend = np.zeros(1, np.int64)
        self.stats_a = np.zeros(NSTATS, np.int64)
        self.err = np.zeros(4, np.int64)
        self.need = np.zeros(1, np.int64)
        self.windows = Windows(2 * MAX_INSTRUMENTS, self.depth)
        self._reset_books(forget=False)
        self.meta = None
        # the URI's symbols take ids 0..n-1 in its order from the start (a run binds a UNIVERSE to
        # them before any record); the id the gateway maps to one of them takes its index
        self.declared = {name: k for k, name in enumerate(dict.fromkeys(self.symbols))}
        self.stats_a[S_INSTRUMENTS] = len(self.declared)
        self._sym_id, self._id_sym = {}, {}  # this session's mappings
        from feeds.core import venues
        self._specs = venues.Specs(venues.cme)
        self.counts = dict.fromkeys(LIVE_STATS, 0)
        self.hist = np.zeros(LAT_BINS, np.int64)
        self.acc = np.zeros(5, np.int64)  # scan(): last ts_event, snapshot records, data records, off clock, last off
        self.raw_sink = None
        self.raw_meta = None
        self.version = 3
        self._last_error = b""
        self.stopped = False
        self.say = lambda m: print(f"[feed] {m}", file=sys.stderr, flush=True)
        # (apart: a flood of one kind does not hide the other)
        self.venue_log = Limit(lambda m: self.say(f"{self.uri}: {m}"), "gateway messages")
        self.mapping_log = Limit(lambda m: self.say(f"{self.uri}: {m}"), "refused symbol mappings")
        self.rx = np.zeros(RX_BYTES, np.uint8)
        self.recv_bytes = RECV_BYTES
        self.have = 0           # bytes in rx
        self.rx_ns = 0          # CLOCK_MONOTONIC of the receive being parsed (bench: bytes -> tick latency)
        self.last_ts_event = 0
        self.attempt = 0
        self.sock = None
        self._compile()  # before we connect: records that come while a parser compiles wait in the socket
        try:
            self._drive(self._connect(first=True))
        except _Dropped as e:
            raise U.FeedError(f"{u}: {e}") from None

    # -- state ---------------------------------------------------------------------------

    def _reset_books(self, forget=True):
        """Every book empty (after a gap: nothing built before it can be trusted; every window is
        re-sent, after a clear tick)."""
        self.ladders = Ladders(2 * MAX_INSTRUMENTS)
        self.orders = Orders(1 << 16)
        self.top[:] = 0
        self.npend[0] = 0
        if forget:
            self.windows.forget()

    @property
    def instruments(self):
        """Names by dense index: the URI's symbols, the only instruments."""
        return list(self.declared)

    @property
    def last_error(self):
        """The gateway's last error message (escaped)."""
        return escape(_cstr(self._last_error))

    def _compile(self):
        """Everything a record can reach that numba compiles on first use (cached after a first run)."""
        out = np.zeros((self.OUT_ROWS, 8), np.int64)
        self._apply(self.rx[:0], 0, out, 0)
        scan(self.rx, 0, 0, self.hist, self.acc)
        emit_gap(out, 0, 0, 0, 0)
        _inst_at(np.full(8, -1, np.int64), np.zeros(8, np.int64), 1, 0)
        o = Orders(8)
        _rehash(o.keys, o.vals, o.keys.copy(), o.vals.copy())

    def stats(self):
        self.counts["log_suppressed"] = self.venue_log.suppressed + self.mapping_log.suppressed
        st = {**super().stats(), **self.counts}
        st.update(comparable_stats("feed_latency", int(self.hist.sum()), int(self.acc[3]), int(self.acc[4]),
                                   lambda p: percentile_us(self.hist, p / 100)))
        return st

    def stop(self):
        self.stopped = True

    # -- the session -----------------------------------------------------------------------

    @staticmethod
    def _drive(gen):
        """Run a generator to its end outside batches() (its yields are only heartbeats)."""
        try:
            while True:
                next(gen)
        except StopIteration as e:
            return e.value

    def _wait(self, sock, ev, deadline, what):
        """Yield (for the heartbeat) until sock is ready for `ev` (select.POLLIN/POLLOUT)."""
        p = select.poll()
        p.register(sock, ev | select.POLLERR | select.POLLHUP)
        while not p.poll(POLL_MS):
            if time.monotonic() > deadline:
                raise _Dropped(f"{what}: no answer from {self._where()} within {self.connect_timeout:g} s")
            if self.stopped:
                raise _Dropped("stopped")
            yield

    def _where(self):
        return f"{self.gateway[0]}:{self.gateway[1]}"

    def _connect(self, first=False):
        """Open a session (a generator: it yields while it waits): TCP, greeting, CRAM, the
        subscriptions, start_session. Leaves the socket in self.sock and what was read past the
        control lines (the start of the DBN stream) in rx. A refused connection or a silent
        gateway raises _Dropped; a failed authentication raises FeedError."""
        host, port = self.gateway
        deadline = time.monotonic() + self.connect_timeout
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise _Dropped(f"cannot resolve {host}: {e.strerror or e}") from None
        family, kind, proto, _, addr = infos[0]
        s = socket.socket(family, kind, proto)
        try:
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # a half-open connection ends by itself too
            for opt, v in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
                if hasattr(socket, opt):
                    s.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), v)
            err = s.connect_ex(addr)
            if err not in (0, 115, 36, 10035):  # EINPROGRESS (Linux, macOS), WSAEWOULDBLOCK
                raise _Dropped(f"cannot connect to {self._where()}: {os.strerror(err)}")
            yield from self._wait(s, select.POLLOUT, deadline, "connect")
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise _Dropped(f"cannot connect to {self._where()}: {os.strerror(err)}")
            buf = bytearray()
            lines = []

            def read_line(what):
                while b"\n" not in buf:
                    yield from self._wait(s, select.POLLIN, deadline, what)
                    try:
                        chunk = s.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as e:
                        raise _Dropped(f"{what}: {e.strerror or e}") from None
                    if not chunk:
                        raise _Dropped(f"{what}: {self._where()} closed the connection")
                    buf.extend(chunk)
                    if len(buf) > 1 << 16:
                        raise _Dropped(f"{what}: {self._where()} sent no line end in 64 KiB: not a Databento gateway")
                i = buf.index(b"\n")
                lines.append(bytes(buf[:i + 1]))
                del buf[:i + 1]
                return parse_control(lines[-1])

            greet = yield from read_line("greeting")
            if "lsg_version" not in greet:
                raise _Dropped(f"{self._where()} did not greet as a Databento gateway")
            challenge = yield from read_line("authentication")
            if "cram" not in challenge:
                raise _Dropped(f"{self._where()} sent no CRAM challenge")
            s.sendall(control_line(auth=cram_response(challenge["cram"], self._key), dataset=self.dataset,
                                   encoding="dbn", ts_out=0, compression="none",
                                   heartbeat_interval_s=self.heartbeat_s, client=CLIENT))
            reply = yield from read_line("authentication")
            if reply.get("success") != "1":
                why = escape(reply.get("error") or "no reason given")
                raise U.FeedError(f"{self.uri}: authentication failed at {self._where()}: {why}")
            subs = []
            for i in range(0, len(self.symbols), SYMBOL_BATCH):
                last = i + SYMBOL_BATCH >= len(self.symbols)
                subs.append(control_line(schema=self.schema, stype_in="raw_symbol",
                                         symbols=",".join(self.symbols[i:i + SYMBOL_BATCH]),
                                         start=self.start if first else None, snapshot=int(self.snapshot),
                                         is_last=int(last)))
            s.sendall(b"".join(subs) + control_line(start_session=0))
        except (BrokenPipeError, ConnectionError) as e:
            s.close()
            raise _Dropped(f"{self._where()}: {e.strerror or e}") from None
        except BaseException:
            s.close()
            raise
        self.sock = s
        self._poll = select.poll()
        self._poll.register(s, select.POLLIN)
        self.rx[:len(buf)] = np.frombuffer(bytes(buf), np.uint8)
        self.have = len(buf)
        self.kick = self.have > 0
        self.session_meta = False
        self.session_data = False
        self.counts["sessions"] += 1
        self.last_rx = self.last_data = time.monotonic()

    def _drop(self, why, out, n):
        """The connection is gone: close it, and (if it had streamed) publish one gap tick and
        clear every book. Returns n."""
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
        self.have = 0
        if self.session_meta:  # one gap per lost session, however many attempts follow
            self.counts["gaps"] += 1
            n = emit_gap(out, n, self.last_ts_event, self.last_ts_event, 0)
            self._reset_books()
            self.session_meta = False
        self.say(f"{self.uri}: {why}; reconnecting")
        return n

    def _backoff(self):
        d = min(self.backoff_max_s, self.backoff_s * 2 ** min(self.attempt, 30)) * random.uniform(0.5, 1.0)
        self.attempt += 1
        return d

    # -- the stream ------------------------------------------------------------------------

    def batches(self):
        out = np.zeros((self.OUT_ROWS, 8), np.int64)
        empty = out[:0]
        n = 0
        last_yield = time.monotonic()
        retry_at = None
        try:
            while not self.stopped:
                self.venue_log.tick()  # (a flood's count is said when its interval ends, even if it stopped)
                self.mapping_log.tick()
                if self.sock is None:
                    if n:
                        yield out[:n]
                        n = 0
                    if retry_at is None:
                        retry_at = time.monotonic() + self._backoff()
                    while time.monotonic() < retry_at and not self.stopped:
                        time.sleep(min(YIELD_EVERY_S, max(0.0, retry_at - time.monotonic())))
                        yield empty
                    if self.stopped:
                        break
                    try:
                        for _ in self._connect():
                            yield empty
                    except _Dropped as e:
                        self.counts["connect_failures"] += 1
                        retry_at = time.monotonic() + self._backoff()
                        self.say(f"{self.uri}: reconnect failed: {e}; next try in {retry_at - time.monotonic():.1f} s")
                        continue
                    self.counts["reconnects"] += 1  # (attempts that failed: connect_failures)
                    retry_at = None
                got = 0
                try:
                    if self.kick:
                        self.kick, got = False, -1  # bytes that came with the handshake: the stream's start
                    elif self._poll.poll(POLL_MS if not n else 0):
                        got = self.sock.recv_into(memoryview(self.rx)[self.have:self.have + self.recv_bytes])
                        if got == 0:
                            raise _Dropped(f"{self._where()} closed the connection")
                except (BlockingIOError, InterruptedError):
                    got = 0
                except _Dropped as e:
                    n = self._drop(str(e), out, n)
                    continue
                except OSError as e:
                    n = self._drop(f"{self._where()}: {e.strerror or e}", out, n)
                    continue
                now = time.monotonic()
                if got:
                    self.rx_ns = time.monotonic_ns()
                    self.last_rx = now
                    if got > 0:
                        self.counts["bytes"] += got
                        self.have += got
                    try:
                        n = yield from self._consume(out, n)
                    except _Dropped as e:
                        n = self._drop(str(e), out, n)
                        continue
                elif now - self.last_rx > self.timeout_s:
                    self.counts["timeouts"] += 1
                    n = self._drop(f"{self._where()} silent for {now - self.last_rx:.1f} s (timeout_s={self.timeout_s:g})",
                                   out, n)
                    continue
                if not got and self.idle_s and time.monotonic() - self.last_data > self.idle_s:
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
            self.venue_log.flush()
            self.mapping_log.flush()
            if self.sock is not None:
                self.sock.close()
                self.sock = None

    def _consume(self, out, n):
        """Apply what rx holds (a generator yielding full batches; returns the ticks left in out)."""
        rx = self.rx
        pos = 0
        if not self.session_meta:
            if self.have < 8:
                return n
            if bytes(rx[:3]) != b"DBN":
                raise U.FeedError(f"{self.uri}: {self._where()} sent no DBN stream after start_session")
            need = 8 + struct.unpack_from("<I", rx, 4)[0]
            if need > MAX_META:
                raise U.FeedError(f"{self.uri}: DBN metadata of {need} bytes from {self._where()}: too large")
            if need > len(rx):
                bigger = np.zeros(max(need, 2 * len(rx)), np.uint8)
                bigger[:self.have] = rx[:self.have]
                self.rx = rx = bigger
            if self.have < need:
                return n
            head = bytes(rx[:need])
            self.meta, pos = read_metadata(self.uri, head)
            self.ids[:] = -1  # a new session maps its ids afresh
            self._sym_id, self._id_sym = {}, {}
            self.version = head[3]
            if self.raw_meta is None:  # the first session's: the recording is one DBN stream
                self.raw_meta = head
                if self.raw_sink is not None:
                    self.raw_sink(head)
            self.session_meta = True
        start = pos
        seen = int(self.acc[2])
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
                raise _Dropped(f"a record at stream byte {pos} is shorter than its header: the DBN framing is lost")
            pos = self._control(pos)
        if self.acc[2] != seen:
            self.last_data = time.monotonic()
            self.last_ts_event = int(self.acc[0])
            self.attempt = 0  # a session that delivers: the next drop starts the backoff again
        self.counts["snapshot_records"] = int(self.acc[1])
        self._sink(start, pos)
        left = self.have - pos
        if left:
            rx[:left] = rx[pos:self.have]
        self.have = left
        return n

    def _sink(self, a, b):
        """Complete records rx[a:b] to the raw recording, as received."""
        if self.raw_sink is not None and b > a:
            self.raw_sink(self.rx[a:b].tobytes())

    def _control(self, pos):
        """A control record at rx[pos]: symbol mapping, system message or error. Returns the next pos."""
        rx = self.rx
        ln = int(rx[pos]) * 4
        rt = int(rx[pos + 1])
        rec = rx[pos:pos + ln].tobytes()
        v1 = self.version == 1
        if rt == RT_SYMBOL_MAPPING:
            at, width = (38, 22) if v1 else (89, 71)
            if ln >= at + width:
                self._map(int(le32(rx, pos + 4)), _cstr(rec[at:at + width]))
        elif rt == RT_SYSTEM:
            text = _cstr(rec[16:16 + (64 if v1 else 303)])
            code = rec[319] if not v1 and ln >= 320 else 255
            if text.startswith("Heartbeat") or (self.version >= 3 and code == 0):
                self.counts["heartbeats"] += 1
                if self.attempt:
                    self.attempt = 0
            else:
                self.counts["system_msgs"] += 1
                if self.venue_log.allow():
                    self.say(f"{self.uri}: gateway: {escape(text)}")
        else:
            self.counts["gateway_errors"] += 1
            self._last_error = rec[16:16 + (64 if v1 else 302)]
            if self.venue_log.allow():
                self.say(f"{self.uri}: gateway error: {self.last_error}")
        return pos + ln

    def _map(self, iid, name):
        """The gateway maps id `iid` to symbol `name`: an instrument only when the URI names it, with
        the session's first id for it (the module's doc)."""
        k = self.declared.get(name)
        if k is None:
            self.counts["unsubscribed_mappings"] += 1
            if self.mapping_log.allow():
                self.say(f"{self.uri}: gateway mapped id {iid} to {escape(name)}, a symbol not subscribed: ignored")
        elif self._sym_id.get(name) != iid:
            if name in self._sym_id or iid in self._id_sym:  # a second id for a symbol, or symbol for an id
                self.counts["mapping_conflicts"] += 1
                if self.mapping_log.allow():
                    was = (f"{name} is id {self._sym_id[name]}" if name in self._sym_id
                           else f"id {iid} is {self._id_sym[iid]}")
                    self.say(f"{self.uri}: gateway mapped id {iid} to {name} but {was} in this session: ignored "
                             f"(id {iid}'s records are not {name}'s)")
                return
            self._sym_id[name], self._id_sym[iid] = iid, name
            _inst_at(self.ids, self.idx, iid, k)
