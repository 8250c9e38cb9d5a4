@_njit(nogil=True, inline='always', cache=True)
def call_decide_targets(state, score, targets, params, me, uids, ubook, uist, shared):
    """A UNIVERSE strategy's decide over its members' targets (changed in place)."""
    decide(state, score, targets, params, _Universe(me, UNIVERSE_N, uids, ubook, uist, shared, DEPTH))
