"""A fake Databento live gateway on loopback: the live protocol as the official `databento`
client speaks it, replaying a DBN MBO file as a live session.

Per connection: greeting (`lsg_version=`), CRAM challenge, the client's `auth=` line checked
against the key we were given (sha256 of "challenge|key", then the key's bucket id), `success=1`
(or `success=0|error=...` and close), subscription lines until `start_session`, then the DBN
stream: metadata (version 3, no symbology, as live), a SymbolMappingMsg per subscribed symbol
(an ErrorMsg for a symbol the file does not have), with snapshot=1 the book at the current point
(per instrument an R record, then an add per resting order, F_SNAPSHOT | F_BAD_TS_RECV, the
instrument's last one with F_LAST), then the file's records from the current point: flat out
(speed=0) or at the recorded ts_recv spacing / speed. When the records run out the session stays
open with heartbeats (SystemMsg, every heartbeat_interval_s the client asked, default 30), as a
real gateway would, or closes (at_end="close").

The "market" moves on across connections: a new session continues where the last one stopped
(plus `skip_on_reconnect` records that pass while nobody listens: they move the book, which the
snapshot then shows, but are never sent); resume=False replays from the start for every session
(independent clients, bench/_live_dbn.py). speed > 0 paces by ts_recv (not with repeat > 1).

Faults, per session number (0 = the first connection), as constructor options:
  key            the valid key: a client with another one fails authentication
  auth_error     what the refusal says (default "Authentication failed.", as Databento's)
  drop_after     {session: N}: close the TCP connection after N records
  silent_after   {session: N}: after N records send nothing at all (no heartbeats) and never close:
                 what a half-open connection looks like to the client
  error_after    {session: N}: send an ErrorMsg (error_text) after N records, then go on
  refuse         sessions closed as soon as they connect (before the greeting): failed attempts
  inject         {session: [(N, bytes), ...]}: send these bytes after N records, then go on: a
                 hostile gateway's records, made by the functions below (floods of error and
                 system messages carrying ANSI escapes and newlines, mappings of symbols never
                 subscribed, a second id for a subscribed symbol, records of any id)
Records count only the file's records (not mappings, snapshot, heartbeats or injected bytes).
A gateway's bad prices are the file's records altered (`recs`, then `body = recs.tobytes()`,
before the first session).

Run alone (`python -m tests.helpers.fake_databento --repeat 20`, key from $FAKE_DATABENTO_KEY) it
prints its port and serves until killed (bench/_live_dbn.py).
"""
import hashlib
import os
import secrets
import select
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dbn" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
KEY = "db-FAKEfakeFAKEfakeFAKEfake0Ab1C"  # a key of Databento's shape, valid for the fake only
LSG_VERSION = "0.fake.1"
MBO_LEN = 56
F_LAST, F_SNAPSHOT, F_BAD_TS_RECV = 0x80, 0x20, 0x08
UNDEF_PRICE = 2**63 - 1
MBO = np.dtype([("len", "u1"), ("rtype", "u1"), ("publisher_id", "<u2"), ("instrument_id", "<u4"),
                ("ts_event", "<u8"), ("order_id", "<u8"), ("price", "<i8"), ("size", "<u4"), ("flags", "u1"),
                ("channel_id", "u1"), ("action", "u1"), ("side", "u1"), ("ts_recv", "<u8"),
                ("ts_in_delta", "<i4"), ("sequence", "<u4")])
assert MBO.itemsize == MBO_LEN


def load(path=DATA, limit=None, repeat=1):
    """(dataset, {raw symbol: instrument id}, MBO records as one structured array) of an MBO
    DBN file; `repeat` plays it that many times, each pass after the first opening with an R
    record (the book starts again)."""
    import databento_dbn as dbn
    import zstandard
    raw = open(path, "rb").read()
    if raw[:4] == b"\x28\xb5\x2f\xfd":
        raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
    mlen = struct.unpack_from("<I", raw, 4)[0]
    meta = dbn.Metadata.decode(raw[:8 + mlen])
    recs = np.frombuffer(raw[8 + mlen:], MBO)
    if not (recs["rtype"] == 0xA0).all():
        raise ValueError(f"{path}: the fake gateway replays MBO files only")
    recs = recs[:limit].copy()
    if repeat > 1:
        clear = np.zeros(1, MBO)
        clear[0] = recs[0]
        clear["order_id"], clear["price"], clear["size"] = 0, UNDEF_PRICE, 0
        clear["action"], clear["side"], clear["flags"] = ord("R"), ord("N"), F_LAST
        recs = np.concatenate([recs] + [np.concatenate([clear, recs])] * (repeat - 1))
    symbols = {}
    for sym, intervals in (meta.mappings or {}).items():
        for iv in intervals:
            symbols[sym] = int(iv["symbol"])
    return meta.dataset, symbols, recs


def error_records(n, text):
    """n ErrorMsg records saying `text` (any characters: escapes, newlines)."""
    import databento_dbn as dbn
    return bytes(dbn.ErrorMsg(0, text, code=dbn.ErrorCode.INTERNAL_ERROR)) * n


def system_records(n, text):
    """n SystemMsg records that are not heartbeats (a slow-reader warning's code) saying `text`."""
    import databento_dbn as dbn
    return bytes(dbn.SystemMsg(0, text, code=dbn.SystemCode.SLOW_READER_WARNING)) * n


def mapping_records(pairs):
    """A SymbolMappingMsg per (instrument id, raw symbol)."""
    import databento_dbn as dbn
    return b"".join(bytes(dbn.SymbolMappingMsg(1, iid, 0, dbn.SType.RAW_SYMBOL, sym, dbn.SType.RAW_SYMBOL, sym, 0,
                                               UNDEF_PRICE)) for iid, sym in pairs)


def with_id(recs, iid):
    """A copy of MBO records as instrument `iid`'s."""
    out = recs.copy()
    out["instrument_id"] = iid
    return out


BAD_PRICES = (0, -4800 * 10**9, 2**63 - 2, -1, 2**62 + 1)  # none a tick can carry (feeds/books/ticks.py price_ok)


def spoil(recs, every=400):
    """A gateway's bad values in MBO records: every `every`-th add, modify and trade gets a price
    from BAD_PRICES or (some adds and trades) a size of 0. Returns (the spoilt records, the same
    with each spoilt record made an N (none) record: what a parser that rejects them applies, event
    ends included; how many bad prices, how many bad sizes)."""
    bad, ref = recs.copy(), recs.copy()
    n_price = n_size = 0
    for act in b"AMT":
        at = np.nonzero(recs["action"] == act)[0][every // 2::every]
        for j, i in enumerate(at):
            if act != ord("M") and j % 3 == 2:
                bad["size"][i] = 0
                n_size += 1
            else:
                bad["price"][i] = BAD_PRICES[j % len(BAD_PRICES)]
                n_price += 1
        ref["action"][at] = ord("N")
    return bad, ref, n_price, n_size


def book_at(recs, k):
    """Resting orders after records[:k], per instrument in priority order:
    {iid: {order_id: [side, price, size, ts_event, sequence]}}."""
    books = {}
    a = recs[:k]
    for iid, oid, px, sz, act, side, ts, seq in zip(a["instrument_id"].tolist(), a["order_id"].tolist(),
                                                    a["price"].tolist(), a["size"].tolist(), a["action"].tolist(),
                                                    a["side"].tolist(), a["ts_event"].tolist(), a["sequence"].tolist()):
        b = books.setdefault(iid, {})
        if act == 65:  # A
            b[oid] = [side, px, sz, ts, seq]
        elif act == 67:  # C
            o = b.get(oid)
            if o is not None:
                o[2] -= sz
                if o[2] <= 0:
                    del b[oid]
        elif act == 77:  # M: a new price or more size loses priority
            o = b.pop(oid, None)
            if o is None or o[1] != px or sz > o[2]:
                b[oid] = [side, px, sz, ts, seq]
            else:
                b[oid] = o
                o[2] = sz
        elif act == 82:  # R
            b.clear()
    return books


class FakeGateway:
    def __init__(self, path=DATA, key=KEY, limit=None, repeat=1, speed=0.0, at_end="hold", drop_after=None,
                 silent_after=None, error_after=None, error_text="fake gateway error: something went wrong",
                 skip_on_reconnect=0, resume=True, refuse=(), inject=None, auth_error="Authentication failed.",
                 host="127.0.0.1", port=0):
        self.dataset, self.symbols, self.recs = load(path, limit, repeat)
        self.body = self.recs.tobytes()
        self.key, self.speed, self.at_end = key, speed, at_end
        self.drop_after, self.silent_after, self.error_after = drop_after or {}, silent_after or {}, error_after or {}
        self.inject, self.auth_error = inject or {}, auth_error
        self.error_text, self.skip, self.resume, self.refuse = error_text, skip_on_reconnect, resume, set(refuse)
        self.cursor = 0            # the market's position: the next record a session sends
        self.sessions = []         # per connection: what the client asked and what it was sent
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.srv = socket.create_server((host, port))
        self.port = self.srv.getsockname()[1]
        self.threads = []
        t = threading.Thread(target=self._accept, daemon=True, name="fake-databento")
        t.start()
        self.threads.append(t)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.closed.set()
        try:
            self.srv.close()
        except OSError:
            pass
        for t in self.threads:
            t.join(timeout=5)

    def _accept(self):
        while not self.closed.is_set():
            r, _, _ = select.select([self.srv], [], [], 0.05)
            if not r:
                continue
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with self.lock:
                k = len(self.sessions)
                self.sessions.append({"auth": None, "subscriptions": [], "records": 0, "snapshot_records": 0,
                                      "heartbeats": 0, "closed_by": None})
            t = threading.Thread(target=self._session, args=(conn, k), daemon=True, name=f"fake-databento-{k}")
            t.start()
            self.threads.append(t)

    # -- one connection --------------------------------------------------------------------

    def _session(self, conn, k):
        info = self.sessions[k]
        if k in self.refuse:
            info["closed_by"] = "refused"
            conn.close()
            return
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._run(conn, k, info)
        except (OSError, ValueError) as e:
            info["closed_by"] = info["closed_by"] or f"client ({e.__class__.__name__})"
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _lines(self, conn, buf):
        """The next control line from the client (None when it closed)."""
        while b"\n" not in buf:
            if self.closed.is_set():
                return None
            r, _, _ = select.select([conn], [], [], 0.05)
            if r:
                chunk = conn.recv(65536)
                if not chunk:
                    return None
                buf.extend(chunk)
        i = buf.index(b"\n")
        line = bytes(buf[:i]).decode()
        del buf[:i + 1]
        return dict(t.partition("=")[::2] for t in line.split("|"))

    def _run(self, conn, k, info):
        import databento_dbn as dbn
        challenge = secrets.token_urlsafe(24)
        conn.sendall(f"lsg_version={LSG_VERSION}\n".encode() + f"cram={challenge}\n".encode())
        buf = bytearray()
        auth = self._lines(conn, buf)
        if auth is None:
            return
        info["auth"] = {k2: v for k2, v in auth.items() if k2 != "auth"}
        want = hashlib.sha256(f"{challenge}|{self.key}".encode()).hexdigest() + "-" + self.key[-5:]
        if auth.get("auth") != want:
            info["closed_by"] = "auth failure"
            conn.sendall(f"success=0|error={self.auth_error}\n".encode())
            return
        if auth.get("dataset") != self.dataset:
            info["closed_by"] = "bad dataset"
            conn.sendall(f"success=0|error=Unknown dataset {auth.get('dataset')}\n".encode())
            return
        conn.sendall(f"success=1|session_id={1000 + k}\n".encode())
        hb = float(auth.get("heartbeat_interval_s") or 30)
        while True:
            line = self._lines(conn, buf)
            if line is None:
                return
            if "start_session" in line:
                break
            info["subscriptions"].append(line)
        subs = info["subscriptions"]
        syms = [s for sub in subs for s in sub.get("symbols", "").split(",") if s]
        snapshot = any(sub.get("snapshot") == "1" for sub in subs)
        with self.lock:
            if not self.resume:
                self.cursor = 0
            elif k:
                self.cursor = min(len(self.recs), self.cursor + self.skip)
            start = self.cursor
        now = int(self.recs["ts_recv"][min(start, len(self.recs) - 1)])
        head = dbn.Metadata(dataset=self.dataset, start=now, stype_in=dbn.SType.RAW_SYMBOL,
                            stype_out=dbn.SType.INSTRUMENT_ID, schema=dbn.Schema.MBO, version=3).encode()
        pre = [head]
        wanted = set()
        for s in syms:
            if s in self.symbols:
                iid = self.symbols[s]
                wanted.add(iid)
                pre.append(bytes(dbn.SymbolMappingMsg(1, iid, now, dbn.SType.RAW_SYMBOL, s, dbn.SType.RAW_SYMBOL, s,
                                                      now, UNDEF_PRICE)))
            else:
                pre.append(bytes(dbn.ErrorMsg(now, f"Failed to resolve symbol: {s}",
                                              code=dbn.ErrorCode.SYMBOL_RESOLUTION_FAILED)))
        if snapshot:
            snap = self._snapshot(start, wanted, now)
            info["snapshot_records"] = len(snap) // MBO_LEN
            pre.append(snap)
        conn.sendall(b"".join(pre))
        mine = np.isin(self.recs["instrument_id"], list(wanted)) if wanted else None
        self._stream(conn, k, info, start, mine, hb)

    def _snapshot(self, k, wanted, now):
        books = book_at(self.recs, k)
        out = []
        for iid in sorted(wanted):
            orders = list(books.get(iid, {}).items())
            recs = np.zeros(1 + len(orders), MBO)
            recs["len"], recs["rtype"], recs["publisher_id"], recs["instrument_id"] = MBO_LEN // 4, 0xA0, 1, iid
            recs["flags"] = F_SNAPSHOT | F_BAD_TS_RECV
            recs["ts_recv"] = now
            recs[0]["ts_event"], recs[0]["price"], recs[0]["action"], recs[0]["side"] = now, UNDEF_PRICE, 82, 78
            for j, (oid, (side, px, sz, ts, seq)) in enumerate(orders, 1):
                recs[j]["order_id"], recs[j]["price"], recs[j]["size"] = oid, px, sz
                recs[j]["action"], recs[j]["side"], recs[j]["ts_event"], recs[j]["sequence"] = 65, side, ts, seq
            recs[-1]["flags"] |= F_LAST
            out.append(recs.tobytes())
        return b"".join(out)

    def _stream(self, conn, k, info, start, mine, hb):
        """Send records from `start` (only the subscribed instruments'), with this session's faults."""
        import databento_dbn as dbn
        faults = [(n, what, None) for what, d in (("drop", self.drop_after), ("silent", self.silent_after),
                                                  ("error", self.error_after)) if k in d for n in [d[k]]]
        faults += [(n, "inject", data) for n, data in self.inject.get(k, ())]
        faults.sort(key=lambda f: f[0])
        i, sent = start, 0
        t0, ts0 = time.monotonic(), int(self.recs["ts_recv"][min(start, len(self.recs) - 1)])
        last_send = time.monotonic()
        chunk = 2048
        while i < len(self.recs) and not self.closed.is_set():
            j = min(len(self.recs), i + chunk)
            if faults:
                j = min(j, i + (faults[0][0] - sent))
            if self.speed > 0:  # recorded pace: what is due now
                due = ts0 + (time.monotonic() - t0) * self.speed * 1e9
                j = min(j, max(i, int(np.searchsorted(self.recs["ts_recv"], due, side="right"))))
            if j > i:
                sel = np.arange(i, j) if mine is None else np.nonzero(mine[i:j])[0] + i
                if len(sel) == j - i:
                    conn.sendall(memoryview(self.body)[i * MBO_LEN:j * MBO_LEN])
                else:
                    conn.sendall(self.recs[sel].tobytes())
                sent += j - i
                with self.lock:
                    self.cursor = j
                info["records"] = sent
                i = j
                last_send = time.monotonic()
            elif time.monotonic() - last_send > hb:
                conn.sendall(bytes(dbn.SystemMsg(0, "Heartbeat", code=dbn.SystemCode.HEARTBEAT)))
                info["heartbeats"] += 1
                last_send = time.monotonic()
            else:
                time.sleep(0.001)
            while faults and sent >= faults[0][0]:
                _, what, data = faults.pop(0)
                if what == "drop":
                    info["closed_by"] = "drop"
                    conn.shutdown(socket.SHUT_RDWR)
                    return
                if what == "silent":
                    info["closed_by"] = "silent"
                    self._wait_for_close(conn)
                    return
                if what == "inject":
                    conn.sendall(data)
                    continue
                conn.sendall(bytes(dbn.ErrorMsg(0, self.error_text, code=dbn.ErrorCode.INTERNAL_ERROR)))
        if self.at_end == "close":
            info["closed_by"] = "end"
            conn.shutdown(socket.SHUT_RDWR)
            return
        while not self.closed.is_set():  # live: heartbeats until the client goes
            r, _, _ = select.select([conn], [], [], min(hb, 0.05))
            if r and not conn.recv(65536):
                info["closed_by"] = info["closed_by"] or "client"
                return
            if time.monotonic() - last_send > hb:
                conn.sendall(bytes(dbn.SystemMsg(0, "Heartbeat", code=dbn.SystemCode.HEARTBEAT)))
                info["heartbeats"] += 1
                last_send = time.monotonic()

    def _wait_for_close(self, conn):
        """Silent: read nothing, send nothing, until the client closes (or we do)."""
        while not self.closed.is_set():
            r, _, _ = select.select([conn], [], [], 0.05)
            if r:
                try:
                    if not conn.recv(65536):
                        return
                except OSError:
                    return


def main():
    import argparse
    import signal
    ap = argparse.ArgumentParser(description="a fake Databento live gateway on loopback (prints its port)")
    ap.add_argument("--path", default=str(DATA))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--speed", type=float, default=0.0)
    a = ap.parse_args()
    gw = FakeGateway(a.path, key=os.environ.get("FAKE_DATABENTO_KEY", KEY), limit=a.limit, repeat=a.repeat,
                     speed=a.speed, resume=False)
    print(gw.port, len(gw.recs), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    gw.close()


if __name__ == "__main__":
    main()
