"""Every source the engine reads, by URI. A source has `uri`, `live` (paced by arrival, not by a
clock), `instruments` (names, by dense index), `stats()` and `batches()`, which yields int64[n, 8]
tick words (a reused buffer: consume each batch before asking for the next)."""
import numpy as np

from .uri import FeedError, split

SCHEMES = ("synthetic", "itch", "moldudp64", "dbn", "binance")


class Synthetic:
    live = False

    def __init__(self, u):
        from .synthetic import Simulator, parse_uri
        self.params = parse_uri(u)
        self.uri = self.params.uri()
        self.sim = Simulator(self.params)
        self.instruments = [f"SYN{i:04d}" for i in range(self.params.instruments)]
        self.produced = 0

    def stats(self):
        return {"ticks": self.produced}

    def batches(self, batch=4096):
        buf = np.zeros((batch, 8), np.int64)
        while True:
            n = batch if not self.params.count else min(batch, self.params.count - self.produced)
            if n <= 0:
                return
            self.sim.generate(buf[:n])
            self.produced += n
            yield buf[:n]


def open_source(u):
    """The source a URI names; FeedError (one line) when it cannot be opened."""
    scheme, target, params = split(u)
    if scheme == "synthetic":
        try:
            return Synthetic(u)
        except ValueError as e:
            raise FeedError(str(e)) from None
    if scheme in ("itch", "dbn", "binance") and not target:
        raise FeedError(f"{u}: no file named (e.g. {scheme}:PATH)")
    if scheme == "itch":
        from .itch_file import ItchFile
        return ItchFile(u, target, params)
    if scheme == "moldudp64":
        from .moldudp64 import MoldSource
        return MoldSource(u, target, params)
    if scheme == "dbn":
        from .dbn import DbnFile
        return DbnFile(u, target, params)
    if scheme == "binance":
        from .binance import BinanceFile
        return BinanceFile(u, target, params)
    raise FeedError(f"unknown source scheme {scheme!r} in {u!r} (known: {', '.join(SCHEMES)})")
