"""Every source the engine reads, by URI. A source has `uri`, `live` (paced by arrival, not by a
clock), `instruments` (names, by dense index), `specs` (a record per instrument, in that order:
engine/instruments.py, made by feeds/core/venues.py), `depth` (levels a side of the depth window its
ticks carry, engine/records.py), `stats()`, `resync()` (re-send every depth window: each
instrument's next event sends a clear tick and its whole window) and `batches()`, which yields
int64[n, 8] tick words (a reused buffer: consume each batch before asking for the next)."""
import importlib

import numpy as np

from feeds.core.uri import FeedError, split

# scheme: (its declaration, the class that reads it), each "module:name", imported when a URI names
# it: a declaration is light (help and checks import no parser), and a file replay never imports
# the live clients
ROWS = (  # (scheme, declaration, reader class)
    ("synthetic", "feeds.synthetic.params:SYNTHETIC", "feeds.synthetic.source:Synthetic"),
    ("itch", "feeds.nasdaq.params:ITCH", "feeds.nasdaq.itch_file:ItchFile"),
    ("moldudp64", "feeds.nasdaq.params:MOLD", "feeds.nasdaq.moldudp64:MoldSource"),
    ("dbn", "feeds.databento.params:FILE", "feeds.databento.dbn:DbnFile"),
    ("binance", "feeds.binance.params:CAPTURE", "feeds.binance.capture:BinanceFile"),
    ("tickfile", "feeds.core.params:TICKFILE", "feeds.core.sources:TickFileSource"),
    ("binance-live", "feeds.binance.params:LIVE", "feeds.binance.live:BinanceLive"),
    ("dbn-live", "feeds.databento.params:LIVE", "feeds.databento.live:DbnLive"),
)
SOURCES = {scheme: (decl, cls) for scheme, decl, cls in ROWS}
SCHEMES = tuple(SOURCES)
FILE_SCHEMES = ("itch", "dbn", "binance", "tickfile")  # a file: the URI must name one


class TickFileSource:
    """`tickfile:FILE` — an engine tick file (engine convert ... --out X.ticks, engine record).
    Batches are copies (a replay of several renumbers instruments); backtests map the file directly."""
    live = False

    def __init__(self, u, v):
        from engine.tickfile import TickFile, TickFileError
        path = v.target
        self.uri = u
        try:
            self.file = TickFile(path)
        except TickFileError as e:
            raise FeedError(str(e)) from None
        self.instruments = self.file.instruments
        from feeds.core.venues import of_file
        self.specs = of_file(self.file)  # the file's records (or, for an older file, its source's)
        self.depth = self.file.depth  # the file's: its ticks are replayed as recorded
        self.read = 0

    def resync(self):
        pass  # a recording cannot re-send what it did not record

    def stats(self):
        return {"records": len(self.file), "complete": int(self.file.complete)}

    def batches(self, batch=8192):
        w = self.file.words
        for i in range(0, len(w), batch):
            out = w[i:i + batch].copy()
            self.read += len(out)
            yield out



class TickFilesSource:
    """Several tick files played one after another (`engine replay A B ...`): instruments are
    matched by name into one table; each file is paced on its own (`segment` changes between
    files, so no one waits out the time between two recordings). The files must have the same
    depth; with depth, each file after the first starts with a clear tick per instrument."""
    live = False

    def __init__(self, paths):
        self.files = [TickFileSource(f"tickfile:{p}", declaration("tickfile").parse("", p, {})) for p in paths]
        self.uri = " ".join(f.uri for f in self.files)
        depths = {f.depth for f in self.files}
        if len(depths) > 1:
            raise FeedError("tick files of different depth cannot be replayed as one stream: "
                            + ", ".join(f"{p} (depth {f.depth})" for p, f in zip(paths, self.files)))
        self.depth = depths.pop() if depths else 0
        self.instruments = []
        self.specs = []
        self.maps = []
        for f in self.files:
            m = []
            for k, name in enumerate(f.instruments or []):
                if name not in self.instruments:
                    self.instruments.append(name)
                    self.specs.append(f.specs[k])
                elif _differ(self.specs[self.instruments.index(name)], f.specs[k]):
                    raise FeedError(f"{name} is not the same instrument in {self.files[0].file.path} and "
                                    f"{f.file.path} ({_describe(self.specs[self.instruments.index(name)])} vs "
                                    f"{_describe(f.specs[k])}): their ticks cannot be one stream")
                m.append(self.instruments.index(name))
            self.maps.append(np.array(m, np.int64))
        self.segment = 0

    def resync(self):
        pass

    def stats(self):
        return {"files": len(self.files), "records": sum(len(f.file) for f in self.files)}

    def batches(self, batch=8192):
        from engine.records import set_tick_instruments, tick_instruments
        for k, (f, m) in enumerate(zip(self.files, self.maps)):
            self.segment = k
            if k and self.depth and len(m) and len(f.file):
                yield self._clears(f.file.words[0], m)
            for out in f.batches(batch):
                if len(m) and not np.array_equal(m, np.arange(len(m))):
                    inst = tick_instruments(out)
                    known = inst < len(m)
                    set_tick_instruments(out, np.where(known, m[np.minimum(inst, len(m) - 1)], inst))
                yield out


    @staticmethod
    def _clears(first, m):
        """A clear tick for each instrument of the next file (stamped like its first tick): its
        depth windows start from empty, so the books the previous file left must go."""
        from engine.records import KIND_LEVEL, pack_tick_tail
        out = np.zeros((len(m), 8), np.int64)
        out[:, 1], out[:, 2] = first[1], first[2]
        for j, inst in enumerate(m):
            pack_tick_tail(out[j], 0, 0, 0, int(inst), KIND_LEVEL, 0)
        return out


def _differ(a, b):
    """Two records of one name that price a lot differently (unknown records agree with anything)."""
    keys = ("venue", "multiplier", "currency", "lot_size", "inverse")
    return a["known"] and b["known"] and any(a[k] != b[k] for k in keys)


def _describe(s):
    return f"{s['venue'] or 'unknown venue'}, a lot = {s['lot_size']:g}, {s['multiplier']:g} {s['currency']} a point"


def source_class(u):
    """The class that reads a URI's scheme (what it can do before it is opened, e.g. raw_suffix);
    FeedError (one line) for an unknown scheme."""
    return _load(_known(split(u)[0], u)[1])


def declaration(scheme):
    """A scheme's declaration (feeds/core/params.py Kind)."""
    return _load(_known(scheme, scheme)[0])


def parse(u):
    """(the URI, its typed value, its declaration): a source checked by its declaration, nothing
    opened; FeedError (one line) naming the URI and the parameter."""
    u = as_uri(u)
    scheme, target, params = split(u)
    kind = _load(_known(scheme, u)[0])
    if scheme in FILE_SCHEMES and not target:
        raise FeedError(f"{u}: no file named (e.g. {scheme}:PATH)")
    return u, kind.parse(u, target, params), kind


def _known(scheme, u):
    if scheme not in SOURCES:
        raise FeedError(f"unknown source scheme {scheme!r} in {u!r} (known: {', '.join(SCHEMES)})")
    return SOURCES[scheme]


def _load(where):
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


def as_uri(s):
    """A source as its URI: a URI as it is, a plain path of a file as that tick file
    (`tickfile:PATH`: what `engine convert` and `engine record` write); FeedError naming it else."""
    import os
    scheme, sep, _ = s.partition(":")
    if scheme in SCHEMES:
        return s
    if os.path.isfile(s):
        return f"tickfile:{s}"
    if sep and scheme.replace("-", "").isalnum() and "/" not in scheme:
        return s  # (a URI of a scheme nobody knows: open_source names it)
    raise FeedError(f"{s}: no such file, and not a source URI (a tick file, tickfile:FILE, binance:FILE, dbn:FILE, "
                    "itch:FILE, synthetic://?..., binance-live://..., dbn-live://...)")


def unless_given(u, **defaults):
    """The URI with each of `defaults` its kind declares and the URI does not give appended
    (e.g. the book depth a strategy reads); the rest as it is."""
    u = as_uri(u)
    scheme, _, params = split(u)
    known = {p.name for p in declaration(scheme).params}
    more = [f"{k}={v}" for k, v in defaults.items() if k in known and k not in params]
    return u + ("&" if "?" in u else "?") + "&".join(more) if more else u


def kinds():
    """Every source kind's declaration, in SCHEMES order."""
    return [declaration(s) for s in SCHEMES]


def open_source(u):
    """The source a URI (or a tick file's plain path) names; FeedError (one line) when it cannot
    be opened."""
    u, value, _ = parse(u)
    return source_class(u)(u, value)
