"""The risk gate (engine/risk.py) on hand-built decisions: every rule fires, clips or refuses as
its mode says, is counted, and never keeps a position on (a reduction always passes)."""
import numpy as np
import pytest

from engine import risk as R

MID = 100 * 10**9  # 100.0 in price units
S = 1_000_000_000


def state(n=1, **limits):
    rlim, rb, rg = R.new_state(n)
    run = {k[4:]: v for k, v in limits.items() if k.startswith("run_")}
    R.set_limits(rlim, 0, **{k: v for k, v in limits.items() if not k.startswith("run_")})
    R.set_limits(rlim, n, **run)
    return rlim, rb, rg


def go(st, prev, want, t=0, inst=0, mid=MID, mode=R.MODE_CLIP):
    rlim, rb, rg = st
    out, rules = R.gate(rlim, rb, rg, inst, prev, want, mid, t, mode)
    return int(out), {R.RULES[b] for b in range(len(R.RULES)) if rules & (1 << b)}


def counts(st):
    return {name: int(st[2][R.RG_RULES + b]) for b, name in enumerate(R.RULES) if st[2][R.RG_RULES + b]}


def test_no_limits_and_off_pass_everything_and_count_nothing():
    st = state()
    assert go(st, 0, 7) == (7, set()) and go(st, 7, -1000) == (-1000, set())
    tight = state(max_position=1)
    assert go(tight, 0, 5, mode=R.MODE_OFF) == (5, set())
    assert counts(st) == counts(tight) == {}


@pytest.mark.parametrize("mode, want", [(R.MODE_CLIP, 3), (R.MODE_REFUSE, 0)])
def test_position_limit_clips_or_refuses(mode, want):
    st = state(max_position=3)
    assert go(st, 0, 5, mode=mode) == (want, {"position"})
    assert go(st, 0, -2, mode=mode) == (-2, set())
    assert counts(st) == {"position": 1}


def test_a_reduction_always_passes_killed_or_out_of_tokens():
    st = state(max_position=1, max_rate=1)
    st[2][R.RG_KILLED] = 1
    assert go(st, 5, 2, t=0) == (2, set())  # over the limit, killed: towards flat goes
    assert go(st, 2, 0, t=1) == (0, set())  # (the bucket's one token is spent: still goes)
    assert go(st, 0, 1, t=2) == (0, {"killed"})
    assert go(st, 3, 4, t=3) == (1, {"killed", "position"})  # more asked over a lowered limit: down to it
    assert go(st, 3, -4, t=4) == (0, {"killed"})  # a reversal while killed: flat only


def test_a_reversal_too_soon_after_the_last_goes_flat():
    st = state(min_flip_ms=100)
    assert go(st, 1, -1, t=0) == (-1, set())  # the first reversal
    assert go(st, -1, 1, t=50_000_000) == (0, {"flip"})  # 50 ms later: flat instead
    assert go(st, 0, 1, t=60_000_000) == (1, set())  # from flat is no reversal
    assert go(st, 1, -1, t=100_000_001) == (-1, set())  # 100 ms after the last reversal
    assert counts(st) == {"flip": 1}


def test_notional_limits_use_the_multiplier_and_the_mid():
    st = state(max_notional=250.0, multiplier=1.0)
    assert go(st, 0, 5) == (2, {"notional"})  # 2 x 100.0 fits, 3 do not
    st = state(max_notional=250.0, multiplier=0.5)
    assert go(st, 0, -9) == (-5, {"notional"})
    assert go(st, -5, -6, mid=0) == (-5, {"no_price"})  # a void book: no increase without a price
    assert go(st, -5, -3, mid=0) == (-3, set())
    assert go(state(max_notional=1e9), 0, 1) == (0, {"no_price"})  # no multiplier: fail closed


def test_gross_notional_counts_every_instrument_held():
    st = state(n=2, run_max_notional=300.0)
    R.set_limits(st[0], 1, multiplier=1.0)
    R.set_limits(st[0], 0, multiplier=1.0)
    assert go(st, 0, 2, inst=0) == (2, set())  # 200 held
    assert go(st, 0, -3, inst=1) == (-1, {"gross"})  # 100 left
    assert go(st, 2, 0, inst=0) == (0, set())
    assert go(st, -1, -3, inst=1) == (-3, set())  # room again


def test_a_flood_of_decisions_is_cut_at_the_rate():
    st = state(max_rate=10)  # 10 a second, a burst of 10
    out, passed = 0, 0
    for k in range(2000):  # one more unit every ms for 2 s: each adds exposure
        new, rules = go(st, out, out + 1, t=k * 1_000_000)
        passed += new != out
        assert rules <= {"rate"}
        out = new
    assert passed == 10 + 19, passed  # the burst, then one every 100 ms (at 100, 200, ... 1900 ms)
    assert counts(st)["rate"] == 2000 - passed


def test_the_rate_is_exact_to_the_ns_and_a_reduction_empties_the_bucket():
    st = state(max_rate=10, burst=1)  # one signal per 100 ms, no burst
    assert go(st, 0, 1, t=0) == (1, set())
    assert go(st, 1, 2, t=100 * 10**6 - 1) == (1, {"rate"})  # a ns early
    assert go(st, 1, 2, t=100 * 10**6) == (2, set())  # on the dot (a refill by elapsed x rate rounds)
    assert go(st, 2, 0, t=150 * 10**6) == (0, set())  # no token left: a reduction goes anyway...
    assert go(st, 0, 1, t=200 * 10**6) == (0, {"rate"})  # ...and leaves the bucket empty, not in debt
    assert go(st, 0, 1, t=250 * 10**6) == (1, set())
    assert go(st, 1, 2, t=10 * S) == (2, set()) and go(st, 2, 3, t=10 * S) == (2, {"rate"})  # idle: one, no more
    assert go(st, 2, 3, t=10 * S - 1) == (2, {"rate"})  # a decision stamped earlier than the last: no refill


def test_the_run_rate_spans_instruments():
    st = state(n=3, run_max_rate=5)
    got = [go(st, 0, 1, inst=i % 3, t=i)[0] for i in range(9)]
    assert sum(got) == 5 and counts(st) == {"rate": 4}


def test_the_same_decisions_give_the_same_cuts():
    rng = np.random.default_rng(7)
    wants = rng.integers(-6, 7, 500)
    ts = np.cumsum(rng.integers(0, 300_000_000, 500))

    def run():
        st = state(max_position=4, max_notional=350.0, multiplier=1.0, max_rate=3, min_flip_ms=500)
        pos, outs = 0, []
        for w, t in zip(wants, ts):
            pos = go(st, pos, int(w), t=int(t))[0]
            outs.append(pos)
        return outs, counts(st)
    a, b = run(), run()
    assert a == b and len(a[1]) >= 3, a[1]


def test_limits_are_checked():
    rlim, _, _ = R.new_state(1)
    with pytest.raises(ValueError, match=">= 0"):
        R.set_limits(rlim, 0, max_position=-1)
    R.set_limits(rlim, 0, max_rate=0.5)
    assert rlim[0, R.RL_BURST] == 1.0 and rlim[0, R.RL_RATE] == 0.5


def test_off_still_stops_entries_when_killed():
    st = state(max_position=1)
    st[2][R.RG_KILLED] = R.KILL_REASONS.index("command")
    assert go(st, 0, 5, mode=R.MODE_OFF) == (0, {"killed"})  # (no limit applied, but no new exposure)
    assert go(st, 4, 2, mode=R.MODE_OFF) == (2, set())


def test_a_refused_target_is_recorded_once_until_a_signal_goes_out():
    rlim, rb, rg = R.new_state(1)
    assert R.record_refused(rb, 0, 5, 0, 0, 1 << R.R_RATE)       # first refusal of 5: recorded
    assert not R.record_refused(rb, 0, 5, 0, 0, 1 << R.R_RATE)   # asked again: counted by the gate, not recorded
    assert R.record_refused(rb, 0, -5, 0, 0, 1 << R.R_RATE)      # another target: recorded
    assert R.record_refused(rb, 0, 5, 3, 0, 1 << R.R_POSITION)   # a clipped one goes out (always a record)
    assert R.record_refused(rb, 0, 5, 3, 3, 1 << R.R_RATE)       # and forgets: 5 refused again is new
    assert not R.record_refused(rb, 0, 5, 3, 3, 0)               # (nothing cut, nothing moved: no record)


def test_flags_say_what_the_gate_did():
    pos = 1 << R.R_POSITION
    assert R.signal_flags(0, 5, 0, 0) == 0 and R.describe(0) == "normal"
    f = R.signal_flags(pos | (1 << R.R_GROSS), 3, 0, 0)
    assert R.describe(f) == "clipped: position, gross"
    assert R.describe(R.signal_flags(1 << R.R_RATE, 0, 0, 0)) == "refused: rate"
    assert R.describe(R.signal_flags(1 << R.R_KILLED, 0, 0, 1)) == "killed, refused: killed"
    from engine.records import SIGNAL_FLAG_KILLED
    assert R.describe(SIGNAL_FLAG_KILLED) == "killed"


def test_configure_prices_known_instruments_and_names_bad_overrides():
    from engine.instruments import make, unknown
    rlim, rb, rg = R.new_state(3)
    lim = R.Limits(mode="refuse", max_position=4, max_notional=1000.0, max_gross=1500.0, max_rate=2.0,
                   instruments=(R.parse_instrument("BINANCE-F:ETHUSDT:max_position=1,min_flip_ms=250"),))
    R.configure(rlim, rg, ["BTCUSDT", "ETHUSDT", "X"], [make("BTCUSDT", multiplier=1e-5), make("ETHUSDT"), unknown("X")],
                lim)
    assert rg[R.RG_MODE] == R.MODE_REFUSE
    assert rlim[0, R.RL_MULT] == 1e-5 and rlim[1, R.RL_MULT] == 1.0 and rlim[2, R.RL_MULT] == 0.0  # unknown: none
    assert rlim[1, R.RL_MAX_POS] == 1 and rlim[1, R.RL_MIN_FLIP_NS] == 250e6 and rlim[0, R.RL_MAX_POS] == 4
    assert rlim[3, R.RL_MAX_NOTIONAL] == 1500.0 and rlim[0, R.RL_RATE] == 2.0 and rlim[0, R.RL_BURST] == 2.0
    out, rules = R.gate(rlim, rb, rg, 2, 0, 1, MID, 0, R.MODE_CLIP)  # unknown instrument, a notional limit set
    assert out == 0 and rules == 1 << R.R_NO_PRICE
    R.set_multipliers(rlim, [None, None, make("X", multiplier=2.0)])  # named later: priced from then on
    assert rlim[2, R.RL_MULT] == 2.0
    with pytest.raises(ValueError, match="NOPE.*BTCUSDT, ETHUSDT, X"):
        R.configure(rlim, rg, ["BTCUSDT", "ETHUSDT", "X"], None, R.Limits(instruments=(("NOPE", {"max_position": 1}),)))
    for bad in ("BTCUSDT", "BTCUSDT:", ":max_position=1", "BTCUSDT:max_position", "BTCUSDT:leverage=2",
                "BTCUSDT:max_position=-1", "BTCUSDT:max_rate=inf", "BTCUSDT:max_rate=x"):
        with pytest.raises(ValueError):
            R.parse_instrument(bad)


def test_a_reversal_on_another_venues_earlier_clock_is_no_flip():
    """The deciding tick's exchange time may run back (a UNIVERSE member decided on another venue's
    tick): the instrument's own clock never does, so min_flip 0 cuts nothing, and a real limit is
    measured on it."""
    st = state(min_flip_ms=0)
    assert go(st, 1, -1, t=2_000_000_000) == (-1, set())
    assert go(st, -1, 1, t=1_000_000_000) == (1, set())  # (a second earlier on another clock: no flip cut)
    st = state(min_flip_ms=100)
    assert go(st, 1, -1, t=2_000_000_000) == (-1, set())
    assert go(st, -1, 1, t=1_000_000_000) == (0, {"flip"})  # (0 ms on its own clock)
    assert go(st, 0, 1, t=2_100_000_001) == (1, set())


def test_a_gross_limit_never_adds_money_across_currencies():
    from engine.instruments import make
    usd, usdt = make("ESH4", "CME", multiplier=50.0, currency="USD"), make("BTCUSDT", "BINANCE", currency="USDT")
    rlim, rb, rg = R.new_state(2)
    with pytest.raises(ValueError, match="USD, USDT: money is never added across currencies"):
        R.configure(rlim, rg, ["ESH4", "BTCUSDT"], [usd, usdt], R.Limits(max_gross=1e6))
    R.configure(rlim, rg, ["ESH4", "BTCUSDT"], [usd, usdt], R.Limits(max_notional=1e6))  # (each in its own: fine)
    rlim, rb, rg = R.new_state(2)
    R.configure(rlim, rg, ["ESH4", ""], [usd, None], R.Limits(max_gross=1e6))
    # an instrument named later in another currency stays unpriced: refused new exposure, and said
    assert R.set_multipliers(rlim, [usd, usdt]) == ["BTCUSDT"] and rlim[1, R.RL_MULT] == 0.0
    out, rules = R.gate(rlim, rb, rg, 1, 0, 1, MID, 0, R.MODE_CLIP)
    assert out == 0 and rules == 1 << R.R_NO_PRICE
