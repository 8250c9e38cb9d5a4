@_njit(nogil=True, inline='always', cache=True)
def decide(state, score, position, params):
    return _hysteresis(position, score, params.enter_long, params.exit_long, params.enter_short,
                       params.exit_short)

