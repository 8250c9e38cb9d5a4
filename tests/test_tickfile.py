"""Tick files: every field round-trips, seeking, damage is reported, files read while written."""
import os

import numpy as np
import pytest

from engine.records import KIND_GAP, KIND_QUOTE, KIND_TRADE, TICK_DTYPE
from engine.tickfile import BLOCK, CRC_AREA, TickFile, TickFileError, TickFileWriter

from tests.helpers.feedutil import cli, read_all


def random_ticks(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.zeros(n, TICK_DTYPE)
    t["ts_event"] = 1_700_000_000 * 10**9 + np.cumsum(rng.integers(1, 10**6, n))
    t["ts_recv"] = t["ts_event"] + rng.integers(0, 10**5, n)
    for f in ("price", "bid_px", "ask_px"):
        t[f] = rng.integers(-2**62, 2**62, n)
    for f in ("size", "bid_sz", "ask_sz"):
        t[f] = rng.integers(0, 2**32, n, dtype=np.uint64)
    t["instrument"] = rng.integers(0, 2**16, n)
    t["kind"] = rng.choice([KIND_QUOTE, KIND_TRADE, KIND_GAP], n)
    t["side"] = rng.integers(0, 256, n)
    t["seq"] = rng.integers(0, 2**63, n)  # the writer numbers records itself
    return t


def write(path, ticks, chunks=3, instruments=("A", "B")):
    w = TickFileWriter(path, instruments, source="test://x")
    for part in np.array_split(ticks, chunks):
        w.append(part)
    w.close()


def test_every_field_round_trips_and_seq_is_the_record_number(tmp_path):
    t = random_ticks(3 * BLOCK + 17)
    p = tmp_path / "a.ticks"
    write(p, t)
    f = TickFile(p)
    assert f.complete and len(f) == len(t) and f.instruments == ["A", "B"] and f.source == "test://x"
    assert f.header_size % 4096 == 0 and f.ticks.base is not None  # a view of the mapping, not a copy
    for name in TICK_DTYPE.names:
        want = np.arange(len(t), dtype=np.uint64) if name == "seq" else t[name]
        assert np.array_equal(f.ticks[name], want), name
    assert len(f.index) == 4


def test_seek_by_exchange_time(tmp_path):
    t = random_ticks(5 * BLOCK)
    p = tmp_path / "a.ticks"
    write(p, t)
    f = TickFile(p)
    for k in (0, 1, BLOCK - 1, BLOCK, 3 * BLOCK + 5, len(t) - 1):
        assert f.seek(int(t["ts_event"][k])) == k
    assert f.seek(int(t["ts_event"][-1]) + 1) == len(t)


@pytest.mark.parametrize("damage", ["cut_records", "cut_index", "flip_record", "flip_header", "flip_index",
                                    "not_a_tick_file", "empty"])
def test_damaged_files_are_reported_never_misread(tmp_path, damage):
    p = tmp_path / "a.ticks"
    write(p, random_ticks(2 * BLOCK + 3))
    raw = bytearray(p.read_bytes())
    hs = TickFile(p).header_size
    if damage == "cut_records":
        raw = raw[:hs + 1000 * 64]
    elif damage == "cut_index":
        raw = raw[:-7]
    elif damage == "flip_record":
        raw[hs + 64 * 5000 + 9] ^= 0x40
    elif damage == "flip_header":
        raw[70] ^= 1  # inside the metadata, of the header and of its spare copy
        raw[(hs - CRC_AREA) // 2 + 70] ^= 1
    elif damage == "flip_index":
        raw[-30] ^= 1
    elif damage == "not_a_tick_file":
        raw[:8] = b"NOTTICKS"
    else:
        raw = bytearray()
    p.write_bytes(bytes(raw))
    with pytest.raises(TickFileError, match=str(p)):
        TickFile(p)
    res = cli("backtest", str(p), "--out", str(tmp_path / "bt"), "--quiet")
    assert res.returncode == 2 and "Traceback" not in res.stderr and str(p) in res.stderr
    assert not (tmp_path / "bt").exists()  # nothing written for a bad input


def test_a_file_being_written_reads_up_to_its_last_complete_record(tmp_path):
    p = tmp_path / "live.ticks"
    t = random_ticks(1000)
    w = TickFileWriter(p, ["A"])
    w.append(t[:600])
    f = TickFile(p)
    assert not f.complete and len(f) == 600 and f.unchecked == 600
    assert "600 records past the last checked block are unchecked" in f.warnings[0]
    end = w.header_size + 600 * 64
    os.pwrite(w.fd, b"\x01" * 40, end)  # a torn record at the end (a write in progress)
    g = TickFile(p)
    assert len(g) == 600 and "a torn last record (40 bytes) is not read" in g.warnings[0]
    os.ftruncate(w.fd, end)
    w.append(t[600:])
    w.close()
    g = TickFile(p)
    assert g.complete and len(g) == 1000 and np.array_equal(g.ticks["price"], t["price"])
    assert np.array_equal(f.ticks["price"], t["price"][:600])  # the earlier mapping is still valid


def test_a_damaged_header_is_read_from_its_spare_copy_and_says_so(tmp_path):
    p = tmp_path / "a.ticks"
    write(p, random_ticks(BLOCK + 3))
    raw = bytearray(p.read_bytes())
    raw[70] ^= 1  # the header at 0 only: as a writer killed while rewriting it leaves it
    p.write_bytes(bytes(raw))
    f = TickFile(p)
    assert f.complete and len(f) == BLOCK + 3 and f.instruments == ["A", "B"]
    assert "read from its spare copy" in f.warnings[0] and str(p) in f.warnings[0]


def test_convert_to_ticks_and_read_back_as_a_source(tmp_path):
    uri = "synthetic://?instruments=3&count=20000&seed=4"
    out = tmp_path / "s.ticks"
    res = cli("convert", uri, "--out", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    a, _ = read_all(uri)
    b, src = read_all(f"tickfile:{out}")
    assert src.instruments == ["SYN0000", "SYN0001", "SYN0002"]
    assert np.array_equal(b["seq"], np.arange(len(a)))
    for f in TICK_DTYPE.names[1:]:
        assert np.array_equal(a[f], b[f]), f
