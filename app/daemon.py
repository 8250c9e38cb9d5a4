"""The control plane of `engine run`, never on the strategy core. The strategy loop knows nothing
of it: they share only the control block.

A drain thread of its own renews the loop's lease every DRAIN_PERIOD_S and drains signals to the
signal file and to zmq (engine/zpub.py: slow subscribers are cut off), so no HTTP client can
starve either. One asyncio loop
(uvloop) on the main thread serves HTTP (bounded: a /metrics snapshot at most every
METRICS_EVERY_S, MAX_REQUESTS at once, timeouts) (/metrics, /health, /ready; /status and /control/* behind a
bearer token), writes the HdrHistogram interval log, watches the loop (a watchdog on its
heartbeat) and the feed (its ring's heartbeat and state, its process): a feed that is dead or
has ended makes /ready false (logged once). A spawned live feed is started again, with backoff,
whether it died or ended; a spawned file feed that dies ends the run (with a warning); a ring
that reappears under the same name is re-attached. The feed's own counters (its ring's header,
engine/feed_stats.py) are added up over its restarts and exported with the loop's.

Several sources (`engine run --feed A --feed B`, app/multi_rings.py): one FeedWatch per source does
all of the above for its own feed and ring, said by the source's label. /ready is 503 while any
source is down (the run is not whole) and its body names each source's state, so one venue that
is down never marks the others down; /ready?source=LABEL is one source's readiness. /status
`sources` and the engine_source_* metrics (a `source` label) count each one; the run's instrument
table (global ids, VENUE:SYMBOL) is written beside the rings as the feeds find instruments.
"""
import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable


from engine import control as C
from engine import dirs, feed_stats, latency, risk, shm, sigring
from engine.records import SIGNAL_FLAG_MARK, signal_flags, signal_instruments
from engine.outputs import NotPrivate, open_own, write_whole
from models import registry

from . import ctlauth, kill_file, prom, run_summary, runtime_file
from .drift_monitor import drift_families
from .paper_status import paper_status
from .prom import PAPER_METRICS  # noqa: F401 (re-exported: the tests, ops files)
from .run_options import RunConfig, risk_limits

FEED_STALE_NS = 500_000_000       # no feed heartbeat for this long: the feed is dead (feeds beat every <= 50 ms)
LOOP_STALL_NS = 1_000_000_000     # no loop heartbeat for this long: the loop is stalled (/ready false, logged)
WATCH_GAP_MAX_NS = 200_000_000    # a longer gap between two looks of the watchdog counts as this: it was stopped too
BRIDGE_MAX_S = 60.0               # the lease is renewed for a control plane that is starting at most this long
DRAIN_JOIN_S = 1.0                # at the end, a drain thread that does not stop within this is stuck (a write),
DRAIN_SLOW_S = 2.0                # or, writing a regular file (a loaded disk slows it, never blocks it), this
                                  # more (within ops/engine.service's TimeoutStopSec=5 with the rest of the stop)
RESPAWN_AFTER_S = 0.5             # a feed that died or ended is started again after this, doubled for each
RESPAWN_MAX_S = 30.0              # restart in a row up to this; a feed that ran well RESPAWN_RESET_S
RESPAWN_RESET_S = 30.0            # starts the count again
WATCH_PERIOD_S = 0.01             # the HTTP thread's housekeeping (watchdog, feed, hlog); draining has its own thread
METRICS_EVERY_S = 0.25            # /metrics renders at most this often, however many scrape it
MAX_REQUESTS = 64                 # HTTP requests in progress at once; more get 503
REQUEST_TIMEOUT_S = 5.0
# commands that load a model (a reload, a shadow: verification, and on a cold numba cache the
# shadow's loop compiled, tens of seconds) get longer before their reply says they are still going
SLOW_COMMANDS = ("reload", "shadow-add", "shadow-remove")
SLOW_REQUEST_TIMEOUT_S = 120.0
KEEPALIVE_S = 5.0
HTTP_STOP_S = 1.0                 # at stop, requests in progress get this long; then their connections close
PUB_RENEW_EVERY = 256             # zmq: the lease is renewed after this many records sent
PUB_HWM = 1000                    # zmq: records queued per subscriber before it is found slow and cut off
LOG_EVERY_S = 10.0                # at most one line per kind of HTTP trouble this often (the rest are counted)
# HELP of the feed's counters that alerts and people read most (every other one gets a generic line)
FEED_HELP = {
    "engine_feed_gaps": "sequence gaps the feed found in its source and could not recover (each one a gap "
                        "tick: the venue's messages in between never arrived)",
    "engine_feed_lost_messages": "messages the feed's source lost in its gaps (MoldUDP64: unrecovered)",
    "engine_feed_rerequests": "MoldUDP64 re-requests sent for missing messages",
    "engine_feed_rerequest_timeouts": "MoldUDP64 re-requests that went unanswered within recover_ms (the "
                                      "messages were declared lost)",
    "engine_feed_recovered_messages": "MoldUDP64 messages recovered by re-requests",
    "engine_feed_bad_packets": "malformed or foreign datagrams the feed dropped",
    "engine_feed_crossed_quotes": "quotes the feed published with the best bid at or above the best ask",
    "engine_feed_unknown_order": "updates for orders the feed's book never saw (lost adds: the book is wrong)",
    "engine_feed_crossed_books": "times a book stayed crossed (best bid at or above best ask) for longer than "
                                 "the feed's --crossed-after, exchange time",
    "engine_feed_crossed_instruments": "instruments whose book is crossed now, and has been for longer than the "
                                       "feed's --crossed-after",
    "engine_feed_feed_latency_off_clock": "ticks whose event time was off the receive clock (received over 100 s "
                                          "after it or over 1 s before): left out of the feed latency percentiles",
    "engine_feed_feed_latency_clock_offset_us": "when most ticks are off the receive clock: the last one's ts_recv "
                                                "- ts_event in us (no feed latency percentile is exported then)",
}


from .progress import log  # noqa: E402  (one owner of the [engine] lines and --quiet)


def _open_token(path):
    """An fd on the token file, or None if there is none. Refused: a link, another user's file, or
    one group or others can read or write (the token would be theirs too)."""
    try:
        return open_own(path)
    except OSError as e:
        raise RuntimeError(f"token file {path}: {e.strerror} (a link is never followed)") from None
    except NotPrivate as why:
        raise RuntimeError(f"token file {path} is refused: {why}; it must be this user's and private: "
                           f"chmod 600 {path} (the engine writes a new token at each start)") from None


def read_metrics_token(path):
    """--metrics-token-file: the token a Prometheus scraping /metrics/private sends (a file the
    operator keeps, readable by Prometheus's group, say): never through a link, this user's or
    root's, nothing for others; None without one."""
    if not path:
        return None
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise RuntimeError(f"--metrics-token-file {path}: {e.strerror} (a link is never followed)") from None
    try:
        st = os.fstat(fd)
        why = ("not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"owned by uid {st.st_uid}, not this user nor root" if st.st_uid not in (os.geteuid(), 0) else
               f"mode {st.st_mode & 0o777:04o}: others can read it (chmod o-rwx)" if st.st_mode & 0o007 else None)
        if why:
            raise RuntimeError(f"--metrics-token-file {path} is refused: {why}")
        token = os.read(fd, 4096).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if len(token) < 16 or any(ch.isspace() for ch in token):
        raise RuntimeError(f"--metrics-token-file {path}: the token must be one word of at least 16 characters")
    return token


def read_token(path):
    """The control token for a client (engine ctl, engine stats), held to the same rules."""
    fd = _open_token(path)
    if fd is None:
        raise FileNotFoundError(2, "No such file or directory", path)
    with os.fdopen(fd) as f:
        return f.read(4096).strip()


def ensure_token(path):
    """A new control token for this run, written 0600 under a temporary name and renamed over the
    old one: a token read (or stolen) during an earlier run is worth nothing once the engine restarts."""
    fd = _open_token(path)  # an existing file we would not trust is refused, not replaced
    if fd is not None:
        os.close(fd)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tok = secrets.token_hex(32)
    write_whole(path, (tok + "\n").encode(), 0o600)
    return tok


def remove_token(path, token):
    """At exit: the token file goes, if it still holds this run's token (a later run's is its own)."""
    try:
        fd = _open_token(path)
    except RuntimeError:
        return
    if fd is None:
        return
    with os.fdopen(fd) as f:
        mine = f.read().strip() == token
    if mine:
        with contextlib.suppress(OSError):
            os.unlink(path)


class HttpLog(logging.Logger):
    """aiohttp's request-handler logger. A malformed request (the parser's 4xx) is counted
    (engine_http_bad_requests_total) and costs at most one line every LOG_EVERY_S, never a
    traceback; an error of ours keeps its traceback (as rate-limited); chatter is dropped."""

    def __init__(self):
        super().__init__("engine.http", logging.DEBUG)
        self.bad = 0
        self._at, self._unlogged = {}, {}

    def _line(self, kind, text):
        now = time.monotonic()
        if now - self._at.get(kind, -1e9) < LOG_EVERY_S:
            self._unlogged[kind] = self._unlogged.get(kind, 0) + 1
            return
        n = self._unlogged.pop(kind, 0)
        self._at[kind] = now
        log(text + (f" (and {n} more since the last such line)" if n else ""))

    def _log(self, level, msg, args, exc_info=None, **kw):
        from aiohttp.http_exceptions import HttpProcessingError
        exc = sys.exc_info()[1] if exc_info is True else exc_info[1] if isinstance(exc_info, tuple) else exc_info
        if isinstance(exc, HttpProcessingError):
            self.bad += 1
            what = " ".join(str(getattr(exc, "message", "") or type(exc).__name__).split())  # one line
            what = what[:160].encode("ascii", "backslashreplace").decode()
            peer = str(args[0]) if args else "?"
            self._line("bad", f"http: {getattr(exc, 'code', 400)} to {peer}: {what} ({self.bad} malformed "
                              "requests so far, engine_http_bad_requests_total)")
        elif level >= logging.WARNING:
            try:
                text = str(msg) % args if args else str(msg)
            except (TypeError, ValueError):
                text = str(msg)
            if isinstance(exc, BaseException) and _ours(exc):
                import traceback
                text += "\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
            elif isinstance(exc, BaseException):  # aiohttp's own, on a connection closing as we stop
                text += f" in aiohttp: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"  # under a flood
            self._line("error", "http: " + text)


def _ours(exc):
    """Did the exception pass through this package's code (else it is the HTTP library's own)?"""
    import traceback
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return any(f.filename.startswith(here + os.sep) and "site-packages" not in f.filename
               for f in traceback.extract_tb(exc.__traceback__))


def kill_switch(ctl, code, name):
    """Put the loop in the killed state (engine/control.py CTL_KILL) for reason `code`, once: the
    first reason stands until resume-after-kill. From the control plane (command, file, feed down)
    and the paper trader's thread (loss, drawdown): one word, written once."""
    if int(ctl[C.CTL_KILL]) == 0:
        ctl[C.CTL_KILL] = code
        ctl[C.L_KILLS + code] += 1
        log(f"KILLED ({risk.kill_reason(code)}): every instrument's target goes flat; no new exposure until "
            f"`engine ctl resume --after-kill --name {name}`")


@dataclass
class PlaneInputs:
    """What a run hands its control plane (built in one place: app/live.py _Run.serve)."""
    cfg: RunConfig                  # resolved (RunConfig.resolved): http (host, port) or None, pub, token_file
    ctl_blk: object                 # engine.control.ControlBlock: the only thing the loop shares with us
    sring: object                   # engine.sigring.SignalRing: the loop's signals, drained here
    slog: object                    # engine.signal_log.SignalLog: the signal file
    drain_buf: object               # int64 [n, SIGNAL_WORDS]: what one drain moves at most
    thread: object                  # app.live.StrategyThread: the loop (its consumer, exit state, error)
    proc: object                    # the feed's subprocess.Popen (None: attached to a ring); respawn replaces it
    ring_name: str                  # the tick ring's name: a new ring there is re-attached
    stop_event: threading.Event     # set: stop (SIGINT/SIGTERM, a fatal error)
    reload_event: threading.Event   # set: reload the model (SIGHUP)
    loaded: list                    # the model generations still mapped, newest last
    swaps: list                     # every reload's record, for the summary
    model_dir: str
    reload: Callable[[], dict]      # load, verify and publish the model again (/control/reload, SIGHUP)
    respawn: Callable | None        # start the feed again (a live one); None: a feed that dies ends the run
    deadline: float | None          # time.monotonic() at which the run ends (--duration); None: when stopped
    lease_ns: int                   # the loop's lease, renewed every drain_period
    drain_period: float
    sources: list | None = None     # FeedSource per source of a run with several (or --record); None: one
    risk_table: Callable | None = None  # the instruments' records as they come -> the risk gate's multipliers
    paper: object = None            # app.paper.PaperTrader (--paper): given every drained signal
    shadows: object = None          # app.live._Run's shadows (--shadow, ctl shadow): .status(), .add(m), .remove(n)
    drift: object = None            # app.drift_monitor.DriftMonitor (--drift): .figures()
    bridge: object = None           # LeaseBridge: renews the lease until the drain thread runs

    # (the run's options, read from its configuration: one owner)
    http = property(lambda self: self.cfg.http)                 # (host, port) or None
    pub = property(lambda self: self.cfg.pub)                   # zmq endpoint or None
    token_file = property(lambda self: self.cfg.token_file)
    hlog_path = property(lambda self: self.cfg.hlog)            # None: no latency log
    hlog_interval = property(lambda self: self.cfg.hlog_interval)
    stall_exit = property(lambda self: self.cfg.stall_exit)


def renew_lease(ctl, sring_hdr, lease_ns):
    """The loop's lease renewed, the control block's and signal ring's heartbeats beaten (we own
    these two files)."""
    now = time.monotonic_ns()
    ctl[C.CTL_LEASE_NS] = now + lease_ns
    ctl[shm.H_HEARTBEAT_NS] = sring_hdr[shm.H_HEARTBEAT_NS] = now


class LeaseBridge:
    """Renews the loop's lease from the moment the loop runs until the control plane's drain
    thread takes over. Starting the plane (the zmq keys, aiohttp, the HTTP server) took 4.9 s on a
    2-core machine loaded by six busy processes, longer than the lease: the loop stopped itself
    before anyone had stopped watching it. Bounded: a plane that has not started in BRIDGE_MAX_S
    lets the lease lapse, as a hung control thread should."""

    def __init__(self, ctl, sring_hdr, lease_ns, period, loop_thread):
        self.done = threading.Event()
        args = (ctl, sring_hdr, lease_ns, period, loop_thread)
        self.thread = threading.Thread(target=self._run, args=args, name="engine-lease-bridge", daemon=True)
        self.thread.start()

    def _run(self, ctl, sring_hdr, lease_ns, period, loop_thread):
        end = time.monotonic() + BRIDGE_MAX_S
        while not self.done.wait(period) and loop_thread.is_alive() and time.monotonic() < end:
            renew_lease(ctl, sring_hdr, lease_ns)

    def stop(self):
        self.done.set()


@dataclass
class FeedSource:
    """One source of a run with several (or with --record): app/live.py _Run._sources makes them."""
    label: str                      # its short name (app/multi_rings.py labels): the metrics' `source` label
    uri: str | None                 # what its feed process reads (None: a ring we attached to)
    ring_name: str
    proc: object                    # its feed's subprocess.Popen (None: attached to a ring); respawn replaces it
    respawn: Callable | None        # start its feed again (a live one); None: a feed that dies ends the run
    index: int                      # its ring's place in the loop's rings (thread.rings.consumers[index])


class FeedWatch:
    """One feed, watched: its ring's heartbeat and state, its process (restarted with backoff when
    live), a ring that reappears under its name (re-attached), its counters over its restarts.
    A run with one source has one, on the run's own proc and ring (`source` None: its words are
    as they always were); a run with several has one per source, each said by its label."""

    def __init__(self, plane, source=None):
        self.p, self.x, self.source = plane, plane.x, source
        self.label = source.label if source is not None else None
        self.who = f"source {source.label}: " if source is not None else ""
        self.feed_dead_since = None
        self.feed_dead_logged = False
        self.respawns = 0
        self.lost_at_attach = None
        self.refused, self.refused_ino = 0, None
        self.backoff, self.respawn_at, self.ok_since, self.exit_seen = 0, None, None, None
        self._feed_consumer, self._feed_last, self._feed_carried = None, {}, {}

    # (the run's own proc and ring with one source; the source's with several)
    @property
    def proc(self):
        return self.source.proc if self.source is not None else self.x.proc

    @proc.setter
    def proc(self, p):
        if self.source is not None:
            self.source.proc = p
        else:
            self.x.proc = p

    @property
    def respawn(self):
        return self.source.respawn if self.source is not None else self.x.respawn

    @property
    def ring_name(self):
        return self.source.ring_name if self.source is not None else self.x.ring_name

    @property
    def consumer(self):
        t = self.x.thread
        rings = getattr(t, "rings", None)
        return rings.consumers[self.source.index] if self.source is not None and rings is not None else t.consumer

    @property
    def reattached(self):
        t = self.x.thread
        rings = getattr(t, "rings", None)
        return rings.reattached[self.source.index] if self.source is not None and rings is not None else t.reattached

    def _ring_state(self):
        """(inode, heartbeat age ns, state) of the ring file now under our ring's name, or None.
        A file there that must not be trusted (shm.open_checked) is refused, counted and logged
        once: its contents are never read."""
        path = shm.ring_path(self.ring_name)
        try:
            fd, st = shm.open_checked(path)
        except shm.RingRefused as e:
            try:
                ino = os.lstat(path).st_ino
            except OSError:
                ino = None
            if ino != self.refused_ino:
                self.refused_ino = ino
                self.refused += 1
                log(f"warning: {e} (not attaching; counted in engine_rings_refused_total)")
            return None
        except shm.RingError:
            return None
        try:
            hdr = shm.read_header_fd(fd, path)
        except shm.RingError:
            return None
        finally:
            os.close(fd)
        return st.st_ino, time.monotonic_ns() - int(hdr[shm.H_HEARTBEAT_NS]), int(hdr[shm.H_STATE])

    def feed_status(self):
        """'ok', 'finished' (a finite source played to its end), or why the feed is not alive."""
        c = self.consumer
        if c is None:
            return "not attached"
        state = int(c.hdr[shm.H_STATE])
        proc = self.proc
        if state == shm.STATE_FINISHED:
            if self.respawn is None:
                return "finished"
            # a live source that ends (MoldUDP64 idle_s, end of session) is a feed that is down
            return "the live feed ended" + (f" (exit status {proc.returncode})" if proc.poll() is not None else "")
        if proc is not None and proc.poll() is not None:
            return f"feed process exited with status {proc.returncode}"
        if self.lost_at_attach is not None and self.reattached == self.lost_at_attach:
            rs = self._ring_state()  # the same ring beating again (a paused feed) is back, not replaced
            if rs is None or rs[0] != c.ino:
                return "waiting for the feed's new ring"
        age = time.monotonic_ns() - int(c.hdr[shm.H_HEARTBEAT_NS])
        if age > FEED_STALE_NS:
            return f"no heartbeat for {age / 1e9:.1f} s"
        return "ok"

    def _feed_exited(self, proc):
        """Once per feed process that exits: a live one is started again after a backoff; a file
        feed that failed is said in the summary, and one that died before the end of its source
        ends the run (its end will never come)."""
        now = time.monotonic()
        code = proc.returncode
        if self.respawn is not None:
            delay = min(RESPAWN_AFTER_S * 2 ** self.backoff, RESPAWN_MAX_S)
            self.backoff += 1
            self.respawn_at = now + delay
            log(f"{self.who}feed process {proc.pid} exited with status {code}: starting it again in {delay:g} s")
            return
        c = self.consumer
        finished = c is not None and int(c.hdr[shm.H_STATE]) == shm.STATE_FINISHED
        if code != 0:
            self.p.warnings.append(f"{self.who}the feed process exited with status {code}"
                                 + (" (its log says why): its source was not read to the end" if finished else
                                    " before the end of its source: the run stopped there"))
        if not finished:
            log(f"{self.who}feed process {proc.pid} exited with status {code} before the end of its source: stopping")
            self.p.abnormal = self.p.abnormal or (f"feed exited {code}", f"{self.who}the feed process exited with "
                                                  f"status {code} before the end of its source")
            self.p.x.stop_event.set()

    def note_feed_exit(self):
        """At the end of the run, before the runner stops the feed: a file feed's exit that the
        watch had no time to see (its loop read to the end first) still makes its warning."""
        proc = self.proc
        if self.respawn is None and proc is not None and proc.poll() is not None and self.exit_seen is not proc:
            self.exit_seen = proc
            self._feed_exited(proc)

    def _watch_feed(self):
        self.feed_counters()  # (read while the feed is there: a restarted feed counts from 0 again)
        status = self.feed_status()
        proc = self.proc
        now = time.monotonic()
        if proc is not None and proc.poll() is not None and self.exit_seen is not proc:
            self.exit_seen = proc
            self._feed_exited(proc)
        if status in ("ok", "finished"):
            if self.feed_dead_logged:
                log(f"{self.who}feed is back")
            self.feed_dead_since, self.feed_dead_logged, self.lost_at_attach = None, False, None
            self.ok_since = self.ok_since or now
            if now - self.ok_since >= RESPAWN_RESET_S:
                self.backoff = 0
        else:
            self.ok_since = None
            if self.feed_dead_since is None:
                self.feed_dead_since = now
                self.lost_at_attach = self.reattached  # up again only on a new ring
            if not self.feed_dead_logged:
                log(f"{self.who}feed is down ({status}); /ready is false until it is back")
                self.feed_dead_logged = True
            if (proc is not None and proc.poll() is not None and self.respawn is not None
                    and self.respawn_at is not None and now >= self.respawn_at):
                self.respawns += 1
                self.respawn_at = None
                self.proc = self.respawn()
                log(f"{self.who}feed restarted (pid {self.proc.pid})")
        # a ring that reappeared under our name, alive: attach to it
        rs = self._ring_state()
        c = self.consumer
        if rs is not None and c is not None and status != "ok":
            ino, age, _ = rs
            if ino != c.ino and age < FEED_STALE_NS and int(self.p.ctl[C.CTL_CMD]) != C.CMD_REATTACH:
                log(f"{self.who}a new feed ring appeared at {shm.ring_path(self.ring_name)}: re-attaching")
                self.p.ctl[C.CTL_CMD] = C.CMD_REATTACH

    def feed_counters(self):
        """The feed's own counters (engine/feed_stats.py), added up over its restarts."""
        c = self.consumer
        if c is not None and c is not self._feed_consumer:  # a new ring: the last one's counts are final
            self._feed_carried = feed_stats.total(self._feed_carried, self._feed_last)
            self._feed_consumer, self._feed_last = c, {}
        if c is not None:
            self._feed_last = feed_stats.read(c.hdr) or self._feed_last
        return feed_stats.total(self._feed_carried, self._feed_last)


class ControlPlane:
    def __init__(self, ctx):
        self.x = ctx
        self.cfg = ctx.cfg
        self.ctl = ctx.ctl_blk.hdr
        self.paused = False
        self.feed_down_since = None  # (--kill-feed-down: since when a feed is down)
        self.stall_logged = False
        self.stalled = False
        self.silent_ns, self._beat, self._watch_at = 0, None, time.monotonic_ns()
        self.hung_ns = int(ctx.stall_exit * 1e9)  # (--stall-exit) 0: a stalled loop never ends the run
        self.abnormal = None        # (reason for the signal file, the summary's words): why we ended the run
        self.drain_stuck = False    # the drain thread did not stop at the end (blocked in a write)
        self.pub = None
        self.hlog = None
        self.token = ensure_token(ctx.token_file) if ctx.http else None
        self.instruments, self.specs = [], None
        self._inst_mtime = None
        # --model registry:NAME: its live link, and where it pointed last (an operator's own symlink
        # is reloaded by SIGHUP or `engine ctl reload`, when they say, as before)
        self.model_link = ctx.model_dir if (ctx.cfg.model or "").startswith(registry.PREFIX) and \
            os.path.islink(ctx.model_dir) else None
        self.model_target = ctx.loaded[-1].path if ctx.loaded else None
        self.started = time.monotonic()
        self.warnings = []          # for the run's summary: a feed process that failed
        self.drainer, self.drain_stop = None, threading.Event()
        self.http_log = HttpLog()
        self._metrics = {False: (b"", 0.0), True: (b"", 0.0)}  # (public, private: each a snapshot and when)
        self.metrics_token = read_metrics_token(ctx.cfg.metrics_token_file) if ctx.http else None
        self.runtime = None
        self.feeds = [FeedWatch(self, src) for src in ctx.sources] if ctx.sources else [FeedWatch(self)]

    # -- the feeds (FeedWatch: one per source) ----------------------------------------------

    def feed_status(self):
        """'ok', 'finished', or why a feed is not alive (with several sources: each one that is not
        ok, by its label)."""
        if len(self.feeds) == 1:
            return self.feeds[0].feed_status()
        bad = [f"{w.label}: {st}" for w in self.feeds for st in [w.feed_status()] if st not in ("ok", "finished")]
        if bad:
            return "; ".join(bad)
        return "finished" if all(w.feed_status() == "finished" for w in self.feeds) else "ok"

    def note_feed_exit(self):
        for w in self.feeds:
            w.note_feed_exit()

    def _watch_feed(self):
        for w in self.feeds:
            w._watch_feed()

    def feed_counters(self):
        """The feeds' own counters (engine/feed_stats.py), added up over their restarts (and sources)."""
        out = {}
        for w in self.feeds:
            out = feed_stats.total(out, w.feed_counters())
        return out

    @property
    def respawns(self):
        return sum(w.respawns for w in self.feeds)

    @property
    def refused(self):
        return sum(w.refused for w in self.feeds)

    def _watchdog(self):
        """How long the loop has been silent (no heartbeat), counted only while we ran ourselves: a
        whole-process stop (SIGSTOP, a debugger, a VM pause) stops the loop and us alike, and a
        gap between two of our looks counts at most WATCH_GAP_MAX_NS, so it never reads as a
        stalled loop. Silent for hung_ns (--stall-exit), the loop is not coming back (its strategy
        never returns: the thread cannot be interrupted): the run ends, abnormally."""
        now = time.monotonic_ns()
        gap, self._watch_at = min(now - self._watch_at, WATCH_GAP_MAX_NS), now
        beat = int(self.ctl[C.L_HEARTBEAT])
        watched = int(self.ctl[C.L_STATE]) in (C.LOOP_RUNNING, C.LOOP_PAUSED) and \
            int(self.ctl[C.CTL_CMD]) != C.CMD_REATTACH
        if not watched or beat != self._beat:
            self._beat, self.silent_ns = beat, 0
        else:
            self.silent_ns += gap
        self.stalled = self.silent_ns > LOOP_STALL_NS
        if self.stalled and not self.stall_logged:
            log(f"watchdog: the strategy loop has not beaten for {self.silent_ns / 1e9:.1f} s (stalled?)")
            self.stall_logged = True
        elif not self.stalled and self.stall_logged:
            log("watchdog: the strategy loop is beating again")
            self.stall_logged = False
        if self.hung_ns and self.silent_ns >= self.hung_ns and self.abnormal is None:
            why = (f"the strategy loop hung: no heartbeat for {self.silent_ns / 1e9:.1f} s (--stall-exit); its "
                   "strategy does not return (an endless loop in on_tick or decide?)")
            log(f"error: {why}; stopping the run")
            self.abnormal = ("strategy loop hung", why)
            self.x.stop_event.set()

    # -- signals -----------------------------------------------------------------------

    def _topic(self, inst):
        if inst < len(self.instruments):
            return self.instruments[inst].encode()
        return str(inst).encode()

    def _refresh_instruments(self):
        rings = getattr(self.x.thread, "rings", None)
        if rings is not None and self.x.sources and len(self.x.sources) > 1:
            # several sources: the run's table (global ids, VENUE:SYMBOL), written beside the rings when it grows
            names, specs = rings.table(True)
            if names != self.instruments or specs != self.specs:
                self.instruments, self.specs = names, specs
                if self.x.risk_table is not None:
                    self.x.risk_table(specs)
                from .multi_rings import write_table
                try:
                    write_table(shm.ring_path(f"{self.cfg.name}.instruments"), names, specs)
                except OSError as e:
                    log(f"warning: cannot write the run's instrument table: {e}")
            return
        c = self.x.thread.consumer
        if c is None:
            return
        try:
            m = os.stat(c.path + ".instruments").st_mtime_ns
        except OSError:  # the feed is gone with its table: the one read at claim or since
            self.instruments, self.specs = c.instruments(), c.specs()
            return
        if m != self._inst_mtime:
            self._inst_mtime = m
            self.instruments, self.specs = c.instruments(), c.specs()  # (specs: engine/instruments.py)
            if self.x.risk_table is not None:
                self.x.risk_table(self.specs)

    def drain(self):
        buf = self.x.drain_buf
        total = 0
        paper = self.x.paper
        # (read before draining. The loop taps a tick before it decides on it, so the last tick
        # taken may still be deciding: the decisions on the ticks before it are all drained below)
        taken = max(paper.tap_written() - 1, 0) if paper is not None else 0
        while True:
            n = sigring.drain(self.x.sring.hdr, self.x.sring.data, self.x.sring.mask, buf)
            if not n:
                if paper is not None:
                    paper.decided(taken)
                return total
            self._renew()  # (alive: a long drain is progress)
            self.x.slog.write(buf[:n])  # signals and conflation marks (the file keeps both)
            if self.x.paper is not None:
                self.x.paper.signals(buf[:n])
            if self.pub is not None:
                self._publish(buf[:n])
            total += n

    def _renew(self):
        renew_lease(self.ctl, self.x.sring.hdr, self.x.lease_ns)

    def _publish(self, chunk):
        """The chunk's decisions on zmq, renewing the lease every PUB_RENEW_EVERY: sending to 50
        subscribers on a loaded machine took 1 ms a record, 3.5 s for one chunk."""
        recs = chunk[(signal_flags(chunk) & SIGNAL_FLAG_MARK) == 0]  # decisions only
        insts = signal_instruments(recs).tolist()
        if insts and max(insts) >= len(self.instruments):
            self._refresh_instruments()  # a feed names instruments as it finds them
        for i, (rec, inst) in enumerate(zip(recs, insts)):  # never blocks: a subscriber found full
            if i % PUB_RENEW_EVERY == PUB_RENEW_EVERY - 1:  # is cut off (engine/zpub.py)
                self._renew()
            self.pub.send(self._topic(inst), rec.tobytes())

    # -- HTTP ----------------------------------------------------------------------------

    @property
    def published(self):
        return self.pub.published if self.pub is not None else 0

    def zmq_counters(self):
        p = self.pub
        return {"published": p.published if p else 0, "dropped": p.dropped if p else 0,
                "slow_disconnects": p.disconnected if p else 0, "refused": p.refused if p else 0}

    def ready(self):
        why = []
        if not self.x.thread.is_alive():
            why.append("strategy loop not running")
        if self.stalled:
            why.append("strategy loop stalled")
        if not self.x.loaded:
            why.append("no model")
        for w in self.feeds:
            fs = w.feed_status()
            if fs not in ("ok", "finished"):
                why.append(f"feed {w.label}: {fs}" if w.label and len(self.feeds) > 1 else f"feed: {fs}")
        return not why, why

    def source_status(self):
        """Each source of a run with several (or --record): its feed, readiness and counters, by label.
        A source that is down is said here alone: the others' entries stay ready."""
        rings = getattr(self.x.thread, "rings", None)
        if not self.x.sources or rings is None:
            return None
        out = {}
        for w, src in zip(self.feeds, self.x.sources):
            k = src.index
            fs = w.feed_status()
            c = w.consumer
            rst = rings.rst[k]
            m = self.x.thread.host.mod
            out[w.label] = {
                "uri": src.uri, "ring": shm.ring_path(src.ring_name), "feed": fs, "ready": fs in ("ok", "finished"),
                "pid": w.proc.pid if w.proc is not None else None,
                "instruments": {"first_id": int(rings.offsets[k]), "ids": int(rings.blocks[k])},
                "counters": {"ticks": int(rst[m.RS_TICKS]), "feed_gaps": int(rst[m.RS_FEED_GAPS]),
                             "feed_lost": int(rst[m.RS_FEED_LOST]), "unmapped": int(rst[m.RS_UNMAPPED]),
                             "gaps": c.gaps if c is not None else 0, "lost": c.lost if c is not None else 0},
                "feed_counters": w.feed_counters(), "feed_restarts": w.respawns, "reattached": w.reattached}
        return out

    def status(self):
        pred = self.x.loaded[-1]
        ok, why = self.ready()
        counters, feed = self.x.ctl_blk.counters(), self.feed_counters()
        return {"name": self.cfg.name, "pid": os.getpid(), "ready": ok, "not_ready": why,
                "counters": counters, "signal_drops": int(self.x.sring.drops),
                "losses": run_summary.losses(counters, feed, self.cfg.conflate_warn), "feed_counters": feed,
                "published": self.published, "zmq": self.zmq_counters(), "paused": self.paused,
                "risk": {"limits": risk_limits(self.cfg).describe(), **run_summary.risk_state(counters)},
                "paper": paper_status(self.x.paper, self.instruments),
                "shadows": self.x.shadows.status() if self.x.shadows is not None else [],
                "drift": self.x.drift.figures() if self.x.drift is not None else None,
                "feed": self.feed_status(),
                "feed_restarts": self.respawns, "reattached": self.x.thread.reattached,
                "sources": self.source_status(),
                "model": {"id": pred.model_id, "backend": pred.backend, "dir": self.x.model_dir,
                          "generation": int(self.ctl[C.L_MODEL_GEN])},
                "loop": {"core": self.x.thread.core, "policy": self.x.thread.policy,
                         "wait": self.x.thread.choice.wait.name, "conflate": self.x.thread.conflate,
                         "state": C.LOOP_STATE_NAMES.get(int(self.ctl[C.L_STATE]), "?"),
                         "preempted": self.x.thread.preempted()},
                "latency_ns": latency.summary(self.x.ctl_blk.hist)}

    def metrics_text(self, private=False):
        """The Prometheus text: what any local process may scrape (health, latency, counts), and with
        `private` (/metrics/private: the owner, or its Prometheus with --metrics-token-file) the
        money and positions of paper trading and the kill switch too."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        plane = self

        class Collector:
            def collect(self):
                c = plane.x.ctl_blk.counters()
                for name, key, doc in (("engine_ticks", "ticks", "ticks read from the ring"),
                                       ("engine_signals", "signals", "signals published: targets that moved "
                                        "(clipped and kill-switch flattenings included; engine/signal_counts.py)"),
                                       ("engine_scored", "scored", "ticks scored by the model"),
                                       ("engine_conflated", "conflated", "scoreable ticks superseded by a later "
                                        "tick of their instrument before the loop scored them (conflation)"),
                                       ("engine_parks", "parks", "sleeps of the loop's wait strategy")):
                    yield CounterMetricFamily(name, doc, value=c[key])
                gaps = CounterMetricFamily("engine_gaps", "gap events by where the data was lost: kind=feed, a gap "
                                           "tick in the stream (the feed lost messages of its source: a venue "
                                           "sequence gap not recovered; or a recording's); kind=ring, the loop was "
                                           "lapped by its feed", labels=["kind"])
                lost = CounterMetricFamily("engine_lost_ticks", "what the gaps lost: kind=ring, ticks (exact); "
                                           "kind=feed, the counts the feed's gap ticks carry (its source's units: "
                                           "MoldUDP64 messages)", labels=["kind"])
                for kind, g, n in (("feed", "feed_gaps", "feed_lost"), ("ring", "gaps", "lost")):
                    gaps.add_metric([kind], c[g])
                    lost.add_metric([kind], c[n])
                yield gaps
                yield lost
                if private:
                    yield from plane._private_families(c)
                recs = CounterMetricFamily("engine_signal_records", "signal records by kind (engine/signal_counts.py:"
                                           " published, clipped, refused by the risk gate, made while killed)",
                                           labels=["kind"])
                for kind, n in c["signal_counts"].items():
                    recs.add_metric([kind], n)
                yield recs
                yield from drift_families(plane.x.drift)
                blocked = CounterMetricFamily("engine_risk_blocked", "decisions the risk gate cut, by the rule "
                                              "that cut them (engine/risk.py; each cut counted, a refused one "
                                              "recorded once per wanted target)", labels=["rule"])
                for rule, n in c["risk_blocked"].items():
                    blocked.add_metric([rule], n)
                yield blocked
                yield GaugeMetricFamily("engine_conflation_warn_ratio", "the share of scoreable ticks conflated "
                                        "(engine_conflated_total / (engine_conflated_total + engine_scored_total)) "
                                        "above which the run warns (--conflate-warn); ops/engine-alerts.yml "
                                        "compares the last minutes' rates with it", value=plane.cfg.conflate_warn)
                yield from feed_families(plane.feed_counters())
                yield from prom.source_families(plane.source_status())  # (several sources: each by its label)
                yield CounterMetricFamily("engine_rings_refused", "files at the feed ring's name refused (a link, "
                                          "another user's, or writable by others)", value=plane.refused)
                yield CounterMetricFamily("engine_drops", "signals dropped on a full signal ring",
                                          value=int(plane.x.sring.drops))
                z = plane.zmq_counters()
                yield CounterMetricFamily("engine_published", "signals published on zmq", value=z["published"])
                yield CounterMetricFamily("engine_zmq_dropped", "signals zmq subscribers did not get because they "
                                          "stopped reading: the one that found a queue full, and the queue "
                                          "(SNDHWM signals + the socket's unsent bytes) of each one cut off",
                                          value=z["dropped"])
                yield CounterMetricFamily("engine_zmq_slow_disconnects", "zmq subscribers disconnected for not "
                                          "reading (their queue was full)", value=z["slow_disconnects"])
                yield CounterMetricFamily("engine_zmq_refused_subscribers", "zmq handshakes refused: a client key "
                                          "the owner does not allow (--pub-clients)", value=z["refused"])
                yield CounterMetricFamily("engine_http_bad_requests", "malformed HTTP requests answered 4xx "
                                          "by the parser", value=plane.http_log.bad)
                hc = getattr(plane, "conns", None)  # (httpconns.py: connections over the caps)
                yield CounterMetricFamily("engine_http_refused_connections", "HTTP connections closed at once: "
                                          "every slot (overall or the peer's) busy", value=hc.refused if hc else 0)
                yield CounterMetricFamily("engine_http_evicted_connections", "idle HTTP connections closed to make "
                                          "room for a new one over the caps", value=hc.evicted if hc else 0)
                yield from prom.families(plane.x.ctl_blk.hist)  # latency: what alerts and dashboards use
                pred = plane.x.loaded[-1]
                info = GaugeMetricFamily("engine_model_info", "the model in use", labels=["model_id", "backend", "generation"])
                info.add_metric([pred.model_id, pred.backend, str(int(plane.ctl[C.L_MODEL_GEN]))], 1.0)
                yield info
                t = plane.x.thread
                yield GaugeMetricFamily("engine_loop_pinned", "1 if the strategy loop is pinned to its core",
                                        value=1.0 if t.core is not None else 0.0)
                yield GaugeMetricFamily("engine_loop_fifo", "1 if the strategy loop runs SCHED_FIFO",
                                        value=1.0 if t.policy == "SCHED_FIFO" else 0.0)
                li = GaugeMetricFamily("engine_loop_info", "the loop's scheduling policy, wait strategy and conflation",
                                       labels=["policy", "wait", "conflate"])
                li.add_metric([t.policy, t.choice.wait.name, "on" if t.conflate else "off"], 1.0)
                yield li
                ok, _ = plane.ready()
                yield GaugeMetricFamily("engine_ready", "1 when model, feed and loop are all well", value=float(ok))
                yield GaugeMetricFamily("engine_paused", "1 while paused", value=float(plane.paused))
                yield GaugeMetricFamily("engine_loop_stalled", "1 when the watchdog sees no loop heartbeat",
                                        value=float(plane.stalled))
                yield CounterMetricFamily("engine_feed_restarts", "times the feed was restarted", value=plane.respawns)
                p = t.preempted()
                if p is not None:  # (/proc: where the kernel keeps schedstats)
                    yield CounterMetricFamily("engine_loop_preemptions", "times other work took the strategy "
                                              "loop's core from it (involuntary context switches)", value=p["count"])
                    yield CounterMetricFamily("engine_loop_preempted_seconds", "time the strategy loop waited for "
                                              "its core while other work ran there", value=p["wait_ms"] / 1e3)

        reg = CollectorRegistry()
        reg.register(Collector())
        return generate_latest(reg)

    def _private_families(self, c):
        """What only the owner may scrape: paper trading's money, positions and fills, the kill switch."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        yield from prom.paper_families(self.x.paper)
        yield GaugeMetricFamily("engine_killed", "1 while the run is killed (no new exposure until `engine "
                                "ctl resume --after-kill`)", value=1 if c["killed"] else 0)
        kills = CounterMetricFamily("engine_kills", "times the run was killed, by reason (command, file, "
                                    "loss, drawdown, feed)", labels=["reason"])
        for reason, n in c["kills"].items():
            kills.add_metric([reason], n)
        yield kills

    def _authorized(self, request):
        """The unix socket (in the 0700 runtime directory): a peer of our uid (or root), by
        SO_PEERCRED, no token. TCP: an Engine-HMAC answer to one of our challenges (ctlauth.py:
        the token never crosses the wire), or `Authorization: Bearer <token>` for curl (whoever
        listens on the port gets that token: README)."""
        entry = self.conns.open.get(request.transport)
        if entry is not None and isinstance(entry[0], tuple):  # ("uid", N): the unix socket
            return entry[0][1] in (os.geteuid(), 0)
        got = request.headers.get("Authorization", "")  # any bytes (undecodable ones come as surrogates)
        if got.startswith(ctlauth.SCHEME + " "):
            return self.challenges.check(self.token, got, request.method, request.raw_path)
        return secrets.compare_digest(got.encode("utf-8", "surrogateescape"), f"Bearer {self.token}".encode())

    async def _serve_http(self, host, port):
        """Serve HTTP on host:port and on the unix socket `http_unix_path()`; we accept the
        connections ourselves, capped (httpconns.py). Returns what to cleanup() at the end."""
        from aiohttp import web

        from .httpconns import Connections, serve

        self.challenges, self.http_unix = ctlauth.Challenges(), None
        self.conns = conns = Connections(say=lambda m: self.http_log._line("conns", m))

        def metrics_of(private):
            async def metrics(request):
                now = time.monotonic()
                body, at = self._metrics[private]
                if now - at >= METRICS_EVERY_S:  # a snapshot: scrapers cannot make us render more
                    body = self.metrics_text(private)
                    self._metrics[private] = (body, now)
                return web.Response(body=body, content_type="text/plain", charset="utf-8",
                                    headers={"X-Content-Type-Options": "nosniff"})
            return metrics

        def owner_or_its_prometheus(fn):
            async def handler(request):
                got = request.headers.get("Authorization", "")
                ok = self._authorized(request) or (self.metrics_token is not None and secrets.compare_digest(
                    got.encode("utf-8", "surrogateescape"), f"Bearer {self.metrics_token}".encode()))
                if not ok:
                    return web.Response(status=401, text="unauthorized: /metrics/private (money, positions) is the "
                                        "owner's: its token, its unix socket, or --metrics-token-file's token\n")
                return await fn(request)
            return handler

        async def health(request):
            alive = self.x.thread.is_alive()
            return web.Response(status=200 if alive else 503, text="alive\n" if alive else "strategy loop not running\n")

        async def ready(request):
            ok, why = self.ready()
            sources = self.source_status()
            want = request.query.get("source")
            if want is not None:  # one source's readiness: a probe per venue
                if not sources or want not in sources:
                    return web.json_response({"error": f"no source {want!r} (sources: "
                                                       f"{', '.join(sources or {}) or 'none'})"}, status=404)
                s = sources[want]
                return web.json_response({"source": want, "ready": s["ready"], "feed": s["feed"]},
                                         status=200 if s["ready"] else 503)
            body = {"ready": ok, "not_ready": why}
            if sources is not None:
                body["sources"] = {k: {"ready": v["ready"], "feed": v["feed"]} for k, v in sources.items()}
            return web.json_response(body, status=200 if ok else 503)

        def guarded(fn):
            async def handler(request):
                if not self._authorized(request):
                    return web.json_response({"error": "unauthorized: use `engine ctl`/`engine stats` (the "
                                                       "engine's unix socket, or a challenge-response over TCP), "
                                                       "or send 'Authorization: Bearer <token>' (the token is in "
                                                       f"{self.x.token_file}, new at each start)"}, status=401)
                return await fn(request)
            return handler

        async def challenge(request):
            c = request.query.get("c", "")
            if not ctlauth.valid_nonce(c):
                return web.json_response({"error": "give c=CLIENT_NONCE (32 to 128 lowercase hex digits)"}, status=400)
            return web.json_response(self.challenges.issue(self.token, c))

        async def status(request):
            return web.json_response(self.status(), dumps=lambda o: json.dumps(o, default=str))

        async def adopted(done, within=0.5):
            """Until the loop adopted the kill switch's move (it says so in the control block), or
            `within` seconds (a loop that has stopped): the reply then shows the state it is in."""
            until = time.monotonic() + within
            while not done() and time.monotonic() < until:
                await asyncio.sleep(0.002)

        async def control(request):
            cmd = request.match_info["cmd"]
            if cmd == "pause":
                self.paused = True
                self.ctl[C.CTL_CMD] = C.CMD_PAUSE
            elif cmd == "resume":
                self.paused = False
                self.ctl[C.CTL_CMD] = C.CMD_RUN
            elif cmd == "kill":
                self.kill(risk.KILL_REASONS.index("command"))
                await adopted(lambda: int(self.ctl[C.L_KILLED]) != 0)
            elif cmd == "resume-after-kill":
                self.unkill()
                await adopted(lambda: int(self.ctl[C.L_KILLED]) == 0)
            elif cmd in ("shadow-add", "shadow-remove"):  # (loading a model is slow: off the event loop)
                arg = request.query.get("model" if cmd == "shadow-add" else "name", "")
                if self.x.shadows is None:
                    return web.json_response({"ok": False, "error": "this run reads no tap ring, where shadows read "
                                              "the loop's ticks: start it with --shadow, --record or --paper (and a "
                                              "signal file: --signals-out FILE)"}, status=409)
                if not arg:
                    return web.json_response({"ok": False, "error": "give ?model=DIR (add) or ?name=NAME (remove)"},
                                             status=400)
                fn = self.x.shadows.add if cmd == "shadow-add" else self.x.shadows.remove
                res = await off_loop(lambda: fn(arg)) or {}
                return web.json_response(res, status=200 if res.get("ok") else 409,
                                         dumps=lambda o: json.dumps(o, default=str))
            elif cmd == "reload":  # this call's own result (runner.reload_model), not the latest swap's
                res = await off_loop(self.x.reload) or {}
                return web.json_response({"ok": bool(res.get("ok")), **res}, status=200 if res.get("ok") else 409,
                                         dumps=lambda o: json.dumps(o, default=str))
            elif cmd != "status":
                return web.json_response({"error": f"unknown command {cmd!r} (status, pause, resume, reload, kill, "
                                                   "resume-after-kill, shadow-add, shadow-remove)"},
                                         status=404)
            return web.json_response(self.status(), dumps=lambda o: json.dumps(o, default=str))

        busy = [0]

        @web.middleware
        async def limit(request, handler):  # a flood gets 503s, not our time
            if busy[0] >= MAX_REQUESTS:
                return web.Response(status=503, text="busy\n", headers={"Retry-After": "1"})
            busy[0] += 1
            conns.begin(request.transport)  # (not idle: never closed to make room)
            slow = request.path.startswith("/control/") and request.path.rsplit("/", 1)[-1] in SLOW_COMMANDS
            within = SLOW_REQUEST_TIMEOUT_S if slow else REQUEST_TIMEOUT_S
            try:
                return await asyncio.wait_for(handler(request), within)
            except asyncio.TimeoutError:
                return web.json_response({"ok": False, "error": f"no answer within {within:g} s" + (
                    "; the command goes on in the engine (engine ctl status / shadow list show when it is done)"
                    if slow else "")}, status=503, headers={"Retry-After": "1"})
            finally:
                busy[0] -= 1
                conns.end(request.transport)

        app = web.Application(middlewares=[limit], client_max_size=4096)
        app.router.add_get("/metrics", metrics_of(False))
        app.router.add_get("/metrics/private", owner_or_its_prometheus(metrics_of(True)))
        app.router.add_get("/health", health)
        app.router.add_get("/ready", ready)
        app.router.add_get("/auth/challenge", challenge)
        app.router.add_get("/status", guarded(status))
        app.router.add_post("/control/{cmd}", guarded(control))
        app.router.add_get("/control/status", guarded(status))
        # (aiohttp's default waits 60 s for requests in progress at stop: keep-alive scrapers that
        # never pause held a stopping engine that long)
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_S, logger=self.http_log,
                               shutdown_timeout=HTTP_STOP_S)
        await runner.setup()
        try:
            served, self.http_unix = await serve(runner, conns, host, port, self.http_unix_path(),
                                                 lambda m: self.http_log._line("accept", m))
        except BaseException:
            await runner.cleanup()
            raise
        return served

    def http_unix_path(self):
        """The control plane's unix socket, in the private runtime directory the runtime file is in
        (None if the path would be too long for a unix socket)."""
        path = os.path.join(dirs.runtime_dir(), f"engine-http.{str(self.cfg.name).replace('/', '%')}.sock")
        if len(os.fsencode(path)) > 107:
            log(f"warning: no unix control socket: {path} is too long for one (clients need --http)")
            return None
        return path

    # -- the loop ------------------------------------------------------------------------

    async def main(self):
        x = self.x
        http = None
        if x.pub:
            from .zpub import Publisher, allowed_clients, key_paths, own_key_paths, server_keys
            # CURVE: subscribers that check the key talk to this engine only, never to a port squatter;
            # and only the client keys the owner allows (app/zauth.py) complete a handshake
            try:
                sd = dirs.state_dir()
                self.pub_key, secret = server_keys(self.cfg.name, sd)
                clients = allowed_clients(self.cfg.pub_clients, sd)
            except OSError as e:
                raise RuntimeError(f"--pub: cannot keep the zmq keypairs in $XDG_STATE_HOME/engine "
                                   f"({e.filename or ''}): {e.strerror}") from None
            self.pub_key_file, self.pub_client_key_file = key_paths(self.cfg.name, sd)[1], own_key_paths(sd)[0]
            # bounded per subscriber: one that stops reading holds at most PUB_HWM records plus its
            # socket buffer; then it is counted and disconnected; it never grows our memory or blocks us
            self.pub = Publisher(x.pub, hwm=PUB_HWM, secret_key=secret, clients=clients)
            who = f"and those listed in {self.cfg.pub_clients}" if self.cfg.pub_clients else "only"
            log(f"signals published on {x.pub} (CURVE, server key {self.pub_key.decode()} in {self.pub_key_file}; "
                f"subscribers: this user's own ({self.pub_client_key_file}) {who}; "
                "topic = instrument, payload = the 128-byte signal record, then the topic's publication number)")
        if x.http:
            http = await self._serve_http(*x.http)
            unix = f" (or, on {self.http_unix[0]}, this user)" if self.http_unix else ""
            log(f"http://{x.http[0]}:{x.http[1]}/metrics /health /ready; /status and /control/* need the token in "
                f"{x.token_file} (new at each start){unix}")
        if x.hlog_path:
            from engine.hlog import HlogWriter
            self.hlog = HlogWriter(x.hlog_path)
            log(f"latency interval log -> {x.hlog_path} every {x.hlog_interval:g} s")
        self.runtime = self._publish_runtime_file()
        next_hlog = time.monotonic() + x.hlog_interval
        next_watch = 0.0
        hup = None  # the SIGHUP reload in progress
        self._refresh_instruments()
        self.drainer = threading.Thread(target=self._drain_loop, name="engine-drain", daemon=True)
        self.drainer.start()
        try:
            while not x.stop_event.is_set():
                if not x.thread.is_alive() or not self.drainer.is_alive():
                    break
                if x.reload_event.is_set() and (hup is None or hup.done()):  # (SIGHUPs meanwhile: one more)
                    x.reload_event.clear()
                    hup = off_loop(x.reload)  # not awaited: a stop never waits on a reload (a stalled file)
                t = time.monotonic()
                if x.deadline and t >= x.deadline:
                    break
                if t >= next_watch:
                    next_watch = t + 0.05
                    self._refresh_instruments()
                    self._watchdog()
                    self._watch_feed()
                    self._kill_triggers(t)
                    self._watch_model()
                    if self.paused and int(self.ctl[C.CTL_CMD]) == C.CMD_RUN:
                        self.ctl[C.CTL_CMD] = C.CMD_PAUSE  # (a re-attach resets the command)
                if self.hlog is not None and t >= next_hlog:
                    next_hlog = t + x.hlog_interval
                    self.hlog.interval(x.ctl_blk.hist)
                await asyncio.sleep(WATCH_PERIOD_S)
        finally:
            self.drain_stop.set()
            if self.runtime is not None:
                self.runtime.remove()
            if http is not None:
                await http.cleanup()
            if self.token is not None:
                remove_token(x.token_file, self.token)

    def kill(self, code):
        kill_switch(self.ctl, code, self.cfg.name)

    def unkill(self):
        if int(self.ctl[C.CTL_KILL]) != 0:
            log(f"kill switch reset (was: {risk.kill_reason(int(self.ctl[C.CTL_KILL]))}): entries allowed again")
            self.ctl[C.CTL_KILL] = 0
            self.feed_down_since = None  # (a feed still down kills again only after the full time)

    def _watch_model(self):
        """registry:NAME's live link moved (`engine model promote` / `rollback`): reload it, once per
        move (a refused artifact is not tried again until the link moves)."""
        if self.model_link is None:
            return
        try:
            now = os.path.realpath(self.model_link)
        except OSError:
            return
        if now != self.model_target:
            self.model_target = now
            log(f"{self.model_link} now points at {now}: reloading the model")
            self.x.reload_event.set()

    def _kill_triggers(self, now):
        """The kill switch's own triggers, every watch: --kill-file appeared, a feed down too long."""
        cfg = self.cfg
        if cfg.kill_file and kill_file.pulled(cfg.kill_file):
            self.kill(risk.KILL_REASONS.index("file"))
        if cfg.kill_feed_down > 0:
            if self.feed_status() in ("ok", "finished"):
                self.feed_down_since = None
            elif self.feed_down_since is None:
                self.feed_down_since = now
            elif now - self.feed_down_since >= cfg.kill_feed_down:
                self.kill(risk.KILL_REASONS.index("feed"))

    def _publish_runtime_file(self):
        """Where this engine's control plane is (engine/runtime_file.py), once it serves."""
        x = self.x
        unix = getattr(self, "http_unix", None)
        info = {"http": f"{x.http[0]}:{x.http[1]}" if x.http else None, "pub": x.pub or None,
                "http_unix": unix[0] if x.http and unix else None,
                "pub_key": self.pub_key.decode() if x.pub else None,
                "pub_key_file": self.pub_key_file if x.pub else None,
                "pub_client_key_file": self.pub_client_key_file if x.pub else None,  # (its owner's subscribers' keypair)
                "token_file": os.path.abspath(x.token_file) if x.http and x.token_file else None,
                "ring": shm.ring_path(x.ring_name)}
        try:
            rf = runtime_file.publish(self.cfg.name, info)
        except (OSError, RuntimeError) as e:  # the engine runs on; clients then need --config or the endpoints
            log(f"warning: cannot write the runtime file for `engine stats/ctl --name {self.cfg.name}`: {e}")
            return None
        log(f"endpoints in {rf.path} (engine stats/ctl/signals --follow --name {self.cfg.name} read it)")
        return rf

    def _drain_loop(self):
        """Its own thread, never the one that answers HTTP: renews the loop's lease, beats the
        heartbeats and drains signals (file, zmq) every drain_period, however busy the HTTP side is."""
        x = self.x
        if x.bridge is not None:
            x.bridge.stop()  # (ours from now on: renewed at once below)
        while not self.drain_stop.is_set():
            self._renew()
            self.drain()
            if self.pub is not None:
                self.pub.poll()
            if not x.thread.is_alive():
                return
            self.drain_stop.wait(x.drain_period)

    def finish(self):
        """After the loop stopped: the last signals and the last interval, then close. A drain
        thread that does not stop (blocked writing the signal file: a reader that stopped reading
        a FIFO, a hung file system) is left alone: nothing more is drained (`drain_stuck`)."""
        if self.runtime is not None:
            self.runtime.remove()
        self.drain_stop.set()
        if self.drainer is not None:
            self.drainer.join(DRAIN_JOIN_S)
            if self.drainer.is_alive() and self.x.slog.regular:  # (slow, not stuck: the last signals, the
                log(f"the drain thread is slow writing {self.x.slog.path}: waiting up to {DRAIN_SLOW_S:.0f} s")
                self.drainer.join(DRAIN_SLOW_S)  # paper trader's and the file's, are worth the wait)
            self.drain_stuck = self.drainer.is_alive()
        if self.drain_stuck:
            log(f"error: the drain thread is stuck writing {self.x.slog.path}: the last signals are not written")
        else:
            self.drain()
        self._refresh_instruments()  # (the run's signal table names them: every one the feed found)
        if self.hlog is not None:
            self.hlog.close(self.x.ctl_blk.hist)
        if self.pub is not None and not self.drain_stuck:  # (a zmq socket is one thread's: never closed under it)
            self.pub.close()


def feed_families(counters):
    """The feed's own counters as engine_feed_<name>_total (gauges: engine_feed_<name>)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    for k, v in sorted(counters.items()):
        name = "engine_feed_" + re.sub(r"[^a-z0-9_]", "_", k.lower())
        if k == "restarts":  # (engine_feed_restarts_total is ours: how often we started the feed again)
            continue
        doc = FEED_HELP.get(name, f"the feed's {k} counter (its source's stats: `engine feed` prints them at its end)")
        if k in feed_stats.GAUGES:
            yield GaugeMetricFamily(name, doc, value=v)
        else:
            yield CounterMetricFamily(name, doc, value=v)


def off_loop(fn):
    """fn() in a daemon thread of its own, as an asyncio future of its result. Not the loop's
    executor: its threads are joined at exit, and a reload blocked on a stalled file system must
    not hold up a stop (nor its reply a request: the request times out, the reload goes on)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(res, err):
        if not fut.done():
            fut.set_exception(err) if err is not None else fut.set_result(res)

    def run():
        res = err = None
        try:
            res = fn()
        except BaseException as e:  # noqa: BLE001 - handed to whoever awaits
            err = e
        try:
            loop.call_soon_threadsafe(settle, res, err)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass
    threading.Thread(target=run, name="engine-reload", daemon=True).start()
    return fut


def run_control_plane(ctx):
    """Run the control plane until stop, duration, or the loop's end; returns the plane."""
    plane = ControlPlane(ctx)
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(plane.main())
    return plane
