"""Run engine code as another (throwaway) local user, from a test running as root.

The interpreter lives where other users may not read it (a pyenv under /root), so the child
starts as root, imports what the code needs, then drops to the user (setgroups, setgid, setuid)
and only then runs it: from there on it has that user's rights and no more.

  python -m tests.helpers.as_user UID GID engine ARGS...   the `engine` command line
  python -m tests.helpers.as_user UID GID python CODE      a snippet
"""
import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import uuid

# what the engine imports lazily on the paths these tests take (imported while still root)
PRELOAD = ("numpy", "numba", "app.cli", "app.live", "app.daemon", "app.config",
           "app.run_summary", "engine.strategy_build", "engine.strategy_load", "engine.outputs", "engine.locks",
           "engine.isolation", "engine.instruments", "feeds.core.sources", "feeds.synthetic.market", "json", "pwd", "secrets",
           "socket", "errno", "zmq", "fractions")


def can_make_users():
    """None, or why throwaway users cannot be made here."""
    if os.geteuid() != 0:
        return "making a throwaway local user needs root"
    if not (shutil.which("useradd") and shutil.which("userdel") and shutil.which("runuser")):
        return "useradd/userdel/runuser are not installed"
    return None


@contextlib.contextmanager
def throwaway_users(n):
    """n new local users (pwd entries) with no home and no login, removed after."""
    names = [f"ev{uuid.uuid4().hex[:10]}" for _ in range(n)]
    made = []
    try:
        for name in names:
            subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True)
            made.append(name)
        yield [pwd.getpwnam(x) for x in names]
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)


def as_user(user, *cmd):
    """argv running cmd (`engine ...` or `python CODE`) in this interpreter as `user`."""
    return [sys.executable, "-m", "tests.helpers.as_user", str(user.pw_uid), str(user.pw_gid), *cmd]


def shell_as(user, script):
    """A shell script run as `user` (runuser: /bin/sh is readable by everyone)."""
    return subprocess.run(["runuser", "-u", user.pw_name, "--", "/bin/sh", "-c", script],
                          capture_output=True, text=True, check=True)


def _main(argv):
    import importlib
    uid, gid, what, *rest = argv
    for m in PRELOAD:
        importlib.import_module(m)
    import numba
    numba.njit(lambda x: x + 1)(1)  # numba loads its target's modules on first compile: now, while it can
    home = os.environ.get("HOME", "")
    if home and os.stat(home).st_uid == int(uid):  # what the imports made there (cache dirs) is the user's
        for d, dirs, files in os.walk(home):
            for x in [d] + [os.path.join(d, f) for f in dirs + files]:
                os.lchown(x, int(uid), int(gid))
    os.setgroups([])
    os.setgid(int(gid))
    os.setuid(int(uid))
    if what == "engine":
        from app.cli import main
        return main(rest)
    exec(compile(rest[0], "<as_user>", "exec"), {"__name__": "__as_user__"})
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
