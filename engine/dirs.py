"""The engine's three per-user directories, each chosen here and only here:

- cache ($XDG_CACHE_HOME/engine, default ~/.cache/engine): numba's machine code, strategy hosts,
  default models. Rebuilt when missing.
- state ($XDG_STATE_HOME/engine, default ~/.local/state/engine): what outlives a run (signal
  files, latency logs, the zmq keypair).
- runtime (/run/engine for root, else $XDG_RUNTIME_DIR/engine, else /tmp/engine-UID): what lives
  as long as an engine (locks, the runtime file, the control socket, the control token). One
  directory for all of them, so a client that finds the runtime file finds the token and the
  socket beside it; never /dev/shm (anyone can plant a file or a link there).

Every one is 0700 and this user's: cache and state are put back to 0700 if wider; a runtime
directory that is not private is refused (its files decide who controls the engine)."""
import os
import stat


def private_dir(d, fix="remove it and start again"):
    """Directory d, made 0700 if need be (and put back to 0700 if it is wider: what is kept there is
    this user's only); refused, saying `fix`, unless it is a directory of this user."""
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise RuntimeError(f"{d} is not a directory of uid {os.geteuid()} (owner uid {st.st_uid}): {fix}")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d


def _home(var, *default):
    return os.environ.get(var) or os.path.join(os.path.expanduser("~"), *default)


def cache_dir(*parts):
    """The engine's per-user cache, then `parts` (the root made 0700 and kept so: what is cached,
    models trained on the user's data, compiled strategies, is this user's only)."""
    root = os.path.join(_home("XDG_CACHE_HOME", ".cache"), "engine")
    private_dir(root, "it is the engine's cache: remove it, or set XDG_CACHE_HOME")
    return os.path.join(root, *parts)


def state_path(*parts):
    """A path under the state directory (nothing created: outputs make their own directories)."""
    return os.path.join(_home("XDG_STATE_HOME", ".local", "state"), "engine", *parts)


def state_dir():
    """The state directory itself, created 0700 (the zmq keypair is kept in it)."""
    return private_dir(state_path())


def runtime_dirs():
    """Every runtime directory an engine of this user may use, the one runtime_dir() picks first
    when it is root: an engine started by systemd with XDG_RUNTIME_DIR=/run uses /run/engine while
    a shell of the same user has another XDG_RUNTIME_DIR or none (clients look in all of them)."""
    out = ["/run/engine"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        out.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "engine"))
    out.append(f"/tmp/engine-{os.geteuid()}")
    seen, dirs = set(), []
    for d in map(os.path.abspath, out):
        if d not in seen:
            seen.add(d)
            dirs.append(d)
    return dirs


def _runtime_choice():
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        return "/run/engine"
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "engine")
    return f"/tmp/engine-{os.geteuid()}"


def runtime_dir():
    """The runtime directory, created 0700 if need be, refused unless it is ours and private."""
    d = _runtime_choice()
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise RuntimeError(f"runtime directory {d} is not a private directory of uid {os.geteuid()} "
                           f"(mode {st.st_mode & 0o777:04o}, owner {st.st_uid}): remove it and start again")
    return d


def runtime_path(name):
    """A file in the runtime directory (the directory made and checked first)."""
    return os.path.join(runtime_dir(), name)
