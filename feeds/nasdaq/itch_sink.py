"""Ticks to ITCH 5.0 messages, into a file or any file object (feeds/nasdaq/itch_writer.py writes them)."""
import datetime as dt
import gzip


class ItchSink:
    """A source's ticks as an ITCH 5.0 file (.itch, .itch.gz; `engine convert`) or stream (the MoldUDP64
    server): the writer starts at the first tick's day."""

    def __init__(self, path, fmt, source, fileobj=None):
        self.f = fileobj or (gzip.open(path, "wb") if fmt == ".itch.gz" else open(path, "wb"))
        self.source = source
        self.writer = None
        self.last_ts = 0

    def write(self, ticks, seq0):
        from feeds.nasdaq.itch_writer import ItchWriter  # (imported when ticks come: a cold compile)
        if not len(ticks):
            return
        if self.writer is None:
            first = int(ticks[0, 1])
            day = first - first % (86_400 * 10**9)
            self.writer = ItchWriter(len(self.source.instruments), day,
                                     [s[:8] for s in self.source.instruments], depth=getattr(self.source, "depth", 0))
            self.f.write(self.writer.start(first))
            self.day = dt.datetime.fromtimestamp(day / 1e9, dt.timezone.utc).date().isoformat()
        for b in self.writer.write(ticks):
            self.f.write(b)
        self.last_ts = int(ticks[-1, 1])

    def finish(self):
        if self.writer is not None:
            self.f.write(self.writer.finish(self.last_ts))

    def close(self):
        self.finish()
        self.f.close()
        return f"read it back as itch:FILE?date={self.day}" if self.writer else None
