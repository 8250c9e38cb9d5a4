"""The strategy loop itself, in-process over a real ring: what it emits, and how it stops."""
import threading
import time

import numpy as np
import pytest

from engine import control as C
from engine import features, latency, shm, strategy
from engine.records import SIGNAL_DTYPE
from engine.sigring import SignalRing, drain
from engine.tickring import TickConsumer, TickRing, publish
from feeds.synthetic import Simulator, parse_uri
from models import artifact, dataset


def _setup(shm_name, words, pred, cfg, lease_s=60.0):
    ring = TickRing(shm_name + ".ticks", 1 << 16)
    for w in words:
        w = w.copy()
        w[2] = time.monotonic_ns()
        publish(ring.hdr, ring.data, ring.mask, w)
    ring.set_state(shm.STATE_FINISHED)
    cons = TickConsumer(shm_name + ".ticks", start="oldest")
    sr = SignalRing(shm_name + ".signals", 1 << 16)
    ctl = np.zeros(shm.HEADER_WORDS, np.int64)
    ctl[C.CTL_MODEL_ADDR] = pred.addr
    ctl[C.CTL_MODEL_GEN] = 1
    ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + int(lease_s * 1e9)
    hist = latency.new_counts()
    k = 4
    args = (cons.hdr, cons.data, cons.mask, cons.slot_base, sr.hdr, sr.data, sr.mask, sr.pstate, ctl, hist,
            features.new_state(k), np.zeros(features.NUM_FEATURES, np.float32), np.zeros(1, np.float32),
            np.zeros(8, np.int64), np.zeros(8, np.int64), np.zeros(k, np.int8), cfg)
    return args, sr, ctl, hist


def _expected_signals(words, pred, cfg):
    X, inst, _, idx = dataset.featurize(words, 4)
    margins = pred.predict_margin(X)
    pos = {}
    out = []
    for j in range(len(X)):
        score = strategy.sigmoid32(margins[j]) if cfg[strategy.CFG_SIGMOID] else margins[j]
        prev = pos.get(inst[j], 0)
        new = strategy.decide(prev, score, cfg)
        if new != prev:
            pos[inst[j]] = new
            out.append((idx[j], inst[j], new, prev, score, margins[j]))
    return out


def test_loop_emits_exactly_the_offline_signals(default_model, shm_name):
    pred = artifact.load(default_model)
    words = np.zeros((30_000, 8), np.int64)
    Simulator(parse_uri("synthetic://?instruments=4&seed=31")).generate(words)
    cfg = strategy.make_cfg(exit_on_eof=True)
    args, sr, ctl, hist = _setup(shm_name, words, pred, cfg)
    state = strategy.run_loop(*args)
    assert state == C.LOOP_EOF
    buf = np.zeros((1 << 16, 8), np.int64)
    got = buf[: drain(sr.hdr, sr.data, sr.mask, buf)].copy().view(SIGNAL_DTYPE).ravel()
    want = _expected_signals(words, pred, cfg)
    assert len(want) > 50 and len(got) == len(want) and sr.drops == 0
    assert list(got["tick_seq"]) == [w[0] for w in want]
    assert list(got["instrument"]) == [w[1] for w in want]
    assert list(got["side"]) == [w[2] for w in want] and list(got["prev_side"]) == [w[3] for w in want]
    # scores and margins bit for bit
    assert np.array_equal(got["score"].view(np.int32), np.array([w[4] for w in want], np.float32).view(np.int32))
    assert np.array_equal(got["margin"].view(np.int32), np.array([w[5] for w in want], np.float32).view(np.int32))
    assert ctl[C.L_TICKS] == len(words) and ctl[C.L_SIGNALS] == len(want)
    assert hist[latency.ST_MODEL].sum() == ctl[C.L_SCORED]


def test_loop_stops_when_its_lease_runs_out(default_model, shm_name):
    """Nobody renews the lease: a spinning loop must stop by itself, never spin forever."""
    pred = artifact.load(default_model)
    words = np.zeros((100, 8), np.int64)
    Simulator(parse_uri("synthetic://?instruments=4&seed=1")).generate(words)
    args, _, ctl, _ = _setup(shm_name, words, pred, strategy.make_cfg(), lease_s=0.3)
    result = []
    t = threading.Thread(target=lambda: result.append(strategy.run_loop(*args)), daemon=True)
    t.start()
    t.join(10)
    assert result == [C.LOOP_LEASE_EXPIRED]


def test_loop_stops_on_command(default_model, shm_name):
    pred = artifact.load(default_model)
    words = np.zeros((100, 8), np.int64)
    Simulator(parse_uri("synthetic://?instruments=4&seed=1")).generate(words)
    args, _, ctl, _ = _setup(shm_name, words, pred, strategy.make_cfg())
    result = []
    t = threading.Thread(target=lambda: result.append(strategy.run_loop(*args)), daemon=True)
    t.start()
    time.sleep(0.2)
    assert t.is_alive()  # spinning on an empty ring
    ctl[C.CTL_CMD] = C.CMD_STOP
    t.join(5)
    assert result == [C.LOOP_STOPPED] and ctl[C.L_TICKS] == 100


@pytest.mark.parametrize("score,pos,want", [
    (0.70, 0, 1), (0.60, 1, 1), (0.54, 1, 0), (0.60, 0, 0), (0.30, 1, -1), (0.40, -1, -1), (0.46, -1, 0),
])
def test_hysteresis(score, pos, want):
    assert strategy.decide(pos, np.float32(score), strategy.make_cfg()) == want


def test_thresholds_must_be_ordered():
    with pytest.raises(ValueError, match="thresholds must satisfy"):
        strategy.make_cfg(enter_long=0.5, exit_long=0.55)
