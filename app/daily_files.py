"""The files `engine record SOURCE... --out DIR` writes: one directory per source, tick files named
by UTC date, cut at midnight or at a size, and the venue's raw messages beside them.

    DIR/<label>/2026-11-26.ticks          the day's ticks (engine/tickfile.py)
    DIR/<label>/2026-11-26.itch.zst       with --raw: the venue's messages, in its own file format
    DIR/<label>/2026-11-26.1.ticks        the next piece of that day (a size cut, or a restart)

The label (`label`) is the URI's scheme, its target (a file source's base name: a host:port, a
market, a dataset), and its symbols= value if any, joined by "-", with every character outside
[A-Za-z0-9._-] made "_" (e.g. moldudp64://127.0.0.1:26400 -> moldudp64-127.0.0.1_26400). Other
parameters are not in it (they may carry keys), except a synthetic source's, which are its market
(synthetic://?seed=3&count=9 -> synthetic-seed_3_count_9); two sources of one label in one
command are an error naming both.

A piece's stem is the date, then `.1`, `.2`, ... (numeric order, `sort -V`): a new piece takes
one more than the highest number of that day already in the directory, so a restarted recorder
never truncates nor appends into a file another run left (finished, or killed and incomplete:
engine/tickfile.py reads those). The tick file's name is reserved with O_EXCL, and a lock file
(`.lock`, flock) keeps a second recorder out of a directory one is writing.

The raw file is a run of whole zstd frames, one per MiB of messages or per second: a recorder
that is killed leaves every frame it finished (a reader rejects a frame cut short, so none is
ever half-written: a frame is one write, and a failed write is cut back to the last whole frame).
"""
import errno as _errno
import fcntl
import os
import re
import threading
import time
import zlib

from engine.outputs import OutputError, open_private, reason
from feeds.core.sources import FILE_SCHEMES
from feeds.core.uri import split

FRAME_BYTES = 1 << 20    # raw bytes compressed into one zstd frame
FRAME_SECONDS = 1.0      # ... or at least this often, so a killed recorder loses at most this
HARD_BYTES = 16 << 20    # the sink compresses itself past this (a source that floods between batches)
ZSTD_LEVEL = 3


def label(uri):
    """A source's directory name under DIR (see the module docstring)."""
    scheme, target, params = split(uri)
    if scheme in FILE_SCHEMES:
        target = os.path.basename(target.rstrip("/"))
    if scheme == "synthetic":  # its parameters are the market: all of them
        target = "_".join(f"{k}_{v}" for k, v in params.items())
        params = {}
    parts = [scheme] + [p for p in (target, params.get("symbols", "")) if p]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts)).strip("._") or scheme
    if len(name) > 120:  # a long symbol list: cut, kept apart from others by a checksum of the URI
        name = f"{name[:111]}-{zlib.crc32(uri.encode()):08x}"
    return name


def parse_rotate(s):
    """--rotate: "daily" -> None (a cut at UTC midnight only), or a size in bytes ("512M", "2G",
    "1500000"): a cut also when a tick file reaches it."""
    s = s.strip()
    if s.lower() == "daily":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?B?|B)?", s, re.I)
    if not m:
        raise ValueError(f"expected daily or a size like 512M, got {s!r}")
    mult = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[(m.group(2) or "")[:1].upper()]
    size = int(float(m.group(1)) * mult)
    if size < MIN_ROTATE:
        raise ValueError(f"{s} is less than {MIN_ROTATE >> 20}M: a tick file's header alone takes about 1 MiB")
    return size


MIN_ROTATE = 2 << 20


def utc_day(t):
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def next_stem(d, day):
    """The stem of the next piece of `day` in directory d: the date, or date.N past every piece of
    that day there (any extension: a raw file counts as much as a tick file)."""
    top = -1
    pat = re.compile(re.escape(day) + r"(?:\.(\d+))?\.")
    for name in os.listdir(d):
        m = pat.match(name)
        if m:
            top = max(top, int(m.group(1) or 0))
    return day if top < 0 else f"{day}.{top + 1}"


def pieces(d):
    """The tick files of a source directory in recording order (date, then piece number)."""
    out = []
    for name in os.listdir(d):
        m = re.fullmatch(r"(\d{4}-\d\d-\d\d)(?:\.(\d+))?\.ticks", name)
        if m:
            out.append(((m.group(1), int(m.group(2) or 0)), os.path.join(d, name)))
    return [p for _, p in sorted(out)]


def fsync_dir(d):
    """A file made or completed in d survives a crash under its name."""
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def lock_dir(d):
    """Hold d's lock file for the life of the process (an fd); one line when another holds it."""
    path = os.path.join(d, ".lock")
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT)  # (0600, never through a link, only ours)
    except OSError as e:
        raise OutputError(path, "the recorder's lock", reason(e), e.errno) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ValueError(f"{d}: another recorder (pid {other}) is writing here") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def reserve(path):
    """Create `path`, which must not exist (never truncate another run's file)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        raise ValueError(f"{path}: exists already (another recorder in this directory?)") from None
    except OSError as e:
        raise OutputError(path, "ticks", reason(e), e.errno) from None


class RawWriter:
    """A source's raw messages into whole zstd frames (see the module docstring). `write` is the
    source's raw_sink: it may be called from the source's own thread; it never raises (an error
    is kept in `.error` and the recorder raises it after the batch)."""

    def __init__(self, path, start=b""):
        import zstandard
        self.path = path
        self._z = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self._lock = threading.Lock()
        self._buf = []
        self._size = 0
        self._last = time.monotonic()
        self.error = None
        self.bytes_in = self.bytes_out = 0
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        if start:
            self.write(start)

    def write(self, data):
        if self.error is not None or not data:
            return
        with self._lock:
            self._buf.append(bytes(data))
            self._size += len(data)
            if self._size >= HARD_BYTES:
                self._frame()

    def maybe_flush(self):
        """From the recorder's loop, after each batch: a frame per MiB, or per second."""
        if self._size >= FRAME_BYTES or (self._size and time.monotonic() - self._last >= FRAME_SECONDS):
            with self._lock:
                self._frame()

    def _frame(self, force=False):
        """Compress what is buffered into one frame and write it whole (called with the lock)."""
        self._last = time.monotonic()
        if (not self._buf and not force) or self.error is not None:
            return
        data = b"".join(self._buf)
        self._buf, self._size = [], 0
        frame = self._z.compress(data)
        off = self.bytes_out
        try:
            mv = memoryview(frame)
            while len(mv):
                k = os.pwrite(self.fd, mv, off)
                if k <= 0:
                    raise OSError(_errno.ENOSPC, os.strerror(_errno.ENOSPC))
                mv, off = mv[k:], off + k
        except OSError as e:
            try:
                os.ftruncate(self.fd, self.bytes_out)  # the frames before stay whole: a readable file
            except OSError:
                pass
            self.error = OutputError(self.path, "raw messages", reason(e), e.errno)
            return
        self.bytes_in += len(data)
        self.bytes_out += len(frame)

    def close(self, fsync=True):
        """The last frame (an empty one for a piece with no messages: still a valid file), fsync."""
        if self.fd is None:
            return
        try:
            with self._lock:
                self._frame(force=self.bytes_out == 0)
            if fsync and self.error is None:
                try:
                    os.fsync(self.fd)
                except OSError as e:
                    self.error = OutputError(self.path, "raw messages", reason(e), e.errno)
        finally:
            os.close(self.fd)
            self.fd = None
