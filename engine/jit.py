"""The engine's `njit`: numba's, with what makes the engine's cold compiles short and shared, for
the engine's own functions only. numba is left as it is for every other program in the same
environment (no entry point, no patch that outlives a compile of ours).

Each function decorated here gets a dispatcher of numba's own, whose `compile` (what numba calls
for a signature it has not compiled, this dispatcher's or, by type inference, as a callee) is
wrapped to, under numba's global compiler lock:
  - take the function's cross-process cache lock (engine/numba_lock.py: one process compiles a
    cold cached function, the others wait and load it);
  - put in place, for the length of that compile only, the three compile-time fixes written
    against this numba (engine/numba_inline.py, numba_ssa.py, numba_live_map.py: the same IR and
    machine code, faster), and take them out again when the outermost compile of ours returns.
Callees compiled while one of ours compiles (a user's strategy functions inside the loop) are part
of that compile and get the same. Which numba the fixes were written for is pinned: on another one
they are left out, and tests/test_numba_scope.py fails loudly (FIXES_FOR) rather than anything
changing behind the engine's back.
"""
import threading

import numba

from . import numba_inline, numba_live_map, numba_lock, numba_ssa

FIXES_FOR = "0.68."  # the numba the compile-time fixes were written against
_depth = threading.local()  # (our compiles in progress on this thread: the fixes stay for the outermost)
FIXES = (numba_inline, numba_ssa, numba_live_map)


def njit(*args, **kw):
    """numba.njit for the engine's own functions (the same options; no eager signatures)."""
    if args and callable(args[0]):
        return ours(numba.njit(args[0], **kw))
    return lambda fn: ours(numba.njit(*args, **kw)(fn))


def ours(dispatcher):
    """A numba dispatcher whose compiles are the engine's (see the module's docstring)."""
    if getattr(dispatcher, "_engine_compile", False):
        return dispatcher
    compile_ = dispatcher.compile  # (numba's own, bound)

    def compile(sig):
        from numba.core.compiler_lock import global_compiler_lock
        with global_compiler_lock:  # (an RLock: numba's compile takes it again)
            outer = getattr(_depth, "n", 0)
            applied = []
            if outer == 0 and numba.__version__.startswith(FIXES_FOR):
                applied = [f for f in FIXES if not f.patched() and f.patch()]
            _depth.n = outer + 1
            fd = numba_lock.acquire_for(dispatcher)
            try:
                return compile_(sig)
            finally:
                numba_lock.release(fd)
                _depth.n = outer
                for f in reversed(applied):
                    f.unpatch()

    dispatcher.compile = compile
    dispatcher._engine_compile = True
    return dispatcher
