"""The signal file: a 64-byte header then raw signal records (SIGNAL_DTYPE, 128 bytes each).

Written by the drainer as signals arrive and flushed on every drain, so a crash loses
at most the signals still in the ring; a partial trailing record is ignored on read.
"""
import os
import time

import numpy as np

from .records import SIGNAL_DTYPE, SIGNAL_FLAG_MARK, SIGNAL_WORDS

RECORD = SIGNAL_DTYPE.itemsize
VERSION = 2  # 1: 64-byte records, before positions in units

MAGIC = b"ENGSIG01"
HEADER = np.dtype([("magic", "S8"), ("version", "<u4"), ("record_size", "<u4"), ("created_unix_ns", "<i8"),
                   ("pad", "V40")])
assert HEADER.itemsize == 64


class SignalLogError(RuntimeError):
    pass


class SignalLog:
    def __init__(self, path):
        self.path = path
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        self.f = open(path, "wb")
        h = np.zeros(1, HEADER)
        h["magic"], h["version"], h["record_size"], h["created_unix_ns"] = MAGIC, VERSION, RECORD, time.time_ns()
        self.f.write(h.tobytes())
        self.count = 0

    def write(self, words):
        """words: int64 [n, SIGNAL_WORDS] signal records."""
        if len(words):
            self.f.write(np.ascontiguousarray(words).tobytes())
            self.f.flush()
            self.count += len(words)

    def close(self):
        self.f.flush()
        try:
            os.fsync(self.f.fileno())
        except OSError:  # not a file that syncs (/dev/null, a pipe): nothing to make durable
            pass
        self.f.close()


def read_signals(path):
    """The signals of a signal file (SIGNAL_DTYPE), conflation marks left out."""
    recs = read_records(path)
    return recs[(recs["flags"] & SIGNAL_FLAG_MARK) == 0]


def read_marks(path):
    """A live run's conflation marks: int64 [m, 2] (first tick seq of a window, flush tick seq)."""
    recs = read_records(path)
    m = recs[(recs["flags"] & SIGNAL_FLAG_MARK) != 0]
    return np.stack([m["ts_event"].astype(np.int64), m["tick_seq"].astype(np.int64)], axis=1) if len(m) else \
        np.zeros((0, 2), np.int64)


def read_records(path):
    """Every record of a signal file: signals and conflation marks."""
    raw = np.fromfile(path, np.uint8)
    if len(raw) < 64:
        raise SignalLogError(f"{path}: {len(raw)} bytes, too short for a signal file header")
    h = raw[:64].view(HEADER)[0]
    if bytes(h["magic"]) != MAGIC:
        raise SignalLogError(f"{path}: not an engine signal file")
    if h["record_size"] != RECORD:
        raise SignalLogError(f"{path}: a signal file of {int(h['record_size'])}-byte records (version "
                             f"{int(h['version'])}, an older engine); this engine reads {RECORD}-byte records")
    body = raw[64: 64 + (len(raw) - 64) // RECORD * RECORD]
    return body.view(SIGNAL_DTYPE)


SIGNAL_COLUMNS = ("seq", "tick_seq", "instrument", "ts_event", "ts_recv", "ts_signal", "ts_wall", "mid_px", "score",
                  "margin", "position", "prev_position", "side", "prev_side", "folded", "model_gen")


def signals_table(sigs, extra=None):
    """Signal records (SIGNAL_DTYPE) as a pyarrow table: one row per signal, prices int64 at
    1e-9, score and margin float32 exactly as the model gave them. `extra`: more columns."""
    import pyarrow as pa
    cols = {c: sigs[c] for c in SIGNAL_COLUMNS}
    cols.update(extra or {})
    return pa.table(cols)


def write_signals_parquet(path, sigs, extra=None, metadata=None):
    """Write atomically (a temporary file renamed into place)."""
    import pyarrow.parquet as pq
    t = signals_table(sigs, extra)
    if metadata:
        t = t.replace_schema_metadata({k.encode(): str(v).encode() for k, v in metadata.items()})
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        pq.write_table(t, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
