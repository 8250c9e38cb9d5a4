@_njit(nogil=True, inline='always', cache=True)
def call_on_tick(state, book, tick, row, params, inst, me, uids, ubook, uist, shared):
    """on_tick of a strategy with no UNIVERSE: the instrument to score (its own) or -1."""
    return inst if on_tick(state, book, tick, row, params) else -1
