"""Cold compiles without numba's quadratic IR copy (for the engine's own compiles:
engine/jit.py puts it in place for each of them and takes it out after).

numba inlines an `inline="always"` callee by deep-copying its IR block by block, each block with
a fresh memo. Every block refers to the function's one Scope, which lists all its variables, so
each block's copy copies the whole scope again: O(blocks x variables) per inlined call site, for
a callee that has itself inlined its own callees (numba issues #8989 and #9204, numba-cuda #688).
On the Binance scanner that was 60% of a 106 s cold compile.

`patch()` makes the deep copies inside one `InlineWorker.inline_ir` call share a memo: every
object is copied once, and the copied blocks share one copied scope, as the blocks they copy
share one. The IR that comes out is the same, so is the machine code (the feeds' tests compare
ticks byte for byte). It is applied only to the code it was written against (the numba version
and the exact copy loop in inline_ir's source); anything else is left alone.

numba's on-disk cache is unaffected: its key (the signature, the CPU, the flags) does not depend on
how the IR was copied, and a process loading the cache compiles nothing, so inlines nothing
(tests/test_first_run.py: a second process compiles nothing, the ITCH parser loaded from the cache).
"""
import copy
import inspect
import re
import threading

_COPY_LOOP = "new_block = copy.deepcopy(the_ir.blocks[block_label])"


class _SharedMemoCopy:
    """Stands in for the `copy` module inside numba's inline_closurecall: deepcopy without a memo
    of its own uses the memo of the inline_ir call in progress."""

    def __init__(self):
        self._local = threading.local()

    def deepcopy(self, x, memo=None):
        if memo is None:
            memo = getattr(self._local, "memo", None)
        return copy.deepcopy(x, memo)

    def __getattr__(self, name):
        return getattr(copy, name)

    def inline_ir(self, original):
        def inline_ir(worker, *args, **kwargs):
            outer = getattr(self._local, "memo", None)
            self._local.memo = {}
            try:
                return original(worker, *args, **kwargs)
            finally:
                self._local.memo = outer
        inline_ir.__wrapped__ = original
        return inline_ir


def patched():
    """Is the shared-memo copy in place in this process?"""
    from numba.core import inline_closurecall as icc
    return isinstance(icc.copy, _SharedMemoCopy)


def patch():
    """Put it in place (engine/jit.py, around a compile of ours); idempotent. Returns whether it is."""
    import numba
    from numba.core import inline_closurecall as icc
    if patched():
        return True
    if not numba.__version__.startswith("0.68."):
        return False
    try:
        src = inspect.getsource(icc)
    except (OSError, TypeError):
        return False
    if _COPY_LOOP not in src or len(re.findall(r"(?<![\w.])copy\.", src)) != 1:
        return False  # not the copy loop this was written against, or the module copies elsewhere too
    shim = _SharedMemoCopy()
    icc.InlineWorker.inline_ir = shim.inline_ir(icc.InlineWorker.inline_ir)
    icc.copy = shim
    return True


def unpatch():
    """numba's own inliner copy again (the benchmark's peer)."""
    from numba.core import inline_closurecall as icc
    if patched():
        icc.InlineWorker.inline_ir = icc.InlineWorker.inline_ir.__wrapped__
        icc.copy = copy
