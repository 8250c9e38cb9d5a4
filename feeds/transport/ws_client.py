"""A websocket client (RFC 6455) whose frames are taken apart in numba, a socket read at a time.

Why not a websocket library: every Python client calls back (or returns) once per frame, and at
Binance's message sizes that call, not the parse, is the cost: picows, the fastest measured, spent
~3.7 us a frame in its Python callback in binance-live, capping the feed near 170k frames/s
(bench/live.py). Here `data_received` reads the clock once per socket read and one numba call turns
every complete text frame of it into the line `<receive ns> <payload>\n` that the Binance scanner
reads (a capture's line format), so Python runs per read, not per frame.

What it does: the HTTP upgrade (Sec-WebSocket-Accept checked), text frames (a newline inside one
becomes a space, so a line stays one line), pings answered with pongs, a close frame answered and
the connection ended, fragmented messages joined (rare: handled in Python), binary frames and pongs
ignored. What a hostile or broken server could grow without bound ends the connection instead (a
protocol error: the caller reconnects): a masked server frame, a frame or fragmented message
larger than `max_frame`, a control frame over 125 bytes or fragmented (RFC 6455 5.5), pongs the
server does not read piling up past WRITE_MAX. TLS through asyncio (wss://). Client frames are
masked as the RFC requires.
"""
import asyncio
import base64
import hashlib
import os
import ssl
import time
from urllib.parse import urlsplit

import numpy as np
from engine.jit import njit

from engine.readonly import read_only

from feeds.core.borrow import data_ptr, load_u64, store_u64
from feeds.core.jscan import byte_mask

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, 1.3
OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
# deframe's status
D_MORE, D_CONTROL, D_BAD = 0, 1, 2
LINE_EXTRA = 24  # bytes a frame's line adds at most: the stamp (<= 20 digits), a space, a newline
MAX_CONTROL = 125  # a control frame's payload at most (RFC 6455 5.5)
WRITE_MAX = 64 << 10  # bytes we may have written that the server has not read (pongs, a close)
_NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)


@njit(nogil=True, inline="always", cache=True)
def _copy_line(src, s, dst, w, ln):
    """dst[w:w + ln] = src[s:s + ln] with every newline a space, eight bytes a step (a frame's
    payload is most of what a feed process touches: a byte loop was a tenth of its time)."""
    k = 0
    while k + 8 <= ln:
        x = load_u64(src, s + k)
        if byte_mask(x, _NEWLINES) != 0:  # (rare: JSON text has no raw newline; from here a byte a step)
            break
        store_u64(dst, w + k, x)
        k += 8
    for j in range(k, ln):
        c = src[s + j]
        dst[w + j] = 32 if c == 10 else c


@njit(nogil=True, cache=True)
def deframe(b, n, stamp, out, max_frame):
    """Frames of b[:n] -> lines in out: (consumed, written, frames, status, opcode, fin, start, length).
    Stops (status D_CONTROL) before any frame that is not a complete text message, giving its
    opcode, FIN bit and payload span for Python to handle, or (D_BAD) at a bad frame's header: its
    length -1 when masked, else over max_frame, or a control frame over MAX_CONTROL or fragmented;
    D_MORE: everything complete was taken. out must hold n + LINE_EXTRA * (n // 2 + 1) bytes."""
    pos = 0
    w = 0
    frames = 0
    ns = stamp.shape[0]
    src, dst = data_ptr(b), data_ptr(out)  # (every read is checked against n; out is sized by the caller)
    while pos + 2 <= n:
        b0 = b[pos]
        b1 = b[pos + 1]
        op = b0 & 0x0F
        fin = (b0 & 0x80) != 0
        if b1 & 0x80:
            return pos, w, frames, D_BAD, op, fin, 0, -1
        ln = np.int64(b1 & 0x7F)
        h = 2
        if ln == 126:
            if pos + 4 > n:
                break
            ln = (np.int64(b[pos + 2]) << 8) | np.int64(b[pos + 3])
            h = 4
        elif ln == 127:
            if pos + 10 > n:
                break
            ln = np.int64(0)
            for k in range(8):
                ln = (ln << 8) | np.int64(b[pos + 2 + k])
            h = 10
            if ln < 0:  # (2^63 and over)
                ln = np.int64(0x7FFFFFFFFFFFFFFF)
        # (judged on the header: such a frame is never buffered, however slowly it comes)
        if ln > max_frame or (op >= 8 and (ln > MAX_CONTROL or not fin)):
            return pos, w, frames, D_BAD, op, fin, 0, ln
        if pos + h + ln > n:
            break
        s = pos + h
        if op != OP_TEXT or not fin:
            return pos, w, frames, D_CONTROL, op, fin, s, ln
        for k in range(ns):
            out[w + k] = stamp[k]
        w += ns
        _copy_line(src, s, dst, w, ln)
        w += ln
        out[w] = 10
        w += 1
        frames += 1
        pos = s + ln
    return pos, w, frames, D_MORE, 0, False, 0, 0


def frame_end(head):
    """The length of the unmasked frame that starts `head` (its header and payload), or 0 when
    head is too short to tell or the frame is masked (deframe judges those)."""
    if len(head) < 2 or head[1] & 0x80:
        return 0
    ln = head[1] & 0x7F
    if ln == 126:
        return 4 + int.from_bytes(head[2:4], "big") if len(head) >= 4 else 0
    if ln == 127:
        return 10 + int.from_bytes(head[2:10], "big") if len(head) >= 10 else 0
    return 2 + ln


def frame(op, payload=b""):
    """A masked client frame."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | op])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    p = np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), n) if n else b""
    return head + mask + bytes(p)


def _seen(fut):
    if not fut.cancelled():
        fut.exception()


class HandshakeError(OSError):
    """The server did not upgrade (its status line says why: a refused subscription, a bad path).
    Its text, like a close frame's reason, holds the server's words as sent: escape it to print."""


class WsProtocol(asyncio.Protocol):
    """One connection. `sink(lines, frames)` takes each read's lines (a bytes-like object valid only
    during the call: the sink copies what it keeps); `on_close(reason)` is called once when the
    connection ends. `fused(b, stamp, lines, lines_ro)`, when given, may take the deframe step and
    what follows in one call (feeds/binance/read.py): it returns deframe's 8 values, having done
    with the lines whatever the sink would have, or None (then deframe runs and the sink is called)."""

    def __init__(self, host, path, sink, on_close, offset, max_frame, fused=None):
        self.host, self.path, self.sink, self.on_close, self.fused = host, path, sink, on_close, fused
        self.offset, self.max_frame = offset, max_frame
        self.key = base64.b64encode(os.urandom(16))
        self.upgraded = asyncio.get_event_loop().create_future()
        self.upgraded.add_done_callback(_seen)  # (an error nobody awaits any more, after a timeout, is no warning)
        self.head = b""
        self.inbuf = bytearray()
        self.frag = None  # a fragmented message being joined
        self.out = self.out_ro = np.empty(0, np.uint8)  # deframe's output, grown as reads need (and a
        # read-only view of it: what the scanner reads, one compiled type for captures and live reads)
        self.transport = None
        self.closed = False
        self.reason = ""

    # -- asyncio ------------------------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        transport.write(b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: signal-engine\r\n\r\n"
                        % (self.path.encode(), self.host.encode(), self.key))

    def data_received(self, data):
        now = time.monotonic_ns()
        if not self.upgraded.done():
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > 65536:
                    self._fail(HandshakeError("the server's upgrade response is over 64 KiB"))
                return
            data = self.head[end + 4:]
            err = self._check_upgrade(self.head[:end])
            if err is not None:
                self._fail(err)
                return
            self.upgraded.set_result(None)
            if not data:
                return
        if self.inbuf:  # a frame cut by the last read
            data = self._join(data, now)
            if data is None:
                return
        self._frames(data, now)

    def connection_lost(self, exc):
        self.closed = True
        if not self.reason:
            self.reason = f"connection lost ({exc})" if exc else "connection closed"
        if not self.upgraded.done():
            self.upgraded.set_exception(HandshakeError(self.reason))
        self.on_close(self.reason)

    # -- frames --------------------------------------------------------------------------------

    def _join(self, data, now):
        """The cut frame completed from data's head and taken apart alone; what follows it in
        data is returned as a view (None: nothing left, or the connection ended). Joining the
        whole read to the cut piece instead copied every read (~256 KiB) once more, flat out."""
        cut = len(self.inbuf)
        head = bytes(self.inbuf[:10])
        known = frame_end(head)  # (> 0: its header was whole when it was cut, and deframe passed it)
        if known > cut + len(data):  # (still cut after this read too: kept as it is, so a frame
            self.inbuf += data       # trickled in pieces costs each piece once)
            return None
        end = known or frame_end(head + bytes(data[:10 - len(head)]))
        if end <= 0 or end > cut + len(data):  # (its header cut, a masked frame, or longer than this
            joined = bytes(self.inbuf) + data  # read too: the two joined, deframe judges the header)
            self.inbuf.clear()
            return joined
        self.inbuf += memoryview(data)[:end - cut]
        first = bytes(self.inbuf)
        self.inbuf.clear()
        self._frames(first, now)
        if self.closed or self.transport.is_closing() or end - cut == len(data):
            return None
        return memoryview(data)[end - cut:]

    def _frames(self, data, now):
        arr = np.frombuffer(data, np.uint8)
        stamp = np.frombuffer(b"%d " % (now + self.offset), np.uint8)
        pos = 0
        while pos < len(arr):
            rest = arr[pos:]
            need = len(rest) + LINE_EXTRA * (len(rest) // 2 + 1)
            if len(self.out) < need:  # (kept: a new one per read was a page fault per 4 KiB)
                self.out = np.empty(max(need, 2 * len(self.out)), np.uint8)
                self.out_ro = read_only(self.out)
            out = self.out
            res = self.fused(rest, stamp, out, self.out_ro) if self.fused is not None else None
            if res is None:
                res = deframe(rest, len(rest), stamp, out, self.max_frame)
                if res[1]:
                    self.sink(memoryview(out)[:res[1]], res[2])  # (the sink copies what it keeps)
            used, w, frames, st, op, fin, s, ln = res
            base, pos = pos, pos + used
            if st == D_MORE:
                break
            if st == D_BAD:
                self._bad(op, fin, ln)
                return
            payload = bytes(rest[s:s + ln])
            pos = base + s + ln
            self._control(op, fin, payload, stamp)
            if self.closed or self.transport.is_closing():
                return
        if pos < len(arr):
            self.inbuf += data[pos:]

    def _bad(self, op, fin, ln):
        """deframe's D_BAD: the connection ends with the reason."""
        if ln < 0:
            self.reason, code = "a masked frame from the server", 1002
        elif ln > self.max_frame:
            self.reason, code = f"a frame of {ln} bytes (over {self.max_frame})", 1009
        else:
            self.reason, code = (f"a control frame of {ln} bytes{'' if fin else ', fragmented'} (RFC 6455: at most "
                                 f"{MAX_CONTROL}, whole)"), 1002
        self.close(code)

    def _control(self, op, fin, payload, stamp):
        if op == OP_PING:
            self.transport.write(frame(OP_PONG, payload))
            if self.transport.get_write_buffer_size() > WRITE_MAX:  # (pongs pile up: the server reads nothing)
                self.reason = f"the server reads nothing ({self.transport.get_write_buffer_size()} bytes unsent)"
                self.transport.abort()
        elif op == OP_CLOSE:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            said = payload[2:].decode("utf-8", "replace")  # (the server's words, as sent: a printer escapes them)
            self.reason = f"close frame {code}" + (f": {said}" if said else "")
            self.close(code if code not in (1005, 1006, 1015) else 1000)
        elif op == OP_TEXT and not fin:
            if self.frag is not None:
                self.reason = "a new message inside a fragmented one"
                self.close(1002)
                return
            self.frag = bytearray(payload)
        elif op == OP_CONT and self.frag is not None:
            if len(self.frag) + len(payload) > self.max_frame:
                self.reason = f"a fragmented message over {self.max_frame} bytes"
                self.frag = None
                self.close(1009)
                return
            self.frag += payload
            if fin:
                msg, self.frag = bytes(self.frag).replace(b"\n", b" "), None
                self.sink(stamp.tobytes() + msg + b"\n", 1)
        # binary frames (and their continuations) and pongs: nothing to do

    def _check_upgrade(self, head):
        lines = head.split(b"\r\n")
        status = lines[0].split(b" ", 2)
        if len(status) < 2 or status[1] != b"101":
            return HandshakeError(f"the server answered \"{lines[0][:200].decode('latin-1')}\", not an upgrade")
        want = base64.b64encode(hashlib.sha1(self.key + GUID).digest())
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            if k.strip().lower() == b"sec-websocket-accept" and v.strip() == want:
                return None
        return HandshakeError("the server's Sec-WebSocket-Accept is missing or wrong")

    def _fail(self, err):
        if not self.upgraded.done():
            self.upgraded.set_exception(err)
        self.reason = str(err)
        self.transport.abort()

    def close(self, code=1000):
        """Send a close frame (once) and end the connection (at once when the server is not
        reading: what we wrote would wait for it for ever)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame(OP_CLOSE, code.to_bytes(2, "big")))
            if self.transport.get_write_buffer_size():
                self.transport.abort()
            else:
                self.transport.close()

    def abort(self):
        if self.transport is not None:
            self.transport.abort()


async def connect(url, sink, on_close, *, offset=0, max_frame=1 << 20, timeout=10.0, fused=None):
    """Open `url` (ws:// or wss://) and complete the upgrade: the protocol object (its `close()`,
    `abort()`, `closed`, `reason`). Raises HandshakeError / OSError / asyncio.TimeoutError."""
    u = urlsplit(url)
    if u.scheme not in ("ws", "wss"):
        raise HandshakeError(f"{url}: not a ws:// or wss:// URL")
    host = u.hostname or ""
    port = u.port or (443 if u.scheme == "wss" else 80)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    loop = asyncio.get_event_loop()
    proto = WsProtocol(f"{host}:{port}" if u.port else host, path, sink, on_close, offset, max_frame, fused)
    ctx = ssl.create_default_context() if u.scheme == "wss" else None
    await asyncio.wait_for(loop.create_connection(lambda: proto, host, port, ssl=ctx), timeout)
    try:
        await asyncio.wait_for(asyncio.shield(proto.upgraded), timeout)
    except BaseException:
        proto.abort()
        raise
    return proto
