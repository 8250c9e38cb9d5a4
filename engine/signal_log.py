"""The signal file: a 64-byte header then raw signal records (SIGNAL_DTYPE, 128 bytes each).

Written by the drainer as signals arrive, straight to the file on every drain, so a crash loses
at most the signals still in the ring; a partial trailing record is ignored on read.

Header (version 6; 5 had no kill marks, 3 no `decision`: read as each signal its own, decision = seq): magic "ENGSIG01", u32 version, u32 record size, i64 created (ns), u32 flags,
u32 0, u64 records, 24 bytes reason (ASCII). Flags: 1 complete (the writer closed it: `records`
is how many it wrote), 2 stopped (a write failed, e.g. a full disk: the file holds the first
`records` records, whole; `reason` says why, and the writer wrote nothing more), 4 ended
abnormally (with 1: closed whole, but the run ended early: its strategy raised or hung, its
lease expired, its feed died; `reason` says which). A file with neither 1 nor 2 is being
written, or its writer was killed. `status()` says which, and `engine signals
show` prints it ("incomplete: the writer stopped at record N (reason)"). Version 2 files (no
flags) are read as they are.
"""
import errno
import os
import stat
import time

import numpy as np

from .records import SIGNAL_DTYPE, SIGNAL_FLAG_KILLED, SIGNAL_FLAG_MARK, SIGNAL_FLAG_PAUSED, SIGNAL_FLAGS_KILL_MARK, \
    SIGNAL_FLAGS_PAUSE_MARK

RECORD = SIGNAL_DTYPE.itemsize
VERSION = 6  # 1: 64-byte records, before positions in units; 2: no completion flags; 3: no decision; 4: no wanted;
#             5: no kill marks
F_COMPLETE, F_STOPPED, F_ABNORMAL = 1, 2, 4
REASON_BYTES = 24

MAGIC = b"ENGSIG01"
HEADER = np.dtype([("magic", "S8"), ("version", "<u4"), ("record_size", "<u4"), ("created_unix_ns", "<i8"),
                   ("flags", "<u4"), ("pad", "<u4"), ("records", "<u8"), ("reason", "S24")])
assert HEADER.itemsize == 64


class SignalLogError(RuntimeError):
    pass


class SignalLog:
    """Append signal records. A write that fails does not raise (the strategy keeps running, its
    signals still go to zmq): the file is marked stopped at its last whole record with the
    reason, `error` says what failed (naming the file), `unwritten` counts what was not written,
    and `on_error(message)` is called once (the engine stops its run). A pipe or a device
    (/dev/null) takes the same bytes, with no marks."""

    def __init__(self, path, on_error=None):
        from .outputs import OutputError, open_private, reason
        self.path = path
        self.on_error = on_error
        self.count = 0
        self.unwritten = 0
        self.error = None
        self.created = time.time_ns()
        self.fd = None
        try:  # 0600 in 0700 directories we make: the trading history is no one else's
            self.fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            self.regular = stat.S_ISREG(os.fstat(self.fd).st_mode)
            _write_all(self.fd, self._header(0))
        except (OSError, _Short) as e:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            e = getattr(e, "cause", e)
            raise OutputError(path, "signals", reason(e), e.errno) from None

    def _header(self, flags, why=""):
        h = np.zeros(1, HEADER)
        h["magic"], h["version"], h["record_size"], h["created_unix_ns"] = MAGIC, VERSION, RECORD, self.created
        h["flags"], h["records"], h["reason"] = flags, self.count, why.encode("ascii", "replace")[:REASON_BYTES]
        return h.tobytes()

    def _mark(self, flags, why=""):
        """Rewrite the header in place (a regular file only): bytes already on disk, no new space."""
        if self.regular:
            os.pwrite(self.fd, self._header(flags, why), 0)

    def write(self, words):
        """words: int64 [n, SIGNAL_WORDS] signal records."""
        if not len(words):
            return
        if self.error is not None or self.fd is None:
            self.unwritten += len(words)
            return
        try:
            _write_all(self.fd, np.ascontiguousarray(words).tobytes())
        except _Short as e:
            self._stop(e.cause, len(words), e.done // RECORD)
            return
        self.count += len(words)

    def _stop(self, e, n, whole):
        """A write failed after `whole` of its `n` records: keep those, mark the file, say so once."""
        from .outputs import OutputError, reason
        self.count += whole
        self.unwritten += n - whole
        self.error = OutputError(self.path, "signals", reason(e), getattr(e, "errno", None))
        if self.regular:
            try:
                os.ftruncate(self.fd, 64 + self.count * RECORD)  # a record written in part goes
                self._mark(F_STOPPED, reason(e))
            except OSError:
                pass  # no flag at all: still read as incomplete
        if self.on_error is not None:
            self.on_error(str(self.error))

    def close(self, abnormal=None):
        """The end mark: complete, and with `abnormal` (a short reason, REASON_BYTES at most) the
        run's early end too."""
        if self.fd is None:
            return
        try:
            if self.regular:
                if self.error is None:
                    self._mark(F_COMPLETE | (F_ABNORMAL if abnormal else 0), abnormal or "")
                os.fsync(self.fd)
        except OSError as e:
            if self.error is None:
                self._stop(e, 0, 0)
        finally:
            os.close(self.fd)
            self.fd = None


class _Short(Exception):
    def __init__(self, done, cause):
        self.done, self.cause = done, cause


def _write_all(fd, data):
    """Write all of data; _Short(bytes written, the OSError) when that fails part way."""
    mv = memoryview(data).cast("B")
    done = 0
    while done < len(mv):
        try:
            k = os.write(fd, mv[done:])
        except OSError as e:
            raise _Short(done, e) from None
        if k <= 0:
            raise _Short(done, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        done += k
    return done


def status(path):
    """What a signal file says of itself: {"version", "records" (whole records in the file),
    "complete" (None for a version 2 file: it cannot say), "stopped_at", "reason", "abnormal" (why
    the run ended early, or None), "note"}
    where note, when not None, is what a reader must be told ("incomplete: ...")."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(64)
    except OSError as e:
        raise SignalLogError(f"{path}: {e.strerror}") from None
    if len(raw) < 64:
        raise SignalLogError(f"{path}: {len(raw)} bytes, too short for a signal file header")
    h = np.frombuffer(raw, HEADER)[0]
    if bytes(h["magic"]) != MAGIC:
        raise SignalLogError(f"{path}: not an engine signal file")
    n, torn = divmod(size - 64, RECORD)
    out = {"version": int(h["version"]), "records": n, "complete": None, "stopped_at": None, "reason": None,
           "abnormal": None, "note": None}
    if out["version"] < 3:
        return out
    flags, declared = int(h["flags"]), int(h["records"])
    why = bytes(h["reason"]).rstrip(b"\0").decode("ascii", "replace")
    out["complete"] = bool(flags & F_COMPLETE)
    if flags & F_COMPLETE:
        if declared != n:
            out["note"] = (f"damaged: its writer closed it with {declared:,} records, it holds {n:,}"
                           + (f" and {torn} bytes of a torn one" if torn else ""))
        elif flags & F_ABNORMAL:
            out["abnormal"] = out["reason"] = why
            out["note"] = f"the run ended abnormally ({why}): its signals stop there"
    elif flags & F_STOPPED:
        out["stopped_at"], out["reason"] = declared, why
        out["note"] = f"incomplete: the writer stopped at record {declared:,} ({why})"
    else:
        out["stopped_at"] = n
        out["note"] = (f"incomplete: the writer stopped at record {n:,} (no end mark: it is still running, or "
                       "was killed)")
    return out


def read_signals(src):
    """The signals of a signal file (SIGNAL_DTYPE), marks left out. src: a signal file, or its records
    (read_records)."""
    recs = _records(src)
    return recs[(recs["flags"] & SIGNAL_FLAG_MARK) == 0]


def _records(src):
    """A signal file's records: src a path, or records read_records already gave."""
    return src if isinstance(src, np.ndarray) else read_records(src)


def read_marks(src):
    """A live run's conflation marks: int64 [m, 2] (first tick seq of a window, flush tick seq). src: a
    signal file, or its records (read_records)."""
    recs = _records(src)
    m = recs[(recs["flags"] & (SIGNAL_FLAG_MARK | SIGNAL_FLAG_KILLED | SIGNAL_FLAG_PAUSED)) == SIGNAL_FLAG_MARK]
    return np.stack([m["ts_event"].astype(np.int64), m["tick_seq"].astype(np.int64)], axis=1) if len(m) else \
        np.zeros((0, 2), np.int64)


def read_kills(src):
    """A live run's kill switch moves (kill marks, engine/records.py): int64 [k, 3] (the seq of the
    first tick after it, the seq of the tick its flattening signals name, the reason: 0 resumed)."""
    recs = _records(src)
    m = recs[(recs["flags"] & SIGNAL_FLAGS_KILL_MARK) == SIGNAL_FLAGS_KILL_MARK]
    return np.stack([m["ts_event"], m["tick_seq"].astype(np.int64), m["position"]], axis=1).astype(np.int64) \
        if len(m) else np.zeros((0, 3), np.int64)


def read_pauses(src):
    """A live run's pauses and resumes (pause marks, engine/records.py): int64 [p, 2] (the seq of the
    first tick after it, 1 paused or 0 resumed)."""
    recs = _records(src)
    m = recs[(recs["flags"] & SIGNAL_FLAGS_PAUSE_MARK) == SIGNAL_FLAGS_PAUSE_MARK]
    return np.stack([m["ts_event"], m["position"]], axis=1).astype(np.int64) if len(m) else np.zeros((0, 2), np.int64)


def model_swaps(src):
    """[(model generation, tick seq of its first decision)] of a live run, in order: more than one
    when a reload swapped the model mid-run (`engine ctl reload`)."""
    d = read_signals(src)
    if not len(d):
        return []
    gens = d["model_gen"].astype(np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(gens)) + 1))
    return [(int(gens[i]), int(d["tick_seq"][i])) for i in starts]


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
    recs = body.view(SIGNAL_DTYPE)
    if h["version"] < 4:  # (the word was reserved, zero: each signal was its own decision)
        recs = recs.copy()
        recs["decision"] = recs["seq"]
    if h["version"] < 5:  # (reserved, zero: no risk gate, each signal went out as decided)
        recs = recs.copy()
        recs["wanted"] = recs["position"]
    return recs


SIGNAL_COLUMNS = ("seq", "tick_seq", "instrument", "ts_event", "ts_recv", "ts_signal", "ts_wall", "mid_px", "score",
                  "margin", "position", "prev_position", "side", "prev_side", "folded", "model_gen", "decision", "wanted",
                  "flags")


def signals_table(sigs, extra=None):
    """Signal records (SIGNAL_DTYPE) as a pyarrow table: one row per signal, prices int64 at
    1e-9, score and margin float32 exactly as the model gave them. `extra`: more columns."""
    import pyarrow as pa
    cols = {c: sigs[c] for c in SIGNAL_COLUMNS}
    cols.update(extra or {})
    return pa.table(cols)


def pa_is_string(t):
    import pyarrow as pa
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def write_signals_parquet(path, sigs, extra=None, metadata=None, tables=None):
    """Write atomically (a temporary file renamed into place; an OutputError naming `path` if
    that fails, and no temporary left). tables: the instrument table of each input (a live run:
    one); the schema metadata carries them and the price scale (engine/records.py
    table_metadata), and unless `extra` has a `symbol` column one is made from the first table."""
    import pyarrow.parquet as pq

    from .outputs import atomic_file
    from .records import symbol_column, table_metadata
    extra = dict(extra or {})
    if "symbol" not in extra:
        extra["symbol"] = symbol_column((tables or [None])[0], sigs["instrument"])
    t = signals_table(sigs, extra)
    t = t.replace_schema_metadata(table_metadata(tables or [], **(metadata or {})))
    strings = [f.name for f in t.schema if pa_is_string(f.type)]
    with atomic_file(path, "the signal table", private=True) as tmp:
        pq.write_table(t, tmp, use_dictionary=strings)  # (dictionary-encoding every float column cost 4x the time)
