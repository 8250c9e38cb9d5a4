"""One engine per core and per tick ring: flock'ed files in /dev/shm (machine-wide, gone at
reboot). The kernel drops a lock when its process dies, so a crash never leaves one behind;
the file says who holds it, for the error the next engine prints."""
import fcntl
import json
import os
import time

LOCK_DIR = "/dev/shm"
_held = []  # open descriptors: a lock lives as long as the process


def _path(kind, key):
    safe = str(key).replace("/", "%")
    return os.path.join(LOCK_DIR, f"engine-lock.{kind}.{safe}")


def acquire(kind, key, name):
    """Take the lock for (kind, key) or raise RuntimeError naming its holder."""
    path = _path(kind, key)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            info = {}
        os.close(fd)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0))) if info.get("since") else "?"
        raise RuntimeError(f"{kind} {key} is in use by engine {info.get('name', '?')!r} (pid {info.get('pid', '?')}, "
                           f"since {since}); one engine per {kind}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "name": name, "since": time.time()}).encode(), 0)
    _held.append(fd)
    return fd


def release_all():
    while _held:
        fd = _held.pop()
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
