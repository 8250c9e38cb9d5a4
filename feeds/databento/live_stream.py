"""The DBN stream a live gateway session sends after start_session: its metadata (no symbology in
live), then records. The data records are feeds/databento/dbn.py's (its parser applies them);
what is live's alone is here: the scan that finds the control records between runs of data
records (and times the data records), and what those control records do.

SymbolMappingMsg gives instrument_id -> raw symbol: only the URI's symbols are instruments, each
with the first id the session maps it to. A mapping of another symbol is ignored
(unsubscribed_mappings), and so is one that would give a symbol a second id or an id a second
symbol (mapping_conflicts: two books never merge). A new session maps afresh. SystemMsg
(heartbeats included) and ErrorMsg are counted, and the messages that are not heartbeats are
printed, escaped, at most venue_text.LINES every PER_S seconds (the rest counted in
log_suppressed and said as a number: feeds/core/venue_text.py); refused mappings are said
likewise, within a budget of their own.

The scan feeds the latency histogram: ts_recv - ts_event of the data records that are not
snapshot records (16 bins an octave, 6% resolution), or, when the two clocks are not comparable
(feeds/core/feed_latency.py), a count and the last difference.
"""
import struct

import numpy as np
from engine.jit import njit

from feeds.core.feed_latency import on_one_clock
from feeds.core.venue_text import Limit, escape
from feeds.databento.dbn import RT_MBO, RT_MBP0, RT_MBP1, RT_MBP10, le64

RT_ERROR, RT_SYMBOL_MAPPING, RT_SYSTEM = 0x15, 0x16, 0x17
F_SNAPSHOT, F_BAD_TS_RECV = 0x20, 0x08
MAX_META = 64 << 20
LAT_BINS = 1024
SC_DATA, SC_CONTROL, SC_BROKEN = 0, 1, 2  # scan()'s results
ACC_LAST_TS, ACC_SNAPSHOT, ACC_DATA, ACC_OFF, ACC_LAST_OFF, NACC = range(6)  # scan()'s `acc`
HEARTBEAT, SYSTEM, ERROR, MAPPING = "heartbeat", "system", "error", "mapping"  # control records


def metadata_size(head, where):
    """Bytes of the metadata a stream starting with `head` (8 bytes at least) opens with.
    ValueError when it is not a DBN stream or the metadata is beyond MAX_META."""
    if bytes(head[:3]) != b"DBN":
        raise ValueError(f"{where} sent no DBN stream after start_session")
    need = 8 + struct.unpack_from("<I", head, 4)[0]
    if need > MAX_META:
        raise ValueError(f"DBN metadata of {need} bytes from {where}: too large")
    return need


@njit(nogil=True, cache=True)
def _lat_bin(v):
    if v < 0:
        v = 0
    e = 0
    while v >= 32:
        v >>= 1
        e += 1
    return e * 16 + v


@njit(nogil=True, cache=True)
def scan(b, pos, end, hist, acc):
    """Walk the complete records of b[pos:end]: returns (offset, what): SC_CONTROL at the first
    error / symbol mapping / system record, SC_BROKEN at a record shorter than its header (the
    stream's framing is lost), else SC_DATA at the end of the last complete record. Data records
    that are not snapshot records add ts_recv - ts_event to `hist` (_lat_bin), or when the two
    clocks are not comparable (feeds/core/feed_latency.py on_one_clock) count it in acc; acc
    (ACC_*): the last data record's ts_event, snapshot records, data records, records off the
    clock, the last one's difference (ns)."""
    while end - pos >= 2:
        ln = np.int64(b[pos]) * 4
        if ln < 16:
            return pos, SC_BROKEN
        if ln > end - pos:
            break
        rt = b[pos + 1]
        if rt == RT_ERROR or rt == RT_SYMBOL_MAPPING or rt == RT_SYSTEM:
            return pos, SC_CONTROL
        if rt == RT_MBO and ln >= 48:
            fl, tr = b[pos + 36], pos + 40
        elif (rt == RT_MBP0 or rt == RT_MBP1 or rt == RT_MBP10) and ln >= 40:
            fl, tr = b[pos + 30], pos + 32
        else:
            pos += ln  # a record the parser skips (or counts as too short)
            continue
        acc[0] = le64(b, pos + 8)
        acc[2] += 1
        if (fl & (F_SNAPSHOT | F_BAD_TS_RECV)) == 0:
            d = le64(b, tr) - acc[0]
            if on_one_clock(d):
                hist[_lat_bin(d)] += 1
            else:
                acc[3] += 1
                acc[4] = d
        elif fl & F_SNAPSHOT:
            acc[1] += 1
        pos += ln
    return pos, SC_DATA


def _bin_value(k):
    """The middle of latency bin k, in ns."""
    e, v = (k // 16 - 1, k - 16 * (k // 16 - 1)) if k >= 32 else (0, k)
    return (v + 0.5) * (1 << e) if e else float(k)


def percentile_us(hist, q):
    """The q-quantile (0-1) of the latency histogram, in microseconds (0 when empty)."""
    total = int(hist.sum())
    if not total:
        return 0
    k = int(np.searchsorted(np.cumsum(hist), q * total))
    return int(round(_bin_value(min(k, len(hist) - 1)) / 1000))


def _cstr(b):
    return bytes(b).split(b"\0", 1)[0].decode("utf-8", "replace")


def decode_control(rec, version):
    """(kind, instrument id, text) of a control record (bytes, whole) of DBN `version`: MAPPING
    (the id and its raw symbol), HEARTBEAT or SYSTEM (the message), ERROR (the message); None for
    a mapping too short to hold its symbol."""
    rt, v1 = rec[1], version == 1
    if rt == RT_SYMBOL_MAPPING:
        at, width = (38, 22) if v1 else (89, 71)
        if len(rec) < at + width:
            return None
        return MAPPING, int.from_bytes(rec[4:8], "little"), _cstr(rec[at:at + width])
    if rt == RT_SYSTEM:
        text = _cstr(rec[16:16 + (64 if v1 else 303)])
        code = rec[319] if not v1 and len(rec) >= 320 else 255
        beat = text.startswith("Heartbeat") or (version >= 3 and code == 0)
        return (HEARTBEAT if beat else SYSTEM), 0, text
    return ERROR, 0, _cstr(rec[16:16 + (64 if v1 else 302)])


class ControlRecords:
    """What a session's control records do (the module's doc). `counts`: the source's counters
    (a dict of the names below); `bind(iid, k)`: make the gateway's id `iid` the instrument of
    index k (the URI's k-th symbol); `say`: one log line."""

    def __init__(self, uri, symbols, counts, bind, say):
        self.uri, self.counts, self.bind, self.say = uri, counts, bind, say
        # the URI's symbols are instruments 0..n-1 in its order (a run binds a UNIVERSE to them
        # before any record): the id the gateway maps to one of them takes its index
        self.declared = {name: k for k, name in enumerate(dict.fromkeys(symbols))}
        # (apart: a flood of one kind does not hide the other)
        self.venue_log = Limit(lambda m: say(f"{uri}: {m}"), "gateway messages")
        self.mapping_log = Limit(lambda m: say(f"{uri}: {m}"), "refused symbol mappings")
        self.version = 3
        self.last_error = ""  # the gateway's last error message, as sent
        self.sym_id, self.id_sym = {}, {}  # this session's mappings

    def new_session(self, version):
        """A session's metadata came (DBN `version`): it maps its ids afresh."""
        self.version = version
        self.sym_id, self.id_sym = {}, {}

    def apply(self, rec):
        """One control record (bytes, whole): counted, said, mapped. Returns its kind."""
        got = decode_control(rec, self.version)
        if got is None:
            return None
        kind, iid, text = got
        if kind == MAPPING:
            self.map(iid, text)
        elif kind == HEARTBEAT:
            self.counts["heartbeats"] += 1
        elif kind == SYSTEM:
            self.counts["system_msgs"] += 1
            if self.venue_log.allow():
                self.say(f"{self.uri}: gateway: {escape(text)}")
        else:
            self.counts["gateway_errors"] += 1
            self.last_error = text
            if self.venue_log.allow():
                self.say(f"{self.uri}: gateway error: {escape(text)}")
        return kind

    def map(self, iid, name):
        """The gateway maps id `iid` to symbol `name`: an instrument only when the URI names it,
        with the session's first id for it (the module's doc)."""
        k = self.declared.get(name)
        if k is None:
            self.counts["unsubscribed_mappings"] += 1
            if self.mapping_log.allow():
                self.say(f"{self.uri}: gateway mapped id {iid} to {escape(name)}, a symbol not subscribed: ignored")
        elif self.sym_id.get(name) != iid:
            if name in self.sym_id or iid in self.id_sym:  # a second id for a symbol, or symbol for an id
                self.counts["mapping_conflicts"] += 1
                if self.mapping_log.allow():
                    was = f"{name} is id {self.sym_id[name]}" if name in self.sym_id else f"id {iid} is {self.id_sym[iid]}"
                    self.say(f"{self.uri}: gateway mapped id {iid} to {name} but {was} in this session: ignored "
                             f"(id {iid}'s records are not {name}'s)")
                return
            self.sym_id[name], self.id_sym[iid] = iid, name
            self.bind(iid, k)

    @property
    def suppressed(self):
        return self.venue_log.suppressed + self.mapping_log.suppressed

    def tick(self):
        """A flood's count is said when its interval ends, even if it stopped."""
        self.venue_log.tick()
        self.mapping_log.tick()

    def flush(self):
        self.venue_log.flush()
        self.mapping_log.flush()
