@_njit(nogil=True, inline='always', cache=True)
def call_on_tick(state, book, tick, row, params, inst, me, uids, ubook, uist, shared):
    """on_tick of a UNIVERSE strategy: the member it names, as the run's instrument to score, or -1."""
    r = on_tick(state, book, tick, row, params, _Universe(me, UNIVERSE_N, uids, ubook, uist, shared, DEPTH))
    return uids[r] if 0 <= r < UNIVERSE_N else -1
