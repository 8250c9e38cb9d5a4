import functools
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_counter = itertools.count()


def engine_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def engine_cmd(*args):
    return [sys.executable, "-m", "app", *args]


def spawn(args, **kw):
    return subprocess.Popen(args, cwd=ROOT, env=engine_env(), **kw)


class LeftRunningWarning(UserWarning):
    """A test ended with processes of its own still running: the `reap` fixture ended them."""


_config = None
FUZZ_TEST = "tests/test_fuzz.py::test_parsers_survive"


def pytest_configure(config):
    global _config
    _config = config
    from tests.helpers import reap
    reap.tag_children()  # an engine whose parent died still says whose it is (tests/helpers/reap.py)
    _zmq_contexts_never_block()


def _zmq_contexts_never_block():
    """A zmq context a failed test leaves to the garbage collector must not hang a later test:
    its __del__ closes the sockets with their linger (default: forever while a message is unsent to
    a peer that is gone) and term() waits for them, wherever the collection happens. In this test
    process every context's sockets linger 0 (the engines under test are other processes, with
    their own settings)."""
    import zmq
    init = zmq.Context.__init__

    def linger_zero(self, *a, **kw):
        init(self, *a, **kw)
        self.setsockopt(zmq.LINGER, 0)
    zmq.Context.__init__ = linger_zero
    # and a context the collector finds is never terminated from __del__: term() still waited forever
    # (seen under xdist, in whichever later test the collection ran) for a socket another thread of
    # that test kept; the worker process ends soon enough to take the context with it
    zmq.Context.__del__ = lambda self: None


# pytest-xdist (`make test`: -n 2 --dist loadgroup) hands out whole groups: each module is one (its
# module fixtures, a trained model or a converted capture, are then made once), and the modules
# that take the strategy core (an engine's per-core lock), pin or spin a thread or set a real-time
# policy are all one group, run one after another in one worker, so two never meet on the core.
# A module joins that group by what it does (its source names one of these), so a new one needs no
# list. (The groups are made by the scheduler below, from the test ids: xdist 3.8's own
# xdist_group marks are lost under pytest 9, which no longer reads the ids xdist rewrites.)
CORE_GROUP = "core"
CORE_WORDS = ("strategy_core", "--core", "isolate", "SCHED_", "--policy", "sched_setaffinity", "spinner")


@functools.lru_cache(maxsize=None)
def xdist_group(module):
    """The group of a test module (its path from the root): CORE_GROUP or the module itself."""
    text = (ROOT / module).read_text()
    return CORE_GROUP if any(w in text for w in CORE_WORDS) else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return xdist_group(nodeid.split("::", 1)[0])
    return ByGroup(config, log)


def session_dir(name):
    """A directory every process of this pytest session shares (the xdist controller and its
    workers alike): the session's base temporary directory, or its parent in a worker."""
    base = _config._tmp_path_factory.getbasetemp()
    d = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    d.mkdir(exist_ok=True)
    return d


def converted(uri, suffix=".ticks"):
    """What `engine convert URI --out FILE --quiet` writes, converted once in the session (by
    whichever xdist worker asks first; the others wait on its lock) and shared: read it, or copy
    it to change it (tests/test_replay.py ticks_file)."""
    import fcntl
    import hashlib
    d = session_dir("converted")
    key = hashlib.sha256(f"{uri} {suffix}".encode()).hexdigest()[:16]
    out = d / f"{key}{suffix}"
    with open(d / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            part = d / f"{key}.part{suffix}"
            r = subprocess.run(engine_cmd("convert", uri, "--out", str(part), "--quiet"), cwd=ROOT, env=engine_env(),
                               capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, r.stderr
            part.rename(out)
    return out


def pytest_collection_modifyitems(items):
    """The fuzz module last: its test waits for the fuzz processes, which take only idle CPU, and
    early in the session (where its name put it) it waited ~3 minutes of a worker for them; by the
    end they have long finished. (Under xdist each worker's order is the scheduler's.)"""
    module = FUZZ_TEST.split("::")[0]
    items.sort(key=lambda i: i.nodeid.startswith(module))


def pytest_collection_finish(session):
    """The fuzz test's processes start now, beside the rest of the suite (tests/helpers/fuzz_jobs.py);
    under xdist the controller starts them (pytest_xdist_node_collection_finished)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and any(i.nodeid.startswith(FUZZ_TEST) for i in session.items):
        from tests.helpers import fuzz_jobs
        fuzz_jobs.start(session_dir("fuzz"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    if any(i.startswith(FUZZ_TEST) for i in ids):
        from tests.helpers import fuzz_jobs
        fuzz_jobs.start(session_dir("fuzz"))


def pytest_sessionfinish(session):
    from tests.helpers import fuzz_jobs
    fuzz_jobs.stop()


_shm_names = []  # the shm_name of the running test, removed again once `reap` has ended its processes


def _remove_shm(name):
    for p in Path("/dev/shm").glob(name + "*"):
        p.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def reap():
    """Every process a test started and left running (an engine, a feed, a replay; pass or fail)
    is ended and waited for after it, and named in a LeftRunningWarning, so no later test meets
    its core lock, ring or port (tests/helpers/reap.py)."""
    from tests.helpers import reap as r
    before = r.mine()
    _shm_names.clear()
    yield
    ended = r.reap(before)
    for name in _shm_names:  # what a killed engine could not remove
        _remove_shm(name)
    if ended:
        import warnings
        warnings.warn(LeftRunningWarning("left running, ended by the reap fixture: " +
                                         "; ".join(f"{what}: {how}" for what, how in ended)))


@pytest.fixture
def shm_name(request):
    """A unique /dev/shm name for one test; every file starting with it is removed after."""
    name = f"enginetest-{os.getpid()}-{next(_counter)}"
    _shm_names.append(name)
    yield name
    _remove_shm(name)


@pytest.fixture(scope="session")
def default_model():
    """The real default model (built once, cached under $XDG_CACHE_HOME like a user's; one xdist
    worker builds it while the others wait on the lock, then find it built)."""
    import fcntl
    from models.default import default_model_dir
    with open(session_dir("default-model") / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return default_model_dir()


def builtin_host():
    """The built-in strategy (microstructure) compiled into the host loops."""
    from engine.strategy_build import load_host
    return load_host("microstructure")


def builtin_features():
    from engine.strategy_load import load
    return load("microstructure").features


def strategy_rows(uri, count=0, host=None):
    """(X, instrument, mid, tick index) of a strategy (default: the built-in one) over a source,
    exactly as training builds them."""
    from models.training import source_ticks
    host = host or builtin_host()
    words, k, levels, _ = source_ticks(uri, count, host.strategy)
    return host.featurize(words, k, levels)


def strategy_core():
    return sorted(os.sched_getaffinity(0))[-1]
