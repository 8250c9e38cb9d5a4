"""The runtime file: where a running engine's control plane is, for `engine stats/ctl/signals
--follow --name NAME` to find it without being told.

`engine run` writes DIR/engine-run.NAME.json once its control plane serves, in the private
runtime directory it keeps its locks and token in (engine/dirs.py: /run/engine for root or a unit
with XDG_RUNTIME_DIR=/run, $XDG_RUNTIME_DIR/engine, else /tmp/engine-UID; 0700): its pid, the HTTP
address, the zmq PUB endpoint and the token file's path (never the token). The file is 0600,
written whole under a temporary name and renamed into place, flock'ed for as long as the
engine runs, and removed at exit. A reader opens it without following links and checks on the
opened descriptor that it is a regular file of this user that nobody else can read or write
(as the token and the rings are checked); a file whose lock is free is stale: its engine is
gone (killed), whatever process now has its pid.
"""
import fcntl
import json
import os
import stat
import time

from engine import dirs

from .private_file import open_private

PREFIX = "engine-run."


class RuntimeFileError(ValueError):
    pass


def _file_name(name):
    return f"{PREFIX}{str(name).replace('/', '%')}.json"


class Published:
    """The file of a running engine: held open (and locked) until remove()."""

    def __init__(self, path, fd):
        self.path, self.fd = path, fd

    def remove(self):
        if self.fd is None:
            return
        try:
            a, b = os.fstat(self.fd), os.lstat(self.path)
            if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):  # still ours (a new engine may have replaced it)
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.fd = None


def publish(name, info):
    """Write the runtime file of engine `name` (info: JSON-able endpoints) atomically; returns a
    Published to remove() at exit."""
    d = dirs.runtime_dir()
    path = os.path.join(d, _file_name(name))
    tmp = os.path.join(d, f".{_file_name(name)}.tmp-{os.getpid()}")
    try:
        os.unlink(tmp)  # a stale one of ours
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # held while we run: a reader that can take it knows we are gone
        body = dict(info, name=str(name), pid=os.getpid(), since=time.time())
        os.write(fd, (json.dumps(body, indent=1) + "\n").encode())
        os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return Published(path, fd)


def _private_dir(d):
    """None if d is a directory only this user can use; else why not (or "" if it is not there)."""
    try:
        st = os.lstat(d)
    except OSError:
        return ""
    if not stat.S_ISDIR(st.st_mode):
        return f"{d} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{d} belongs to uid {st.st_uid} (run this as that user)"
    if st.st_mode & 0o077:
        return f"{d} is open to others (mode {st.st_mode & 0o777:04o})"
    return None


def _read_checked(path):
    """The runtime file's contents and whether its engine is alive; None if there is none."""
    fd = open_private(path, "runtime file", " (the engine writes it 0600)", RuntimeFileError)
    if fd is None:
        return None
    try:
        raw = os.pread(fd, 65536, 0)
        try:
            info = json.loads(raw)
        except ValueError:
            info = None
        if not isinstance(info, dict) or not isinstance(info.get("pid"), int):
            raise RuntimeFileError(f"runtime file {path} is not an engine runtime file (no JSON object with a pid)")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            alive = False  # nobody holds it: the engine that wrote it is gone
        except BlockingIOError:
            alive = True
        return info, alive
    finally:
        os.close(fd)


def find(name):
    """The runtime info of the running engine `name` (a dict with pid, http, pub, token_file), or
    RuntimeFileError saying, in one line, why there is none."""
    fname = _file_name(name)
    stale, notes = None, []
    for d in dirs.runtime_dirs():
        why = _private_dir(d)
        if why:
            notes.append(why)
            continue
        if why == "":
            continue
        path = os.path.join(d, fname)
        got = _read_checked(path)
        if got is None:
            continue
        info, alive = got
        if alive:
            info["runtime_file"] = path
            return info
        stale = stale or (path, info)
    if stale:
        path, info = stale
        pid = info["pid"]
        gone = "is gone" if not _pid_alive(pid) else "is not that engine any more"
        raise RuntimeFileError(f"engine {name!r} is not running: its runtime file {path} is stale (pid {pid} {gone}; "
                               "the engine did not exit cleanly): start it again, or remove the file")
    where = ", ".join(dirs.runtime_dirs())
    extra = f"; {'; '.join(notes)}" if notes else ""
    raise RuntimeFileError(f"no engine named {name!r} is running as this user (no {fname} in {where}{extra}): "
                           "give --name NAME, --config FILE, or the endpoint itself")


def find_publisher(endpoint):
    """The runtime info of a live engine of this user publishing on endpoint, or None."""
    for d in dirs.runtime_dirs():
        if _private_dir(d) is not None:
            continue
        for f in sorted(os.listdir(d)):
            if not (f.startswith(PREFIX) and f.endswith(".json")):
                continue
            path = os.path.join(d, f)
            try:
                got = _read_checked(path)
            except RuntimeFileError:
                continue
            if got is not None and got[1] and got[0].get("pub") == endpoint:
                got[0]["runtime_file"] = path
                return got[0]
    return None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
