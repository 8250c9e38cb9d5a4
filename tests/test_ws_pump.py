"""The native reader's calls (feeds/transport/netcalls.py) on real sockets: recv_into's bytes, -EAGAIN on an
empty socket and 0 at the end of the stream; poll_two's mask for the socket and the wake eventfd and
its timeout; a Pump blocked in poll stopped by its eventfd, its cut frame handed back; and the sink
read and the pump are compiled with."""
import asyncio
import os
import socket
import threading
import time

import numpy as np
import pytest
from numba import njit

from feeds.transport import netcalls
from feeds.binance.pump import W_STOPPED


@njit(nogil=True)
def _recv(fd, buf, off, n):
    return netcalls.recv_into(fd, buf, off, n, netcalls.MSG_DONTWAIT)


@njit(nogil=True)
def _poll(a, b, ms):
    return netcalls.poll_two(a, b, ms)


def test_recv_and_poll_on_a_socket_pair():
    a, b = socket.socketpair()
    wake = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        buf = np.zeros(16, np.uint8)
        assert _recv(b.fileno(), buf, 0, 16) == -netcalls.EAGAIN
        t = time.monotonic()
        assert _poll(b.fileno(), wake, 50) == 0  # (the timeout: nothing to read)
        assert time.monotonic() - t >= 0.04
        a.sendall(b"hello")
        assert _poll(b.fileno(), wake, -1) == 1
        assert _recv(b.fileno(), buf, 3, 10) == 5 and bytes(buf[3:8]) == b"hello" and not buf[:3].any()
        os.eventfd_write(wake, 1)
        assert _poll(b.fileno(), wake, -1) == 2
        a.sendall(b"x")
        assert _poll(b.fileno(), wake, -1) == 3
        assert _recv(b.fileno(), buf, 0, 16) == 1
        a.close()
        assert _poll(b.fileno(), wake, -1) & 1  # (the end of the stream is readable)
        assert _recv(b.fileno(), buf, 0, 16) == 0
        assert _recv(-1, buf, 0, 16) == -9  # EBADF
        assert _poll(-1, -1, 0) == 0  # (negative fds are skipped, as poll(2) says)
    finally:
        b.close()
        os.close(wake)


@pytest.mark.parametrize("spin", [False, True], ids=["polling", "spinning"])
def test_a_waiting_pump_stops_at_once_and_hands_back_a_cut_frame(spin):
    """A Pump over a websocket-like stream (a real socket pair) with a frame cut short: waiting for
    more (blocked in poll, or spinning on recv), stop() ends it (the eventfd wakes the poll); the cut
    frame's bytes come back for Python to finish."""
    from feeds.binance import read as binance_read
    from feeds.binance.capture import Scanner
    from feeds.binance.pump import Pump
    a, b = socket.socketpair()
    loop = asyncio.new_event_loop()
    try:
        sc = Scanner("x", strict=False, quote=True, size_div=1000, depth=1)
        core = sorted(os.sched_getaffinity(0))[-1]
        pump = Pump(spin, 1 << 20, core)  # (reader_core=: the thread pins itself there)
        done = []
        class Proto(asyncio.Protocol):  # (a real transport over b: what Pump pauses and reads beside)
            def connection_made(self, transport):
                self.transport = transport
        _, proto = loop.run_until_complete(loop.create_connection(Proto, sock=b))
        cut = bytes([0x81, 126, 0, 200]) + b"{" * 50  # (a 200-byte text frame, 50 bytes of it sent)
        a.sendall(cut)
        args = (sc.table(), sc.top, np.zeros((64, 8), np.int64), binance_read.throwaway_publish(), 0, 0, 0)
        pump.compile(args)  # (as the source does before its first connection: a cold cache compiles here, not in
        pump.start(proto, args, 0, lambda: done.append(1))  # the thread while the deadlines below run)
        deadline = time.monotonic() + 10
        while pump.ctl[4] < 1 and time.monotonic() < deadline:  # (C_READS: it read the cut frame)
            time.sleep(0.01)
        assert not proto.transport.is_reading() and pump.running and not done
        assert os.sched_getaffinity(pump.thread.native_id) == {core}
        res = []
        stopper = threading.Thread(target=lambda: res.append(pump.stop()), daemon=True)
        stopper.start()
        stopper.join(30)  # (a pump that missed its wake would block in poll for good)
        assert res, "the pump did not wake"
        why, err, n, *_ = res[0]
        assert why == W_STOPPED and n == len(cut) and bytes(pump.buf[:n]) == cut
        assert not pump.running and pump.starts == 1
    finally:
        a.close()
        loop.close()
        b.close()


def test_the_compile_sink_takes_real_publishes():
    """binance_read.throwaway_publish() (what read and the pump are compiled with) is a real sink,
    kept alive: reads that publish through it land in its one-record ring and its histograms, the
    same table every call (over arrays freed on return, one such publish wrote freed memory)."""
    from engine import shm
    from feeds.binance import read as binance_read
    from feeds.binance.capture import Scanner
    from feeds.core.feed_latency import HIST, OFF, OFF_N
    sc = Scanner("x", strict=False, quote=True, size_div=1000, depth=1)
    event_ms = 1723161256322
    msg = (b'{"stream":"btcusdt@trade","data":{"e":"trade","E":%d,"T":%d,"s":"BTCUSDT",'
           b'"t":5266583935,"p":"61800.30","q":"0.006","X":"MARKET","m":false}}' % (event_ms, event_ms))
    # (received 1.2 ms after its event: a latency on one clock, feed_latency.on_one_clock; a stamp
    # more than MAX_SKEW_NS before the event is counted off the clock, not in the histogram)
    stamp = np.frombuffer(b"%d " % (event_ms * 1_000_000 + 1_176_367), np.uint8)
    frame = np.frombuffer(bytes([0x81, 126, 0, len(msg)]) + msg, np.uint8)
    lines = np.zeros(4096, np.uint8)
    ro = lines.view()
    ro.flags.writeable = False
    P = binance_read.throwaway_publish()
    published = 0
    for _ in range(50):
        r = binance_read.read(frame, len(frame), stamp, lines, ro, 1 << 20,
                              sc.table(), sc.top, np.zeros((64, 8), np.int64), P, 0, 0, 0, 0)
        published += r[11]
    hdr, _, feed, f2t = binance_read._SINK[0][:4]
    assert binance_read.throwaway_publish() is P and published > 0
    assert hdr[shm.H_WRITE] == published and f2t[0].sum() == published
    assert feed[OFF, OFF_N] == 0 and feed[HIST].sum() == published
