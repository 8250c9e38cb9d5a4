"""`engine record SOURCE... --out DIR`: real recorder processes into daily tick files, cut at a
size or at UTC midnight with no tick lost or repeated, resumed without overwriting, the venue's
raw messages beside them (a real MoldUDP64 server), and the errors a user can cause."""
import gzip
import hashlib
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from app.daily_files import label, pieces
from engine.tickfile import TickFile
from feeds.core.sources import open_source

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.data import SPOT as BINANCE
from tests.helpers.feedutil import cli, one_line_error, without_depth

TS_RECV = 2  # the tick word a live source stamps on arrival (engine/records.py)


def reference(uri):
    """Every tick word of a source read here, in one array (the unrotated truth), and the source."""
    src = open_source(uri)
    parts = [b.copy() for b in src.batches()]
    return (np.concatenate(parts) if parts else np.zeros((0, 8), np.int64)), src


def recorded(d):
    """(the tick files of a source directory in order, all their words concatenated)."""
    files = [TickFile(p) for p in pieces(d)]
    assert all(f.complete and not f.warnings for f in files), [f.warnings for f in files]
    for f in files:  # seq is the record number in its own file, so it restarts at each piece
        assert np.array_equal(f.words[:, 0], np.arange(len(f)))
    return files, np.concatenate([f.words for f in files])


def same_but_seq(a, b, skip=()):
    keep = [i for i in range(1, 8) if i not in skip]
    assert a.shape == b.shape, (a.shape, b.shape)
    assert np.array_equal(a[:, keep], b[:, keep])


def popen(*args):
    return subprocess.Popen(engine_cmd(*args), cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(pred, proc, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not pred():
        if proc.poll() is not None:
            raise AssertionError(f"{what}: the recorder ended first: {proc.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_synthetic_and_a_real_file_source_each_into_its_directory(tmp_path):
    """Two sources, one command: a process each, each in DIR/<label>/<UTC date>.ticks, complete,
    with exactly the ticks the source gives (the Binance one a slice of the real capture)."""
    cap = tmp_path / "slice.gz"
    with gzip.open(BINANCE, "rt") as f, gzip.open(cap, "wt") as g:
        g.writelines(line for _, line in zip(range(3000), f))
    syn = "synthetic://?instruments=3&seed=11&count=20000&depth=5&rate=0"  # (flat out: as the source gives them)
    out = tmp_path / "rec"
    r = cli("record", syn, f"binance:{cap}", "--out", str(out), "--json", "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    sums = [json.loads(x) for x in r.stdout.splitlines()]  # a line per source (its process)
    assert sorted(s["label"] for s in sums) == ["binance-slice.gz",
                                                "synthetic-instruments_3_seed_11_count_20000_depth_5_rate_0"]
    assert sorted(os.listdir(out)) == sorted(s["label"] for s in sums)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    for uri in (syn, f"binance:{cap}"):
        d = out / label(uri)
        files, words = recorded(d)
        assert [os.path.basename(f.path) for f in files] == [f"{day}.ticks"]
        ref, src = reference(uri)
        assert len(ref) > 1000
        same_but_seq(words, ref)
        assert files[0].instruments == list(src.instruments) and files[0].source == src.uri


def test_size_cuts_lose_and_repeat_nothing(tmp_path):
    uri = "synthetic://?instruments=2&seed=5&count=60000&depth=0&rate=0"
    r = cli("record", uri, "--out", str(tmp_path), "--rotate", "2M", "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    files, words = recorded(tmp_path / label(uri))
    assert len(files) >= 3
    for f in files:
        assert os.path.getsize(f.path) <= (2 << 20) + 8192 * 64  # SIZE, plus at most one batch
    same_but_seq(words, reference(uri)[0])
    day = os.path.basename(files[0].path)[:10]
    assert [os.path.basename(f.path) for f in files] == [f"{day}.ticks"] + [f"{day}.{k}.ticks"
                                                                           for k in range(1, len(files))]


def test_a_cut_at_utc_midnight_starts_a_piece_that_stands_alone(tmp_path):
    """The recorder's clock crosses midnight mid-stream (a clock given to it here: midnight does not
    come in a test): two files named by their days; the second starts every depth window afresh,
    so it reads alone as a consumer checks it; the market's quotes and trades run on unbroken."""
    from app.recorder import record_source
    from tests.helpers.depthbook import windows
    t = [1_893_456_000.0 - 0.3]  # 2029-12-31 23:59:59.7 UTC

    def clock():
        t[0] += 0.001  # (a call per batch: ~300 batches of 32 ticks before midnight)
        return t[0]
    uri = "synthetic://?instruments=3&seed=2&count=30000&depth=4&rate=0"  # (a batch of 32 ticks a call of clock)
    res = record_source(uri, str(tmp_path), quiet=True, clock=clock)
    d = tmp_path / label(uri)
    files, words = recorded(d)
    assert [os.path.basename(f.path) for f in files] == ["2029-12-31.ticks", "2030-01-01.ticks"]
    assert res["ticks"] == len(words) == 30000 and 5000 < len(files[0]) < 20000
    mine = without_depth(words.view(files[0].ticks.dtype).reshape(-1))
    ref = without_depth(reference(uri)[0].view(files[0].ticks.dtype).reshape(-1))
    assert len(mine) > 3000 and np.array_equal(mine[list(mine.dtype.names[1:])],  # (re-sent windows take
                                               ref[:len(mine)][list(mine.dtype.names[1:])])  # some of count=)
    windows(files[1].ticks, 4)  # raises on a level it never saw, or a touch its window does not hold


def test_a_restart_never_overwrites(tmp_path):
    """A finished piece, then a recorder killed mid-write, then another run: three pieces of the
    day, the first two byte for byte as they were left, the killed one still readable."""
    from app.recorder import record_source  # (the runs that end well run here: the same code, faster)
    uri = "synthetic://?instruments=2&seed=9&count=50000000&depth=0&rate=0"  # never ends by itself
    d = tmp_path / label(uri)
    day0 = time.strftime("%Y-%m-%d", time.gmtime())
    record_source(uri, str(tmp_path), duration=0.3, quiet=True)
    first = d / f"{day0}.ticks"
    digest = hashlib.sha256(first.read_bytes()).hexdigest()
    killed = popen("record", uri, "--out", str(tmp_path), "--quiet")
    try:
        second = d / f"{day0}.1.ticks"
        wait_for(lambda: second.exists() and second.stat().st_size > (4 << 20), killed, "the second piece grows")
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=30)
    left = second.read_bytes()
    record_source(uri, str(tmp_path), duration=0.3, quiet=True)
    if time.strftime("%Y-%m-%d", time.gmtime()) != day0:
        pytest.skip("UTC midnight passed during the test")
    assert sorted(os.listdir(d)) == [".lock", f"{day0}.1.ticks", f"{day0}.2.ticks", f"{day0}.ticks"]
    assert hashlib.sha256(first.read_bytes()).hexdigest() == digest and second.read_bytes() == left
    f = TickFile(str(second))
    assert not f.complete and len(f) > 0 and any("incomplete" in w for w in f.warnings), f.warnings
    assert TickFile(str(d / f"{day0}.2.ticks")).complete


def test_raw_itch_beside_the_ticks_reads_back_as_the_same_ticks(tmp_path):
    """One MoldUDP64 multicast session (the real server), two recorders with --raw: one whole, one
    cut by size. The whole one's .itch.zst, through `engine convert itch:`, gives the ticks it
    recorded, every word but ts_recv (live: the arrival time; a file has none, so its exchange
    time); the cut one's raw pieces are each a readable ITCH file (the stock directory again at
    the start of each), and together hold every message once."""
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    uri = f"moldudp64://239.7.7.9:{port}?iface=127.0.0.1&idle_s=60&start_seq=1&date=2023-11-14"
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    recs = [popen("record", uri, "--out", str(whole), "--raw", "--quiet", "--json"),
            popen("record", uri, "--out", str(cut), "--raw", "--rotate", "2M", "--quiet", "--json")]
    try:
        for out, p in zip((whole, cut), recs):  # each has its socket before it has its first file
            wait_for(lambda: (out / label(uri)).is_dir() and pieces(out / label(uri)), p, "listening")
        srv = cli("moldudp64", "serve", "synthetic://?instruments=3&seed=4&count=40000", "--dest",
                  f"239.7.7.9:{port}", "--iface", "127.0.0.1", "--linger", "0.5", "--rate", "100000", "--json")
        assert srv.returncode == 0, srv.stderr[-2000:]
        sent = json.loads(srv.stdout)
        res = [json.loads(p.communicate(timeout=120)[0]) for p in recs]
    finally:
        for p in recs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert all(p.returncode == 0 for p in recs)
    for r in res:
        assert r["stats"]["gaps"] == 0 and r["stats"]["messages"] == sent["messages"], r["stats"]
    # the whole session: its raw file converts into the ticks recorded
    (f,), words = recorded(whole / label(uri))
    raw = whole / label(uri) / os.path.basename(f.path).replace(".ticks", ".itch.zst")
    assert res[0]["files"][0]["raw"] == str(raw)
    back = tmp_path / "back.ticks"
    r = cli("convert", f"itch:{raw}?date=2023-11-14", "--out", str(back), "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    b = TickFile(str(back))
    assert b.instruments == f.instruments and len(b) > 20000
    same_but_seq(words, b.words, skip=(TS_RECV,))
    assert not np.array_equal(words[:, TS_RECV], b.words[:, TS_RECV])
    # the cut session: every piece has its raw piece, each readable; the messages add up
    files, _ = recorded(cut / label(uri))
    assert len(files) >= 2 and [x["ticks"] for x in res[1]["files"]] == [p.path for p in files]
    messages = 0
    for k, piece in enumerate(files):
        rp = piece.path[:-len(".ticks")] + ".itch.zst"
        src = open_source(f"itch:{rp}?date=2023-11-14")
        n = sum(len(x) for x in src.batches())
        st = src.stats()
        assert st["instruments"] == 3 and src.instruments == f.instruments and n > 0
        messages += st["messages"] - (3 if k else 0)  # (each later piece starts with the 3 directory messages)
    assert messages == sent["messages"]


def _silent_live_source():
    """A moldudp64 URI on a free loopback port that nothing sends to: it would wait 600 s for data."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"moldudp64://127.0.0.1:{s.getsockname()[1]}?idle_s=600"


def test_raw_from_a_source_that_has_none_is_one_line_before_anything_starts(tmp_path):
    """--raw with a source that cannot give raw messages: one line naming it, and no source of the
    command opened (the live one's port stays free) and nothing made."""
    live = _silent_live_source()
    bad = "synthetic://?instruments=2&seed=1&count=1000"
    line = one_line_error(cli("record", live, bad, "--out", str(tmp_path / "b"), "--raw", timeout=120))
    assert bad in line and "--raw" in line
    assert not (tmp_path / "b").exists()


def test_a_source_that_fails_at_start_stops_the_others(tmp_path):
    """A source that fails when opened (here a file that is not there) ends the command with its one
    line; a live source started beside it, which would wait 600 s for data, is stopped with it."""
    live = _silent_live_source()
    bad = f"itch:{tmp_path / 'missing.itch'}"
    res = cli("record", live, bad, "--out", str(tmp_path / "b"), timeout=120)  # (a live one left running: timeout)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "missing.itch" in res.stderr
    made = os.listdir(tmp_path / "b") if (tmp_path / "b").exists() else []
    assert label(bad) not in made and set(made) <= {label(live)}


def test_two_sources_of_one_label_are_refused_before_anything_starts(tmp_path):
    from app.recorder import record_sources
    with pytest.raises(ValueError, match="both be recorded into .*tickfile-day.ticks"):
        record_sources(["tickfile:/x/day.ticks", "tickfile:/y/day.ticks"], str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_full_disk_leaves_the_file_incomplete_and_one_line_naming_it(tmp_path):
    from tests.helpers.small_fs import small_fs
    d = tmp_path / "fs"
    with small_fs(d, "2m") as fill:
        fill(1 << 20)  # (the recorder writes 256 KiB at a time: a few writes fit)
        uri = "synthetic://?instruments=2&seed=3&count=200000&depth=0"
        r = cli("record", uri, "--out", str(d), "--quiet")
        (path,) = pieces(d / label(uri))
        line = one_line_error(r)
        assert path in line and "No space left on device" in line, line
        f = TickFile(path)
        assert len(f) > 0 and any("incomplete" in w and "No space left on device" in w for w in f.warnings)
