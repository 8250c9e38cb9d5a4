"""A minimal, fast local Binance venue for throughput benchmarks (bench/live.py): it replays a capture
flat out to every websocket client, far faster than feeds/binance/venue/ (~25-85k frames/s:
aiohttp and a Python loop per frame), so a client's own receive + parse cost is what gets measured.

    python bench/_ws_blast.py CAPTURE [--passes N] [--prebuild a/b/c]
        prints `PORT depth=D bookTicker=B trade=T` (the capture's frames per pass by stream kind) on
        one line, then serves until SIGTERM / SIGINT / stdin closed.

One asyncio (uvloop) TCP server on 127.0.0.1:0, a raw Protocol (no HTTP or websocket library):
  GET /fapi/v1/exchangeInfo, /api/v3/exchangeInfo   the capture's symbol, status TRADING
  GET /fapi/v1/depth, /api/v3/depth                  the capture's own snapshot line's JSON, as recorded
  GET [/pN]/stream?streams=a/b/c                     a websocket (RFC 6455 handshake), then the capture
                                                     N passes (the server's --passes without /pN)
The frames are the JSON after the first space of each capture line (the snapshot line excepted), only
those of the subscribed streams, in capture order, PRE-ENCODED as unmasked text frames in one blob per
pass and written with transport.write in ~1 MiB chunks cut at frame boundaries, flat out while the
transport is below its high-water mark (pause_writing / resume_writing), so a pong or close reply
written between chunks never lands inside a frame. Client frames (masked) are read all along:
ping -> pong, close -> close echoed and the connection closed; text (e.g. SUBSCRIBE) ignored.

Stream names: `<sym>@depth...` (any speed) is served from the capture's depth diffs with the stream
name rewritten to the subscribed one; `<sym>@bookTicker` as recorded; `<sym>@trade` as recorded, and
`<sym>@aggTrade` from the same trades as one-trade aggregates (a = f = l = the trade id), so clients
that only subscribe aggTrade (cryptofeed) get the same events. The same subscription gets the same bytes.

Repeats: pass k > 0 is pass 0 with every update id (depth U / u / pu, bookTicker u) raised by k*D and
every trade id by k*Dt, where D bridges the last diff of a pass to the first of the next (futures:
pu of the first = u of the last; spot: U = u + 1) and Dt = the capture's trade id span + 1. So the
depth stream stays continuous across passes (no gap, no resync) and nothing is a duplicate: a client
that drops repeated ids (ours does: it is how a rotation is made gapless) does the full work on
every pass. The ids are rewritten in place (same digit count, checked), by numpy, per pass. The
book is another matter: pass k's first diffs land on the book pass k-1's last diffs left, whose
stale levels cross it; bench/live.py therefore measures a feed's parse on one pass per connection
(a fresh book each time) and uses repeats only for the bare websocket clients.
"""
import argparse
import asyncio
import base64
import gzip
import hashlib
import json
import os
import re
import signal
import struct
import sys
from pathlib import Path

import numpy as np

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CHUNK = 1 << 20
HIGH_WATER = 8 << 20


def frame(payload, opcode=0x1):
    """An unmasked websocket frame (server to client), RFC 6455 5.2."""
    n = len(payload)
    if n < 126:
        return bytes((0x80 | opcode, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", 0x80 | opcode, 126, n) + payload
    return struct.pack("!BBQ", 0x80 | opcode, 127, n) + payload


class Capture:
    """The capture's lines as (kind, JSON bytes): kind depth / bookTicker / trade; the snapshot apart."""

    def __init__(self, path):
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        self.lines, self.snapshot, self.symbol = [], None, None
        for ln in raw.split(b"\n"):
            sp = ln.find(b" ")
            if sp < 1:
                continue
            body = ln[sp + 1:].rstrip(b"\r")
            if not body.startswith(b'{"stream":"'):
                if self.snapshot is None and body.startswith(b'{"lastUpdateId"'):
                    self.snapshot = body
                continue
            stream = body[11:body.index(b'"', 11)].decode()
            sym, _, kind = stream.partition("@")
            kind = "depth" if kind.startswith("depth") else kind
            if kind not in ("depth", "bookTicker", "trade"):
                continue
            self.symbol = self.symbol or sym
            self.lines.append((kind, body[body.index(b'"data":') + 7:-1]))  # the data object
        if self.snapshot is None or self.symbol is None:
            raise SystemExit(f"{path}: no snapshot line or no stream lines: not a Binance capture")
        self.futures = b'"pu":' in next(b for k, b in self.lines if k == "depth")
        self.counts = {k: sum(1 for kk, _ in self.lines if kk == k) for k in ("depth", "bookTicker", "trade")}


_INT = {}


def _int_at(b, key):
    """(offset of the digits after `key`, their count, value) in b."""
    r = _INT.get(key)
    if r is None:
        r = _INT[key] = re.compile(re.escape(key) + rb"(\d+)")
    m = r.search(b)
    return m.start(1), m.end(1) - m.start(1), int(m.group(1))


def _agg(trade):
    """A trade's data object as an aggTrade of that one trade (Binance's aggTrade field order)."""
    t = json.loads(trade)
    d = {"e": "aggTrade", "E": t["E"], "a": t["t"], "s": t["s"], "p": t["p"], "q": t["q"], "f": t["t"],
         "l": t["t"], "T": t["T"], "m": t["m"]}
    return json.dumps(d, separators=(",", ":")).encode()


class Plan:
    """One subscription's pass 0 (the blob and its frame ends) and where its ids are, to make pass k."""

    def __init__(self, cap, streams):
        sym = cap.symbol
        serve = {}  # capture kind -> [(stream name, converter)]
        for s in streams:
            ssym, _, kind = s.partition("@")
            if ssym != sym:
                continue
            if kind.startswith("depth") and kind[5:6] in ("", "@"):
                serve.setdefault("depth", []).append((s, None))
            elif kind == "bookTicker":
                serve.setdefault("bookTicker", []).append((s, None))
            elif kind == "trade":
                serve.setdefault("trade", []).append((s, None))
            elif kind == "aggTrade":
                serve.setdefault("trade", []).append((s, _agg))
        parts, ends, fields = [], [], []  # fields: (blob offset, digits, kind 0 update id / 1 trade id)
        off = 0
        keys = {"depth": ((b'"U":', 0), (b'"u":', 0)) + (((b'"pu":', 0),) if cap.futures else ()),
                "bookTicker": ((b'"u":', 0),), "trade": ((b'"t":', 1),)}
        agg_keys = ((b'"a":', 1), (b'"f":', 1), (b'"l":', 1))
        first_u = last_u = first_t = last_t = None
        for kind, data in cap.lines:
            if kind == "depth":
                if first_u is None:
                    first_u = _int_at(data, b'"pu":' if cap.futures else b'"U":')[2]
                last_u = _int_at(data, b'"u":')[2]
            elif kind == "trade":
                t = _int_at(data, b'"t":')[2]
                first_t = t if first_t is None else first_t
                last_t = t
            for name, conv in serve.get(kind, ()):
                d = conv(data) if conv else data
                head = b'{"stream":"' + name.encode() + b'","data":'
                payload = head + d + b"}"
                f = frame(payload)
                base = off + len(f) - len(payload) + len(head)
                for key, k in (agg_keys if conv else keys[kind]):
                    i, nd, _ = _int_at(d, key)
                    fields.append((base + i, nd, k))
                parts.append(f)
                off += len(f)
                ends.append(off)
        self.blob = np.frombuffer(b"".join(parts), np.uint8)
        self.ends = np.array(ends, np.int64)
        self.frames = len(ends)
        f = np.array(fields, np.int64).reshape(-1, 3)
        self.pos, self.nd, self.kind = f[:, 0], f[:, 1], f[:, 2]
        self.val = np.zeros(len(f), np.int64)
        for nd in np.unique(self.nd):
            m = self.nd == nd
            p = self.pos[m]
            v = np.zeros(len(p), np.int64)
            for j in range(int(nd)):
                v = v * 10 + (self.blob[p + j].astype(np.int64) - 48)
            self.val[m] = v
        d_upd = (last_u - first_u) if cap.futures else (last_u + 1 - first_u) if first_u is not None else 0
        d_trd = (last_t - first_t + 1) if first_t is not None else 0
        self.shift = np.array([d_upd, d_trd], np.int64)

    def blob_of(self, k):
        """Pass k's bytes (ids shifted in place)."""
        if k == 0 or not len(self.pos):
            return self.blob
        b = self.blob.copy()
        val = self.val + k * self.shift[self.kind]
        if np.any(val >= 10 ** self.nd.astype(np.float64)):
            raise RuntimeError(f"pass {k}: an id would gain a digit (fewer passes)")
        for nd in np.unique(self.nd):
            m = self.nd == nd
            p, v = self.pos[m], val[m]
            for j in range(int(nd) - 1, -1, -1):
                b[p + j] = (v % 10 + 48).astype(np.uint8)
                v = v // 10
        return b


class Venue:
    def __init__(self, cap, passes):
        self.cap, self.passes, self.plans = cap, passes, {}
        sym = cap.symbol.upper()
        info = {"symbol": sym, "pair": sym, "status": "TRADING", "contractStatus": "TRADING",
                "baseAsset": sym[:-4] if sym.endswith("USDT") else sym[:3],
                "quoteAsset": "USDT" if sym.endswith("USDT") else sym[3:],
                "filters": [{"filterType": "PRICE_FILTER", "minPrice": "0.10", "maxPrice": "4529764", "tickSize": "0.10"},
                            {"filterType": "LOT_SIZE", "minQty": "0.001", "maxQty": "1000", "stepSize": "0.001"}]}
        if cap.futures:
            info.update(contractType="PERPETUAL", marginAsset=info["quoteAsset"], pricePrecision=2, quantityPrecision=3)
        self.exchange_info = json.dumps({"timezone": "UTC", "serverTime": 0, "rateLimits": [], "exchangeFilters": [],
                                         "symbols": [info]}).encode()

    def plan(self, streams):
        key = tuple(streams)
        if key not in self.plans:
            self.plans[key] = Plan(self.cap, streams)
        return self.plans[key]


class Conn(asyncio.Protocol):
    def __init__(self, venue):
        self.venue = venue
        self.buf = bytearray()
        self.ws = False
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.task = None

    def connection_made(self, transport):
        self.tr = transport
        transport.set_write_buffer_limits(high=HIGH_WATER, low=HIGH_WATER // 4)

    def pause_writing(self):
        self.can_write.clear()

    def resume_writing(self):
        self.can_write.set()

    def connection_lost(self, exc):
        self.can_write.set()
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data):
        self.buf += data
        if self.ws:
            self._ws_frames()
            return
        while not self.ws:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            del self.buf[:end + 4]
            self._request(head)

    def _request(self, head):
        parts = head[0].split(" ")
        target = parts[1] if len(parts) > 1 else "/"
        path, _, query = target.partition("?")
        hdrs = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        v = self.venue
        if path.endswith("/stream") and hdrs.get("upgrade", "").lower() == "websocket":
            prefix = path[:-len("/stream")].strip("/")
            passes = int(prefix[1:]) if prefix.startswith("p") and prefix[1:].isdigit() else v.passes
            streams = [s for s in query.partition("streams=")[2].split("&")[0].split("/") if s]
            accept = base64.b64encode(hashlib.sha1(hdrs.get("sec-websocket-key", "").encode() + WS_GUID).digest())
            self.tr.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
            self.ws = True
            self.task = asyncio.get_running_loop().create_task(self._send(v.plan(streams), passes))
            if self.buf:
                self._ws_frames()
            return
        if path.endswith("/exchangeInfo"):
            self._reply(200, v.exchange_info)
        elif path.endswith("/depth"):
            self._reply(200, v.cap.snapshot)
        else:
            self._reply(404, b'{"code":-1,"msg":"not found"}')

    def _reply(self, status, body):
        self.tr.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      b"X-MBX-USED-WEIGHT-1M: 1\r\n\r\n" % (status, b"OK" if status == 200 else b"Not Found", len(body))
                      + body)

    def _ws_frames(self):
        b = self.buf
        while len(b) >= 2:
            op, n = b[0] & 0x0F, b[1] & 0x7F
            i = 2
            if n == 126:
                if len(b) < 4:
                    return
                n, i = struct.unpack_from("!H", b, 2)[0], 4
            elif n == 127:
                if len(b) < 10:
                    return
                n, i = struct.unpack_from("!Q", b, 2)[0], 10
            masked = b[1] & 0x80
            if len(b) < i + (4 if masked else 0) + n:
                return
            if masked:
                mask = np.frombuffer(bytes(b[i:i + 4]), np.uint8)
                i += 4
                payload = (np.frombuffer(bytes(b[i:i + n]), np.uint8) ^ np.resize(mask, n)).tobytes()
            else:
                payload = bytes(b[i:i + n])
            del b[:i + n]
            if op == 0x9:  # ping
                self.tr.write(frame(payload, 0xA))
            elif op == 0x8:  # close: echo it and hang up
                self.tr.write(frame(payload[:2], 0x8))
                self.tr.close()
                return

    async def _send(self, plan, passes):
        for k in range(passes):
            blob = memoryview(plan.blob_of(k))
            ends = plan.ends
            pos, total = 0, len(blob)
            while pos < total:
                if not self.can_write.is_set():
                    await self.can_write.wait()
                if self.tr.is_closing():
                    return
                j = int(np.searchsorted(ends, pos + CHUNK))
                end = int(ends[min(j, len(ends) - 1)])
                self.tr.write(blob[pos:end])
                pos = end
                await asyncio.sleep(0)  # let the client's pings / close in between chunks


async def serve(cap, passes, prebuild):
    loop = asyncio.get_running_loop()
    venue = Venue(cap, passes)
    if prebuild:
        venue.plan([s for s in prebuild.split("/") if s])
    server = await loop.create_server(lambda: Conn(venue), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    c = cap.counts
    print(f"{port} depth={c['depth']} bookTicker={c['bookTicker']} trade={c['trade']}", flush=True)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    loop.add_reader(sys.stdin.fileno(), lambda: os.read(sys.stdin.fileno(), 4096) or stop.done() or stop.set_result(None))
    await stop
    server.close()


def main():
    ap = argparse.ArgumentParser(description="Replay a Binance capture flat out as a local venue.")
    ap.add_argument("capture")
    ap.add_argument("--passes", type=int, default=1, help="passes of the capture per connection (default 1)")
    ap.add_argument("--prebuild", default="", help="a subscription (a/b/c) whose frames to encode before serving")
    a = ap.parse_args()
    cap = Capture(a.capture)
    try:
        import uvloop
        uvloop.run(serve(cap, a.passes, a.prebuild))
    except ImportError:
        asyncio.run(serve(cap, a.passes, a.prebuild))


if __name__ == "__main__":
    main()
