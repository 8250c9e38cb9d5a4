"""The broadcast tick ring: one producer, any number of consumers, never blocks the producer.

Each 64-byte slot's first word is its sequence number, a seqlock:
  producer: seq word := BUSY; release fence; write words 1..7; seq word := seq (release store)
  consumer: s1 = seq word (acquire); copy words 1..7; acquire fence; s2 = seq word;
            s1 == s2 == expected -> the copy is whole; anything newer -> we were lapped.
A lapped consumer counts exactly the sequence numbers it skips, hands the caller a
KIND_GAP tick carrying that count, and resumes half a ring behind the producer.

Depth windows (engine/records.py): the header's H_DEPTH word says how many levels a side the
ticks carry. A consumer whose books are void (it was lapped, or it joined mid-stream) bumps its
line's C_RESYNC word; the producer looks at those words between batches and re-sends every
window (each instrument's next event starts with a clear tick and carries its whole window).
poll bumps it on a lap, claim when it starts after the beginning of the stream.
"""
import os
import time

import numpy as np
from .jit import njit

from . import defaults, shm
from .intrinsics import (compare_exchange, fence_acquire, fence_release, load_acquire,
                         load_relaxed, store_relaxed, store_release)
from .records import KIND_GAP, RECORD_WORDS, TICK_DTYPE, tick_word7

BUSY = -1
POLL_EMPTY, POLL_TICK, POLL_GAP = 0, 1, 2
_W7_GAP = np.int64(tick_word7.py_func(0, 0, KIND_GAP, 0))  # a gap tick's word 7
NO_LIMIT = np.int64(1) << 62  # backpressure_limit: no consumer holds the producer back


@njit(nogil=True, inline="always", cache=True)
def publish(hdr, data, mask, words):
    """Publish one record (words[1..7]); returns its seq. Producer only."""
    w = hdr[shm.H_WRITE]
    base = (w & mask) * RECORD_WORDS
    store_relaxed(data, base, BUSY)
    fence_release()
    for k in range(1, RECORD_WORDS):
        data[base + k] = words[k]
    store_release(data, base, w)
    store_release(hdr, shm.H_WRITE, w + 1)
    return w


@njit(nogil=True, cache=True)
def backpressure_limit(hdr, mask):
    """The first seq the producer may not publish yet: the slowest back-pressure consumer's cursor
    plus the capacity (NO_LIMIT when no live line asked for back-pressure; claim sets the word)."""
    lim = NO_LIMIT
    for i in range(shm.MAX_CONSUMERS):
        b = shm.H_CONSUMERS + 8 * i
        if load_relaxed(hdr, b + shm.C_PID) != 0 and load_relaxed(hdr, b + shm.C_BACKPRESSURE) != 0:
            c = load_acquire(hdr, b + shm.C_CURSOR) + mask + 1
            if c < lim:
                lim = c
    return lim


@njit(nogil=True, inline="always", cache=True)
def room(hdr, mask, limit):
    """Producer: (may publish the next seq, limit); re-reads the consumers' cursors only once the
    last limit (start with -1) is reached."""
    w = hdr[shm.H_WRITE]
    if w < limit:
        return True, limit
    limit = backpressure_limit(hdr, mask)
    return w < limit, limit


@njit(nogil=True, inline="always", cache=True)
def poll(hdr, data, mask, slot_base, out):
    """Try to read the consumer's next tick into `out` (int64[8]).

    Returns POLL_EMPTY, POLL_TICK, or POLL_GAP (out holds a gap tick: seq = first lost,
    price word = how many). The consumer's cursor, lost and gap counters live in its
    header line at `slot_base`, so anyone can inspect them.
    """
    n = load_relaxed(hdr, slot_base + shm.C_CURSOR)
    base = (n & mask) * RECORD_WORDS
    s1 = load_acquire(data, base)
    if s1 == n:
        for k in range(1, RECORD_WORDS):
            out[k] = data[base + k]
        fence_acquire()
        if load_relaxed(data, base) == n:
            out[0] = n
            store_relaxed(hdr, slot_base + shm.C_CURSOR, n + 1)
            return POLL_TICK
    elif s1 == BUSY:
        # Being written (seq n, or a later lap's): empty unless the writer is already past us.
        if load_acquire(hdr, shm.H_WRITE) <= n + mask:
            return POLL_EMPTY
    elif s1 < n:
        # An older lap's record: seq n is not published yet, and a writer past it would have
        # overwritten this slot. Empty, decided without touching the header line the producer
        # writes on every publish (reading it here made every empty poll steal that line).
        return POLL_EMPTY
    # Lapped: resume half a ring behind the writer and count every seq we skip.
    w = load_acquire(hdr, shm.H_WRITE)
    resume = w - ((mask + 1) >> 1)
    if resume <= n:
        resume = n + 1
    lost = resume - n
    request_resync(hdr, slot_base)  # our books are void now: ask for every depth window again
    out[0] = n
    for k in range(1, RECORD_WORDS):
        out[k] = 0
    out[3] = lost
    out[7] = _W7_GAP
    store_relaxed(hdr, slot_base + shm.C_LOST, load_relaxed(hdr, slot_base + shm.C_LOST) + lost)
    store_relaxed(hdr, slot_base + shm.C_GAPS, load_relaxed(hdr, slot_base + shm.C_GAPS) + 1)
    store_relaxed(hdr, slot_base + shm.C_CURSOR, resume)
    return POLL_GAP


def publish_gap(hdr, data, mask, seq, lost=0):
    """Publish a gap tick (seq: its number in the stream; lost: how many were lost, 0 when nobody
    knows). Producer only: e.g. the strategy thread into its tap ring when it re-attaches to a
    restarted feed's ring, so a recording voids its books where the loop did."""
    w = np.zeros(RECORD_WORDS, np.int64)
    w[0], w[3], w[7] = seq, lost, _W7_GAP
    return publish(hdr, data, mask, w)


@njit(nogil=True, inline="always", cache=True)
def origin(hdr, ts):
    """When a tick of this ring with receive time `ts` reached us, on CLOCK_MONOTONIC: where latency
    is measured from. A live ring's ts_recv is that time already; a paced replay's is the data's
    own, and the tick was due at the ring's clock (H_CLOCK_*); a replay read flat out has no such
    time (0: not measured)."""
    kind = hdr[shm.H_CLOCK_KIND]
    if kind == shm.CLOCK_ARRIVAL:
        return ts
    if kind == shm.CLOCK_PACED:
        return hdr[shm.H_CLOCK_MONO0] + np.int64(float(ts - hdr[shm.H_CLOCK_DATA0]) * 1e6 / float(hdr[shm.H_CLOCK_SPEED_U]))
    return np.int64(0)


@njit(nogil=True, inline="always", cache=True)
def head(hdr, data, mask, slot_base):
    """A file producer's next tick, not published yet: (known, its ts_recv). Known when the
    producer announced the consumer's next seq (H_HEAD_SEQ, stored after H_HEAD_TS) and that seq is
    still unpublished after H_HEAD_TS was read: the producer announces seq n + 1 only after it
    published n, so a value read before n's slot still shows unpublished is n's own."""
    n = load_relaxed(hdr, slot_base + shm.C_CURSOR)
    if load_acquire(hdr, shm.H_HEAD_SEQ) != n:
        return False, np.int64(0)
    ts = load_acquire(hdr, shm.H_HEAD_TS)
    if load_acquire(data, (n & mask) * RECORD_WORDS) == n:
        return False, np.int64(0)  # published meanwhile: poll it
    return True, ts


@njit(nogil=True, inline="always", cache=True)
def announce(hdr, seq, ts):
    """Producer: the tick it will publish as `seq` has receive time ts (engine/tickring.py head)."""
    store_release(hdr, shm.H_HEAD_TS, ts)
    store_release(hdr, shm.H_HEAD_SEQ, seq)


@njit(nogil=True, inline="always", cache=True)
def waiting(hdr, data, mask, slot_base):
    """Is the consumer's next tick already published? (One load of its slot's seq word: the
    loop's test for "behind", which conflation acts on.)"""
    n = load_relaxed(hdr, slot_base + shm.C_CURSOR)
    return load_acquire(data, (n & mask) * RECORD_WORDS) == n


@njit(nogil=True, inline="always", cache=True)
def request_resync(hdr, slot_base):
    """Ask the producer to re-send every depth window (our line's C_RESYNC; only we write it)."""
    store_release(hdr, slot_base + shm.C_RESYNC, load_relaxed(hdr, slot_base + shm.C_RESYNC) + 1)


@njit(cache=True)
def _claim_slot(hdr, max_consumers, pid, dead_pid, start, backpressure):
    for i in range(max_consumers):
        b = shm.H_CONSUMERS + 8 * i
        if compare_exchange(hdr, b + shm.C_PID, dead_pid, pid):
            store_relaxed(hdr, b + shm.C_LOST, 0)
            store_relaxed(hdr, b + shm.C_GAPS, 0)
            store_release(hdr, b + shm.C_CURSOR, start)
            store_release(hdr, b + shm.C_BACKPRESSURE, backpressure)  # after the cursor it guards
            return i
    return -1


def _mark_slots_busy(mm):
    # A zeroed slot would read as seq 0: every slot reads "being written" until it is.
    np.frombuffer(mm, np.int64, offset=shm.HEADER_BYTES)[0::RECORD_WORDS] = BUSY


class TickRing:
    """Producer side: creates the ring file (refusing a live owner's) and publishes. depth: the
    levels a side of the depth window the ticks carry (the source's `depth`)."""

    def __init__(self, name, capacity=defaults.RING_CAPACITY, owner_pid=None, depth=0, first_recv=0):
        def init(mm):
            _mark_slots_busy(mm)
            h = np.frombuffer(mm, np.int64, shm.HEADER_WORDS)
            h[shm.H_DEPTH] = depth
            h[shm.H_FIRST_RECV] = first_recv
            h[shm.H_HEAD_SEQ] = -1  # nothing announced (seq 0 is a real one)
        self.path = shm.ring_path(name)
        self.mm, self.hdr, self.note = shm.create(self.path, shm.RING_TICKS, 64, capacity, owner_pid, init=init)
        self.data = np.frombuffer(self.mm, np.int64, capacity * RECORD_WORDS, shm.HEADER_BYTES)
        self.mask = capacity - 1
        self._resync_seen = self._resync_words()

    @property
    def depth(self):
        return int(self.hdr[shm.H_DEPTH])

    def _resync_words(self):
        return self.hdr[shm.H_CONSUMERS + shm.C_RESYNC::8][:shm.MAX_CONSUMERS].copy()

    def resync_requested(self):
        """Has any consumer asked for the depth windows again since we last looked? (Between
        batches, never per tick.)"""
        now = self._resync_words()
        if np.array_equal(now, self._resync_seen):
            return False
        self._resync_seen = now
        return True

    def heartbeat(self):
        self.hdr[shm.H_HEARTBEAT_NS] = time.monotonic_ns()

    def set_clock(self, kind, data0=0, mono0=0, speed=1.0):
        """What the ticks' ts_recv means (shm.CLOCK_*): before the ring is marked producing, so a
        reader that sees a tick sees its clock."""
        h = self.hdr
        h[shm.H_CLOCK_DATA0], h[shm.H_CLOCK_MONO0] = data0, mono0
        h[shm.H_CLOCK_SPEED_U] = round(speed * 1e6) if kind == shm.CLOCK_PACED else 0
        h[shm.H_CLOCK_KIND] = kind

    def anchor(self):
        """The run's clock for this ring, (data time, monotonic ns it is due at), or None until the
        reading run has set it (set_anchor)."""
        mono = int(self.hdr[shm.H_ANCHOR_MONO])
        return (int(self.hdr[shm.H_ANCHOR_DATA]), mono) if mono else None

    def set_state(self, state):
        self.hdr[shm.H_STATE] = state
        self.heartbeat()

    def consumers(self):
        return sum(1 for i in range(shm.MAX_CONSUMERS) if self.hdr[shm.H_CONSUMERS + 8 * i + shm.C_PID])

    def release_dead_backpressure(self):
        """Stop waiting for back-pressure consumers whose process is gone; returns how many."""
        n = 0
        for i in range(shm.MAX_CONSUMERS):
            b = shm.H_CONSUMERS + 8 * i
            pid = int(self.hdr[b + shm.C_PID])
            if pid and self.hdr[b + shm.C_BACKPRESSURE] and not shm.pid_alive(pid):
                self.hdr[b + shm.C_BACKPRESSURE] = 0
                n += 1
        return n

    def publish_instruments(self, names, specs=None):
        """Write the feed's instrument table beside the ring (NAME.instruments, JSON, replaced
        atomically) so readers such as `engine record` can name what the indices mean, and
        price them: specs, a record per name (engine/instruments.py; `dump`'s form)."""
        import json

        from .instruments import dump
        tmp = f"{self.path}.instruments.tmp-{os.getpid()}"
        try:
            os.unlink(tmp)  # a stale one of ours, or a planted link: the name itself goes, not its target
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(dump(names, specs), f)
        os.replace(tmp, self.path + ".instruments")

    def unlink(self):
        for p in (self.path, self.path + ".instruments"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


class TickConsumer:
    """A consumer's view: maps the ring and claims a consumer line in its header."""

    def __init__(self, name, start=None):
        self.path = shm.ring_path(name)
        self.mm, self.hdr = shm.open_rw(self.path, shm.RING_TICKS)
        try:
            self.ino = os.stat(self.path).st_ino  # a feed that restarts puts a new file here
        except FileNotFoundError:
            self.ino = None
        cap = int(self.hdr[shm.H_CAPACITY])
        self.data = np.frombuffer(self.mm, np.int64, cap * RECORD_WORDS, shm.HEADER_BYTES)
        self.mask = cap - 1
        self.out = np.zeros(RECORD_WORDS, np.int64)
        self.tick = self.out.view(TICK_DTYPE)
        self.slot = None
        if start is not None:
            self.claim(start)

    def claim(self, start="now", backpressure=False):
        """Take a consumer line; reading starts at the writer ("now") or the oldest safe seq.
        backpressure: a file producer waits for us rather than lap us (live ones never wait).
        The producer's instrument table is read first: a file feed released by this claim may
        finish, and remove its files, before anyone else looks."""
        self.instruments()
        cap = self.mask + 1
        w = int(self.hdr[shm.H_WRITE])
        begin = w if start == "now" else max(0, w - cap + cap // 8)
        pid = os.getpid()
        bp = 1 if backpressure else 0
        slot = _claim_slot(self.hdr, int(self.hdr[shm.H_MAX_CONSUMERS]), pid, 0, begin, bp)
        if slot < 0:  # reclaim a line whose process died
            for i in range(int(self.hdr[shm.H_MAX_CONSUMERS])):
                old = int(self.hdr[shm.H_CONSUMERS + 8 * i + shm.C_PID])
                if not shm.pid_alive(old):
                    slot = _claim_slot(self.hdr, int(self.hdr[shm.H_MAX_CONSUMERS]), pid, old, begin, bp)
                    if slot >= 0:
                        break
        if slot < 0:
            raise shm.RingError(f"{self.path}: all {shm.MAX_CONSUMERS} consumer slots are taken by live processes")
        self.slot = slot
        self.slot_base = shm.H_CONSUMERS + 8 * slot
        self.hdr[self.slot_base + shm.C_ATTACHED_NS] = time.monotonic_ns()
        if begin > 0:  # the depth windows were sent before we came: ask for them again
            self.request_resync()
        return slot

    def set_anchor(self, data0, mono0):
        """The run's one clock for a paced file producer that waits for it (feeds/process.py
        run_clock): data time data0 is due at CLOCK_MONOTONIC mono0."""
        self.hdr[shm.H_ANCHOR_DATA] = data0
        self.hdr[shm.H_ANCHOR_MONO] = mono0  # (second: x86 keeps two stores in order)

    @property
    def first_recv(self):
        """The producer's first tick's ts_recv (0: none, or a producer that does not say)."""
        return int(self.hdr[shm.H_FIRST_RECV])

    @property
    def depth(self):
        """Levels a side of the depth window the producer's ticks carry (0: none)."""
        return int(self.hdr[shm.H_DEPTH])

    def request_resync(self):
        """Have the producer re-send every depth window (e.g. after our books were voided)."""
        request_resync(self.hdr, self.slot_base)

    @property
    def resyncs(self):
        return int(self.hdr[self.slot_base + shm.C_RESYNC])

    @property
    def lost(self):
        return int(self.hdr[self.slot_base + shm.C_LOST])

    @property
    def gaps(self):
        return int(self.hdr[self.slot_base + shm.C_GAPS])

    def producer_finished(self):
        """True once the producer marked end of stream and we have read everything."""
        return (int(self.hdr[shm.H_STATE]) == shm.STATE_FINISHED and
                int(self.hdr[self.slot_base + shm.C_CURSOR]) >= int(self.hdr[shm.H_WRITE]))

    def instruments(self):
        """The producer's instrument table, if it published one (else the last one read here,
        once the producer has gone and removed it; else [])."""
        return self._table()[0]

    def specs(self):
        """The producer's instrument records (engine/instruments.py), in the order of
        `instruments()`; None when it published names only."""
        return self._table()[1]

    def _table(self):
        import json

        from .instruments import InstrumentError, parse
        last = getattr(self, "_last_table", ([], None))
        try:  # the same checks as the ring: a planted table would name instruments falsely
            fd, _ = shm.open_checked(self.path + ".instruments")
        except shm.RingError:
            return last
        try:
            with os.fdopen(fd) as f:
                self._last_table = parse(json.load(f))
        except (OSError, ValueError, InstrumentError):
            return last
        return self._last_table

    def close(self):
        if self.slot is not None:
            self.hdr[self.slot_base + shm.C_BACKPRESSURE] = 0
            self.hdr[self.slot_base + shm.C_PID] = 0
            self.slot = None
