"""`itch:FILE` — a Nasdaq ITCH 5.0 day file (2-byte length before each message; gzip optional).

  itch:FILE?symbols=AAPL,MSFT&date=2019-01-30&utc_offset=-5&on_error=stop
  symbols     instruments to keep (Stock Directory symbols; default all)
  date        the trading day, YYYY-MM-DD: ITCH timestamps count from its midnight (default:
              none, so ts_event is nanoseconds since midnight)
  utc_offset  hours the exchange's midnight is from UTC (Nasdaq: -5, or -4 in summer; default 0)
  on_error    stop (default): a malformed message is an error naming its byte offset;
              skip: count it and go on
  depth       book levels per side published as level ticks, 0..32 (default 10; 0 = none):
              each message that changes a book is one book event (engine/records.py)
ts_recv is the exchange time: an ITCH file carries no receive time.
"""
import numpy as np

from feeds.core import files, uri as U, venues
from feeds.nasdaq.itch import ST_ERROR, ST_INPUT, ST_OUT, ItchBooks

BATCH = 4096


def itch_params(u, params, extra=None):
    known = {"symbols": (U.symbols, ()), "date": (U.date_ns, 0), "utc_offset": (float, 0.0),
             "on_error": (U.on_error, "stop"), "depth": (U.depth, U.DEFAULT_DEPTH)}
    known.update(extra or {})
    p = U.take(u, params, known)
    p["day_ns"] = p["date"] - int(p["utc_offset"] * 3600 * 10**9) if p["date"] else 0
    return p


class ItchFile:
    live = False

    def __init__(self, u, path, params):
        self.uri, self.path = u, path
        files.check_readable(path)
        p = itch_params(u, params)
        self.books = ItchBooks(p["symbols"], strict=p["on_error"] == "stop", day_ns=p["day_ns"],
                               depth=p["depth"])
        self.depth = p["depth"]
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
