"""Several sources in one run (`engine run --feed A --feed B`, [[feed]] tables): every tick of every
source is read, instruments are numbered and named for the run, the loop takes the ready tick with
the smallest receive time and never waits on an empty ring, one feed that dies leaves the others
flowing (and /ready, /status and /metrics say which one is down), and `--record` gives a tick file
whose backtest is the run's signals bit for bit. Real feed processes, rings and a compiled model."""
import json
import os
import signal
import threading
import time
import types

import numpy as np
import pyarrow.parquet as pq

from engine.records import SIGNAL_FLAG_MARK, TICK_DTYPE, KIND_QUOTE
from engine.tickfile import TickFile
from tests.conftest import converted
from tests.helpers.daemon import Daemon, wait_until
from tests.helpers.feedutil import cli, one_line_error

A_URI = "synthetic://?instruments=2&count=12000&seed=21"
B_URI = "synthetic://?instruments=3&count=9000&seed=22"


def _files():
    return converted(A_URI), converted(B_URI)


def _run_json(*args):
    r = cli("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--max", "--json", *args, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_two_sources_from_feed_tables_every_tick_read_recorded_and_backtested_bit_for_bit(
        tmp_path, default_model, shm_name):
    a, b = _files()
    conf = tmp_path / "engine.toml"
    # (a merge window: with it too, the recording is what the loop read)
    conf.write_text(f'[loop]\nmerge_window_us = 200\n\n[[feed]]\nuri = "tickfile:{a}"\nring_capacity = 4096\n\n'
                    f'[[feed]]\nuri = "tickfile:{b}"\n')
    live, rec = tmp_path / "live.sig", tmp_path / "rec.ticks"
    run, err = _run_json("--config", str(conf), "--name", shm_name, "--signals-out", str(live), "--record", str(rec))
    fa, fb = TickFile(a), TickFile(b)
    # every tick of both, each source's count its own (a one-source run of a file reads all of it: test_replay)
    assert run["ticks"] == len(fa) + len(fb) and run["lost"] == 0 and run["gaps"] == 0
    src = run["sources"]
    assert list(src) == ["tickfile-1", "tickfile-2"]
    assert [src[k]["counters"]["ticks"] for k in src] == [len(fa), len(fb)]
    assert [src[k]["instruments"] for k in src] == [{"first_id": 0, "ids": 2}, {"first_id": 2, "ids": 3}]
    assert all(s["feed"] == "finished" for s in src.values())
    assert run["record"] == {"out": str(rec), "ticks": len(fa) + len(fb), "gaps": 0, "lost": 0, "error": None}

    # the recording: the run's ids and names, each record naming its source; each source's ticks in its order
    r = TickFile(rec)
    assert r.complete and len(r) == run["ticks"]
    assert r.instruments == ["SYNTHETIC:SYN0000", "SYNTHETIC:SYN0001", "SYNTHETIC:SYN0000@tickfile-2",
                             "SYNTHETIC:SYN0001@tickfile-2", "SYNTHETIC:SYN0002"]
    assert [s["source"] for s in r.specs] == ["tickfile-1"] * 2 + ["tickfile-2"] * 3
    t = r.ticks
    for f, ids, off in ((fa, (0, 1), 0), (fb, (2, 3, 4), 2)):
        mine = t[np.isin(t["instrument"], ids)]
        assert np.array_equal(mine["instrument"], f.ticks["instrument"] + off)
        for col in ("ts_event", "price", "bid_px", "ask_px", "bid_sz", "ask_sz", "kind"):
            assert np.array_equal(mine[col], f.ticks[col]), col
    assert np.array_equal(t["seq"], np.arange(len(t)))

    # its backtest: the live run's signals, bit for bit
    r2 = cli("backtest", str(rec), "--out", str(tmp_path / "bt"), "--quiet", "--json", timeout=600)
    assert r2.returncode == 0, r2.stderr
    from engine.signal_log import read_signals
    ls = read_signals(live)
    ls = ls[(ls["flags"] & SIGNAL_FLAG_MARK) == 0]
    bt = pq.read_table(tmp_path / "bt" / "signals.parquet")
    assert len(ls) == bt.num_rows == run["signals"] > 50
    for col in ("seq", "tick_seq", "instrument", "ts_event", "ts_recv", "mid_px", "position", "prev_position",
                "side", "prev_side", "folded"):
        assert np.array_equal(ls[col].astype(np.int64), bt.column(col).to_numpy().astype(np.int64)), col
    for col in ("score", "margin"):
        assert np.array_equal(ls[col].view(np.uint32), bt.column(col).to_numpy().view(np.uint32)), col
    assert set(np.unique(ls["instrument"])) & {0, 1} and set(np.unique(ls["instrument"])) & {2, 3, 4}

    # one source: its names, its loop and its summary as before (no sources, no venue prefix)
    one, _ = _run_json("--feed", f"tickfile:{b}", "--name", shm_name + "one", "--signals-out",
                       str(tmp_path / "one.parquet"))
    assert one["ticks"] == len(fb) and one["sources"] is None and one["record"] is None
    from engine.instruments import parse
    meta = pq.read_table(tmp_path / "one.parquet").schema.metadata
    assert parse(json.loads(meta[b"engine.instruments"]))[0] == fb.instruments == ["SYN0000", "SYN0001", "SYN0002"]


def _two_rings(default_model, shm_name, window_ns=0):
    """run_loop_multi on two real rings (this process their producer), the model compiled for the
    run, its tap read back: send(ring, ts, inst), start() the loop's thread, taken(n) (True once n
    ticks were taken; no n: the ticks taken so far), finish() -> the loop's exit state, close()."""
    from app.multi_rings import MultiRings, compile_multi
    from app.recorder import drain
    from engine import control as C
    from engine import shm, sigring
    from engine.loop_args import LiveArgs, SignalView, new_tick, run_multi_args
    from engine.strategy_build import load_host
    from engine.tickring import TickConsumer, TickRing, publish
    from models import artifact

    host = load_host("microstructure")
    mod = host.mod
    compile_multi(host, 2)
    pred = artifact.load(str(default_model), strategy=host.strategy)
    rings = [TickRing(f"{shm_name}.r{k}", 64) for k in range(2)]
    tap = TickRing(f"{shm_name}.tap", 64)
    ctl_blk = C.ControlBlock(f"{shm_name}.ctl")
    sring = sigring.SignalRing(f"{shm_name}.sig")
    ctl = ctl_blk.hdr
    ctl[C.CTL_MODEL_ADDR], ctl[C.CTL_MODEL_GEN] = pred.addr, 1
    ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + 120 * 10**9
    m = MultiRings([f"{shm_name}.r0", f"{shm_name}.r1"], ["a", "b"], np.array([0, 2], np.int64),
                   np.array([2, 3], np.int64), mod.RS_WIDTH, tap=tap)
    reader = TickConsumer(f"{shm_name}.tap")
    reader.claim("oldest")
    got, buf, res = [], np.zeros((64, 8), np.int64), {}

    def send(k, ts, inst):
        t = np.zeros(1, TICK_DTYPE)
        t["ts_event"], t["ts_recv"], t["instrument"], t["kind"] = ts, ts, inst, KIND_QUOTE
        t["bid_px"], t["ask_px"], t["bid_sz"], t["ask_sz"] = 100 * 10**9, 101 * 10**9, 5, 7
        publish(rings[k].hdr, rings[k].data, rings[k].mask, t.view(np.int64).reshape(8))

    def taken(n=0):
        k = drain(reader.hdr, reader.data, reader.mask, reader.slot_base, buf)
        got.extend(buf[:k].copy())
        return len(got) >= n if n else np.array(got).view(TICK_DTYPE).reshape(-1)

    m.attach("oldest", backpressure=False)
    hs = host.state(5, 0)
    cfg = host.loop_cfg(exit_on_eof=True)
    cfg[mod.CFG_TAP] = 1.0
    cfg[mod.CFG_MERGE_WINDOW_NS] = window_ns
    live = LiveArgs(signals=SignalView.of(sring), ctl=ctl, hist=ctl_blk.hist, state=hs.loop_arrays(),
                    row=host.new_row(), out=np.zeros(1, np.float32), tick=new_tick(),
                    sig=np.zeros(16, np.int64), pvals=host.params(), cfg=cfg)

    def finish():
        for r in rings:
            r.set_state(shm.STATE_FINISHED)
        th.join(30)
        assert not th.is_alive()
        return res["state"]

    def close():
        ctl[C.CTL_CMD] = C.CMD_STOP
        if th.ident is not None:
            th.join(30)
        m.close()
        reader.close()
        for r in (*rings, tap):
            r.unlink()
        for p in (ctl_blk.path, sring.path):
            os.unlink(p)
        pred.release()

    th = threading.Thread(target=lambda: res.setdefault("state", mod.run_loop_multi(
        *run_multi_args(mod, m.view(), live))))
    return types.SimpleNamespace(send=send, start=th.start, taken=taken, finish=finish, close=close, m=m, mod=mod,
                                 ctl_blk=ctl_blk, rings=rings, sring=sring)


def test_the_loop_takes_the_oldest_ready_tick_and_never_waits_on_an_empty_ring(default_model, shm_name):
    """Ticks ready on both rings come out by receive time; while one ring is empty (its feed silent)
    the other's ticks come through; a tick that arrives late is taken when it is there."""
    from engine import control as C
    r = _two_rings(default_model, shm_name)
    try:
        for ts, k, inst in ((10, 0, 0), (30, 0, 1), (50, 0, 0), (20, 1, 2), (40, 1, 0)):
            r.send(k, ts, inst)  # all ready before the loop looks: taken by receive time
        r.start()
        wait_until(lambda: r.taken(5), "the five ready ticks", timeout=30)
        r.send(0, 60, 1)  # ring 1 stays empty (its feed silent, not finished): ring 0 still flows
        r.send(0, 70, 0)
        wait_until(lambda: r.taken(7), "ring 0's ticks while ring 1 is empty", timeout=30)
        r.send(1, 65, 1)  # older than the last one taken, but it arrived after: taken when it is there
        wait_until(lambda: r.taken(8), "the late tick", timeout=30)
        assert r.finish() == C.LOOP_EOF
        g = r.taken()
        assert g["ts_recv"].tolist() == [10, 20, 30, 40, 50, 60, 70, 65]
        # ring 1's ids moved past ring 0's block; numbered in the merged stream
        assert g["instrument"].tolist() == [0, 4, 1, 2, 0, 1, 0, 3]
        assert g["seq"].tolist() == list(range(8))
        assert r.m.rst[:, r.mod.RS_TICKS].tolist() == [5, 3] and r.ctl_blk.counters()["ticks"] == 8
    finally:
        r.close()


def test_a_tick_past_its_rings_block_is_skipped_and_a_kill_names_the_last_tick_taken(default_model, shm_name):
    """A tick whose instrument is past its ring's block of ids is counted (unmapped) and skipped, and
    the loop's last tick stays the last one it took: a kill at idle after it marks that tick's seq
    in the merged stream and the next one's, as a backtest of the recording numbers them (it once
    named the skipped tick's own words)."""
    from engine import control as C, sigring
    from engine.records import SIGNAL_DTYPE, SIGNAL_FLAGS_KILL_MARK
    r = _two_rings(default_model, shm_name)
    try:
        for ts, k, inst in ((10, 1, 0), (20, 1, 1), (30, 1, 2), (40, 0, 1)):
            r.send(k, ts, inst)
        r.send(0, 50, 2)  # ring 0's block is 2 ids: id 2 is past it
        r.start()
        wait_until(lambda: r.m.rst[0, r.mod.RS_UNMAPPED] == 1, "the unmapped tick", timeout=30)
        r.ctl_blk.hdr[C.CTL_KILL] = 1
        out = np.zeros((64, 16), np.int64)
        got = []

        def marks():
            n = sigring.drain(r.sring.hdr, r.sring.data, r.sring.mask, out)
            got.extend(out[:n].copy())
            recs = np.array(got, np.int64).reshape(-1, 16).view(SIGNAL_DTYPE).reshape(-1)
            return recs[(recs["flags"] & SIGNAL_FLAGS_KILL_MARK) == SIGNAL_FLAGS_KILL_MARK]
        wait_until(lambda: len(marks()) == 1, "the kill mark", timeout=30)
        m = marks()[0]
        assert (int(m["tick_seq"]), int(m["ts_event"])) == (3, 4)
        assert r.taken()["seq"].tolist() == [0, 1, 2, 3]
        assert r.m.rst[:, r.mod.RS_TICKS].tolist() == [1, 3]
    finally:
        r.close()


def test_a_merge_window_holds_the_oldest_tick_for_a_silent_ring_and_no_longer(default_model, shm_name):
    """--merge-window-us: while ring 1 is empty, ring 0's tick waits (up to the window) for an older
    one ring 1's feed may still publish; one that comes within the window goes first; past the
    window the held tick goes anyway; a finished ring holds nobody."""
    from engine import control as C
    from engine import shm
    r = _two_rings(default_model, shm_name, window_ns=3_000_000_000)
    try:
        r.start()
        r.send(0, 60, 1)  # ring 1 empty and not finished: held
        time.sleep(0.3)
        assert len(r.taken()) == 0, "taken before the window while ring 1 was silent"
        r.send(1, 55, 2)  # received earlier, published later, within the window: first
        wait_until(lambda: r.taken(2), "both ticks", timeout=30)
        t0 = time.monotonic()
        r.send(0, 80, 0)  # ring 1 silent again: goes after the window, not before
        wait_until(lambda: r.taken(3), "the tick held past the window", timeout=30)
        held = time.monotonic() - t0
        assert held >= 2.9, held
        r.rings[1].set_state(shm.STATE_FINISHED)  # ring 1's feed ended: nothing more can come from it
        t0 = time.monotonic()
        r.send(0, 90, 1)
        wait_until(lambda: r.taken(4), "a tick beside a finished ring", timeout=30)
        assert time.monotonic() - t0 < 2.0, "held for a ring whose feed had finished"
        assert r.finish() == C.LOOP_EOF
        assert r.taken()["ts_recv"].tolist() == [55, 60, 80, 90]
    finally:
        r.close()


def test_one_feed_killed_the_other_keeps_flowing_and_ready_says_which(tmp_path, default_model, shm_name):
    d = Daemon(tmp_path, shm_name, "--feed", "synthetic://?instruments=2&seed=31&rate=2000",
               "--feed", "synthetic://?instruments=2&seed=32&rate=2000")
    try:
        d.wait_for("/metrics /health /ready")
        wait_until(lambda: d.get("/ready")[0] == 200, "both sources ready", timeout=60)
        st = d.status()["sources"]
        assert list(st) == ["synthetic-1", "synthetic-2"] and all(s["ready"] for s in st.values())
        code, body = d.get("/ready")
        assert json.loads(body)["sources"] == {"synthetic-1": {"ready": True, "feed": "ok"},
                                               "synthetic-2": {"ready": True, "feed": "ok"}}
        os.kill(st["synthetic-2"]["pid"], signal.SIGKILL)

        def down():
            code, body = d.get("/ready")
            return (code, json.loads(body)) if code == 503 else None
        code, body = wait_until(down, "/ready saying synthetic-2 is down", timeout=30)
        assert body["sources"]["synthetic-1"] == {"ready": True, "feed": "ok"}
        assert body["sources"]["synthetic-2"]["ready"] is False
        assert any(w.startswith("feed synthetic-2: ") for w in body["not_ready"]), body
        assert d.get("/ready?source=synthetic-1")[0] == 200
        assert d.get("/ready?source=nope")[0] == 404
        # the other source keeps flowing while this one is down (or being restarted)
        t0 = d.status()["sources"]["synthetic-1"]["counters"]["ticks"]
        wait_until(lambda: d.status()["sources"]["synthetic-1"]["counters"]["ticks"] > t0 + 200,
                   "synthetic-1's ticks going on", timeout=30)
        metrics = d.get("/metrics")[1].decode()
        assert 'engine_source_ticks_total{source="synthetic-1"}' in metrics
        assert 'engine_source_ready{source="synthetic-1"} 1.0' in metrics
        # a live source's feed is started again; the run never stopped
        wait_until(lambda: d.get("/ready")[0] == 200, "synthetic-2 back", timeout=60)
        s2 = d.status()["sources"]["synthetic-2"]
        assert s2["feed_restarts"] == 1 and s2["reattached"] == 1
        t2 = s2["counters"]["ticks"]
        wait_until(lambda: d.status()["sources"]["synthetic-2"]["counters"]["ticks"] > t2 + 100,
                   "synthetic-2's ticks again", timeout=30)
    finally:
        out = d.stop()
    summary_ok = "source synthetic-2 (synthetic://" in out and "restarted 1" in out
    assert summary_ok, out


def test_feed_tables_and_flags(tmp_path):
    """[[feed]] tables give several sources; --feed on the command line wins over them; a table
    without uri, and a run-wide key given twice differently, are one-line errors naming the file."""
    from app import config
    from app.cli import run_cmds
    from app.cli.parser import Parser
    p = Parser()
    run_cmds.add_arguments(p)
    p.add_argument("--config")
    f = tmp_path / "e.toml"
    f.write_text('[[feed]]\nuri = "tickfile:/a.ticks"\nspeed = 2.0\n[[feed]]\nuri = "tickfile:/b.ticks"\n')
    for argv, want in ((["--config", str(f)], ["tickfile:/a.ticks", "tickfile:/b.ticks"]),
                       (["--config", str(f), "--feed", "tickfile:/c.ticks"], "tickfile:/c.ticks"),
                       (["--feed", "x:1", "--feed", "x:2"], ["x:1", "x:2"])):
        a = config.apply(p.parse_args(argv), p, argv)
        cfg = run_cmds.from_args(a)
        assert cfg.feed == want, argv
    assert run_cmds.from_args(config.apply(p.parse_args(["--config", str(f)]), p, ["--config", str(f)])).speed == 2.0
    for text, why in (('[[feed]]\nrate = 1.0\n', "needs uri"),
                      ('[[feed]]\nuri = "a:1"\nrate = 1.0\n[[feed]]\nuri = "b:1"\nrate = 2.0\n',
                       "feed.rate is given twice")):
        f.write_text(text)
        err = one_line_error(cli("run", "--config", str(f), "--no-doctor", "--http", "none", "--pub", "none"))
        assert str(f) in err and why in err, err


def test_a_replays_tap_holds_all_of_it_so_a_stalled_recorder_is_late_never_lapped(tmp_path, default_model, shm_name):
    """The loop never waits for its recorder: a recorder stalled longer than the tap ring takes to
    fill loses ticks (a gap in the file). A replay of tick files runs flat out (284k ticks in 0.3 s,
    and one whole-suite run lost them), so its tap is sized to hold every tick of it."""
    import subprocess
    from engine import shm
    from tests.conftest import ROOT, engine_cmd, engine_env
    big = converted("synthetic://?instruments=2&count=300000&seed=23")
    a, _ = _files()
    total = len(TickFile(big)) + len(TickFile(a))
    assert total > 1 << 18  # more than the tap's least (app/run_input.py TAP_CAPACITY)
    proc = subprocess.Popen(engine_cmd("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none",
                                       "--feed", f"tickfile:{big}", "--feed", f"tickfile:{a}", "--duration", "3",
                                       "--name", shm_name, "--record", str(tmp_path / "rec.ticks"),
                                       "--signals-out", str(tmp_path / "s.sig")),
                            cwd=ROOT, env=engine_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        tap = shm.ring_path(f"{shm_name}.tap")
        wait_until(lambda: os.path.exists(tap) or proc.poll() is not None, "the tap ring")
        size = os.stat(tap).st_size
    finally:
        err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0, err
    slots = 1 << (total - 1).bit_length()
    assert shm.ring_bytes(64, slots) <= size < shm.ring_bytes(64, 2 * slots), (size, slots)
