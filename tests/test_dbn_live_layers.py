"""dbn-live's layers, each on its own (the whole source against the fake gateway: tests/test_dbn_live.py):
the TCP link (feeds/databento/gateway_link.py) against a loopback peer, the gateway protocol's lines
(gateway_protocol.py), the DBN live stream's scan and control records (live_stream.py) on records
made by Databento's own `databento_dbn`, and the session's backoff, gap and silence rules
(gateway_session.py)."""
import socket
import threading
from collections import Counter

import numpy as np
import pytest

from feeds.databento.gateway_link import Dropped, GatewayLink, run_blocking as drive
from feeds.databento.gateway_protocol import (SYMBOL_BATCH, Subscription, auth_line, control_line, parse_control,
                                              subscription_lines)
from feeds.databento.gateway_session import MIN_BACKOFF_S, Backoff, GatewaySession
from feeds.databento.live_stream import (ACC_DATA, ACC_SNAPSHOT, ERROR, HEARTBEAT, LAT_BINS, MAPPING, NACC, SC_BROKEN,
                                         SC_CONTROL, SC_DATA, SYSTEM, ControlRecords, decode_control, metadata_size,
                                         percentile_us, scan)

KEY = "db-0123456789abcdefXYZab"


class Peer:
    """A loopback listener that sends `say` to its one client, then (close=True) closes, or
    stays silent; what the client sent is in `heard`."""

    def __init__(self, say=b"", close=True):
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.heard = b""
        self.say, self.close_after = say, close
        self.done = threading.Event()
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        c, _ = self.srv.accept()
        with c:
            c.sendall(self.say)
            if not self.close_after:
                self.done.wait(60)
                return
            c.shutdown(socket.SHUT_WR)
            c.settimeout(10)
            try:
                while chunk := c.recv(65536):
                    self.heard += chunk
            except OSError:  # (reset by a client that closed with our bytes unread)
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.t.join(10)
        self.srv.close()


def unused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there
    return port


# --- transport ---------------------------------------------------------------------------------

def test_link_reads_lines_then_the_rest_into_the_receive_buffer_and_sees_the_close():
    with Peer(b"lsg_version=1\ncram=abc\nDBN\x03rest") as peer:
        link = GatewayLink("127.0.0.1", peer.port, 10.0)
        drive(link.open())
        assert link.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)  # a half-open TCP ends too
        assert drive(link.read_line("greeting")) == b"lsg_version=1\n"
        assert drive(link.read_line("authentication")) == b"cram=abc\n"
        link.send(b"auth=x\n")
        got = link.take_buffered()
        rx = np.zeros(64, np.uint8)
        while True:  # what came after the lines, then the peer's close
            try:
                k = link.receive(memoryview(rx)[len(got):], 20)
            except Dropped as e:
                assert str(e) == f"127.0.0.1:{peer.port} closed the connection"
                break
            got += rx[len(got):len(got) + k].tobytes()
        assert got == b"DBN\x03rest"
        link.close()
        assert link.sock is None
    assert peer.heard == b"auth=x\n"


def test_link_refused_silent_and_endless_peers_are_dropped():
    port = unused_port()
    with pytest.raises(Dropped, match=f"cannot connect to 127.0.0.1:{port}"):
        drive(GatewayLink("127.0.0.1", port, 10.0).open())
    with Peer(close=False) as peer:  # connects, never says a word
        link = GatewayLink("127.0.0.1", peer.port, 0.2)
        drive(link.open())
        with pytest.raises(Dropped, match=f"greeting: no answer from 127.0.0.1:{peer.port} within 0.2 s"):
            drive(link.read_line("greeting"))
        link.close()
    with Peer(b"x" * 70_000) as peer:  # no line end
        link = GatewayLink("127.0.0.1", peer.port, 10.0)
        drive(link.open())
        with pytest.raises(Dropped, match="sent no line end in 64 KiB: not a Databento gateway"):
            drive(link.read_line("greeting"))
        link.close()


# --- the gateway protocol ----------------------------------------------------------------------

def test_auth_line_answers_the_challenge_as_the_official_client_and_never_carries_the_key():
    cram = pytest.importorskip("databento.common.cram")
    line = auth_line("chal-42", KEY, "GLBX.MDP3", 7)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    f = parse_control(line)
    assert f["auth"] == cram.get_challenge_response("chal-42", KEY)
    assert f["auth"].endswith("-" + KEY[-5:])
    assert (f["dataset"], f["encoding"], f["heartbeat_interval_s"], f["compression"]) == ("GLBX.MDP3", "dbn", "7", "none")
    assert KEY not in line.decode()


def test_subscription_lines_carry_500_symbols_each_the_last_marked():
    symbols = tuple(f"S{i}" for i in range(2 * SYMBOL_BATCH + 1))
    lines = [parse_control(x) for x in subscription_lines("mbo", symbols, start=123, snapshot=True)]
    assert [len(x["symbols"].split(",")) for x in lines] == [500, 500, 1]
    assert sum((x["symbols"].split(",") for x in lines), []) == list(symbols)
    assert [x["is_last"] for x in lines] == ["0", "0", "1"]
    assert all(x["schema"] == "mbo" and x["stype_in"] == "raw_symbol" and x["start"] == "123"
               and x["snapshot"] == "1" for x in lines)
    one = subscription_lines("trades", ("ESH4",))
    assert one == [b"schema=trades|stype_in=raw_symbol|symbols=ESH4|snapshot=0|is_last=1\n"]  # no start
    assert control_line(start_session=0) == b"start_session=0\n"


# --- the DBN live stream -----------------------------------------------------------------------

def mbo(ts, flags=0x80, delay=1_000_000, iid=7):
    import databento_dbn as dbn
    return bytes(dbn.MBOMsg(1, iid, ts, 1, 100 * 10**9, 1, dbn.Action.ADD, dbn.Side.BID, ts + delay, flags=flags))


def test_scan_stops_at_control_records_and_broken_framing_and_times_the_data():
    import databento_dbn as dbn
    snap = mbo(5, flags=0x20 | 0x08)  # a snapshot record: not a latency
    ctl = bytes(dbn.SystemMsg(0, "Heartbeat", code=dbn.SystemCode.HEARTBEAT))
    data = [mbo(10 + i) for i in range(3)]
    stream = snap + data[0] + data[1] + ctl + data[2]
    b = np.frombuffer(stream + data[0][:20], np.uint8)  # ends inside a record
    hist, acc = np.zeros(LAT_BINS, np.int64), np.zeros(NACC, np.int64)
    at = len(snap) + 2 * len(data[0])
    assert scan(b, 0, len(b), hist, acc) == (at, SC_CONTROL)
    assert scan(b, at + len(ctl), len(b), hist, acc) == (len(stream), SC_DATA)  # the partial record waits
    assert acc[ACC_DATA] == 4 and acc[ACC_SNAPSHOT] == 1 and hist.sum() == 3
    assert abs(percentile_us(hist, 0.5) - 1000) <= 70  # 1 ms each, 16 bins an octave
    bad = np.frombuffer(data[0] + b"\x03" + data[1][1:], np.uint8)  # a length of 12 bytes: framing lost
    assert scan(bad, 0, len(bad), hist, acc) == (len(data[0]), SC_BROKEN)


def test_metadata_size_refuses_what_is_not_dbn_or_too_large():
    assert metadata_size(b"DBN\x03" + (100).to_bytes(4, "little"), "gw:1") == 108
    with pytest.raises(ValueError, match="gw:1 sent no DBN stream after start_session"):
        metadata_size(b"HTTP/1.1", "gw:1")
    with pytest.raises(ValueError, match="DBN metadata of 4294967303 bytes from gw:1: too large"):
        metadata_size(b"DBN\x03\xff\xff\xff\xff", "gw:1")


def test_control_records_decode_in_dbn_v1_and_v3():
    import databento_dbn as dbn
    R = dbn.SType.RAW_SYMBOL
    v3 = [bytes(dbn.SymbolMappingMsg(1, 17077, 0, R, "ESH4", R, "ESH4", 0, 0)),
          bytes(dbn.SystemMsg(0, "Heartbeat", code=dbn.SystemCode.HEARTBEAT)),
          bytes(dbn.SystemMsg(0, "slow", code=dbn.SystemCode.SLOW_READER_WARNING)),
          bytes(dbn.ErrorMsg(0, "bad\nthing", code=dbn.ErrorCode.INTERNAL_ERROR))]
    v1 = [bytes(dbn.SymbolMappingMsgV1(1, 17077, 0, "ESH4", "ESH4", 0, 0)), bytes(dbn.SystemMsgV1(0, "Heartbeat 1")),
          bytes(dbn.SystemMsgV1(0, "slow")), bytes(dbn.ErrorMsgV1(0, "bad\nthing"))]
    want = [(MAPPING, 17077, "ESH4"), (HEARTBEAT, 0, "Heartbeat"), (SYSTEM, 0, "slow"), (ERROR, 0, "bad\nthing")]
    assert [decode_control(r[:r[0] * 4], 3) for r in v3] == want
    want[1] = (HEARTBEAT, 0, "Heartbeat 1")
    assert [decode_control(r[:r[0] * 4], 1) for r in v1] == want
    assert decode_control(v3[0][:80], 3) is None  # a mapping too short for its symbol


def test_control_records_map_only_the_uris_symbols_once_per_session():
    import databento_dbn as dbn
    R = dbn.SType.RAW_SYMBOL

    def mapping(iid, sym):
        return bytes(dbn.SymbolMappingMsg(1, iid, 0, R, sym, R, sym, 0, 0))
    counts, bound, said = Counter(), [], []
    c = ControlRecords("dbn-live://X", ("NOPE4", "ESH4", "ESM4", "ESH4"), counts, lambda i, k: bound.append((i, k)),
                       said.append)
    assert c.declared == {"NOPE4": 0, "ESH4": 1, "ESM4": 2}
    for rec in (mapping(5, "ESH4"), mapping(5, "ESH4"), mapping(6, "ESH4"), mapping(5, "ESM4"), mapping(9, "ZZ\x1b")):
        assert c.apply(rec) == MAPPING
    assert bound == [(5, 1)]  # the same mapping again is no news
    assert counts == {"mapping_conflicts": 2, "unsubscribed_mappings": 1}
    assert "gateway mapped id 6 to ESH4 but ESH4 is id 5 in this session: ignored" in said[0]
    assert "gateway mapped id 5 to ESM4 but id 5 is ESH4 in this session: ignored" in said[1]
    assert said[2].endswith(r"gateway mapped id 9 to ZZ\x1b, a symbol not subscribed: ignored")
    c.new_session(3)  # a new session maps afresh
    c.apply(mapping(6, "ESH4"))
    assert bound == [(5, 1), (6, 1)]
    beat = bytes(dbn.SystemMsg(0, "Heartbeat", code=dbn.SystemCode.HEARTBEAT))
    err = bytes(dbn.ErrorMsg(0, "disk\x1b[2J full", code=dbn.ErrorCode.INTERNAL_ERROR))
    assert [c.apply(r) for r in (beat, err)] == [HEARTBEAT, ERROR]
    assert counts["heartbeats"] == 1 and counts["gateway_errors"] == 1 and c.last_error == "disk\x1b[2J full"
    assert said[-1] == r"dbn-live://X: gateway error: disk\x1b[2J full"


# --- the session -------------------------------------------------------------------------------

def test_backoff_doubles_to_its_cap_with_jitter_and_starts_again_after_a_reset():
    top = Backoff(0.5, 30.0, uniform=lambda a, b: b)
    assert [top.next() for _ in range(9)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    top.reset()
    assert top.next() == 0.5
    low = Backoff(0.5, 30.0, uniform=lambda a, b: a)
    assert [low.next() for _ in range(4)] == [0.25, 0.5, 1, 2]
    real = Backoff(0.5, 30.0)
    for k in range(40):  # (2^attempt is capped: no overflow however long the outage)
        d = real.next()
        ceiling = min(30.0, 0.5 * 2 ** k)
        assert 0.5 * ceiling <= d <= ceiling
    assert Backoff(0, 1, uniform=lambda a, b: b).next() == MIN_BACKOFF_S


def session(port, **kw):
    counts, said = Counter(), []
    sub = Subscription("GLBX.MDP3", "mbo", ("ESH4",), 30)
    s = GatewaySession("dbn-live://GLBX.MDP3", ("127.0.0.1", port), KEY, sub,
                       Backoff(MIN_BACKOFF_S, MIN_BACKOFF_S), counts, said.append, lambda: False, **kw)
    return s, counts, said


def test_a_lost_session_is_one_gap_however_many_attempts_fail():
    s, counts, said = session(unused_port(), timeout_s=5.0)
    assert not s.lost("first attempt failed")  # nothing streamed: no gap
    s.streamed = True
    assert s.lost("connection reset") and not s.lost("connection reset")
    assert counts["gaps"] == 1 and said[-1] == "dbn-live://GLBX.MDP3: connection reset; reconnecting"
    for _ in range(2):
        assert drive(s.reconnect()) is None and s.link is None
    assert counts["connect_failures"] == 2 and counts["reconnects"] == 0 and counts["gaps"] == 1
    assert "reconnect failed: cannot connect to 127.0.0.1:" in said[-1] and "next try in" in said[-1]
    assert s.silence(s.last_rx + 5.0) is None
    assert s.silence(s.last_rx + 6.5) == f"127.0.0.1:{s.gateway[1]} silent for 6.5 s (timeout_s=5)"
    assert counts["timeouts"] == 1
    assert not s.idle(1e9)  # idle_s=0: never idle
