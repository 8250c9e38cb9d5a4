"""What a test left running: every process the pytest process started, directly or further down,
that was not there when the test started, is ended (SIGTERM, then SIGKILL after a grace) and
waited for (tests/conftest.py's autouse `reap` fixture), so no test meets another's engine, core
lock or ring.

Its processes are those below it (parent links) and those whose environment carries its tag
(TAG=its pid, set at the session's start and inherited): an engine or feed whose parent died was
handed to init and is found by the tag. A process is named by (pid, start time): a pid the kernel
reused is another process."""
import os
import signal
import time

TAG = "ENGINE_TEST_SESSION"


def tag_children():
    """Every process started from now on carries this process's tag in its environment."""
    os.environ[TAG] = str(os.getpid())


def _stat(pid):
    """(ppid, start time, state) of a pid, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(b")") + 2:].split()  # the command name (in parentheses) may hold spaces
    return int(rest[1]), int(rest[19]), rest[0].decode()


def _tagged(pid, tag):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return tag in f.read().split(b"\0")
    except OSError:
        return False


def mine(root=None):
    """{(pid, start time): state} of every process of this session's (default: this one's): below
    it, or carrying its tag."""
    root = os.getpid() if root is None else root
    table = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            st = _stat(int(e))
            if st:
                table[int(e)] = st
    kids = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    tag = f"{TAG}={root}".encode()
    found = {pid for pid in table if pid != root and table[pid][0] == 1 and _tagged(pid, tag)}  # orphans
    todo = list(kids.get(root, ())) + list(found)
    out = {}
    while todo:
        pid = todo.pop()
        if pid in table and (pid, table[pid][1]) not in out:
            out[(pid, table[pid][1])] = table[pid][2]
            todo.extend(kids.get(pid, ()))
    return out


def describe(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    return f"pid {pid} ({cmd[:160]})"


def _alive(key):
    st = _stat(key[0])
    return st is not None and st[1] == key[1] and st[2] != "Z"


def _signal(keys, sig):
    for key in keys:
        if _alive(key):
            try:
                os.kill(key[0], sig)
                if sig == signal.SIGTERM:
                    os.kill(key[0], signal.SIGCONT)  # a stopped process acts on SIGTERM only once resumed
            except ProcessLookupError:
                pass


def _wait_gone(keys, timeout):
    deadline = time.monotonic() + timeout
    while True:
        left = [k for k in keys if _alive(k)]  # a zombie counts as gone: it holds no lock, ring or port
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def _python_machinery(pid):
    """multiprocessing's own helpers (its resource tracker and forkserver, Dask's spawned workers):
    they outlive a test on purpose, shared by the whole process, and killing one would hang the
    next test that needs it. Never an engine, a feed or a replay."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing" in f.read()
    except OSError:
        return False


def _new(before):
    return {k: s for k, s in mine().items() if k not in before and not _python_machinery(k[0])}


def reap(before, grace=5.0):
    """End every process below this one that is not in `before` (a mine() taken earlier):
    SIGTERM to the topmost ones (an engine then stops its own feed and removes its rings and
    locks), SIGKILL to whatever is still there after `grace` seconds, and wait for all. Returns
    [(description, how it ended)] of those that were running; exited children that nobody waited
    for are left to them (zombies hold no lock, ring or port)."""
    now = _new(before)
    running = [k for k, s in now.items() if s != "Z"]
    said = {k: describe(k[0]) for k in running}
    if running:
        pids = {pid for pid, _ in now}
        top = [k for k in running if (_stat(k[0]) or (0,))[0] not in pids]
        _signal(top or running, signal.SIGTERM)
        _wait_gone(running, grace)
        left = [k for k, s in _new(before).items() if s != "Z"]  # what ignored SIGTERM or started meanwhile
        for k in left:
            said.setdefault(k, describe(k[0]))
        _signal(left, signal.SIGKILL)
        stuck = set(_wait_gone(left, 30.0))  # only a process in uninterruptible sleep outlives SIGKILL
    else:
        left, stuck = [], set()
    # exited processes are left to their owners to wait for (a Popen does; multiprocessing's join
    # would hang forever on a child someone else had collected)
    return [(said[k], "still running after SIGKILL" if k in stuck else "SIGKILL" if k in left else "SIGTERM")
            for k in said]
