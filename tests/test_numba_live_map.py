"""engine/numba_live_map.py: numba's liveness over bitsets gives numba's own live map, set for set,
on every call of a real compile, in every process of the engine; the machine code that comes out
is compared in tests/test_numba_ssa.py (its "stock" child undoes this extension too)."""
import subprocess
import sys

from tests.conftest import ROOT, engine_env


def test_every_engine_process_finds_liveness_over_bitsets():
    code = ("from numba import njit\nfrom engine.numba_live_map import patched\n"
            "njit(lambda x: x + 1)(1)\nprint(patched())\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == "True", r.stderr


def test_every_live_map_of_a_compile_equals_numbas_own():
    r = subprocess.run([sys.executable, "-m", "tests.helpers.ssa_target", "live-map"], cwd=ROOT, env=engine_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    calls, differ = map(int, r.stdout.split())
    assert calls >= 10 and differ == 0, (calls, differ)
