"""Every source the engine reads, by URI. A source has `uri`, `live` (paced by arrival, not by a
clock), `instruments` (names, by dense index), `specs` (a record per instrument, in that order:
engine/instruments.py, made by feeds/core/venues.py), `depth` (levels a side of the depth window its
ticks carry, engine/records.py), `stats()`, `resync()` (re-send every depth window: each
instrument's next event sends a clear tick and its whole window) and `batches()`, which yields
int64[n, 8] tick words (a reused buffer: consume each batch before asking for the next)."""
import importlib

import numpy as np

from feeds.core.uri import FeedError, split

# scheme: (module, class), imported when a URI names it (a file replay never imports the live clients)
CLASSES = {"synthetic": ("feeds.synthetic.source", "Synthetic"), "itch": ("feeds.nasdaq.itch_file", "ItchFile"),
           "moldudp64": ("feeds.nasdaq.moldudp64", "MoldSource"), "dbn": ("feeds.databento.dbn", "DbnFile"),
           "binance": ("feeds.binance.capture", "BinanceFile"), "tickfile": (__name__, "TickFileSource"),
           "binance-live": ("feeds.binance.live", "BinanceLive"), "dbn-live": ("feeds.databento.live", "DbnLive")}
SCHEMES = tuple(CLASSES)
FILE_SCHEMES = ("itch", "dbn", "binance", "tickfile")  # a file: the URI must name one


class TickFileSource:
    """`tickfile:FILE` — an engine tick file (engine convert ... --out X.ticks, engine record).
    Batches are copies (a replay of several renumbers instruments); backtests map the file directly."""
    live = False

    def __init__(self, u, path, params):
        from engine.tickfile import TickFile, TickFileError
        from feeds.core.uri import take
        take(u, params, {})
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
        self.files = [TickFileSource(f"tickfile:{p}", p, {}) for p in paths]
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
    return _class(split(u)[0], u)


def _class(scheme, u):
    if scheme not in CLASSES:
        raise FeedError(f"unknown source scheme {scheme!r} in {u!r} (known: {', '.join(SCHEMES)})")
    module, name = CLASSES[scheme]
    return getattr(importlib.import_module(module, __package__), name)


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


def open_source(u):
    """The source a URI (or a tick file's plain path) names; FeedError (one line) when it cannot
    be opened."""
    u = as_uri(u)
    scheme, target, params = split(u)
    cls = _class(scheme, u)
    if scheme in FILE_SCHEMES and not target:
        raise FeedError(f"{u}: no file named (e.g. {scheme}:PATH)")
    return cls(u, target, params)
