"""--kill-file PATH: the run is killed when the file appears. Only its owner may pull that switch:
the file's directory must exist and be writable by nobody but this user (or root), checked at
start (a directory others can write, /tmp among them, sticky or not, lets them create the name:
refused, with why), and a file that appears counts only when this user or root owns it."""
import os
import stat


def check(path):
    """ValueError (one line) when `path` is no place for a kill file."""
    if not path or not str(path).strip():
        raise ValueError("--kill-file '': give the path of a file to watch")
    d = os.path.dirname(os.path.abspath(path)) or "/"
    try:
        st = os.stat(d)
    except OSError as e:
        raise ValueError(f"--kill-file {path}: its directory {d}: {e.strerror}") from None
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"--kill-file {path}: {d} is not a directory")
    if st.st_uid not in (me, 0) or st.st_mode & 0o022:
        who = f"uid {st.st_uid}'s" if st.st_uid not in (me, 0) else \
            f"writable by {'others' if st.st_mode & 0o002 else 'its group'}"
        raise ValueError(f"--kill-file {path}: its directory {d} is {who}: another user could kill the run (or keep "
                         "it killed) by making the file there; use a directory only you (or root) can write")


def pulled(path):
    """Has the kill file appeared, made by this user or root? (Another user's never counts.)"""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid in (os.geteuid(), 0)
