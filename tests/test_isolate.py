"""engine run --isolate and the preemption line: real processes, real CPU masks, a real kill -9.

Other work on the strategy core shows in the summary (how long the loop waited for its core),
--isolate moves that work off for the run and puts it back at exit, and what a killed engine
moved is put back by the next run of the same name."""
import json
import os
import shlex
import shutil
import signal
import subprocess
import time

import pytest

from engine import isolation

from tests.conftest import ROOT, engine_cmd, engine_env, spawn, strategy_core

CORE = strategy_core()
ALL = set(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(ALL) < 2, reason="one core: nothing to move the other work to")


def _child(cmd, cpus):
    return subprocess.Popen(cmd, start_new_session=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus))


def _engine(tmp_path, name, *args):
    """`engine run` on the strategy core, stderr to a file; returns (process, its stderr path) once it runs."""
    err = tmp_path / f"{name}.err"
    p = spawn(engine_cmd("run", "--core", str(CORE), "--name", name, "--json", "--http", "none", "--pub", "none",
                         "--rate", "20000", "--signals-out", str(tmp_path / f"{name}.sig"), *args),
              stdout=subprocess.PIPE, stderr=open(err, "w"), text=True)
    deadline = time.monotonic() + 120
    while "[engine] running:" not in err.read_text():
        assert p.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    return p, err


def test_work_on_the_core_shows_as_preemption_with_what_to_do(tmp_path, default_model):
    hog = _child(["sh", "-c", "while :; do :; done"], {CORE})  # a CPU hog on the strategy core alone
    try:
        p, err = _engine(tmp_path, f"pre{os.getpid()}", "--duration", "2")
        out, _ = p.communicate(timeout=60)
    finally:
        hog.kill()
        hog.wait()
    res = json.loads(out)
    pre = res["preempted"]
    assert pre["count"] > 10 and pre["wait_ms"] > 100, pre  # the scheduler shares the core with the hog
    table = subprocess.run(engine_cmd("run", "--core", str(CORE), "--name", f"pre2{os.getpid()}", "--duration", "1",
                                      "--http", "none", "--pub", "none", "--signals-out", str(tmp_path / "t.sig")),
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    line = [x for x in table.stdout.splitlines() if x.strip().startswith(f"core {CORE}: the strategy thread waited")]
    assert len(line) == 1, table.stdout


def test_isolate_moves_other_work_off_the_core_and_puts_it_back(tmp_path, default_model):
    name = f"iso{os.getpid()}"
    a = _child(["sleep", "120"], ALL)
    b = _child(["sleep", "120"], ALL)
    try:
        p, err = _engine(tmp_path, name, "--duration", "30", "--isolate")
        assert os.sched_getaffinity(a.pid) == ALL - {CORE} == os.sched_getaffinity(b.pid)
        assert "[engine] isolate: moved" in err.read_text()
        if os.geteuid() == 0:  # kernel threads too: kthreadd (pid 2) may run anywhere
            assert CORE not in os.sched_getaffinity(2)
        assert not isolation.movable_tasks(CORE).get("sleep"), isolation.movable_tasks(CORE)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, err.read_text()
        assert os.sched_getaffinity(a.pid) == ALL == os.sched_getaffinity(b.pid)  # put back at exit
        if os.geteuid() == 0:
            assert os.sched_getaffinity(2) == set(range(os.cpu_count()))
        res = json.loads(out)
        assert res["isolation"].startswith("moved ") and "undone at exit" in res["isolation"]
        assert "[engine] isolate: put back" in err.read_text()

        # killed: what it moved stays moved, until the next run of the name puts it back; a mask
        # changed since is left as it is
        p, err = _engine(tmp_path, name, "--duration", "30", "--isolate")
        assert os.sched_getaffinity(a.pid) == ALL - {CORE}
        p.kill()
        p.wait()
        assert os.sched_getaffinity(a.pid) == ALL - {CORE}
        os.sched_setaffinity(b.pid, ALL)  # someone else's change
        c = subprocess.run(engine_cmd("run", "--core", str(CORE), "--name", name, "--duration", "0.5", "--http",
                                      "none", "--pub", "none", "--signals-out", str(tmp_path / "c.sig")),
                           capture_output=True, text=True, timeout=120)
        assert c.returncode == 0, c.stderr
        assert "put back what a killed engine" in c.stderr and "1 changed since, left as they are" in c.stderr, c.stderr
        assert os.sched_getaffinity(a.pid) == ALL == os.sched_getaffinity(b.pid)
    finally:
        for x in (a, b):
            x.kill()
            x.wait()


def test_isolate_needs_a_core():
    r = subprocess.run(engine_cmd("run", "--isolate", "--duration", "1"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--isolate needs --core" in r.stderr and "Traceback" not in r.stderr


def test_a_record_that_is_not_a_private_file_of_ours_is_left_alone(tmp_path):
    """The next run trusts only its own 0600 records: a readable one, or a symlink planted under the
    name, is neither read nor acted on (the masks it names are not touched)."""
    d = isolation.locks.lock_dir()
    rec = {"pid": 1, "core": CORE, "since": 0, "irqs": {}, "workqueue": None,
           "tasks": {str(os.getpid()): [isolation._start_time(os.getpid()), sorted(ALL), sorted(ALL), "x"]}}
    loose = os.path.join(d, f"engine-isolation.loose{os.getpid()}.json")
    link = os.path.join(d, f"engine-isolation.link{os.getpid()}.json")
    target = tmp_path / "planted.json"
    target.write_text(json.dumps(rec))
    try:
        with open(loose, "w") as f:
            f.write(json.dumps(rec))
        os.chmod(loose, 0o644)
        os.symlink(target, link)
        lines = isolation.recover()
        assert any(loose in x and "refused" in x for x in lines), lines
        assert not any(link in x for x in lines), lines
        assert os.path.exists(loose) and os.path.islink(link)  # left as they were
    finally:
        for p in (loose, link):
            if os.path.lexists(p):
                os.unlink(p)


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/run", os.W_OK) or not shutil.which("unshare"),
                    reason="needs root and unshare(1): a small tmpfs over /run/engine in a mount namespace of its own")
def test_a_full_lock_directory_is_refused_by_name_and_what_moved_is_put_back(tmp_path, default_model):
    """A full disk where the locks and the isolation record live: with no room for the core's lock,
    the run is refused naming that file; with room for the locks but not the record, it stops
    naming the record, and every task it had moved is back as it was."""
    pid2 = set(os.sched_getaffinity(2))
    run = " ".join(shlex.quote(x) for x in engine_cmd(
        "run", "--core", str(CORE), "--isolate", "--duration", "2", "--http", "none", "--pub", "none",
        "--name", f"full{os.getpid()}", "--signals-out", str(tmp_path / "s.sig")))
    for pages, named in ((16, "engine-lock.core."), (14, "engine-isolation.")):
        script = (f"mkdir -p /run/engine && mount -t tmpfs -o size=64k tmpfs /run/engine && chmod 700 /run/engine && "
                  f"dd if=/dev/zero of=/run/engine/fill bs=4k count={pages} 2>/dev/null; {run}")
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=ROOT,
                           env=engine_env(), capture_output=True, text=True, timeout=120)
        last = r.stderr.strip().splitlines()[-1]
        assert r.returncode == 2 and "No space left on device" in last and named in last, r.stderr
        assert "Traceback" not in r.stderr
        assert set(os.sched_getaffinity(2)) == pid2  # nothing left moved
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"full{os.getpid()}")]
