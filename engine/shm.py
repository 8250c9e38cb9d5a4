"""Ring files in /dev/shm: creation with ownership checks, mapping (read-only inspection of any
ring: engine/ring_info.py).

A ring is one file: a 4 KiB header page (int64 words, layout below) then the slots.
Files are created 0600 under a temporary name and renamed into place, so nobody ever
maps a half-initialised header. We map files directly (not multiprocessing.shared_memory,
whose resource tracker can unlink a segment when a reader exits before Python 3.13).
"""
import errno
import mmap
import os
import pwd
import re
import secrets
import stat
import time

import numpy as np

SHM_DIR = "/dev/shm"
HEADER_BYTES = 4096
HEADER_WORDS = HEADER_BYTES // 8
MAGIC = int.from_bytes(b"ENGRING1", "little")
LAYOUT_VERSION = 1

RING_TICKS = 1     # broadcast: one producer, many consumers, producer never blocks
RING_SIGNALS = 2   # SPSC: full -> counted drop
RING_CONTROL = 3   # the engine's control block: control words, counters, histograms

# Header words. Each group that one party writes sits on its own 64-byte line.
H_MAGIC, H_VERSION, H_KIND, H_RECORD_SIZE, H_CAPACITY, H_PID, H_CREATED_NS, H_MAX_CONSUMERS = range(8)
H_HEARTBEAT_NS = 8     # producer: CLOCK_MONOTONIC ns, refreshed while it runs
H_STATE = 9            # producer: 0 created, 1 producing, 2 finished (end of stream)
H_DEPTH = 10           # tick rings: levels a side of the depth window the ticks carry (records.py)
H_WRITE = 16           # producer: next seq to publish (== records published)
H_READ = 24            # SPSC consumer: next seq to read
H_CONSUMER_PID = 25    # SPSC consumer pid
H_DROPS = 32           # SPSC producer: records dropped because the ring was full
# Tick rings: what the ticks' ts_recv means (the run's clock), written by the producer before it
# marks the ring producing (engine/tickring.py `origin` reads them):
H_CLOCK_KIND = 40      # CLOCK_ARRIVAL, CLOCK_PACED or CLOCK_UNPACED
H_CLOCK_DATA0 = 41     # paced: the data time (ts_recv) that was due at ...
H_CLOCK_MONO0 = 42     # ... this CLOCK_MONOTONIC ns
H_CLOCK_SPEED_U = 43   # paced: data ns per monotonic ns, in millionths (speed 20 = 20,000,000)
H_FIRST_RECV = 44      # the first tick's ts_recv (0: none), set when the ring is made
# A run's one clock for its file sources (written by the run that reads them, before the producer
# starts; feeds/process.py waits for it when told to): data time H_ANCHOR_DATA is due at monotonic
# H_ANCHOR_MONO (0: not set yet) in every ring of the run.
H_ANCHOR_DATA = 48
H_ANCHOR_MONO = 49
# A file producer's next tick while it waits to publish it (paced, or held by a consumer): its
# ts_recv, then (release) its seq. A reader merging several rings in receive-time order takes a
# tick from one ring only when every other ring's next tick is known (engine/tickring.py `head`).
H_HEAD_TS = 56
H_HEAD_SEQ = 57
CLOCK_ARRIVAL, CLOCK_PACED, CLOCK_UNPACED = 0, 1, 2
H_CONSUMERS = 64       # broadcast consumer lines start here, 8 words each:
C_PID, C_CURSOR, C_LOST, C_GAPS, C_ATTACHED_NS = range(5)
C_RESYNC = 5           # the consumer bumps it to have the producer re-send every depth window
C_BACKPRESSURE = 6     # 1: a file producer waits for this consumer rather than lap it (feeds/core/publisher.py)
MAX_CONSUMERS = 32
H_FEED_STATS = 328     # tick rings, words 328-511: the feed's own counters, written between batches (engine/feed_stats.py)

CAP_FOWNER = 3  # linux/capability.h: may remove others' files from a sticky directory

STATE_CREATED, STATE_PRODUCING, STATE_FINISHED = 0, 1, 2
STATE_NAMES = {0: "created", 1: "producing", 2: "finished"}


class RingError(RuntimeError):
    """A ring could not be created or opened; the message says why."""


class RingRefused(RingError):
    """A file at a ring's name that must not be trusted (a link, another user's, writable by others)."""


# /dev/shm is world-writable: any local user can put a file at a ring's name. A ring is opened
# only with O_NOFOLLOW, and mapped only when fstat on the opened descriptor (not the name, which
# may be swapped between check and use) shows a regular file owned by this engine's uid, or by
# a uid given with --ring-owner (a feed handler running as another user), that nobody else can
# write: no group/other bits for our own files (they are created 0600), no other-bits for a
# trusted owner's (who may share with a group).
TRUSTED_UIDS = set()


def trust_uid(uid):
    TRUSTED_UIDS.add(int(uid))


def untrusted(st):
    """Why a file with this stat must not be mapped, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    me = os.geteuid()
    if st.st_uid != me and st.st_uid not in TRUSTED_UIDS:
        return (f"owned by uid {st.st_uid}, not by this engine's uid {me}"
                + (f" nor a --ring-owner ({', '.join(map(str, sorted(TRUSTED_UIDS)))})" if TRUSTED_UIDS
                   else " (--ring-owner trusts a feed running as another user)"))
    mode = st.st_mode & 0o777
    if mode & (0o077 if st.st_uid == me else 0o007):
        return f"mode {mode:04o} lets other users at it (rings are 0600)"
    return None


def open_checked(path, flags=os.O_RDONLY):
    """Open a ring file without following a link and check the opened file (untrusted());
    returns (fd, stat). RingRefused says why a file was refused; RingError when it is absent."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)  # a planted FIFO: no hang
    except FileNotFoundError:
        raise RingError(f"no ring at {path}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RingRefused(f"{path} is a symbolic link: refused (a ring is never opened through a link)") from None
        raise RingError(f"{path}: {e.strerror}") from None
    st = os.fstat(fd)
    why = untrusted(st)
    if why:
        os.close(fd)
        raise RingRefused(f"{path}: {why}: refused")
    return fd, st


def read_header_fd(fd, path):
    raw = os.pread(fd, HEADER_BYTES, 0)
    if len(raw) < HEADER_BYTES:
        raise RingError(f"{path}: file is {len(raw)} bytes, shorter than a ring header ({HEADER_BYTES})")
    hdr = np.frombuffer(raw, np.int64)
    if int(hdr[H_MAGIC]) != MAGIC:
        raise RingError(f"{path}: not an engine ring (bad magic)")
    return hdr


def ring_path(name):
    """A bare name lives in /dev/shm; anything with a slash is a path."""
    return name if "/" in name else os.path.join(SHM_DIR, name)


def pid_alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_header(path):
    with open(path, "rb") as f:
        return read_header_fd(f.fileno(), path)


def check_owner(path):
    """Raise RingError if a live process other than us owns the ring at `path`.

    Returns a message when a dead owner's ring is about to be replaced, else None.
    """
    if not os.path.lexists(path):
        return None
    _refuse_unreplaceable(path)
    try:
        fd, _ = open_checked(path)
    except RingRefused as e:  # never believe such a file's contents (a planted pid 1 blocks nobody)
        return f"replacing {e}"
    except RingError as e:
        return f"replacing {path}: {e}"
    try:
        hdr = read_header_fd(fd, path)
    except RingError as e:
        return f"replacing {path}: {e}"
    finally:
        os.close(fd)
    pid = int(hdr[H_PID])
    if pid != os.getpid() and pid_alive(pid):
        hb = int(hdr[H_HEARTBEAT_NS])
        age = (time.monotonic_ns() - hb) / 1e9 if hb else float("nan")
        raise RingError(
            f"ring {path} is owned by live process {pid} (heartbeat {age:.1f} s ago); "
            f"stop that process or use another --name")
    return f"replacing ring {path} left by dead process {pid}"


def ring_bytes(record_size, capacity):
    """A ring file's size: the header page and its slots."""
    return HEADER_BYTES + capacity * record_size


def _gib(n):
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def room(directory):
    """(bytes, what bounds them): the most a new ring in `directory` can take. A ring's pages are
    all touched (the tick ring's at once), so it must fit both in the file system's free space
    and in memory (tmpfs pages are memory); a file past either dies of SIGBUS or the OOM killer."""
    st = os.statvfs(directory)
    limits = [(st.f_bavail * st.f_frsize, f"{directory} has {_gib(st.f_bavail * st.f_frsize)} free")]
    try:
        with open("/proc/meminfo") as f:
            kb = int(re.search(r"^MemAvailable:\s+(\d+) kB", f.read(), re.M).group(1))
        limits.append((kb * 1024, f"{_gib(kb * 1024)} of memory is available"))
    except (OSError, AttributeError, ValueError):
        pass
    return min(limits)


def check_room(path, size, what="ring capacity"):
    """Refuse, before anything is created, a ring of `size` bytes that cannot fit (room())."""
    limit, why = room(os.path.dirname(path) or ".")
    if size > limit:
        raise RingError(f"ring {path} would need {_gib(size)} ({size:,} bytes) but {why}: give a smaller {what}")


def owner_name(uid):
    """'user NAME (uid N)', or 'uid N' for a uid with no name."""
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _may_replace(path, st):
    """Can this process rename over the file at `path` (lstat `st`)? In a sticky directory such as
    /dev/shm only the file's owner, the directory's, or a holder of CAP_FOWNER may."""
    d = os.path.dirname(path) or "."
    dst = os.stat(d)
    if not os.access(d, os.W_OK | os.X_OK):
        return False
    if not dst.st_mode & stat.S_ISVTX or os.geteuid() in (st.st_uid, dst.st_uid):
        return True
    try:
        with open("/proc/self/status") as f:
            eff = int(re.search(r"^CapEff:\s+([0-9a-f]+)", f.read(), re.M).group(1), 16)
    except (OSError, AttributeError, ValueError):
        return os.geteuid() == 0
    return bool(eff & (1 << CAP_FOWNER))


def _refuse_unreplaceable(path):
    """A file at a ring's name that this process cannot replace (another user's, planted in
    the sticky /dev/shm): one line naming its owner, before anything is created."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not _may_replace(path, st):
        raise RingError(f"{path} belongs to {owner_name(st.st_uid)}, and this engine, running as "
                        f"{owner_name(os.geteuid())}, cannot replace it: have that user (or root) remove it, "
                        "or use another --name")


def create(path, kind, record_size, capacity, owner_pid=None, init=None):
    """Create (or replace a dead owner's) ring file; returns (mmap, header view, note).

    `init(mm)` runs before the file is renamed into place, so nobody sees it half-made. Whatever
    fails, the temporary file is removed: nothing is left in /dev/shm by a refused start.
    """
    if capacity <= 0 or capacity & (capacity - 1):
        raise RingError(f"ring capacity must be a power of two, got {capacity}")
    note = check_owner(path)
    size = ring_bytes(record_size, capacity)
    check_room(path, size)
    fd, tmp = _create_tmp(path)
    mm = hdr = None
    try:
        try:
            os.ftruncate(fd, size)
            _reserve(fd, size)  # every page now, or ENOSPC now: never SIGBUS when a page is first touched
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            raise RingError(f"cannot size ring {path} to {size:,} bytes: {e.strerror}") from None
        finally:
            os.close(fd)
        hdr = np.frombuffer(mm, np.int64, HEADER_WORDS, 0)
        hdr[H_VERSION] = LAYOUT_VERSION
        hdr[H_KIND] = kind
        hdr[H_RECORD_SIZE] = record_size
        hdr[H_CAPACITY] = capacity
        hdr[H_PID] = owner_pid if owner_pid is not None else os.getpid()
        hdr[H_CREATED_NS] = time.time_ns()
        hdr[H_MAX_CONSUMERS] = MAX_CONSUMERS if kind == RING_TICKS else 1
        hdr[H_HEARTBEAT_NS] = time.monotonic_ns()
        if init is not None:
            init(mm)
        hdr[H_MAGIC] = MAGIC  # last: a header with magic is complete
        try:
            os.rename(tmp, path)  # replaces the name itself, never what a link there points to
        except OSError as e:
            try:
                owner = f" (it belongs to {owner_name(os.lstat(path).st_uid)})"
            except OSError:
                owner = ""
            raise RingError(f"cannot put a ring at {path}{owner}: {e.strerror}; remove that file or use another "
                            "--name") from None
    except BaseException:
        _unlink(tmp)  # first: the file goes even if the mapping cannot be closed yet
        hdr = None  # the view exports the mapping's buffer: it must go before the mapping closes
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # a view still held (by a traceback's frame): unmapped when it dies
                pass
        raise
    return mm, hdr, note


def _create_tmp(path):
    """A new 0600 file beside `path` under a name nobody can have planted (O_EXCL, random)."""
    for _ in range(16):
        tmp = f"{path}.tmp.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise RingError(f"cannot create a ring beside {path}: {e.strerror}") from None
    raise RingError(f"cannot create a ring beside {path}: every temporary name tried exists")


def _unlink(p):
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass


def _reserve(fd, size):
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def open_rw(path, kind):
    """Map an existing ring read-write (consumers write their own cursor lines)."""
    fd, st = open_checked(path, os.O_RDWR)
    try:
        size = st.st_size
        if size < HEADER_BYTES:
            raise RingError(f"{path}: {size} bytes is too short for a ring")
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    hdr = np.frombuffer(mm, np.int64, HEADER_WORDS, 0)
    validate(path, hdr, size, kind)
    return mm, hdr


def validate(path, hdr, size, kind):
    if int(hdr[H_MAGIC]) != MAGIC:
        raise RingError(f"{path}: not an engine ring (bad magic)")
    if int(hdr[H_VERSION]) != LAYOUT_VERSION:
        raise RingError(f"{path}: layout version {int(hdr[H_VERSION])}, this engine reads {LAYOUT_VERSION}")
    if kind is not None and int(hdr[H_KIND]) != kind:
        raise RingError(f"{path}: ring kind {int(hdr[H_KIND])}, expected {kind}")
    cap, rs = int(hdr[H_CAPACITY]), int(hdr[H_RECORD_SIZE])
    if cap <= 0 or cap & (cap - 1) or rs != 64 or HEADER_BYTES + cap * rs != size:
        raise RingError(f"{path}: inconsistent header (capacity {cap}, record size {rs}, file {size} bytes)")
