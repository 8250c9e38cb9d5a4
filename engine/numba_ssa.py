"""SSA reconstruction that rewrites only the blocks naming the variable it fixes (for the engine's own
compiles: engine/jit.py puts it in place for each of them and takes it out after).

numba rebuilds SSA form one re-assigned variable at a time, and for each one rewrites every block
of the function twice (fresh names for its definitions, then every use pointed at the definition
that reaches it): O(variables x statements). Inlining makes both large: opening a `binance-live://`
source rebuilds ~1,200 such variables, and the rewrites took 14 of its 137 s cold compile (1 s here;
bench/cold_compile.py).

A block that does not name the variable comes out of both rewrites unchanged, statement for
statement: the handlers change only assignments to it and statements that use it, and the phi
nodes it needs are added afterwards, by label. `patch()` indexes once, per call of numba's
`_run_ssa`, which names each block mentions; a rewrite then runs numba's own handlers on the
blocks that name the variable, in numba's order (so fresh names and phis come out the same), and
hands the others on as they are. Fixing one variable never changes which other variables a block
names (its phis take only its own definitions, and its fresh names are new: `Scope.redefine` skips
the scope's names, so the index is used only when the scope holds every name the blocks mention).
`_run_ssa` works on its own copy of the blocks, so a phi added to a block handed on never reaches
the caller's blocks. The IR that comes out is the same, so is the machine code
(tests/test_numba_ssa.py).

Applied only to the source it was written against (numba 0.68, its ssa.py by hash); anything else
is left alone. numba's on-disk cache is unaffected (a process loading the cache compiles nothing).
"""
import hashlib
import inspect
import threading

# sha256 of numba 0.68.1's numba/core/ssa.py: the handlers and rewrite loop this relies on
SSA_SHA256 = "d20accd92757fef663a43e78d0ee88fe01d9333379eda463c9e15f0e7785e490"

_local = threading.local()


def _mentions(blocks):
    """label -> the names of the variables its statements mention (ir.Stmt.list_vars: what the
    SSA handlers look at, for assignments their target too)."""
    return {label: {v.name for stmt in blk.body for v in stmt.list_vars()} for label, blk in blocks.items()}


def _own(blocks):
    from numba.core import ir
    out = {}
    for label, blk in blocks.items():
        b = ir.Block(scope=blk.scope, loc=blk.loc)
        b.body = list(blk.body)
        out[label] = b
    return out


def _run_ssa(original):
    def run_ssa(blocks):
        if not blocks:
            return original(blocks)
        blocks = _own(blocks)
        outer = getattr(_local, "mentions", None)
        mentions = _mentions(blocks)
        scope = next(iter(blocks.values())).scope.localvars
        _local.mentions = mentions if all(n in scope for m in mentions.values() for n in m) else None
        try:
            return original(blocks)
        finally:
            _local.mentions = outer
    run_ssa.__wrapped__ = original
    return run_ssa


def _run_block_rewrite(original):
    def run_block_rewrite(blocks, states, handler):
        mentions = getattr(_local, "mentions", None)
        name = states.get("varname")
        if mentions is None or name is None:
            return original(blocks, states, handler)
        out = {}
        for label, blk in blocks.items():
            m = mentions.get(label)
            if m is None or name in m:
                out.update(original({label: blk}, states, handler))
            else:
                out[label] = blk
        return out
    run_block_rewrite.__wrapped__ = original
    return run_block_rewrite


def source_sha256():
    from numba.core import ssa
    try:
        return hashlib.sha256(inspect.getsource(ssa).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def patched():
    """Is the index in place in this process?"""
    from numba.core import ssa
    return getattr(ssa._run_ssa, "__wrapped__", None) is not None


def patch():
    """Put it in place (engine/jit.py, around a compile of ours); idempotent. Returns whether it is."""
    import numba
    from numba.core import ssa
    if patched():
        return True
    if not numba.__version__.startswith("0.68.") or source_sha256() != SSA_SHA256:
        return False
    ssa._run_block_rewrite = _run_block_rewrite(ssa._run_block_rewrite)
    ssa._run_ssa = _run_ssa(ssa._run_ssa)
    return True


def unpatch():
    """numba's own rebuild again (the benchmark's and the tests' peer)."""
    from numba.core import ssa
    if patched():
        ssa._run_ssa = ssa._run_ssa.__wrapped__
        ssa._run_block_rewrite = ssa._run_block_rewrite.__wrapped__
