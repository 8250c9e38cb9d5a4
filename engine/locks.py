"""One engine per core and per tick ring: flock'ed files in a directory only this user can write
(the runtime directory of engine/dirs.py: /run/engine for root, else $XDG_RUNTIME_DIR/engine, else
/tmp/engine-UID; 0700, checked on every use). Never in /dev/shm: anyone can put a file or a link
there, and a lock opened through a planted link would clobber its target. The kernel drops a lock when its process dies, so a
crash never leaves one held; the file says who holds it, for the error the next engine prints. A
clean exit removes its lock files (while still holding them; acquire checks that the file it
locked is still the one at the name, so that is safe)."""
import fcntl
import json
import os
import time

from . import dirs

_held = []  # open descriptors: a lock lives as long as the process


def lock_dir():
    """The runtime directory (engine/dirs.py), where the locks are: created 0700, refused unless private."""
    return dirs.runtime_dir()


def _path(kind, key):
    safe = str(key).replace("/", "%")
    return os.path.join(lock_dir(), f"engine-lock.{kind}.{safe}")


def acquire(kind, key, name):
    """Take the lock for (kind, key) or raise RuntimeError naming its holder."""
    path = _path(kind, key)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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
        if _same_file(fd, path):
            break
        os.close(fd)  # its holder removed it as we opened it: a lock on a removed file locks nothing; again
    try:  # who holds it, for the next engine's error message
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "name": name, "since": time.time()}).encode(), 0)
    except OSError as e:  # a full disk: refused, naming the file
        os.unlink(path)
        os.close(fd)
        raise OSError(e.errno, e.strerror, path) from None
    _held.append((fd, path))
    return fd


def _same_file(fd, path):
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def release_all():
    """Release every lock, removing its file while we still hold it (safe: a process that opened
    the file just before sees, once it gets the lock, that the name no longer leads to it, and
    starts again with a new file; acquire)."""
    while _held:
        fd, path = _held.pop()
        try:
            if _same_file(fd, path):
                os.unlink(path)
        except OSError:
            pass  # left in place: harmless, the next engine takes it
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
