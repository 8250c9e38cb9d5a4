"""The control token of `engine run`'s HTTP plane: a new one written 0600 at each start, removed at
a clean exit; read by the clients (engine ctl, engine stats) under the same rules. And
--metrics-token-file's token, which a Prometheus scraping /metrics/private sends."""
import contextlib
import os
import secrets

from engine.outputs import write_whole

from .private_file import open_private


def open_token(path):
    """An fd on the token file, or None if there is none. Refused: a link, another user's file, or
    one group or others can read or write (the token would be theirs too)."""
    return open_private(path, "token file", f"; it must be this user's and private: chmod 600 {path} (the engine "
                        "writes a new token at each start)")


def read_metrics_token(path):
    """--metrics-token-file: the token a Prometheus scraping /metrics/private sends (a file the
    operator keeps, readable by Prometheus's group, say): never through a link, this user's or
    root's, nothing for others; None without one."""
    if not path:
        return None
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise RuntimeError(f"--metrics-token-file {path}: {e.strerror} (a link is never followed)") from None
    try:
        st = os.fstat(fd)
        why = ("not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"owned by uid {st.st_uid}, not this user nor root" if st.st_uid not in (os.geteuid(), 0) else
               f"mode {st.st_mode & 0o777:04o}: others can read it (chmod o-rwx)" if st.st_mode & 0o007 else None)
        if why:
            raise RuntimeError(f"--metrics-token-file {path} is refused: {why}")
        token = os.read(fd, 4096).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if len(token) < 16 or any(ch.isspace() for ch in token):
        raise RuntimeError(f"--metrics-token-file {path}: the token must be one word of at least 16 characters")
    return token


def read_token(path):
    """The control token for a client (engine ctl, engine stats), held to the same rules."""
    fd = open_token(path)
    if fd is None:
        raise FileNotFoundError(2, "No such file or directory", path)
    with os.fdopen(fd) as f:
        return f.read(4096).strip()


def ensure_token(path):
    """A new control token for this run, written 0600 under a temporary name and renamed over the
    old one: a token read (or stolen) during an earlier run is worth nothing once the engine restarts."""
    fd = open_token(path)  # an existing file we would not trust is refused, not replaced
    if fd is not None:
        os.close(fd)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tok = secrets.token_hex(32)
    write_whole(path, (tok + "\n").encode(), 0o600)
    return tok


def remove_token(path, token):
    """At exit: the token file goes, if it still holds this run's token (a later run's is its own)."""
    try:
        fd = open_token(path)
    except RuntimeError:
        return
    if fd is None:
        return
    with os.fdopen(fd) as f:
        mine = f.read().strip() == token
    if mine:
        with contextlib.suppress(OSError):
            os.unlink(path)
