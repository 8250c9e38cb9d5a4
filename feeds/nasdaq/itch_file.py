"""`itch:FILE` — a Nasdaq ITCH 5.0 day file (2-byte length before each message; gzip optional).

Its parameters are declared in feeds/nasdaq/params.py (ITCH; `engine sources itch`).
ts_recv is the exchange time: an ITCH file carries no receive time.
"""
import numpy as np

from feeds.core import files, uri as U, venues
from feeds.nasdaq.itch import ST_ERROR, ST_INPUT, ST_OUT, ItchBooks

BATCH = 4096


def day_ns(v):
    """The ns the day's ITCH times count from (0: none): date's midnight, moved by utc_offset."""
    return v.date - int(v.utc_offset * 3600 * 10**9) if v.date else 0


class ItchFile:
    live = False

    def __init__(self, u, v):
        self.uri, self.path = u, v.target
        files.check_readable(self.path)
        self.books = ItchBooks(v.symbols, strict=v.on_error == "stop", day_ns=day_ns(v), depth=v.depth)
        self.depth = v.depth
        self.bytes_read = 0
        self._specs = venues.Specs(venues.nasdaq)

    @property
    def instruments(self):
        return self.books.instruments()

    @property
    def specs(self):
        """The instruments' records (engine/instruments.py): Nasdaq stocks."""
        return self._specs.of(self.instruments)

    def stats(self):
        return self.books.stats_dict()

    def resync(self):
        """A consumer asked for every window again (feeds/process.py)."""
        self.books.forget()

    def batches(self):
        """int64[n, 8] tick batches (the buffer is reused: consume each before the next)."""
        out = np.zeros((BATCH, 8), np.int64)
        n = 0
        carry = b""
        base = 0  # file offset of carry[0]
        for chunk in files.chunks(self.path):
            data = np.frombuffer(carry + chunk, np.uint8)
            pos = 0
            while True:
                pos, n, _, st = self.books.apply(data, pos, len(data), out, n)
                if st == ST_OUT:
                    yield out[:n]
                    n = 0
                elif st == ST_ERROR:
                    self.books.err[1] += base
                    raise U.FeedError(f"{self.path}: {self.books.error_text()}")
                else:
                    assert st == ST_INPUT
                    break
            carry = data[pos:].tobytes()
            base += pos
            self.bytes_read = base
        if n:
            yield out[:n]
        if carry:
            raise U.FeedError(f"{self.path}: truncated: the file ends inside a message at byte {base} "
                              f"({len(carry)} bytes of it)")
