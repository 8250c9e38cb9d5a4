"""`engine record`: live market data into tick files, in two forms.

`engine record --ring NAME --out FILE.ticks`: a live ring's ticks into a tick file. A consumer like
any other (it never slows the producer: if it falls a ring behind, it records the gap tick with
the exact count it lost). It drains in batches and sleeps briefly when the ring is empty, so it
belongs on a housekeeping core, never the strategy's (`--core`). It stops on SIGINT/SIGTERM or
when the producer marks the end of its stream, and closes the file complete (index written, flag
set); while it runs, readers see every record written so far, and the instrument table as it
grows. A write that fails (a full disk) stops it: the file keeps its whole records, marked
incomplete with the reason, and the command fails naming the file; a killed recorder leaves a
file whose filled blocks readers still check (engine/tickfile.py).

`engine record SOURCE... --out DIR [--rotate daily|SIZE] [--raw]`: each source (any URI of
feeds/core/sources.py open_source; a synthetic one at its rate=) read by a recorder of its own into
DIR/<label>/ (app/daily_files.py: the label, the names, the resume rule). One source is
recorded in this process; several by one child process each (this same command with one
SOURCE): a source's parser, its socket reads and
its compression then never wait for another's (the GIL), one source that fails or stalls does
not stop the others, and a stop signal reaches each (forwarded). A child that fails before it
has its first file open (a bad URI, an unreadable file) stops the others and the command; one
that fails later ends alone and the command's exit status says so when the rest end.

Rotation. Pieces are named by the recorder's wall clock in UTC (the receive side: a live feed's
day, and a file source recorded today is in today's file). A cut is due after a batch of the
source when the UTC date is no longer the piece's, or (--rotate SIZE) when the tick file has
reached SIZE. It closes the piece complete (index, flag, fsync of the files and the directory),
then opens the next; the same process goes on reading, so no tick is lost or repeated. A source
without depth is cut there, between two batches (a piece is SIZE plus at most a batch). A source
with a depth window (depth > 0) is asked to resync() when the cut is due, and the cut falls just
before the first clear tick that follows (the start of the first event after the resync: each
instrument's next event then sends a clear tick and its whole window), so the rest of an event
the source had begun before (one it hands over across two batches) stays in the old piece, and
each piece starts every window afresh and stands alone: `engine replay` of consecutive pieces
clears the books at each file, as for separate recordings. A source that re-sends nothing (a
tick file) is cut anyway after CUT_WAIT_TICKS ticks or CUT_WAIT_S (that piece does not stand
alone). A stop (SIGINT/SIGTERM, --duration, the source's end) closes the piece complete the same
way; a live source with a stop() (MoldUDP64) is asked to stop and its last ticks are still
recorded (up to STOP_GRACE_S). A live source must yield (possibly empty) batches regularly:
cuts, stops and progress happen between batches.

Raw messages (--raw). The contract with a source (binance-live, dbn-live, moldudp64 implement it):
- `src.raw_suffix`, a class attribute: the extension of its own file format (".binance", ".dbn",
  ".itch"); a source without it cannot be recorded with --raw (one line naming the URI, before
  any source of the command is opened).
- `src.raw_sink = fn`, set by the recorder before batches() is called: the source calls fn(data)
  with its raw bytes in that file format, in order, each call ending at a message boundary, and
  before it yields the batch that holds those messages' ticks; the concatenation of the calls is
  a file the matching file source reads (binance:F, dbn:F, itch:F). fn never raises (a write
  error is kept and the recorder stops after the batch) and may be called from another thread.
- `src.raw_restart()` (optional): the bytes a new piece must start with to be a readable file
  on its own, given the raw bytes delivered so far (DBN: the metadata header; ITCH: the stock
  directory seen so far; Binance: a snapshot line of the book as of the last delivered diff;
  b"" when none). The recorder calls it at each cut, after the last batch of the old piece,
  holding the sink's lock (no delivery comes between it and the new piece: it must not call
  raw_sink itself); the first piece of a run starts with what the source sends itself.
A raw piece is cut with its tick file: DIR/<label>/<stem><raw_suffix>.zst (whole zstd frames:
app/daily_files.py) holds the messages of its tick file's ticks, give or take what the source had
received but not yet turned into ticks at the cut: messages reach the sink before their ticks
reach the recorder, so those are in the earlier raw piece (for moldudp64, at most the batch the
cut falls in; for a source that hands over raw bytes from its network thread, what its queue
held). Messages a live source lost (a MoldUDP64 gap) are in neither file; the tick file has the
gap tick.

Disk full: the tick file (or the raw file) being written keeps its whole records, marked
incomplete with the reason, and the command fails with one line naming it.
"""
import os
import signal
import sys
import threading
import time

import numpy as np
from engine.jit import njit

from engine import realtime, tickring
from engine.outputs import OutputError
from engine.tickfile import TickFileWriter
from engine.tickring import TickConsumer

BATCH = 4096


@njit(nogil=True, cache=True)
def drain(hdr, data, mask, slot_base, buf):
    """Poll up to len(buf) ticks (gap ticks included) into buf; returns how many."""
    n = 0
    while n < buf.shape[0]:
        st = tickring.poll(hdr, data, mask, slot_base, buf[n])
        if st == tickring.POLL_EMPTY:
            break
        n += 1
    return n


def _open(ring, wait):
    from engine.shm import RingError
    deadline = time.monotonic() + wait
    while True:
        try:
            return TickConsumer(ring)
        except RingError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _specs(c, names):
    """The feed's records (engine/instruments.py) of `names`, as its ring's table has them: what
    each instrument is travels from the feed into the file (None when the feed gave names only)."""
    specs = c.specs()
    if specs is None:
        return None
    by_name = {s["symbol"]: s for s in specs}
    from engine.instruments import unknown
    return [by_name.get(n) or unknown(n) for n in names]


def record(ring, out, *, start="now", core=None, duration=None, instruments=(), quiet=False, wait=0.0):
    tell = lambda m: print(f"[record] {m}", file=sys.stderr, flush=True)  # noqa: E731  (the result, warnings)
    say = (lambda m: None) if quiet else tell  # progress
    if core is not None:
        realtime.check_core(core)
        realtime.pin_current_thread(core)
    buf = np.zeros((BATCH, 8), np.int64)
    c = _open(ring, wait)  # a missing ring fails here, before the file exists
    drain(c.hdr, c.data, c.mask, 8, np.zeros((0, 8), np.int64))  # compile before we attach
    stop = {"flag": False}
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.__setitem__("flag", True))
    w = TickFileWriter(out, instruments, source=f"ring:{c.path}", depth=c.depth)
    c.claim(start, backpressure=True)  # a file replay waits for the recorder: nothing lost
    say(f"{c.path} -> {out}")
    deadline = time.monotonic() + duration if duration else None
    names = list(instruments) or c.instruments()
    last_look = time.monotonic()
    error = None
    try:
        w.set_instruments(names, _specs(c, names))  # in the header as soon as known: a killed recorder keeps them
        while not stop["flag"]:
            n = drain(c.hdr, c.data, c.mask, c.slot_base, buf)
            if n:
                w.append(buf[:n])
                if not instruments and (not names or time.monotonic() - last_look > 0.5):  # it may grow
                    names, last_look = c.instruments() or names, time.monotonic()
                    w.set_instruments(names, _specs(c, names))
                continue
            if c.producer_finished() or (deadline and time.monotonic() >= deadline):
                break
            time.sleep(0.0005)
        while True:  # what is already in the ring when we are told to stop is recorded too
            n = drain(c.hdr, c.data, c.mask, c.slot_base, buf)
            if not n:
                break
            w.append(buf[:n])
    except OutputError as e:  # a full disk: the file keeps what it has, marked incomplete
        error = e
    finally:
        try:
            names = list(instruments) or c.instruments() or names
            w.set_instruments(names, _specs(c, names))
            w.close()
        except OutputError as e:
            error = error or e
        finally:
            c.close()
    tell(f"recorded {w.n} ticks ({c.gaps} gaps, {c.lost} ticks lost)")
    if error is not None:
        tell(f"warning: {out} is incomplete: its writer stopped at record {w.n:,} ({error.reason}); readers "
            "check its filled blocks and report the rest")
        raise error
    return {"ticks": w.n, "gaps": c.gaps, "lost": c.lost, "out": out}


# -- engine record SOURCE... --out DIR ------------------------------------------------------------

CUT_WAIT_S = 5.0       # how long a due cut waits for a resync's first clear tick (above),
CUT_WAIT_TICKS = 4096  # ... or how many ticks (what an event begun before the resync has left is far less)
STOP_GRACE_S = 2.0     # after a stop, how long a source with stop() may take to hand over its last ticks
FLUSH_S = 0.05         # buffered ticks reach the file at least this often (readers of a file being written)
READY_FD_ENV = "ENGINE_RECORD_READY_FD"  # a child says "my first file is open" on this fd (record_sources)


class Pieces:
    """One source's recording: the current piece (tick file, and raw file with --raw), the cuts."""

    def __init__(self, src, d, rotate_bytes, raw, clock, say):
        self.src, self.d, self.rotate, self.raw_on, self.clock, self.say = src, d, rotate_bytes, raw, clock, say
        self.buf = np.zeros((BATCH, 8), np.int64)  # ticks gathered into fewer, larger writes
        self.nbuf = 0
        self.w = self.raw = None
        self._sink_lock = threading.Lock()  # the raw writer is swapped at a cut under it
        self.is_open = False
        self.pending = None  # (why, since, ticks since): a cut waiting for the resync's first clear tick
        self.done = []      # completed pieces: {"ticks", "records", "raw"}
        self.ticks = 0      # every tick recorded, all pieces
        self._open(first=True)

    def _open(self, first=False):
        from engine.tickfile import TickFileWriter

        from .daily_files import RawWriter, next_stem, reserve, utc_day
        now = self.clock()
        self.day = utc_day(now)
        self.midnight = (now // 86400 + 1) * 86400  # the next UTC midnight: the cut
        stem = next_stem(self.d, self.day)
        path = f"{self.d}/{stem}.ticks"
        reserve(path)
        src = self.src
        self.w = TickFileWriter(path, src.instruments, src.uri, depth=getattr(src, "depth", 0),
                                specs=getattr(src, "specs", None))
        self.is_open = True
        old = None
        if self.raw_on:
            rpath = f"{self.d}/{stem}{src.raw_suffix}.zst"
            with self._sink_lock:  # (a source may deliver from its own thread: nothing falls between)
                start = b"" if first or not hasattr(src, "raw_restart") else (src.raw_restart() or b"")
                try:
                    new = RawWriter(rpath, start)
                except OSError as e:
                    from engine.outputs import OutputError, reason
                    raise OutputError(rpath, "raw messages", reason(e), e.errno) from None
                old, self.raw = self.raw, new
            src.raw_sink = self._sink
        return old

    def _sink(self, data):
        """The source's raw_sink: into the current piece's raw file."""
        with self._sink_lock:
            if self.raw is not None:
                self.raw.write(data)

    @property
    def path(self):
        return self.w.path

    def add(self, ticks):
        """A source batch (a reused buffer: copied here)."""
        i = 0
        while i < len(ticks):
            k = min(len(ticks) - i, len(self.buf) - self.nbuf)
            self.buf[self.nbuf:self.nbuf + k] = ticks[i:i + k]
            self.nbuf += k
            i += k
            if self.nbuf == len(self.buf):
                self.flush()

    def flush(self):
        if self.nbuf:
            n, self.nbuf = self.nbuf, 0
            self.w.append(self.buf[:n])  # (an OutputError on a full disk: the file is marked incomplete)
            self.ticks += n
        names = self.src.instruments
        if len(names) != len(self.w.meta["instruments"]):  # found as it reads: in the header at once
            self.w.set_instruments(names, getattr(self.src, "specs", None))
        if self.raw is not None:
            self.raw.maybe_flush()
            if self.raw.error is not None:
                raise self.raw.error

    def size(self):
        return self.w.header_size + (self.w.n + self.nbuf) * 64

    def cut_due(self):
        """Why the piece must end after this batch: None, "midnight" or "size"."""
        if self.clock() >= self.midnight:
            return "midnight"
        if self.rotate and self.size() >= self.rotate:
            return "size"
        return None

    def batch(self, ticks, now):
        """A source batch into the pieces: a pending cut falls before its first clear tick."""
        if self.pending is None:
            self.add(ticks)
            return
        i = _first_clear(ticks)
        if i is None and now - self.pending[1] < CUT_WAIT_S and self.pending[2] + len(ticks) < CUT_WAIT_TICKS:
            self.add(ticks)  # the rest of an event begun before the resync: the old piece's
            self.pending = (*self.pending[:2], self.pending[2] + len(ticks))
            return
        i = i or 0
        self.add(ticks[:i])
        self.cut(self.pending[0])
        self.add(ticks[i:])

    def begin_cut(self, why, now):
        if getattr(self.src, "depth", 0):
            self.src.resync()  # each instrument's next event re-sends its window: the next piece stands alone
            self.pending = (why, now, 0)
        else:
            self.cut(why)

    def cut(self, why):
        """Complete the piece and open the next; the raw file is swapped for the next one before it
        is closed, so a source delivering meanwhile loses nothing."""
        old = self.path
        self.pending = None
        self.close(keep_raw=True)
        old_raw = self._open()
        if old_raw is not None:
            old_raw.close()
            if old_raw.error is not None:
                raise old_raw.error
        d = self.done[-1]
        self.say(f"{old} complete ({d['records']:,} ticks, {why}); now {self.path}")

    def close(self, keep_raw=False):
        """Flush, then complete the piece (fsync); an error names the file that failed."""
        from .daily_files import fsync_dir
        err = None
        if self.is_open:
            self.is_open = False
            try:
                self.flush()
            except Exception as e:  # (OutputError) the piece is still closed below, incomplete as marked
                err = e
            try:
                self.w.set_instruments(self.src.instruments, getattr(self.src, "specs", None))
                self.w.close()
            except Exception as e:
                err = err or e
            self.done.append({"ticks": self.w.path, "records": self.w.n,
                              "raw": self.raw.path if self.raw is not None else None})
        if self.raw is not None and not keep_raw:
            with self._sink_lock:
                raw, self.raw = self.raw, None  # (what a source delivers after the stop is not kept)
            raw.close()
            err = err or raw.error
        fsync_dir(self.d)
        if err is not None:
            raise err


def check_raw(uri):
    """--raw: FeedError (one line) unless the URI's source can give its raw messages; asked of its
    class, so nothing is opened, started or made for any source of the command first."""
    from feeds.core.sources import source_class
    from feeds.core.uri import FeedError
    if not getattr(source_class(uri), "raw_suffix", None):
        raise FeedError(f"{uri}: --raw: this source cannot give its raw messages (it has no raw_suffix); "
                        "record it without --raw")


def record_source(uri, out, *, rotate=None, raw=False, duration=None, quiet=False, core=None, progress=10.0,
                  clock=time.time):
    """Record one source into out/<label>/ until it ends, a stop signal, or `duration`; returns a
    summary dict. `clock`: the wall clock that names and cuts the pieces (UTC seconds)."""
    from engine.outputs import OutputError, check_writable, private_dirs, reason
    from feeds.core.sources import open_source

    from .daily_files import label, lock_dir
    name = label(uri)
    d = os.path.join(out, name)
    tell = lambda m: print(f"[record] {name}: {m}", file=sys.stderr, flush=True)  # noqa: E731  (the result, warnings)
    say = (lambda m: None) if quiet else tell  # progress
    if core is not None:
        realtime.check_core(core)
        realtime.pin_current_thread(core)  # (threads a source starts inherit it)
    if raw:
        check_raw(uri)
    check_writable(d, "recordings", directory=True)  # before a live source starts listening
    src = open_source(uri)
    try:
        private_dirs(d)  # (0700 where made here: trading history)
    except OSError as e:
        raise OutputError(d, "recordings", reason(e), e.errno) from None
    lock = lock_dir(d)
    try:
        return _record(uri, src, d, name, rotate, raw, duration, progress, clock, say, tell)
    finally:
        os.close(lock)


def _record(uri, src, d, name, rotate, raw, duration, progress, clock, say, tell):
    stop = {"at": None}

    def on_stop(*_):
        if stop["at"] is None:
            stop["at"] = time.monotonic()
        if hasattr(src, "stop"):
            src.stop()
    before = {s: signal.signal(s, on_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _loop(uri, src, d, name, rotate, raw, duration, progress, clock, say, tell, stop, on_stop)
    finally:
        for s, h in before.items():  # (a caller in this process, a test, gets its own back)
            signal.signal(s, h)


def _loop(uri, src, d, name, rotate, raw, duration, progress, clock, say, tell, stop, on_stop):
    from engine.outputs import OutputError
    rec = Pieces(src, d, rotate, raw, clock, say)
    _ready()
    say(f"{uri} -> {rec.path}" + (f" (+ raw {rec.raw.path})" if rec.raw else ""))
    t0 = last_flush = last_say = time.monotonic()
    said = 0
    deadline = None
    error = None
    gen = _batches(src)
    try:
        for ticks in gen:
            now = time.monotonic()
            if duration and deadline is None:  # from the first batch: a parser that compiles first does not count
                deadline = now + duration
            if len(ticks) or rec.pending:
                rec.batch(ticks, now)
            if now - last_flush >= FLUSH_S or (rec.raw is not None and rec.raw.error is not None):
                rec.flush()
                last_flush = now
            if rec.pending is None:
                why = rec.cut_due()
                if why:
                    rec.begin_cut(why, now)
            if deadline and now >= deadline:
                on_stop()
            if stop["at"] is not None and (not hasattr(src, "stop") or now - stop["at"] > STOP_GRACE_S):
                break  # (a source with stop() ends by itself, after handing over what it holds)
            if progress and now - last_say >= progress:
                n = rec.ticks + rec.nbuf
                say(f"{n:,} ticks ({(n - said) / (now - last_say):,.0f}/s) -> {rec.path}")
                said, last_say = n, now
    except OutputError as e:
        error = e
    finally:
        gen.close()
        try:
            rec.close()
        except OutputError as e:
            error = error or e
    files = rec.done
    tell(f"recorded {rec.ticks:,} ticks into {len(files)} file(s) in {d}")
    if error is not None:
        if os.path.exists(error.path) and error.path.endswith(".ticks"):
            tell(f"warning: {error.path} is incomplete: its writer stopped ({error.reason}); readers check its "
                "filled blocks and report the rest")
        raise error
    return {"source": uri, "label": name, "dir": d, "ticks": rec.ticks, "files": files,
            "seconds": round(time.monotonic() - t0, 3), "stats": src.stats()}


def _batches(src):
    """The source's batches, at its own pace when it has one (synthetic rate=, feeds/synthetic/market.py
    paced: a recording of a simulated market takes as long as its pace says); others as they come."""
    from feeds.synthetic.source import Synthetic
    if isinstance(src, Synthetic) and src.params.rate > 0:
        from feeds.synthetic.market import paced
        return paced(src.batches(), src.params.rate)
    return src.batches()


def _first_clear(ticks):
    """Index of the first clear tick (a level tick of no side) in a batch, or None."""
    from engine.records import KIND_LEVEL, SIDE_NONE, TICK_DTYPE
    if not len(ticks):
        return None
    r = np.ascontiguousarray(ticks).view(TICK_DTYPE).reshape(-1)
    hit = np.flatnonzero((r["kind"] == KIND_LEVEL) & (r["side"] == SIDE_NONE))
    return int(hit[0]) if len(hit) else None


def _ready():
    """Tell a parent recorder (record_sources) that this child's first file is open."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is not None:
        try:
            os.write(int(fd), b"1")
            os.close(int(fd))
        except (OSError, ValueError):
            pass


def record_sources(uris, out, child_args=(), **kw):
    """One source: record_source here. Several: a child process each (`engine record URI --out
    out *child_args`), stop signals forwarded; returns the exit status (the children print their
    own summaries and error lines)."""
    import subprocess

    from feeds.core.sources import as_uri

    from .daily_files import label
    uris = [as_uri(u) for u in uris]  # (a tick file's plain path: that file)
    labels = {}
    for u in uris:
        lb = label(u)
        if lb in labels:
            raise ValueError(f"{labels[lb]} and {u} would both be recorded into {os.path.join(out, lb)}: "
                             "record them with separate commands and --out directories")
        labels[lb] = u
    if len(uris) == 1:
        return record_source(uris[0], out, **kw)
    if kw.get("raw"):  # (before any child starts; one source is checked by record_source)
        for u in uris:
            check_raw(u)
    kids = []
    try:
        for u in uris:
            r, w = os.pipe()
            env = dict(os.environ, **{READY_FD_ENV: str(w)})
            p = subprocess.Popen([sys.executable, "-m", "app", "record", u, "--out", out, *child_args],
                                 env=env, pass_fds=(w,))
            os.close(w)
            os.set_blocking(r, False)
            kids.append({"uri": u, "p": p, "r": r, "ready": False})
    except BaseException:
        for k in kids:
            k["p"].terminate()
        raise

    stopping = []

    def forward(*_):
        stopping.append(1)
        for k in kids:
            if k["p"].poll() is None:
                k["p"].send_signal(signal.SIGTERM)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)
    failed_at_start = None
    while any(k["p"].poll() is None for k in kids):
        for k in kids:
            if not k["ready"]:
                try:
                    k["ready"] = bool(os.read(k["r"], 1))
                except BlockingIOError:
                    pass
            rc = k["p"].poll()
            if rc and not k["ready"] and failed_at_start is None:
                failed_at_start = k  # a bad URI, --raw unsupported: the command fails as a whole
                forward()
        time.sleep(0.05)
    for k in kids:
        os.close(k["r"])
    died = [k for k in kids if k["p"].returncode < 0]
    if died and not stopping:  # (a child stopped before its handlers were set dies of the SIGTERM)
        k = died[0]
        raise RuntimeError(f"the recorder of {k['uri']} was killed by signal {-k['p'].returncode}")
    return max((k["p"].returncode for k in kids if k["p"].returncode > 0), default=0)
