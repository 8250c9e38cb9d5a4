"""A live websocket read by a native thread: recv, deframe, scan and publish with no Python per read
(`binance-live://...&reader=native`, or `reader=spin`).

Why: at a live feed's pace, a read that enters Python first pays for the interpreter's and numba's
dispatch memory, cold again after every idle millisecond on a shared host: on this VM the Python
read callback's frame-to-tick was 21-50 us p50 and ~150 us p99 even with the event loop spinning
(bench/live.py). Here one numba function (pump) loops: wait for the socket (poll, or spin on recv
for `spin`), recv, read the clock, and run feeds/binance_read.read on the bytes (deframe, scan,
book, ticks into the ring): ~2 us p50 a small frame at pace here.

The handover (the only seam between this thread and the source's own):
- The pump runs only in the steady state: the active connection, nothing queued before its reads,
  every book synced, no snapshot asked, no standby, no raw recording. It reads a dup of the
  socket's fd, the event loop's reading paused, so nothing else reads or publishes meanwhile.
- It returns to Python on anything else, before reading further: a control frame or a bad one,
  a scan that stopped (a table to grow, out full), a symbol that needs a snapshot, the end of the
  stream or an error, or a stop asked (ctl[C_STOP] set, then the eventfd written). Python then
  finishes that read the way the read callback would (what is left of its bytes goes back through
  feeds/ws_client.WsProtocol, a frame cut at the end into its buffer), and resumes reading.
- Counters it keeps in ctl (frames, the clock of the last read that completed a frame, ticks published) are folded into the
  source's own between event-loop steps.
"""
import os
import threading

import numpy as np
from engine.jit import njit

from engine.intrinsics import cpu_pause, load_acquire, monotonic_ns, store_relaxed
from engine.readonly import read_only
from feeds.binance import read as binance_read
from feeds.binance.layout import R_DONE
from feeds.transport.netcalls import EAGAIN, EINTR, MSG_DONTWAIT, poll_two, readonly, recv_into
from feeds.transport.ws_client import D_MORE, LINE_EXTRA

C_STOP, C_FRAMES, C_LAST_NS, C_PUB, C_READS = range(5)
W_STOPPED, W_EOF, W_ERROR, W_PYTHON = range(4)  # why pump returned
READ_MAX = 256 << 10  # bytes asked of one recv


@njit(nogil=True, cache=True)
def _stamp(stamp, v):
    """v's decimal digits and a space into stamp; its length."""
    nd, t = 1, v // 10
    while t > 0:
        nd += 1
        t //= 10
    for i in range(nd - 1, -1, -1):
        stamp[i] = 48 + v % 10
        v //= 10
    stamp[nd] = 32
    return nd + 1


@njit(nogil=True, cache=True)
def pump(fd, wake_fd, spin, ctl, buf, stamp, lines, offset, max_frame, H, top, out, P, mask, limit_ns, nsym):
    """Read fd until a reason to stop (module doc). Returns (why, errno, n, used, written, deframe
    status, scan stop, ticks, scan status, wants a snapshot, receive ns): the last read's buf[:n],
    buf[used:n] not taken apart, its lines lines[:written] scanned up to `scan stop` with that many
    ticks in out (unpublished unless scan status is R_DONE). buf holds max_frame plus a read;
    lines LINE_EXTRA * (len(buf) // 2 + 1) more."""
    lines_ro = readonly(lines)
    have = 0
    now = 0
    while True:
        if load_acquire(ctl, C_STOP) != 0:
            return W_STOPPED, 0, have, 0, 0, D_MORE, 0, 0, R_DONE, False, now
        if not spin:
            ev = poll_two(fd, wake_fd, -1)
            if ev == -EINTR:
                continue
            if ev < 0:
                return W_ERROR, -ev, have, 0, 0, D_MORE, 0, 0, R_DONE, False, now
            if ev & 2:
                continue  # (woken: the stop flag is set)
        k = recv_into(fd, buf, have, min(READ_MAX, buf.shape[0] - have), MSG_DONTWAIT)
        if k == -EAGAIN or k == -EINTR:
            if spin:
                cpu_pause()
            continue
        if k <= 0:
            return (W_EOF if k == 0 else W_ERROR), -k, have, 0, 0, D_MORE, 0, 0, R_DONE, False, now
        now = monotonic_ns()
        ns = _stamp(stamp, now + offset)
        n = have + k
        used, w, frames, st, op, fin, s, ln, pos, nt, r, pub, want = binance_read.read(
            readonly(buf[:n]), n, readonly(stamp[:ns]), lines, lines_ro, max_frame, H, top, out, P, mask, offset,
            limit_ns, nsym)
        store_relaxed(ctl, C_FRAMES, ctl[C_FRAMES] + frames)
        store_relaxed(ctl, C_PUB, ctl[C_PUB] + pub)
        store_relaxed(ctl, C_READS, ctl[C_READS] + 1)
        if frames > 0:  # (the last whole frame's time: silence is not broken by a frame's pieces)
            store_relaxed(ctl, C_LAST_NS, now)
        if st != D_MORE or r != R_DONE or want or n - used >= buf.shape[0] - READ_MAX:
            return W_PYTHON, 0, n, used, w, st, pos, nt, r, want, now
        have = n - used
        for i in range(have):  # (a frame cut by the read: to the front)
            buf[i] = buf[used + i]


class Pump:
    """The thread that runs pump over one connection at a time, and its buffers (kept between runs)."""

    def __init__(self, spin, max_frame, core=-1):
        self.spin, self.max_frame, self.core = bool(spin), max_frame, core  # (core: the thread's CPU, -1 any)
        self.ctl = np.zeros(8, np.int64)
        self.buf = np.empty(max_frame + 2 * READ_MAX, np.uint8)
        self.lines = np.empty(len(self.buf) + LINE_EXTRA * (len(self.buf) // 2 + 1), np.uint8)
        self.lines_ro = read_only(self.lines)  # (what the scanner reads when Python finishes a read)
        self.stamp = np.zeros(32, np.uint8)
        self.thread = self.result = self.error = None
        self.fd = self.wake_fd = -1
        self.seen = (0, 0)  # (frames, ticks) already folded into the source's counters
        self.starts = self.reads = self.reads_before = self.ticks = 0  # over every run: how much the thread took

    @property
    def running(self):
        return self.thread is not None

    def compile(self, args):
        """pump compiled (or loaded from the cache) on throwaway arrays: it returns at once (stop set)."""
        ctl = np.ones(8, np.int64)
        pump(-1, -1, self.spin, ctl, np.zeros(2 * READ_MAX + 16, np.uint8), self.stamp, self.lines[:64], 0,
             self.max_frame, *args)

    def start(self, proto, args, offset, done):
        """Read proto's socket (its event-loop reading paused) with pump(..., *args); done() is called
        from the thread when pump returns by itself."""
        sock = proto.transport.get_extra_info("socket")
        self.fd = os.dup(sock.fileno())  # (its own fd: closing the transport never hands ours to another socket)
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        proto.transport.pause_reading()
        self.reads_before = self.reads
        self.ctl[:] = 0
        self.seen = (0, 0)
        self.result = self.error = None
        self.starts += 1
        fd, wake = self.fd, self.wake_fd

        def run():
            try:
                if self.core >= 0:  # (this thread only: Linux applies it to the caller)
                    os.sched_setaffinity(0, (self.core,))
                self.result = pump(fd, wake, self.spin, self.ctl, self.buf, self.stamp, self.lines, offset,
                                   self.max_frame, *args)
            except BaseException as e:  # noqa: BLE001 - handed to the source, which raises it again
                self.error = e
                self.result = (W_ERROR, 0, 0, 0, 0, D_MORE, 0, 0, R_DONE, False, 0)
            if self.ctl[C_STOP] == 0:  # (returned by itself: the source's loop must hear of it)
                done()
        self.thread = threading.Thread(target=run, name="binance-pump", daemon=True)
        self.thread.start()

    def stop(self):
        """Stop the thread (if it still runs), join it; its result (pump's tuple)."""
        if self.thread is None:
            return None
        self.ctl[C_STOP] = 1  # (read by the pump with an acquire load: seen at its next step)
        try:
            os.eventfd_write(self.wake_fd, 1)
        except OSError:
            pass
        self.thread.join()
        self.thread = None
        os.close(self.fd)
        os.close(self.wake_fd)
        self.fd = self.wake_fd = -1
        return self.result

    def take_counts(self):
        """(frames, ticks published) since the last call."""
        f, p = int(self.ctl[C_FRAMES]), int(self.ctl[C_PUB])
        d = (f - self.seen[0], p - self.seen[1])
        self.seen = (f, p)
        self.ticks += d[1]
        self.reads = self.reads_before + int(self.ctl[C_READS])
        return d

    def last_s(self):
        """The CLOCK_MONOTONIC time in s of the last read that completed a frame, or 0.0 before the first."""
        return int(self.ctl[C_LAST_NS]) / 1e9
