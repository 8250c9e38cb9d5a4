"""engine/numba_ssa.py: numba's SSA rebuild rewrites only the blocks that name the variable it fixes,
in the engine's own compiles (engine/jit.py), and compiles the same machine code as numba's own:
children compile tests/helpers/ssa_target.py both ways."""
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


def test_the_same_llvm_ir_and_results_as_numbas_own_rebuild_from_fewer_block_rewrites():
    ours, stock = _compile("ours"), _compile("stock")
    assert ours[3] and not stock[3]  # (the child really compiled each way: as the engine's, or numba's own)
    assert ours[0] == stock[0], "the engine's SSA rebuild changed the compiled code"
    python = subprocess.run([sys.executable, "-m", "tests.helpers.ssa_target", "python"], cwd=ROOT,
                            env=engine_env(NUMBA_DISABLE_JIT="1"), capture_output=True, text=True, timeout=120)
    assert ours[1] == stock[1] == python.stdout.strip(), python.stderr[-2000:]
    assert ours[2] * 3 < stock[2], (ours[2], stock[2])  # most blocks name neither variable they fix


def _loops(x, n):
    a, b, c = 0, 1, 2
    for i in range(n):
        if x[i] > 0:
            a = a + x[i]
            c = a
        elif x[i] < -3:
            b = b * 2
            while b > 100:
                b -= 7
        else:
            a, b = b, a
    return a, b, c


def _undefined_on_a_path(n):
    if n > 3:
        y = 1
    for i in range(n):
        z = y + i
        while z:
            z -= 1
            if z == 5:
                break
            y += z
    return y


def _nested_continue(n):
    acc = 0
    for i in range(n):
        for j in range(i):
            acc += j
            if acc > 50:
                acc = 0
                continue
            acc -= 1
    return acc


def test_the_rebuilt_ir_is_numbas_own_on_loops_breaks_and_a_variable_undefined_on_a_path():
    """In process, numba's front end only: the IR the rebuild leaves, its warnings (a variable
    undefined on a path) and its scope, each way; the caller's blocks come out as they went in."""
    import io
    import warnings

    from numba.core import compiler, ssa

    from engine import numba_ssa
    from tests.helpers import ssa_target
    assert numba_ssa.patch()
    ours, stock = ssa._run_ssa, ssa._run_ssa.__wrapped__

    def rebuild(fn, run):
        func_ir = compiler.run_frontend(fn)
        given = {k: (b, list(b.body)) for k, b in func_ir.blocks.items()}
        ssa._run_ssa = run
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                func_ir = ssa.reconstruct_ssa(func_ir)
        finally:
            ssa._run_ssa = ours
        out = io.StringIO()
        func_ir.dump(file=out)
        assert all(b.body == body for b, body in given.values())  # (phis went into copies)
        scope = next(iter(func_ir.blocks.values())).scope
        return out.getvalue(), [str(w.message) for w in said], sorted(scope.localvars._con)

    fns = [_loops, _undefined_on_a_path, _nested_continue, ssa_target._pass.py_func, ssa_target.target_py]
    try:
        for fn in fns:
            a, b = rebuild(fn, ours), rebuild(fn, stock)
            assert a == b, fn.__name__
            assert " = phi(" in a[0], fn.__name__  # (there was SSA to rebuild)
    finally:
        numba_ssa.unpatch()  # (numba as it comes for the rest of this process)
