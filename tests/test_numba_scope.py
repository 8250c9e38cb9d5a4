"""engine/jit.py: the engine's compile-time fixes to numba (numba_inline, numba_ssa, numba_live_map)
and its cross-process compile lock apply to the engine's own compiles only. Another program in the
same environment gets numba as it comes (no entry point, nothing patched before, during or after
it compiles), and a numba other than the one the fixes were written for fails here, loudly."""
import subprocess
import sys

import numba

from tests.conftest import ROOT, engine_env

FIXES = ("engine.numba_inline", "engine.numba_ssa", "engine.numba_live_map")


def _child(code):
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def test_the_fixes_are_written_for_this_numba():
    from engine import jit, numba_inline, numba_live_map, numba_ssa
    assert numba.__version__.startswith(jit.FIXES_FOR), (
        f"numba {numba.__version__}: engine/numba_*.py were written against numba {jit.FIXES_FOR}x; check each "
        "against this numba (their tests) and then update engine/jit.py FIXES_FOR")
    for fix in (numba_inline, numba_ssa, numba_live_map):  # (each recognises its numba's code: applies, undoes)
        assert fix.patch() and fix.patched(), fix.__name__
        fix.unpatch()
        assert not fix.patched(), fix.__name__


def test_numba_is_left_as_it_comes_for_everyone_else():
    """No numba_extensions entry point of ours; a plain numba compile in a process that imported the
    engine patches nothing; the engine's compile has the fixes in place while it runs, and only then."""
    from importlib.metadata import entry_points
    assert [e for e in entry_points(group="numba_extensions") if e.value.startswith(("engine.", "app."))] == []
    code = f"""
import numba, engine, app.cli, feeds.core.sources
import {', '.join(FIXES)}
fixes = [{', '.join(FIXES)}]
state = lambda: "".join("1" if f.patched() else "0" for f in fixes)
numba.njit(lambda x: x + 1)(1)
before = state()
during = []
@numba.njit
def callee(x):
    return x * 2
own = callee.compile
def seen(sig):  # (a callee compiled while the engine's function compiles: part of its compile)
    during.append(state())
    return own(sig)
callee.compile = seen
from engine.jit import njit
@njit
def ours(x):
    return callee(x) + 1
assert ours(2) == 5
after = state()
numba.njit(lambda x: x - 1)(1)
print(before, during[0] if during else "none", after, state())
"""
    before, during, after, plain_after = _child(code)
    assert before == "000" and during == "111" and after == "000" and plain_after == "000", (before, during, after)
