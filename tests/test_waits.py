"""The scheduling policy `auto` picks (from a fake /proc and /sys), and what the wait strategies
do on a real ring: an idle backoff loop parks, and a tick that arrives while it is parked is
still taken."""
import threading
import time

import numpy as np
import pytest

from engine import control as C
from engine import latency, shm
from engine.loop_args import LiveArgs, SignalView, TickView, new_tick, run_args
from engine.records import SIGNAL_WORDS
from engine.sigring import SignalRing
from engine.strategy_build import load_host
from engine.tickring import TickConsumer, TickRing, publish
from engine.waits import choose, make_wait
from feeds.synthetic.market import Simulator, parse_uri
from models import artifact


def _root(tmp_path, runtime=950_000, period=1_000_000, isolated=""):
    k = tmp_path / "proc/sys/kernel"
    k.mkdir(parents=True)
    (k / "sched_rt_runtime_us").write_text(f"{runtime}\n")
    (k / "sched_rt_period_us").write_text(f"{period}\n")
    cpu = tmp_path / "sys/devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "isolated").write_text(isolated + "\n")
    return str(tmp_path)


def test_auto_avoids_fifo_spin_where_rt_throttling_would_park_it(tmp_path):
    c = choose("auto", "auto", core=1, root=_root(tmp_path), can_fifo=True)
    assert (c.policy, c.wait.name) == ("other", "spin")
    assert "RT throttling is on (950000 of every 1000000 us)" in c.reason and "50 ms" in c.reason
    assert "SCHED_OTHER + spin" in c.describe()


def test_auto_takes_fifo_spin_when_throttling_is_off(tmp_path):
    c = choose("auto", "auto", core=1, root=_root(tmp_path, runtime=-1), can_fifo=True)
    assert (c.policy, c.wait.name) == ("fifo", "spin") and "RT throttling is off" in c.reason


def test_auto_on_an_isolated_core_says_so(tmp_path):
    c = choose("auto", "auto", core=3, root=_root(tmp_path, isolated="2-3"), can_fifo=True)
    assert c.policy == "other" and "core 3 is isolated" in c.reason


@pytest.mark.parametrize("wait", ["backoff", "duty"])
def test_auto_takes_fifo_with_a_wait_that_sleeps(tmp_path, wait):
    c = choose("auto", wait, core=1, root=_root(tmp_path), can_fifo=True)
    assert (c.policy, c.wait.name) == ("fifo", wait) and "RT budget" in c.reason


def test_auto_without_the_right_stays_other(tmp_path):
    c = choose("auto", "auto", core=1, root=_root(tmp_path, runtime=-1), can_fifo=False)
    assert c.policy == "other" and "no permission" in c.reason


def test_forced_policies_and_the_warning(tmp_path):
    root = _root(tmp_path)
    c = choose("fifo", "auto", core=1, root=root, can_fifo=True)
    assert (c.policy, c.wait.name) == ("fifo", "spin") and "warning" in c.reason
    assert choose("other", "backoff", root=root).wait.name == "backoff"


def test_duty_sleeps_more_than_the_kernel_would_take(tmp_path):
    w = make_wait("duty", _root(tmp_path))
    assert w.duty == pytest.approx(1.5 * 0.05)
    assert make_wait("duty", _root(tmp_path / "off", runtime=-1)).duty == 0.0


@pytest.mark.parametrize("policy,wait,needle", [("rr", "auto", "--policy 'rr'"), ("auto", "nap", "--wait 'nap'")])
def test_unknown_names_are_refused(policy, wait, needle, tmp_path):
    with pytest.raises(ValueError, match=needle):
        choose(policy, wait, root=_root(tmp_path))


def _loop_on_empty_ring(shm_name, host, pred, wait, seconds, late_ticks=None):
    """Run the live loop on a ring nobody publishes to for `seconds` (then publish late_ticks, if
    any, and let it finish); returns (loop thread CPU seconds, wall seconds, ctl)."""
    host.compile_live()  # not inside the measured thread
    ring = TickRing(shm_name + ".ticks", 1 << 12)
    cons = TickConsumer(shm_name + ".ticks", start="oldest")
    sr = SignalRing(shm_name + ".signals", 1 << 12)
    ctl = np.zeros(shm.HEADER_WORDS, np.int64)
    ctl[C.CTL_MODEL_ADDR] = pred.addr
    ctl[C.CTL_MODEL_GEN] = 1
    ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + 60_000_000_000
    hs = host.state(4, 0)
    cfg = host.loop_cfg(exit_on_eof=True, wait=make_wait(wait))
    live = LiveArgs(signals=SignalView.of(sr), ctl=ctl, hist=latency.new_counts(), state=hs.loop_arrays(),
                    row=host.new_row(), out=np.zeros(1, np.float32), tick=new_tick(),
                    sig=np.zeros(SIGNAL_WORDS, np.int64), pvals=host.params(), cfg=cfg)
    args = run_args(host.mod, TickView.of(cons), live)
    out = {}

    def body():
        t = time.thread_time()
        out["state"] = host.mod.run_loop(*args)
        out["cpu"] = time.thread_time() - t

    th = threading.Thread(target=body, daemon=True)
    t0 = time.monotonic()
    th.start()
    time.sleep(seconds)
    if late_ticks is not None:
        for w in late_ticks:
            w = w.copy()
            w[2] = time.monotonic_ns()
            publish(ring.hdr, ring.data, ring.mask, w)
    ring.set_state(shm.STATE_FINISHED)
    th.join(10)
    assert not th.is_alive(), "the loop did not end at the end of the stream"
    return out["cpu"], time.monotonic() - t0, ctl, out["state"]


def test_an_idle_backoff_loop_parks_and_still_takes_the_next_tick(default_model, shm_name):
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    words = np.zeros((500, 8), np.int64)
    Simulator(parse_uri("synthetic://?instruments=4&seed=5")).generate(words)
    cpu, wall, ctl, state = _loop_on_empty_ring(shm_name, host, pred, "backoff", 0.6, late_ticks=words)
    assert state == C.LOOP_EOF
    assert ctl[C.L_TICKS] == len(words)  # every tick published while it slept was taken
    assert ctl[C.L_PARKS] > 50           # it slept (park_max 1 ms over 0.6 s)
    assert cpu < 0.5 * wall, (cpu, wall)  # a spinning loop burns the whole wall time


def test_an_idle_spin_loop_never_parks(default_model, shm_name):
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    cpu, wall, ctl, state = _loop_on_empty_ring(shm_name, host, pred, "spin", 0.3)
    assert state == C.LOOP_EOF and ctl[C.L_PARKS] == 0
