"""Writing outputs so that a failure (a full disk, a read-only directory) never passes unnoticed.

Whole outputs (a report directory, a model, a table, an .npy) are built under a temporary name in
the same directory and renamed into place: they appear complete or not at all, and the temporary
is removed on any failure. Streaming outputs (the signal file, tick files) are marked instead: a
header flag set at a clean close, and the record and reason where the writer stopped
(engine/signal_log.py, engine/tickfile.py). Every failure is an OutputError that names the file:
"cannot write signals to /x/run.sig: No space left on device".
"""
import contextlib
import errno as _errno
import os
import shutil
import tempfile


class OutputError(RuntimeError):
    """An output that could not be written; the message names it and why."""

    def __init__(self, path, what, reason, errno=None):
        self.path, self.what, self.reason, self.errno = str(path), what, reason, errno
        super().__init__(f"cannot write {what} to {self.path}: {reason}")


WRITE_ERRNOS = (_errno.ENOSPC, _errno.EDQUOT, _errno.EFBIG, _errno.EROFS)


class Refused(PermissionError):
    """An output name that must not be written through: a link, another user's file, a directory
    another user can change. Its reason is its own words, not errno's."""

    def __init__(self, path, why, errno=_errno.EPERM):
        super().__init__(errno, why, str(path))
        self.why = why


def reason(e):
    """What an exception says, without decoration ('[Errno 28] ...', a library's 'Detail: ...')."""
    if isinstance(e, OutputError):
        return e.reason
    if isinstance(e, Refused):
        return e.why
    if isinstance(e, OSError) and e.errno:
        return os.strerror(e.errno)
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def is_write_error(e, tmp=None):
    """An error of writing an output (not of reading an input): an OutputError, a full disk or
    quota, a read-only file system, or any OSError about the temporary output `tmp`."""
    if isinstance(e, OutputError):
        return True
    if not isinstance(e, OSError):
        return False
    name = str(getattr(e, "filename", None) or "")
    return e.errno in WRITE_ERRNOS or bool(tmp and name and name.startswith(str(tmp)))


def as_output_error(e, path, what, inside=None):
    """e (an OSError or an OutputError about a temporary name) as an OutputError naming `path`;
    `inside`: a temporary directory standing for `path`, whose file the reason then names."""
    why = reason(e)
    failed = getattr(e, "path", None) if isinstance(e, OutputError) else getattr(e, "filename", None)
    if inside and failed and str(failed).startswith(inside + os.sep):
        why += f" (writing {os.path.relpath(str(failed), inside)})"
    return OutputError(path, what, why, getattr(e, "errno", None))


def _nearest_existing(d):
    while d and not os.path.lexists(d):
        up = os.path.dirname(d)
        if up == d:
            break
        d = up
    return d


def unsafe_dir(d):
    """Why another local user could change what is written in existing directory d (replace or
    plant names there), or None: writable by group or others without the sticky bit (a sticky
    /tmp keeps each name its owner's: outputs there are opened without following links and only
    as this user's files)."""
    import stat
    try:
        st = os.stat(d)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (f"{d} is writable by {'others' if st.st_mode & 0o002 else 'its group'} and not sticky: another "
                f"user could replace what is written there (chmod go-w {d}, or a directory of your own)")
    return None


def _check_name(p):
    """Refused: an existing name that is a link, or another user's file (planted for us to write into)."""
    import stat
    try:
        st = os.lstat(p)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Refused(p, "is a symbolic link: refused (an output is never written through a link)", _errno.ELOOP)
    if (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)) \
            and st.st_uid != os.geteuid():
        raise Refused(p, f"is owned by uid {st.st_uid}, not this user (uid {os.geteuid()}): refused (planted?)")


def check_writable(path, what, directory=False):
    """Can `path` be written (created, or replaced)? Checked before anything starts, so a bad
    output path fails a command before it creates or runs anything. A probe file is created
    and removed in its directory when that exists (this catches /proc, read-only mounts, and
    permissions root ignores in access(2)); a missing directory must be creatable. Refused too: a
    name that is a link or another user's file, a directory another user can change (unsafe_dir)."""
    p = os.path.abspath(os.path.expanduser(str(path)))
    try:
        _check_name(p)
    except Refused as e:
        raise OutputError(path, what, e.why, e.errno) from None
    for d in (os.path.dirname(p), p if directory and os.path.isdir(p) else None):
        why = d and unsafe_dir(d)
        if why:
            raise OutputError(path, what, why, _errno.EPERM)
    if directory and os.path.isdir(p) and os.stat(p).st_uid != os.geteuid():  # (atomic_dir would refuse it)
        raise OutputError(path, what, f"is a directory of uid {os.stat(p).st_uid}, not this user's: refused",
                          _errno.EPERM)
    if os.path.exists(p) and not os.path.isdir(p) and not os.path.isfile(p):  # a device, a pipe
        if not os.access(p, os.W_OK):
            raise OutputError(path, what, "Permission denied", _errno.EACCES)
        return
    if os.path.isdir(p) and not directory:
        raise OutputError(path, what, "Is a directory")
    if os.path.lexists(p) and directory and not os.path.isdir(p):
        raise OutputError(path, what, "Not a directory")
    d = os.path.dirname(p)
    top = _nearest_existing(d)
    if not os.path.isdir(top):
        raise OutputError(path, what, f"{top} is not a directory")
    if top == d:
        for where in ([d, p] if directory and os.path.isdir(p) else [d]):  # an existing directory is written into
            try:
                fd, probe = tempfile.mkstemp(prefix=".engine-probe-", dir=where)
            except OSError as e:
                raise OutputError(path, what, reason(e), e.errno) from None
            os.close(fd)
            os.unlink(probe)
    elif not os.access(top, os.W_OK | os.X_OK):
        raise OutputError(path, what, f"cannot create its directory under {top}: Permission denied",
                          _errno.EACCES)
    if os.path.isfile(p) and not os.access(p, os.W_OK):
        raise OutputError(path, what, "Permission denied", _errno.EACCES)


def private_dirs(d):
    """Make directory `d` and its missing parents 0700 (trading history lives under them): only
    the directories made here; one that exists (a user's own, /tmp) is left as it is."""
    d = os.path.abspath(str(d))
    missing = []
    while not os.path.isdir(d) and os.path.dirname(d) != d:
        missing.append(d)
        d = os.path.dirname(d)
    for m in reversed(missing):
        try:
            os.mkdir(m, 0o700)
        except FileExistsError:
            continue
        os.chmod(m, 0o700)  # (a umask that takes the owner's bits away)


def open_private(path, flags):
    """os.open a file of ours 0600 in 0700 directories we make, never through a link: what the
    name holds is checked on the opened file. A regular file of ours there already (a run again
    over the same name) is made 0600 too; another user's file, a pipe or socket of another
    user's, anything but a character device (/dev/null) is refused (Refused): planted, it would
    take what we write, or (root) have us write or chmod a file of theirs."""
    import stat
    private_dirs(os.path.dirname(os.path.abspath(path)))
    _check_name(path)  # (first: a planted FIFO of another user's would hold the open; re-checked on the fd)
    trunc = flags & os.O_TRUNC  # (after the checks: never another user's file truncated at the open)
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        if e.errno == _errno.ELOOP:
            raise Refused(path, "is a symbolic link: refused (an output is never written through a link)",
                          _errno.ELOOP) from None
        raise
    st, me = os.fstat(fd), os.geteuid()
    mine = st.st_uid == me
    ok = (stat.S_ISREG(st.st_mode) and mine) or stat.S_ISCHR(st.st_mode) or \
        ((stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)) and mine)
    if not ok:
        os.close(fd)
        raise Refused(path, f"is {'owned by uid ' + str(st.st_uid) + ', not this user' if not mine else 'not a file'}:"
                            " refused (planted?)")
    if stat.S_ISREG(st.st_mode):
        if st.st_mode & 0o077:
            os.fchmod(fd, st.st_mode & 0o700)
        if trunc:
            os.ftruncate(fd, 0)
    return fd


def temp_name(path):
    """A temporary name beside `path` (same directory, so the rename is atomic)."""
    d, base = os.path.split(os.path.abspath(str(path)))
    return os.path.join(d, f".{base}.tmp-{os.getpid()}")


class NotPrivate(Exception):
    """A file that must be this user's alone is not (str: why)."""


def open_own(path):
    """A read-only fd on `path` (a token, a key, a runtime file), checked on the opened file: a
    regular file of this user that group and others cannot read or write; None if there is none.
    Never through a link, never waiting (a FIFO): OSError when it cannot be opened (a link:
    ELOOP), NotPrivate saying why it is refused."""
    import stat
    fd = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    st, me = os.fstat(fd), os.geteuid()
    why = ("not a regular file" if not stat.S_ISREG(st.st_mode) else
           f"owned by uid {st.st_uid}, not this user (uid {me})" if st.st_uid != me else
           f"mode {st.st_mode & 0o777:04o}: group or others have access to it" if st.st_mode & 0o077 else None)
    if why:
        os.close(fd)
        raise NotPrivate(why)
    return fd


def write_whole(path, data, mode):
    """Write a small file (a key, a token) whole: `mode` from its creation, synced, renamed over
    `path` (a reader sees the old file or the new, never part of one; a link there is replaced,
    never followed). The temporary is removed on any failure."""
    tmp = temp_name(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # (whatever the umask)
        os.write(fd, data)
        os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path, what, private=False):
    """Yield a temporary path beside `path`; rename it into place when the block succeeds.
    On any failure the temporary is removed, and an OSError becomes an OutputError naming `path`.
    private: the temporary is made 0600 (in 0700 directories made here) before anything is
    written to it, so the output is never readable by others, even while it is written."""
    tmp = temp_name(path)
    why = unsafe_dir(os.path.dirname(os.path.abspath(str(path))))
    if why:
        raise OutputError(path, what, why, _errno.EPERM)
    if not private:
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # (one a killed writer of ours left: it may have another mode)
        if private:
            os.close(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        else:  # (made here, exclusively: the block's open then writes our file, never a link planted at its name)
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
        yield tmp
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_write_error(e, tmp):
            raise as_output_error(e, path, what) from None
        raise


@contextlib.contextmanager
def atomic_dir(path, what):
    """Yield a temporary directory beside `path`, filled by the block; then it becomes `path`:
    renamed into place when `path` does not exist (or is empty), else its files replace the
    same names in `path` one by one (each atomically; other files there are left alone). On any
    failure the temporary directory is removed and `path` is as it was."""
    path = os.path.abspath(str(path))
    tmp = temp_name(path)
    try:  # (a report is trading history: this user's alone, never into a place another user holds)
        _check_name(path)
        why = unsafe_dir(os.path.dirname(path))
        if why:
            raise Refused(path, why)
        if os.path.isdir(path) and os.stat(path).st_uid != os.geteuid():
            raise Refused(path, f"is a directory of uid {os.stat(path).st_uid}, not this user's: refused")
    except Refused as e:
        raise OutputError(path, what, e.why, e.errno) from None
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        private_dirs(os.path.dirname(path))
        os.mkdir(tmp, 0o700)
        os.chmod(tmp, 0o700)  # (whatever the umask)
        yield tmp
        try:
            os.rename(tmp, path)  # atomic; over an empty directory too
        except OSError as e:
            if e.errno not in (_errno.EEXIST, _errno.ENOTEMPTY) or not os.path.isdir(path):
                raise
            for name in sorted(os.listdir(tmp)):
                os.replace(os.path.join(tmp, name), os.path.join(path, name))
            os.rmdir(tmp)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_write_error(e, tmp):
            raise as_output_error(e, path, what, inside=tmp) from None
        raise
