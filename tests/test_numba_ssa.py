"""engine/numba_ssa.py: numba's SSA rebuild rewrites only the blocks that name the variable it fixes,
in every process of the engine (the numba_extensions entry point), and compiles the same machine
code as numba's own: children compile tests/helpers/ssa_target.py both ways."""
import subprocess
import sys

from tests.conftest import ROOT, engine_env


def _compile(how):
    r = subprocess.run([sys.executable, "-m", "tests.helpers.ssa_target", how], cwd=ROOT, env=engine_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    llvm, rest = r.stdout.strip().split(" ", 1)
    result, blocks, patched = rest.rsplit(" ", 2)
    return llvm, result, int(blocks), patched == "True"


def test_every_engine_process_rebuilds_ssa_with_the_index():
    code = "from numba import njit\nfrom engine.numba_ssa import patched\nnjit(lambda x: x + 1)(1)\nprint(patched())\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == "True", r.stderr


def test_the_same_llvm_ir_and_results_as_numbas_own_rebuild_from_fewer_block_rewrites():
    ours, stock = _compile("ours"), _compile("stock")
    assert ours[3] and not stock[3]  # (the child really compiled each way: with both extensions, or neither)
    assert ours[0] == stock[0], "the engine's SSA rebuild changed the compiled code"
    python = subprocess.run([sys.executable, "-m", "tests.helpers.ssa_target", "python"], cwd=ROOT,
                            env=engine_env(NUMBA_DISABLE_JIT="1"), capture_output=True, text=True, timeout=120)
    assert ours[1] == stock[1] == python.stdout.strip(), python.stderr[-2000:]
    assert ours[2] * 3 < stock[2], (ours[2], stock[2])  # most blocks name neither variable they fix
