@_njit(nogil=True, inline='always', cache=True)
def call_decide_targets(state, score, targets, params, me, uids, ubook, uist, shared):
    """(decide takes one position: DECIDE_TARGETS is 0 and this is never called)"""
    return None
