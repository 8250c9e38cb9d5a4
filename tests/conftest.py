import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
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


def pytest_collection_finish(session):
    """The fuzz test's processes start now, beside the rest of the suite (tests/helpers/fuzz_jobs.py)."""
    if any(item.nodeid.startswith("tests/test_fuzz.py::test_parsers_survive") for item in session.items):
        from tests.helpers import fuzz_jobs
        fuzz_jobs.start()


def pytest_sessionfinish(session):
    from tests.helpers import fuzz_jobs
    fuzz_jobs.stop()


@pytest.fixture
def shm_name(request):
    """A unique /dev/shm name for one test; every file starting with it is removed after."""
    name = f"enginetest-{os.getpid()}-{next(_counter)}"
    yield name
    for p in Path("/dev/shm").glob(name + "*"):
        p.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def default_model():
    """The real default model (built once, cached under $XDG_CACHE_HOME like a user's)."""
    from models.default import default_model_dir
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
