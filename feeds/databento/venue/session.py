"""One connection to the gateway: greeting, CRAM authentication, the subscription lines until
`start_session`, then the DBN stream (metadata, symbol mappings, the snapshot when asked, the
records from the market's position) with the session's faults, and heartbeats once they run out."""
import select
import socket
import time

import numpy as np

from .cram import answer, challenge
from .records import MBO_LEN, UNDEF_PRICE, snapshot

LSG_VERSION = "0.venue.1"


def serve(gw, conn, k):
    """Session k of gateway gw on socket conn, to its end."""
    info = gw.sessions[k]
    if k in gw.refuse:
        info["closed_by"] = "refused"
        conn.close()
        return
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _run(gw, conn, k, info)
    except (OSError, ValueError) as e:
        info["closed_by"] = info["closed_by"] or f"client ({e.__class__.__name__})"
    finally:
        try:
            conn.close()
        except OSError:
            pass


def _line(gw, conn, buf):
    """The next control line from the client as {key: value} (None when it closed)."""
    while b"\n" not in buf:
        if gw.closed.is_set():
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


def _authenticated(gw, conn, info, buf):
    """The greeting and the client's auth line; its fields, or None (refused, or it went)."""
    text = challenge()
    conn.sendall(f"lsg_version={LSG_VERSION}\n".encode() + f"cram={text}\n".encode())
    auth = _line(gw, conn, buf)
    if auth is None:
        return None
    info["auth"] = {k2: v for k2, v in auth.items() if k2 != "auth"}
    if gw.key is None or auth.get("auth") != answer(text, gw.key):
        info["closed_by"] = "auth failure"
        conn.sendall(f"success=0|error={gw.auth_error}\n".encode())
        return None
    if auth.get("dataset") != gw.dataset:
        info["closed_by"] = "bad dataset"
        conn.sendall(f"success=0|error=Unknown dataset {auth.get('dataset')}\n".encode())
        return None
    return auth


def _run(gw, conn, k, info):
    import databento_dbn as dbn
    buf = bytearray()
    auth = _authenticated(gw, conn, info, buf)
    if auth is None:
        return
    conn.sendall(f"success=1|session_id={1000 + k}\n".encode())
    hb = float(auth.get("heartbeat_interval_s") or 30)
    while True:
        line = _line(gw, conn, buf)
        if line is None:
            return
        if "start_session" in line:
            break
        info["subscriptions"].append(line)
    subs = info["subscriptions"]
    syms = [s for sub in subs for s in sub.get("symbols", "").split(",") if s]
    with gw.lock:
        if not gw.resume:
            gw.cursor = 0
        elif k:
            gw.cursor = min(len(gw.recs), gw.cursor + gw.skip)
        start = gw.cursor
    now = int(gw.recs["ts_recv"][min(start, len(gw.recs) - 1)])
    head = dbn.Metadata(dataset=gw.dataset, start=now, stype_in=dbn.SType.RAW_SYMBOL,
                        stype_out=dbn.SType.INSTRUMENT_ID, schema=dbn.Schema.MBO, version=3).encode()
    pre = [head]
    wanted = set()
    for s in syms:
        if s in gw.symbols:
            iid = gw.symbols[s]
            wanted.add(iid)
            pre.append(bytes(dbn.SymbolMappingMsg(1, iid, now, dbn.SType.RAW_SYMBOL, s, dbn.SType.RAW_SYMBOL, s,
                                                  now, UNDEF_PRICE)))
        else:
            pre.append(bytes(dbn.ErrorMsg(now, f"Failed to resolve symbol: {s}",
                                          code=dbn.ErrorCode.SYMBOL_RESOLUTION_FAILED)))
    if any(sub.get("snapshot") == "1" for sub in subs):
        snap = snapshot(gw.recs, start, wanted, now)
        info["snapshot_records"] = len(snap) // MBO_LEN
        pre.append(snap)
    conn.sendall(b"".join(pre))
    mine = np.isin(gw.recs["instrument_id"], list(wanted)) if wanted else None
    _stream(gw, conn, k, info, start, mine, hb)


def _faults(gw, k):
    """Session k's faults in the order they fire: [(records sent, what, bytes to inject)]."""
    faults = [(n, what, None) for what, d in (("drop", gw.drop_after), ("silent", gw.silent_after),
                                              ("error", gw.error_after)) if k in d for n in [d[k]]]
    faults += [(n, "inject", data) for n, data in gw.inject.get(k, ())]
    faults.sort(key=lambda f: f[0])
    return faults


def _stream(gw, conn, k, info, start, mine, hb):
    """Send records from `start` (only the subscribed instruments'), with this session's faults."""
    faults = _faults(gw, k)
    recs = gw.recs
    i, sent = start, 0
    t0, ts0 = time.monotonic(), int(recs["ts_recv"][min(start, len(recs) - 1)])
    last_send = time.monotonic()
    while i < len(recs) and not gw.closed.is_set():
        j = min(len(recs), i + 2048)
        if faults:
            j = min(j, i + (faults[0][0] - sent))
        if gw.speed > 0:  # recorded pace: what is due now
            due = ts0 + (time.monotonic() - t0) * gw.speed * 1e9
            j = min(j, max(i, int(np.searchsorted(recs["ts_recv"], due, side="right"))))
        if j > i:
            sel = np.arange(i, j) if mine is None else np.nonzero(mine[i:j])[0] + i
            if len(sel) == j - i:
                conn.sendall(memoryview(gw.body)[i * MBO_LEN:j * MBO_LEN])
            else:
                conn.sendall(recs[sel].tobytes())
            sent += j - i
            with gw.lock:
                gw.cursor = j
            info["records"] = sent
            i = j
            last_send = time.monotonic()
        elif time.monotonic() - last_send > hb:
            last_send = _heartbeat(conn, info)
        else:
            time.sleep(0.001)
        while faults and sent >= faults[0][0]:
            if _fault(gw, conn, info, faults.pop(0)):
                return
    _at_end(gw, conn, info, hb, last_send)


def _fault(gw, conn, info, fault):
    """Apply one fault; True: the session ends."""
    import databento_dbn as dbn
    _, what, data = fault
    if what == "drop":
        info["closed_by"] = "drop"
        conn.shutdown(socket.SHUT_RDWR)
        return True
    if what == "silent":
        info["closed_by"] = "silent"
        _wait_for_close(gw, conn)
        return True
    if what == "inject":
        conn.sendall(data)
    else:
        conn.sendall(bytes(dbn.ErrorMsg(0, gw.error_text, code=dbn.ErrorCode.INTERNAL_ERROR)))
    return False


def _heartbeat(conn, info):
    import databento_dbn as dbn
    conn.sendall(bytes(dbn.SystemMsg(0, "Heartbeat", code=dbn.SystemCode.HEARTBEAT)))
    info["heartbeats"] += 1
    return time.monotonic()


def _at_end(gw, conn, info, hb, last_send):
    """The records ran out: close (at_end "close"), else heartbeats until the client goes, as a
    live gateway."""
    if gw.at_end == "close":
        info["closed_by"] = "end"
        conn.shutdown(socket.SHUT_RDWR)
        return
    while not gw.closed.is_set():
        r, _, _ = select.select([conn], [], [], min(hb, 0.05))
        if r and not conn.recv(65536):
            info["closed_by"] = info["closed_by"] or "client"
            return
        if time.monotonic() - last_send > hb:
            last_send = _heartbeat(conn, info)


def _wait_for_close(gw, conn):
    """Silent: read nothing, send nothing, until the client closes (or we do)."""
    while not gw.closed.is_set():
        r, _, _ = select.select([conn], [], [], 0.05)
        if r:
            try:
                if not conn.recv(65536):
                    return
            except OSError:
                return
