"""HdrHistogram interval logs (.hlog, format 1.3): one tagged line per stage per interval.

Readable by hdrh's HistogramLogReader and by HistogramLogAnalyzer. Written here rather than
with hdrh's HistogramLogWriter, which drops the start-time line's fraction and prints
sub-millisecond maxima as 0 (DESIGN.md): the interval max is in milliseconds with nanosecond
precision, as the Java tools expect (values are recorded in ns, max-value-unit ratio 1e6).
Each interval holds the counts recorded since the previous one (a difference of the loop's
cumulative counts), so a reader can add intervals up or look at any one.
"""
import datetime as dt
import os
import time

import numpy as np

from . import latency


class HlogWriter:
    """Writes as it goes (flushed every interval). A write that fails (a full disk) does not stop
    the run: `error` names the file and why, and nothing more is written; a clean close ends
    the log with a "#[EndTime: ...]" comment line, so a log without one was cut short."""

    def __init__(self, path, start_unix=None):
        from .outputs import OutputError, open_private, reason
        self.path = path
        self.error = None
        self.intervals = 0
        try:  # 0600 in 0700 directories we make, as the signal file
            self.f = open(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w", encoding="ascii")
        except OSError as e:
            raise OutputError(path, "the latency log", reason(e), e.errno) from None
        self.start = start_unix if start_unix is not None else time.time()
        when = dt.datetime.fromtimestamp(self.start, dt.timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")
        self._write("#[Logged with signal-engine, values in ns]\n"
                    "#[Histogram log format version 1.3]\n"
                    f"#[StartTime: {self.start:.3f} (seconds since epoch), {when}]\n"
                    f"#[BaseTime: {self.start:.3f} (seconds since epoch)]\n"
                    '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')
        if self.error is not None:
            self.close()
            raise self.error
        self.prev = None
        self.t_prev = self.start

    def _write(self, text):
        from .outputs import OutputError, reason
        if self.error is not None:
            return False
        try:
            self.f.write(text)
            self.f.flush()
            return True
        except OSError as e:
            self.error = OutputError(self.path, "the latency log", reason(e), e.errno)
            return False

    def interval(self, counts, now_unix=None):
        """Log what each stage recorded since the last call (counts: the cumulative arrays)."""
        now = now_unix if now_unix is not None else time.time()
        cur = np.array(counts, copy=True)
        delta = cur if self.prev is None else cur - self.prev
        self.prev = cur
        t0, length = self.t_prev - self.start, now - self.t_prev
        self.t_prev = now
        lines = []
        for i, stage in enumerate(latency.STAGES):
            h = latency.to_hdrh(delta[i])
            mx = h.get_max_value() if h.get_total_count() else 0
            payload = h.encode().decode("ascii")
            lines.append(f"Tag={stage},{t0:.3f},{length:.3f},{mx / 1e6:.6f},{payload}\n")
        if self._write("".join(lines)):
            self.intervals += 1

    def close(self, counts=None):
        if self.f.closed:
            return
        if counts is not None:
            self.interval(counts)
        self._write(f"#[EndTime: {time.time():.3f} (seconds since epoch), {self.intervals} intervals]\n")
        try:
            if self.error is None:
                os.fsync(self.f.fileno())
        except OSError as e:
            self._write("")  # (keeps the first error)
            if self.error is None:
                from .outputs import OutputError, reason
                self.error = OutputError(self.path, "the latency log", reason(e), e.errno)
        try:
            self.f.close()
        except OSError:
            pass  # what was buffered when the disk filled: already reported in `error`


def read(path):
    """[(tag, start_sec, length_sec, histogram)] of a .hlog, through hdrh's own reader."""
    from hdrh.histogram import HdrHistogram
    from hdrh.log import HistogramLogReader
    ref = HdrHistogram(latency.LOWEST_NS, latency.HIGHEST_NS, latency.SIG_FIGS)
    # hdrh's reader returns histograms without their tags: read the tags from the lines alongside
    tags = [ln.split(",", 1)[0][4:] for ln in open(path) if ln.startswith("Tag=")]
    r = HistogramLogReader(path, ref)
    out = []
    while True:
        h = r.get_next_interval_histogram()
        if h is None:
            break
        out.append((tags[len(out)], h.get_start_time_stamp() / 1000.0, (h.get_end_time_stamp() - h.get_start_time_stamp()) / 1000.0, h))
    return out
