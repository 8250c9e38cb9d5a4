"""MoldUDP64 over loopback: a real server process, packets dropped on purpose, re-requests."""
import json
import socket
import subprocess

import numpy as np
import pytest

from engine.records import KIND_GAP
from feeds.nasdaq.moldudp64 import HEADER, packet
from feeds.core.sources import open_source

from tests.conftest import ROOT, engine_cmd, engine_env

SYN = "synthetic://?instruments=2&count=9000&seed=3"  # (with depth: about 3000 quotes and trades)
FIELDS = ("ts_event", "instrument", "kind", "side", "price", "size", "bid_px", "bid_sz", "ask_px", "ask_sz")


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def serve(port, *extra):
    return subprocess.Popen(engine_cmd("moldudp64", "serve", SYN, "--dest", f"127.0.0.1:{port}", "--json",
                                       "--linger", "0.6", "--rate", "50000", *extra),
                            cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def receive(rerequest=None, drop=()):
    from engine.records import TICK_DTYPE
    port, rport = free_port(), free_port()
    uri = f"moldudp64://127.0.0.1:{port}?date=2023-11-14&idle_s=60&start_seq=1"
    extra = ["--drop", ",".join(map(str, drop))] if drop else []
    if rerequest:
        uri += f"&rerequest=127.0.0.1:{rport}"
        extra += ["--rerequest", f"127.0.0.1:{rport}"]
    src = open_source(uri)  # listening before the server sends
    proc = serve(port, *extra)
    try:
        parts = [b.copy() for b in src.batches()]
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    ticks = np.concatenate(parts).view(TICK_DTYPE).reshape(-1)
    return ticks, src.stats(), json.loads(out)


@pytest.fixture(scope="module")
def clean():
    return receive()


def test_no_loss_gives_the_itch_file_ticks(clean, tmp_path):
    ticks, st, sent = clean
    assert st["gaps"] == st["lost_messages"] == st["bad_packets"] == 0
    assert st["messages"] == sent["messages"]
    f = tmp_path / "same.itch"
    from tests.helpers.feedutil import cli, read_all
    assert cli("convert", SYN, "--out", str(f), "--quiet").returncode == 0
    ref, _ = read_all(f"itch:{f}?date=2023-11-14")
    assert len(ticks) == len(ref) > 3000
    for k in FIELDS:
        assert np.array_equal(ticks[k], ref[k]), k


def test_dropped_packets_are_counted_exactly(clean):
    ticks, st, sent = receive(drop=(3, 10, 11, 40))
    assert sent["packets_dropped"] == 4 and sent["messages_dropped"] > 0
    gaps = ticks[ticks["kind"] == KIND_GAP]
    assert st["gaps"] == len(gaps) == 3  # 10 and 11 are one gap
    assert st["lost_messages"] == int(gaps["price"].sum()) == sent["messages_dropped"]
    assert st["messages"] == sent["messages"] - sent["messages_dropped"]


def test_rerequests_recover_every_dropped_message(clean):
    ticks, st, sent = receive(rerequest=True, drop=(0, 3, 10, 11, 40))
    assert st["gaps"] == st["lost_messages"] == 0
    assert st["recovered_messages"] == sent["messages_dropped"] > 0 and st["rerequests"] >= 4
    ref = clean[0]
    assert len(ticks) == len(ref)
    for k in FIELDS:
        assert np.array_equal(ticks[k], ref[k]), k


def test_hostile_datagrams_are_counted_and_dropped():
    port = free_port()
    src = open_source(f"moldudp64://127.0.0.1:{port}")
    out = np.zeros((64, 8), np.int64)
    pending = {}
    good = packet(b"SESSION001", 1, [b"\x00\x0cS" + bytes(11)])
    hostile = [b"", b"short", good[:25],                                   # no header / cut
               HEADER.pack(b"SESSION001", 2, 3) + b"\x00\x05abc",          # messages do not fit
               HEADER.pack(b"SESSION001", 2, 1) + b"\x00\x00",             # zero-length message
               packet(b"OTHERSESS0", 2, [b"\x00\x01S"])]                   # another session
    n = 0
    for d in [good] + hostile:
        gen = src.datagram(d, pending, out, n)
        try:
            while True:
                next(gen)
        except StopIteration as e:
            n = e.value
    st = src.stats()
    assert st["bad_packets"] == len(hostile)
    assert st["messages"] == 1 and st["gaps"] == 0 and n == 0
    src.sock.close()


def test_multicast_group_into_engine_convert(tmp_path):
    """A multicast session on loopback, received by `engine convert` (a live source: it ends with
    the session and writes its file whole)."""
    import time
    import pyarrow.parquet as pq
    from tests.helpers.feedutil import read_all
    port = free_port()
    out = tmp_path / "mc.parquet"
    conv = subprocess.Popen(engine_cmd("convert", f"moldudp64://239.7.7.7:{port}?iface=127.0.0.1&idle_s=60&start_seq=1"
                                       "&date=2023-11-14", "--out", str(out), "--quiet"),
                            cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120  # the receiver has bound (and joined) before the session starts
    while not any(f":{port:04X} " in ln for ln in open("/proc/net/udp")):
        assert conv.poll() is None and time.monotonic() < deadline, conv.stderr.read() if conv.poll() is not None else "no bind"
        time.sleep(0.05)
    srv = subprocess.run(
        engine_cmd("moldudp64", "serve", SYN, "--dest", f"239.7.7.7:{port}", "--iface", "127.0.0.1", "--linger", "0.6",
                   "--rate", "50000"), cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=120)
    assert srv.returncode == 0, srv.stderr
    _, err = conv.communicate(timeout=60)
    assert conv.returncode == 0, err
    f = tmp_path / "same.itch"
    from tests.helpers.feedutil import cli
    assert cli("convert", SYN, "--out", str(f), "--quiet").returncode == 0
    ref, _ = read_all(f"itch:{f}?date=2023-11-14")
    t = pq.read_table(out)
    assert t.num_rows == len(ref)
    for k in FIELDS:
        assert t.column(k).to_numpy().tolist() == ref[k].tolist(), k
