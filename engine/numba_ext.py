"""numba's `numba_extensions` init hook (pyproject.toml; numba runs only the entry point named
`init`, before its first compile): inlining without the quadratic IR copy (engine/numba_inline.py),
SSA rewrites of only the blocks that name a variable (engine/numba_ssa.py), liveness over bitsets
(engine/numba_live_map.py) and one compile per cold cached function across processes
(engine/numba_lock.py)."""


def init():
    from . import numba_inline, numba_live_map, numba_lock, numba_ssa
    numba_inline.patch()
    numba_ssa.patch()
    numba_live_map.patch()
    numba_lock.patch()
