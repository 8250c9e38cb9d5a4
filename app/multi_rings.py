"""Several sources in one run (`engine run --feed A --feed B`): each source has its own feed process
and tick ring, as a single source does, and one strategy loop reads them all (host_template
run_loop_multi: files merged in receive-time order on the run's one clock, which `set_clock` sets
in their rings; live rings' ready ticks the oldest first, waiting on a quiet one only within
--merge-window-us).

Instrument ids are global to the run: ring k's local id + offsets[k]. A source whose instruments
are all known when it is opened (a tick file, the synthetic market) gets exactly as many ids as
it has, and these come first, densely, in --feed order; sources that find instruments as they read
(Binance, DBN, ITCH files, live venues) share the ids after them (the last one takes all that is
left; before it, each gets OPEN_BLOCK at most). A tick whose local id does not fit its block is
counted (unmapped) and skipped. With several sources instruments are named VENUE:SYMBOL (the
venue from the source's instrument records; the source's label where a record has none), each
record carrying its source's label; the table is written beside the rings (NAME.instruments) and
into the recording (--record), and names the signals on zmq and in the signal table. A run with
one source keeps its names and its loop (run_loop, unchanged); with --record it reads its one ring
through run_loop_multi, whose tap feeds the recorder.

Labels: each source's URI scheme (binance, dbn, tickfile, ...), with -2, -3 ... when several share
one: the `source` label of the per-source metrics and the keys of /status and /ready's sources.
"""
import json
import os
import time

import numpy as np

from engine import shm, warmup
from engine.loop_args import MultiTickView
from engine.records import MAX_INSTRUMENTS
from engine.tickring import TickConsumer, TickRing

OPEN_BLOCK = 8192  # ids for a source that finds instruments as it reads, when another such source follows


from engine.universe import source_labels as labels  # noqa: E402  (the sources' labels: one owner)


def ring_names(name, n):
    """The rings of a run with n sources: NAME.ticks with one (as always), NAME.ticks.K with more."""
    return [f"{name}.ticks"] if n == 1 else [f"{name}.ticks.{k}" for k in range(n)]


def fixed_instruments(src):
    """How many instruments a source has, when it knows them all once opened (else None)."""
    from feeds.core.sources import TickFileSource, TickFilesSource
    from feeds.synthetic.source import Synthetic
    if isinstance(src, (Synthetic, TickFileSource, TickFilesSource)) or getattr(src, "instruments_at_open", False):
        return max(1, len(src.instruments))
    return None


def id_blocks(sources):
    """(offsets, blocks): int64 [K] each: ring k's first id in the run and how many it may use."""
    k = len(sources)
    if k == 1:
        return np.zeros(1, np.int64), np.full(1, MAX_INSTRUMENTS, np.int64)
    fixed = [fixed_instruments(s) for s in sources]
    offsets, blocks = np.zeros(k, np.int64), np.zeros(k, np.int64)
    nxt = 0
    for i in range(k):  # the sources that know their instruments first: dense
        if fixed[i] is not None:
            offsets[i], blocks[i] = nxt, fixed[i]
            nxt += fixed[i]
    if nxt > MAX_INSTRUMENTS:
        raise ValueError(f"the sources have {nxt:,} instruments together; a run holds at most {MAX_INSTRUMENTS:,}")
    open_ = [i for i in range(k) if fixed[i] is None]
    for j, i in enumerate(open_):
        left = MAX_INSTRUMENTS - nxt
        size = left if j == len(open_) - 1 else min(OPEN_BLOCK, left // (len(open_) - j))
        if size < 1:
            raise ValueError("no instrument ids are left for the sources that find their instruments as they read")
        offsets[i], blocks[i] = nxt, size
        nxt += size
    return offsets, blocks


class MultiRings:
    """The loop's view of every source's ring: consumers, id blocks, held ticks, per-ring counters,
    and the tap ring (--record) it publishes what it took into."""

    def __init__(self, ring_names_, labels_, offsets, blocks, rst_width, tap=None, ordered=None, rs_ordered=None):
        self.ring_names, self.labels = list(ring_names_), list(labels_)
        self.offsets, self.blocks = offsets, blocks
        k = len(self.ring_names)
        self.heads = np.zeros((k, 8), np.int64)
        self.rst = np.zeros((k, rst_width), np.int64)
        # file rings: merged in receive-time order on one clock (host_template _take_next, RS_ORDERED)
        self.ordered = list(ordered or [False] * k)
        if rs_ordered is not None:
            self.rst[:, rs_ordered] = self.ordered
        self.consumers = [None] * k
        self.reattached = [0] * k
        self.tap = tap or TickRing.__new__(TickRing)  # (no tap: a 2-slot scratch ring the loop never writes)
        if tap is None:
            self.tap.hdr = np.zeros(shm.HEADER_WORDS, np.int64)
            self.tap.data = np.zeros(2 * 8, np.int64)
            self.tap.mask = 1

    def attach(self, start, backpressure):
        """Map and claim every ring (claiming releases a spawned feed that waits for its reader)."""
        for k, name in enumerate(self.ring_names):
            c = TickConsumer(name)
            warmup.prefault(c.data)
            c.claim(start=start, backpressure=backpressure)
            self.consumers[k] = c
        self.set_clock()

    def set_clock(self):
        """The run's one clock for its file rings (their feeds wait for it: feeds/process.py
        run_clock): the earliest first receive time among them is due now, so files of the same
        day play side by side as they were received."""
        files = [c for c, o in zip(self.consumers, self.ordered) if o]
        firsts = [c.first_recv for c in files if c.first_recv]
        if files:
            data0, mono0 = (min(firsts) if firsts else 0), time.monotonic_ns()
            for c in files:
                c.set_anchor(data0, mono0)

    def view(self):
        cs = self.consumers
        return MultiTickView(thdrs=tuple(c.hdr for c in cs), tdatas=tuple(c.data for c in cs),
                             tmasks=np.array([c.mask for c in cs], np.int64),
                             slot_bases=np.array([c.slot_base for c in cs], np.int64),
                             offsets=self.offsets, blocks=self.blocks, heads=self.heads, rst=self.rst,
                             taphdr=self.tap.hdr, tapdata=self.tap.data, tapmask=self.tap.mask)

    def replaced(self):
        """The rings whose name now holds another, live ring (a restarted feed)."""
        out = []
        for k, (name, c) in enumerate(zip(self.ring_names, self.consumers)):
            try:
                ino = os.stat(shm.ring_path(name)).st_ino
            except OSError:
                continue
            if ino != c.ino:
                out.append(k)
        return out

    def reattach(self, k, backpressure):
        """Ring k was replaced: map the new one (its held tick is from the old ring: dropped)."""
        old = self.consumers[k]
        c = TickConsumer(self.ring_names[k])
        warmup.prefault(c.data)
        c.claim(start="oldest", backpressure=backpressure)
        old.close()
        self.consumers[k] = c
        self.rst[k, 1] = 0  # (RS_HELD)
        self.reattached[k] += 1

    def close(self):
        for c in self.consumers:
            if c is not None:
                c.close()

    def table(self, multi):
        """(names, specs) of the run's instruments by global id: each ring's table moved to its
        offset; with several sources named VENUE:SYMBOL and each record naming its source. Ids a
        source has not used (yet) between two blocks are named "" (an unknown record)."""
        from engine.instruments import table as records
        from engine.instruments import unknown
        from engine.universe import run_name
        if not multi:
            c = self.consumers[0]
            return (c.instruments(), c.specs()) if c is not None else ([], None)
        names, specs, seen = [], [], set()
        for k, c in enumerate(self.consumers):
            if c is None:
                continue
            local = c.instruments()[:int(self.blocks[k])]
            if not local:
                continue
            recs = records(local, c.specs())
            off = int(self.offsets[k])
            while len(names) < off:
                names.append("")
                specs.append(unknown(""))
            for i, (n, s) in enumerate(zip(local, recs)):
                g = run_name(n, s["venue"], self.labels[k])
                if g in seen:  # the same venue and symbol from two sources: the label tells them apart
                    g = f"{g}@{self.labels[k]}"
                seen.add(g)
                rec = {**s, "symbol": g, "source": self.labels[k]}
                if off + i < len(names):
                    names[off + i], specs[off + i] = g, rec
                else:
                    names.append(g)
                    specs.append(rec)
        return names, specs


def write_table(path, names, specs):
    """The run's instrument table beside its rings (the rings' own format: engine/tickring.py)."""
    from engine.instruments import dump
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dump(names, specs), f)
    os.replace(tmp, path)


def compile_multi(host, k):
    """Compile (or load from numba's cache) run_loop_multi for k rings with the exact argument
    types of a real run, before anything goes real time: it returns at once (CMD_STOP)."""
    from engine import control as C
    from engine import defaults, latency
    from engine.loop_args import LiveArgs, SignalView, new_tick, run_multi_args
    mod = host.mod
    cap = 16
    ctl = np.zeros(shm.HEADER_WORDS, np.int64)
    ctl[C.CTL_CMD] = C.CMD_STOP
    ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + defaults.LEASE_NS
    hs = host.state(1, max(host.strategy.depth, 1))
    hdrs = tuple(np.zeros(shm.HEADER_WORDS, np.int64) for _ in range(k))
    datas = tuple(np.zeros(cap * 8, np.int64) for _ in range(k))
    rings = MultiTickView(thdrs=hdrs, tdatas=datas, tmasks=np.full(k, cap - 1, np.int64),
                          slot_bases=np.full(k, shm.H_CONSUMERS, np.int64), offsets=np.zeros(k, np.int64),
                          blocks=np.ones(k, np.int64), heads=np.zeros((k, 8), np.int64),
                          rst=np.zeros((k, mod.RS_WIDTH), np.int64), taphdr=np.zeros(shm.HEADER_WORDS, np.int64),
                          tapdata=np.zeros(cap * 8, np.int64), tapmask=cap - 1)
    signals = SignalView(shdr=np.zeros(shm.HEADER_WORDS, np.int64), sdata=np.zeros(cap * 16, np.int64),
                         smask=cap - 1, spstate=np.zeros(4, np.int64))
    live = LiveArgs(signals=signals, ctl=ctl, hist=latency.new_counts(), state=hs.loop_arrays(),
                    row=host.new_row(), out=np.zeros(1, np.float32), tick=new_tick(),
                    sig=np.zeros(16, np.int64), pvals=host.params(), cfg=host.loop_cfg())
    mod.run_loop_multi(*run_multi_args(mod, rings, live))
