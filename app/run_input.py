"""What `engine run` reads: a tick ring to attach to (--ring), or the sources its feed processes
will read (--feed, opened once here so a bad URI fails before anything is created): their rings'
names and labels, book depth, instrument ids, whether they end, and whether the loop conflates."""
import os
from dataclasses import dataclass, field

from engine import shm
from engine.records import MAX_INSTRUMENTS  # feature state for every index a ring may carry
from engine.tickring import TickConsumer

from .progress import log

TAP_CAPACITY = 1 << 18  # --record: at least this many slots in the tap ring (16 MiB; drained every ms)
TAP_WHOLE_MAX = 1 << 22  # a replay of tick files: a tap that holds all of it, up to this (256 MiB)


def feed_list(cfg):
    """The --feed sources of a run, as a list (one `--feed` is a string, several a list)."""
    return [cfg.feed] if isinstance(cfg.feed, str) else list(cfg.feed or [])


def feed_uri(cfg, strategy=None, uri=None):
    """The source a feed process reads, with the book levels the strategy needs."""
    from feeds.core.sources import as_uri, unless_given
    uri = as_uri(uri or (feed_list(cfg) or [None])[0] or f"synthetic://?instruments={cfg.instruments}&seed={cfg.seed}")
    return unless_given(uri, depth=strategy.source_depth()) if strategy is not None else uri


@dataclass
class RunInput:
    """One run's input (open_input makes it). With several sources, ring k is source k's."""
    ring: str | None                # --ring: the existing tick ring attached to (else None: feeds are spawned)
    ring_names: list                # the tick rings (ring_names[0] is ring_name)
    feed_uris: list                 # what each feed process reads ([None] with --ring)
    labels: list                    # each source's short name (app/multi_rings.py labels)
    levels: int                     # book levels a side the streams carry (the deepest)
    n_inst: int                     # instrument ids the loop's state covers
    src_finite: list                # each source ends (a file, a counted simulation)
    ordered: list                   # each source is read in receive-time order on the run's one clock (files)
    finite: bool                    # the run ends when its input does
    file_feed: bool                 # file feeds only: they wait for the loop (lossless)
    multi: bool                     # several rings
    id_blocks: tuple | None = None  # (offsets, blocks) of the run's ids per ring (None with --ring)
    srcs: list = field(default_factory=list)   # the opened sources
    fixed: list = field(default_factory=list)  # each source's instrument count when known once opened, else None
    warnings: list = field(default_factory=list)  # an incomplete tick file's unchecked records, in words
    conflate: bool = False
    multi_loop: bool = False        # several rings, or a recording of what the loop read: run_loop_multi
    _tap_cap: int | None = None

    @property
    def ring_name(self):
        return self.ring_names[0]

    @property
    def feed_uri(self):
        return self.feed_uris[0]

    def tap_capacity(self, cfg):
        """--record: the tap ring's slots. The loop never waits for its recorder (a lap is a gap in
        the file), so a replay of tick files, read flat out, gets a tap that holds all of it (up to
        TAP_WHOLE_MAX, in a quarter of the room /dev/shm has): a recorder stalled on a busy disk is
        then late, never lapped (284k ticks went by in 0.3 s, and one whole-suite run lost them)."""
        if self._tap_cap is None:
            from feeds.core.sources import TickFileSource
            cap = max(cfg.ring_capacity, TAP_CAPACITY)
            srcs = self.srcs
            if not cfg.ring and srcs and all(isinstance(x, TickFileSource) for x in srcs):
                want = min(1 << max(sum(len(x.file) for x in srcs) - 1, 1).bit_length(), TAP_WHOLE_MAX)
                tap_dir = os.path.dirname(shm.ring_path(f"{cfg.name}.tap"))
                if want > cap and shm.ring_bytes(64, want) <= shm.room(tap_dir)[0] // 4:
                    cap = want
            self._tap_cap = cap
        return self._tap_cap

    def start_table(self):
        """(names, records) of the run's instruments known at start, in id order, named as the run's
        instrument table names them (app/multi_rings.py: venue-qualified with several sources, a
        name two sources share qualified by its source's label) ([] with --ring or for sources
        that find theirs as they read: the control plane fills in their multipliers as they come,
        _Run.risk_table)."""
        from engine.instruments import table
        from engine.universe import run_name
        if self.ring:
            return [], []
        names, recs, seen = [], [], set()
        offsets = self.id_blocks[0] if self.id_blocks is not None else [0]
        for k, src in enumerate(self.srcs):
            while len(names) < offsets[k]:
                names.append("")
                recs.append(None)
            for n, r in zip(src.instruments, table(src.instruments, getattr(src, "specs", None))):
                g = run_name(n, r["venue"], self.labels[k]) if self.multi else n
                if self.multi and g in seen:
                    g = f"{g}@{self.labels[k]}"
                seen.add(g)
                names.append(g)
                recs.append(r)
        return names, recs

    def bind(self, strat):
        """A UNIVERSE strategy's members bound to the run's instruments, known at start (ids); else None.
        Sources that find their instruments as they read cannot be bound before the first tick:
        refused, naming the source."""
        if not strat.universe:
            return None
        if self.ring or any(fixed is None for fixed in self.fixed):
            what = "--ring" if self.ring else self.feed_uris[self.fixed.index(None)]
            raise ValueError(f"{what}: names its instruments only as it reads them, and strategy {strat.path} "
                             "binds its UNIVERSE before the run starts: record it (engine record / --record) and run "
                             "the recording (--feed tickfile:FILE)")
        names, recs = self.start_table()
        venues = [r["venue"] if r is not None else "" for r in recs]
        return strat.bind_universe(names, venues, "the run's sources")


def attach_input(cfg):
    """--ring: an existing tick ring (it must exist and be one: a clear error otherwise)."""
    if cfg.feed:
        raise ValueError("--ring attaches to an existing tick ring; --feed spawns a feed: give one of them")
    probe = TickConsumer(cfg.ring)
    # a ring ends when its producer marks it finished (H_STATE, as `engine feed` does at the end of its
    # source or when stopped): so do we, as with a spawned file feed. A producer that dies without
    # marking it is a feed that is down: we wait for a new ring under the name.
    return RunInput(ring=cfg.ring, ring_names=[cfg.ring], feed_uris=[None], labels=["ring"],
                    levels=int(getattr(probe, "depth", 0)), n_inst=MAX_INSTRUMENTS,  # whatever the producer publishes
                    src_finite=[True], ordered=[False], finite=True, file_feed=False, multi=False)


def feed_input(cfg, strat):
    """--feed (or the synthetic market): each source opened once (a bad URI fails here, before
    anything is created), the rings its feed processes will make, their ids and depth."""
    from feeds.core.sources import open_source
    from feeds.synthetic.source import Synthetic

    from .multi_rings import fixed_instruments, id_blocks, labels, ring_names
    uris = [feed_uri(cfg, strat, u) for u in feed_list(cfg)] or [feed_uri(cfg, strat)]
    if len(set(uris)) != len(uris):
        raise ValueError(f"--feed {next(u for u in uris if uris.count(u) > 1)} is given twice")
    srcs = []
    for u in uris:
        srcs.append(open_source(u))
        if hasattr(srcs[-1], "sock"):
            srcs[-1].sock.close()  # the feed process listens, not us
    depths = [int(getattr(x, "depth", 0)) for x in srcs]
    if len(srcs) > 1 and strat.depth > min(depths):  # every source must carry the book it reads
        k = depths.index(min(depths))
        raise ValueError(f"--feed {uris[k]}: carries {depths[k]} book levels a side and strategy "
                         f"{strat.path} reads DEPTH {strat.depth}")
    blocks = id_blocks(srcs)
    if len(srcs) == 1:
        n_inst = srcs[0].params.instruments if isinstance(srcs[0], Synthetic) else MAX_INSTRUMENTS
    else:  # the ids every block covers (dense from 0: all of them when a source finds its instruments)
        n_inst = int((blocks[0] + blocks[1]).max())
    # a source with an end (a file, a counted simulation) ends the run once it is played (every one of them)
    src_finite = [not x.live and (not isinstance(x, Synthetic) or x.params.count > 0) for x in srcs]
    return RunInput(ring=None, ring_names=ring_names(cfg.name, len(uris)), feed_uris=uris, labels=labels(uris),
                    levels=max(depths), n_inst=n_inst, src_finite=src_finite,
                    # files: read in receive-time order on the run's one clock (live sources: as they arrive)
                    ordered=[not x.live and not isinstance(x, Synthetic) for x in srcs], finite=all(src_finite),
                    # A file can wait, a market cannot: a file feed waits for our loop (lossless, every tick
                    # scored); live sources never block, and the loop conflates when it falls behind them.
                    file_feed=all(not x.live and not isinstance(x, Synthetic) for x in srcs),
                    multi=len(uris) > 1, id_blocks=blocks, srcs=srcs, fixed=[fixed_instruments(x) for x in srcs],
                    # an incomplete tick file (a killed recorder): its unchecked records, in the summary too
                    warnings=[w for x in srcs for w in getattr(getattr(x, "file", None), "warnings", [])])


def open_input(cfg, strat):
    """The run's input, and how the loop reads it: conflating (--conflate, or auto: unless file feeds
    wait for it), and run_loop_multi for several rings or a recording of what it read."""
    inp = attach_input(cfg) if cfg.ring else feed_input(cfg, strat)
    for w in inp.warnings:
        log(f"warning: {w}")
    inp.conflate = cfg.conflate == "on" or (cfg.conflate == "auto" and not inp.file_feed)
    inp.multi_loop = inp.multi or cfg.tapped
    return inp
