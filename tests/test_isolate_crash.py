"""`--isolate` as root, then SIGKILL: the IRQ affinities and the unbound workqueues' mask it
changed (system state beyond tasks, which tests/test_isolate.py follows) stay changed only until
the next `engine run`, which puts them back from the record the killed engine kept."""
import contextlib
import os
import signal
import subprocess

import pytest

from engine import isolation, locks, shm
from engine.realtime import parse_cpulist

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.test_isolate import ALL, CORE, _engine


def _irqs():
    out = {}
    for irq in os.listdir(isolation.IRQ_DIR):
        if irq.isdigit():
            try:
                out[irq] = parse_cpulist(open(f"{isolation.IRQ_DIR}/{irq}/smp_affinity_list").read())
            except OSError:
                pass
    return out


def _workqueue():
    try:
        return isolation._parse_hexmask(open(isolation.WORKQUEUE_MASK).read())
    except OSError:
        return None


def _why_not():
    if os.geteuid() != 0:
        return "changing IRQ affinity needs root"
    if len(ALL) < 2:
        return "one core: nothing to move the other work to"
    if not any(CORE in c and len(c) > 1 for c in _irqs().values()):
        return f"no IRQ here may run on core {CORE} and another"
    return None


@pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))
def test_what_a_killed_isolate_run_changed_is_put_back_by_the_next_run(tmp_path, default_model):
    name = f"isocrash{os.getpid()}"
    irqs0, wq0 = _irqs(), _workqueue()
    p, err = _engine(tmp_path, name, "--duration", "120", "--isolate")
    try:
        moved = {irq for irq, c in _irqs().items() if c != irqs0.get(irq)}
        assert moved and all(CORE not in _irqs()[i] for i in moved), err.read_text()
        assert os.path.exists(os.path.join(locks.lock_dir(), f"engine-isolation.{name}.json"))
        if wq0 is not None and CORE in wq0 and len(wq0) > 1:
            assert _workqueue() == wq0 - {CORE}
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert all(_irqs()[i] == irqs0[i] - {CORE} for i in moved)  # a killed engine undoes nothing itself
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for suffix in ("ctl", "signals", "ticks"):  # what the killed engine left in /dev/shm
            with contextlib.suppress(FileNotFoundError):
                os.unlink(shm.ring_path(f"{name}.{suffix}"))
    r = subprocess.run(engine_cmd("run", "--name", f"{name}b", "--duration", "0.5", "--http", "none", "--pub", "none",
                                  "--signals-out", str(tmp_path / "b.sig")),
                       cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "put back what a killed engine" in r.stderr, r.stderr[-3000:]
    now = _irqs()
    assert {i: now[i] for i in moved} == {i: irqs0[i] for i in moved}
    assert _workqueue() == wq0
    assert not os.path.exists(os.path.join(locks.lock_dir(), f"engine-isolation.{name}.json"))
