"""`engine convert SOURCE --out FILE`: a source's normalised ticks to an engine tick file (.ticks,
with each instrument's record: engine/instruments.py), .parquet, .csv, or ITCH 5.0 (.itch, .itch.gz). Written to a temporary file and renamed, so a failed conversion leaves nothing;
a failed write (a full disk) is an error naming the output."""
import os
import sys
import time

import numpy as np

from engine.records import TICK_DTYPE, symbol_column, table_metadata

from feeds.core.sources import open_source
from feeds.core.uri import FeedError

FORMATS = (".parquet", ".csv", ".itch", ".itch.gz", ".ticks")
COLUMNS = ("seq", "ts_event", "ts_recv", "instrument", "kind", "side", "price", "size",
           "bid_px", "bid_sz", "ask_px", "ask_sz")  # then `symbol`; prices int64 at 1e-9 (engine.price_scale)


def out_format(path):
    for ext in FORMATS:
        if path.endswith(ext):
            return ext
    raise FeedError(f"{path}: unknown output format (by extension: {', '.join(FORMATS)})")


def _table(ticks, seq0, names):
    """A batch of ticks as columns, with each tick's symbol (from the source's instrument table
    as it stands: a live source finds its instruments as it reads)."""
    import pyarrow as pa
    rec = ticks.view(TICK_DTYPE).reshape(-1)
    cols = {c: rec[c] for c in COLUMNS}
    cols["seq"] = np.arange(seq0, seq0 + len(rec), dtype=np.uint64)
    cols["symbol"] = pa.array(symbol_column(names, rec["instrument"]), pa.string())
    return pa.table(cols)


class _Tabular:
    def __init__(self, path, fmt, source):
        self.path, self.fmt, self.source = path, fmt, source
        self.writer = None

    def write(self, ticks, seq0):
        t = _table(ticks, seq0, self.source.instruments)
        if self.writer is None:
            if self.fmt == ".parquet":
                import pyarrow.parquet as pq
                self.names = list(self.source.instruments)  # (a source may find more as it reads: close())
                self.writer = pq.ParquetWriter(self.path, t.schema.with_metadata(self._meta()), compression="zstd",
                                               use_dictionary=["symbol"])
            else:
                import pyarrow.csv as pcsv
                self.writer = pcsv.CSVWriter(self.path, t.schema)
        self.writer.write_table(t)

    def close(self):
        if self.writer is None:  # no ticks: still a valid, empty file with the columns
            self.write(np.zeros((0, 8), np.int64), 0)
        meta = self.source.instruments
        self.writer.close()
        if self.fmt == ".parquet" and list(meta) != self.names:
            self._restamp()
        return meta

    def _meta(self):
        import json

        from engine.instruments import dump
        specs = getattr(self.source, "specs", None)
        extra = {"engine.instruments": json.dumps(dump(self.source.instruments, specs))} if specs is not None else {}
        return table_metadata([self.source.instruments], **{"engine.source": self.source.uri}, **extra)

    def _restamp(self):
        """Instruments were found after the first batch: the file is copied once with the whole
        table in its schema metadata (what readers see), row group by row group."""
        import pyarrow.parquet as pq
        src = pq.ParquetFile(self.path)
        tmp = self.path + ".restamp"
        try:
            with pq.ParquetWriter(tmp, src.schema_arrow.with_metadata(self._meta()), compression="zstd",
                                  use_dictionary=["symbol"]) as w:
                for i in range(src.num_row_groups):
                    w.write_table(src.read_row_group(i))
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


class TicksSink:
    """An engine tick file (engine/tickfile.py): seq renumbered, the source's instrument table
    and depth window."""

    def __init__(self, path, fmt, source):
        from engine.tickfile import TickFileWriter
        self.source = source
        self.w = TickFileWriter(path, source.instruments, source.uri, depth=getattr(source, "depth", 0),
                                specs=getattr(source, "specs", None))

    def write(self, ticks, seq0):
        self.w.append(ticks)
        if len(self.source.instruments) != len(self.w.meta["instruments"]):  # found as it reads
            self.w.set_instruments(self.source.instruments, getattr(self.source, "specs", None))

    def close(self):
        self.w.set_instruments(self.source.instruments, getattr(self.source, "specs", None))
        self.w.close()


def convert(uri, out, progress=True, on_source=None):
    """Convert; returns a summary dict. Raises FeedError on bad input (no output left behind).
    A live source runs until it ends (MoldUDP64 end of session, idle_s) or its stop() is called
    (on_source(src) gets it first, e.g. to wire SIGINT): then the file is completed, not dropped."""
    from engine.outputs import as_output_error, check_writable, is_write_error, temp_name
    fmt = out_format(out)
    check_writable(out, "ticks")  # before the source is opened (a live one starts listening)
    src = open_source(uri)
    if on_source:
        on_source(src)
    tmp = temp_name(out)
    n = 0
    t0 = last = time.monotonic()
    first = None
    try:
        if fmt.startswith(".itch"):
            from feeds.nasdaq.itch_sink import ItchSink as sink_class  # (its writer compiles only for ITCH)
        else:
            sink_class = TicksSink if fmt == ".ticks" else _Tabular
        sink = sink_class(tmp, fmt, src)
        for ticks in src.batches():
            sink.write(ticks, n)
            n += len(ticks)
            now = time.monotonic()
            if first is None:  # the rate counts from the first batch: before it, the parser compiled (said so)
                first, last = (now, n), now
            elif progress and now - last >= 1.0:
                last = now
                print(f"[convert] {n:,} ticks ({(n - first[1]) / (now - first[0]):,.0f}/s)", file=sys.stderr,
                      flush=True)
        note = sink.close()
        os.replace(tmp, out)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if is_write_error(e, tmp):
            raise as_output_error(e, out, "ticks") from None  # names the output, not its temporary
        raise
    res = {"source": src.uri, "out": out, "ticks": n, "instruments": list(src.instruments),
           "seconds": round(time.monotonic() - t0, 3), "stats": src.stats(),
           # an input tick file that is incomplete: its unchecked records (engine/tickfile.py)
           "warnings": list(getattr(getattr(src, "file", None), "warnings", []))}
    if isinstance(note, str):
        res["note"] = note
    return res
