"""The tick ring across real processes, the signal ring, and ring ownership."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from numba import njit

from engine import shm
from engine.intrinsics import cpu_pause
from engine.records import KIND_GAP
from engine.sigring import SignalRing, drain, push
from engine.tickring import POLL_EMPTY, POLL_GAP, TickConsumer, TickRing, poll, publish

from .conftest import ROOT, engine_cmd, engine_env, spawn


@njit(nogil=True, cache=True)
def consume_all(hdr, data, mask, slot_base, out, n_expected, stats):
    """Read until n_expected seqs are accounted for; stats = [delivered, torn, out_of_order, lost, gaps]."""
    expect = 0
    spins = 0
    while expect < n_expected:
        st = poll(hdr, data, mask, slot_base, out)
        if st == POLL_EMPTY:
            spins += 1
            if spins > 2_000_000_000:
                return -1
            cpu_pause()
            continue
        spins = 0
        if out[0] != expect:
            stats[2] += 1
        if st == POLL_GAP:
            stats[3] += out[3]
            stats[4] += 1
            expect = out[0] + out[3]
            continue
        for k in range(1, 8):
            if out[k] != out[0] * 8 + k:
                stats[1] += 1
                break
        stats[0] += 1
        expect = out[0] + 1
    return expect


def _producer(name, count, cap, wait=1, pace=0):
    return spawn([sys.executable, "-m", "tests.helpers.pattern_producer", name, str(count), str(cap), str(wait),
                  str(pace)])


def _wait_for(path, proc, timeout=60):
    t0 = time.monotonic()
    while not os.path.exists(path):
        assert proc.poll() is None, "producer died"
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.01)


def test_cross_process_million_ticks_none_lost_none_torn(shm_name):
    """1.2M ticks through a 128k-slot ring (it wraps 9 times while both sides run), produced in
    bursts at about 4M/s: ~30 ms of slack, so a consumer that keeps up loses nothing."""
    n, cap = 1_200_000, 1 << 17
    stats = np.zeros(5, np.int64)
    consume_all(np.zeros(512, np.int64), np.zeros(64, np.int64), 7, 64, np.zeros(8, np.int64), 0, stats)  # JIT first
    proc = _producer(shm_name, n, cap, pace=4096)
    try:
        _wait_for(f"/dev/shm/{shm_name}", proc)
        c = TickConsumer(shm_name, start="oldest")
        end = consume_all(c.hdr, c.data, c.mask, c.slot_base, c.out, n, stats)
        c.close()
        assert end == n
        delivered, torn, disorder, lost, gaps = stats
        assert (torn, disorder, lost, gaps) == (0, 0, 0, 0)
        assert delivered == n
        assert c.producer_finished() or int(c.hdr[shm.H_WRITE]) == n
    finally:
        proc.wait(timeout=30)


def test_lapped_consumer_counts_exactly_what_it_lost(shm_name):
    n, cap = 200_000, 1024
    proc = _producer(shm_name, n, cap, pace=5000)  # bursts of 5000 into a 1024-slot ring
    try:
        _wait_for(f"/dev/shm/{shm_name}", proc)
        c = TickConsumer(shm_name, start="oldest")
        delivered, lost, gaps, torn = 0, 0, 0, 0
        expect = 0
        seen = []
        while expect < n:
            st = poll(c.hdr, c.data, c.mask, c.slot_base, c.out)
            if st == POLL_EMPTY:
                time.sleep(0.0002)  # a deliberately slow consumer
                continue
            seq = int(c.out[0])
            assert seq == expect, f"expected seq {expect}, got {seq}"
            if st == POLL_GAP:
                assert int(c.out[7] >> 48) & 0xFF == KIND_GAP
                lost += int(c.out[3])
                gaps += 1
                expect = seq + int(c.out[3])
                seen.append(("gap", seq, int(c.out[3])))
            else:
                torn += any(int(c.out[k]) != seq * 8 + k for k in range(1, 8))
                delivered += 1
                expect = seq + 1
        assert torn == 0
        assert gaps > 0, "the slow consumer was never lapped: the test did not test anything"
        assert delivered + lost == n
        assert (c.lost, c.gaps) == (lost, gaps)  # the header counters agree, for inspectors
        c.close()
    finally:
        proc.wait(timeout=30)


def _spin_sees_store(mode, path, timeout):
    """A separate process spins on a word of a shared file; we store to it from here."""
    with open(path, "wb") as f:
        f.write(b"\x00" * 64)
    p = spawn([sys.executable, "-m", "tests.helpers.spinner", path, mode], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        a = np.memmap(path, np.int64, "r+", shape=(8,))
        a[0] = 1
        a.flush()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return p.stdout.readline().strip() == "done"
    finally:
        p.kill()
        p.wait()


def test_spin_on_acquire_load_does_not_hang(shm_name):
    assert _spin_sees_store("acquire", f"/dev/shm/{shm_name}", timeout=10.0)


def test_spin_on_plain_load_hangs_which_is_why_we_use_acquire(shm_name):
    """Control for the test above: LLVM hoists a plain load out of the loop. If this ever
    stops hanging, the test above no longer proves anything about the intrinsics."""
    assert not _spin_sees_store("plain", f"/dev/shm/{shm_name}", timeout=1.0)


def test_ring_header_readable_and_inspect_cli(shm_name):
    r = TickRing(shm_name, 1 << 10)
    w = np.zeros(8, np.int64)
    for _ in range(5):
        publish(r.hdr, r.data, r.mask, w)
    c = TickConsumer(shm_name, start="oldest")
    # anyone can read the header with numpy, read-only
    hdr = np.fromfile(f"/dev/shm/{shm_name}", np.int64, shm.HEADER_WORDS)
    assert hdr[shm.H_MAGIC] == shm.MAGIC and hdr[shm.H_CAPACITY] == 1024 and hdr[shm.H_WRITE] == 5
    assert hdr[shm.H_PID] == os.getpid()
    assert oct(os.stat(f"/dev/shm/{shm_name}").st_mode & 0o777) == "0o600"
    out = subprocess.run(engine_cmd("ring", "inspect", shm_name, "--json"), cwd=ROOT, env=engine_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json
    info = json.loads(out.stdout)
    assert info["capacity"] == 1024 and info["write_cursor"] == 5 and info["producer_alive"]
    assert info["consumers"][0]["pid"] == os.getpid() and info["consumers"][0]["lag"] == 5
    c.close()
    txt = subprocess.run(engine_cmd("ring", "inspect", shm_name), cwd=ROOT, env=engine_env(),
                         capture_output=True, text=True, timeout=60)
    assert "write_cursor: 5" in txt.stdout


def test_inspect_missing_ring_is_a_clear_error(shm_name):
    out = subprocess.run(engine_cmd("ring", "inspect", shm_name), cwd=ROOT, env=engine_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert shm_name in out.stderr


def test_live_owner_is_refused_dead_owner_is_replaced(shm_name):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        TickRing(shm_name, 64, owner_pid=holder.pid)
        with pytest.raises(shm.RingError, match=f"owned by live process {holder.pid}"):
            TickRing(shm_name, 64)
    finally:
        holder.kill()
        holder.wait()
    r = TickRing(shm_name, 64)  # the owner is dead now
    assert r.note and "dead process" in r.note
    assert int(r.hdr[shm.H_PID]) == os.getpid()


def test_garbage_file_is_not_a_ring(shm_name):
    fd = os.open(f"/dev/shm/{shm_name}", os.O_WRONLY | os.O_CREAT, 0o600)  # ours and private: only the
    os.write(fd, b"\x00" * 100)                                            # contents are wrong
    os.close(fd)
    with pytest.raises(shm.RingError, match="too short"):
        TickConsumer(shm_name)


def test_signal_ring_full_counts_drops_and_never_blocks(shm_name):
    s = SignalRing(shm_name, 8)
    rec = np.zeros(8, np.int64)
    pushed = 0
    for i in range(20):
        rec[0] = i
        pushed += bool(push(s.hdr, s.data, s.mask, s.pstate, rec))
    assert pushed == 8 and s.drops == 12
    out = np.zeros((32, 8), np.int64)
    n = drain(s.hdr, s.data, s.mask, out)
    assert n == 8 and list(out[:8, 0]) == list(range(8))
    rec[0] = 99
    assert push(s.hdr, s.data, s.mask, s.pstate, rec)
    assert drain(s.hdr, s.data, s.mask, out) == 1 and out[0, 0] == 99
