"""The MBO records a gateway replays: a DBN file's as one structured array, and the book at any
point of it (what a snapshot sends)."""
import struct

import numpy as np

MBO_LEN = 56
F_LAST, F_SNAPSHOT, F_BAD_TS_RECV = 0x80, 0x20, 0x08
UNDEF_PRICE = 2**63 - 1
MBO = np.dtype([("len", "u1"), ("rtype", "u1"), ("publisher_id", "<u2"), ("instrument_id", "<u4"),
                ("ts_event", "<u8"), ("order_id", "<u8"), ("price", "<i8"), ("size", "<u4"), ("flags", "u1"),
                ("channel_id", "u1"), ("action", "u1"), ("side", "u1"), ("ts_recv", "<u8"),
                ("ts_in_delta", "<i4"), ("sequence", "<u4")])
assert MBO.itemsize == MBO_LEN


class DbnFileError(ValueError):
    pass


def load(path, limit=None, repeat=1):
    """(dataset, {raw symbol: instrument id}, MBO records as one structured array) of an MBO
    DBN file (zstd or plain); `repeat` plays it that many times, each pass after the first
    opening with an R record (the book starts again)."""
    import databento_dbn as dbn
    meta, body = _read(path)
    try:
        meta = dbn.Metadata.decode(meta)
    except Exception as e:  # (the decoder raises its own exception types)
        raise DbnFileError(f"{path}: not a DBN file ({e})") from None
    if len(body) % MBO_LEN:
        raise DbnFileError(f"{path}: the venue replays MBO files only")
    recs = np.frombuffer(body, MBO)
    if not len(recs) or not (recs["rtype"] == 0xA0).all():
        raise DbnFileError(f"{path}: the venue replays MBO files only" if len(recs) else f"{path}: no records")
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


def _read(path):
    """(the metadata's bytes, the records' bytes) of a DBN file."""
    import zstandard
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:4] == b"\x28\xb5\x2f\xfd":
            raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
    except OSError as e:
        raise DbnFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    except zstandard.ZstdError as e:
        raise DbnFileError(f"{path}: not a zstd DBN file ({e})") from None
    if raw[:3] != b"DBN" or len(raw) < 8:
        raise DbnFileError(f"{path}: not a DBN file")
    mlen = struct.unpack_from("<I", raw, 4)[0]
    return raw[:8 + mlen], raw[8 + mlen:]


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


def snapshot(recs, k, wanted, now):
    """The MBO snapshot after records[:k] for instruments `wanted`: per instrument an R record, then
    an add per resting order, F_SNAPSHOT | F_BAD_TS_RECV, the instrument's last one with F_LAST."""
    books = book_at(recs, k)
    out = []
    for iid in sorted(wanted):
        orders = list(books.get(iid, {}).items())
        snap = np.zeros(1 + len(orders), MBO)
        snap["len"], snap["rtype"], snap["publisher_id"], snap["instrument_id"] = MBO_LEN // 4, 0xA0, 1, iid
        snap["flags"] = F_SNAPSHOT | F_BAD_TS_RECV
        snap["ts_recv"] = now
        snap[0]["ts_event"], snap[0]["price"], snap[0]["action"], snap[0]["side"] = now, UNDEF_PRICE, 82, 78
        for j, (oid, (side, px, sz, ts, seq)) in enumerate(orders, 1):
            snap[j]["order_id"], snap[j]["price"], snap[j]["size"] = oid, px, sz
            snap[j]["action"], snap[j]["side"], snap[j]["ts_event"], snap[j]["sequence"] = 65, side, ts, seq
        snap[-1]["flags"] |= F_LAST
        out.append(snap.tobytes())
    return b"".join(out)
