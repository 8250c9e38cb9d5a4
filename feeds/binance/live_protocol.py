"""Binance's side of binance-live, as data and rules (no I/O): the combined stream's URL, the REST
requests (path, request weight, the size a reply may have) and what their replies mean, the lines
binance-live adds to the capture format (a REST snapshot placed where its reply arrived, a gap),
and which books need a depth snapshot (Binance's sync procedure: a book waits for a snapshot at
start, after a gap, and for a new raw piece)."""
import json
from urllib.parse import quote, urlsplit

from feeds.binance import scan as S
from feeds.core import uri as U
from feeds.core.venue_text import escape

MAX_STREAMS = 1024  # per connection (the venue's limit)
# REST replies past these sizes are not the venue's (a reply is read up to its cap, then dropped):
# exchangeInfo ~3 KiB a symbol (spot's permission sets included), a depth level ~40 bytes a side
INFO_BYTES, INFO_SYMBOL_BYTES, DEPTH_LEVEL_BYTES = 1 << 20, 64 << 10, 128
# diffs a symbol holds while it waits for a snapshot (the newest: past it the oldest go). A live
# book needs only those that come during the snapshot's round trip (a REST timeout, 30 s, of the
# busiest 0 ms stream); a capture's reader holds binance.HOLD_MAX. Without this a venue that
# withholds snapshots (or sends stale ones) grew the held arena without bound.
LIVE_HOLD = 5000


def check_url(u, key, value, schemes):
    """ws= / rest=: a URL of one of `schemes` with a host."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - (raises on a port that is not a number)
    except ValueError as e:
        raise U.FeedError(f"{u}: {key}={value!r}: {e}") from None
    if parts.scheme.lower() not in schemes or not parts.hostname:
        raise U.FeedError(f"{u}: {key}={value!r} is not a {' or '.join(s + '://' for s in schemes)}HOST URL")
    return value


def streams(symbols, update, book_ticker, trades):
    """The combined stream's names: per symbol its depth diffs (at `update`, or the plain @depth for
    none), its bookTicker (unless off) and its trades (unless none)."""
    out = []
    for s in symbols:
        lo = s.lower()
        out.append(f"{lo}@depth" if update == "none" else f"{lo}@depth@{update}")
        if book_ticker != "off":
            out.append(f"{lo}@bookTicker")
        if trades != "none":
            out.append(f"{lo}@{trades}")
    return out


def stream_url(u, ws, names):
    """The one connection's URL for the streams `names` (FeedError past the venue's limit)."""
    if len(names) > MAX_STREAMS:
        raise U.FeedError(f"{u}: {len(names)} streams; one connection carries at most {MAX_STREAMS}")
    return ws.rstrip("/") + "/stream?streams=" + "/".join(names)


def depth_weight(market, limit):
    """REST weight of a depth snapshot (Binance's tables, spot and futures)."""
    if market == "spot":
        return 5 if limit <= 100 else 25 if limit <= 500 else 50 if limit <= 1000 else 250
    return 2 if limit <= 50 else 5 if limit <= 100 else 10 if limit <= 500 else 20


def depth_request(rest, api, market, symbol, limit):
    """A depth snapshot's (url, weight, reply cap)."""
    return (f"{rest}{api}/depth?symbol={symbol}&limit={limit}", depth_weight(market, limit),
            4096 + 2 * DEPTH_LEVEL_BYTES * limit)


def info_request(rest, api, market, symbols):
    """exchangeInfo's (url, weight, reply cap) for `symbols`."""
    q = quote(json.dumps(list(symbols), separators=(",", ":")))
    return (f"{rest}{api}/exchangeInfo?symbols={q}", 20 if market == "spot" else 1,
            INFO_BYTES + INFO_SYMBOL_BYTES * len(symbols))


def _json(body):
    """(body parsed, None) or (None, why not)."""
    try:
        return json.loads(body), None
    except ValueError:
        return None, "not JSON"
    except RecursionError:
        return None, "JSON nested deeper than a parser follows"


def read_info(u, market, rest, symbols, status, body):
    """exchangeInfo's reply: every symbol must exist (FeedError, one line, the venue's words
    escaped, otherwise); the symbols not trading now."""
    doc, bad = _json(body)
    if status != 200:
        msg = doc.get("msg") if isinstance(doc, dict) else None
        msg = msg if isinstance(msg, str) else body[:200].decode("utf-8", "replace")
        if status == 400 and "symbol" in msg.lower():  # (the venue does not say which)
            raise U.FeedError(f"{u}: unknown symbol among {', '.join(symbols)} on Binance "
                              f"{market} (exchangeInfo: {escape(msg)})")
        raise U.FeedError(f"{u}: exchangeInfo refused {', '.join(symbols)}: HTTP {status} {escape(msg)}")
    syms = doc.get("symbols") if isinstance(doc, dict) else None
    if not isinstance(syms, list) or not all(isinstance(s, dict) for s in syms):
        raise U.FeedError(f"{u}: exchangeInfo from {rest} is not Binance's ({bad or 'no list of symbol objects'})")
    info = {s["symbol"]: s for s in syms if isinstance(s.get("symbol"), str)}
    missing = [s for s in symbols if s not in info]
    if missing:
        raise U.FeedError(f"{u}: unknown symbol {', '.join(missing)} on Binance {market}")
    return [s for s in symbols if info[s].get("status", info[s].get("contractStatus")) not in ("TRADING", None)]


def snapshot_line(ns, symbol, status, body):
    """A depth reply as the capture line the scanner reads (`<ns> {"s":SYMBOL,"lastUpdateId":...}`:
    the venue's reply names no symbol), or None: not a reply to use (ask again)."""
    if status != 200 or not body.lstrip().startswith(b"{"):
        return None
    body = body.replace(b"\n", b" ").lstrip()
    return b"%d {\"s\":%s," % (ns, json.dumps(symbol).encode()) + body[1:] + b"\n"


def gap_line(ns, reason):
    """The line a lost connection leaves in the capture: every book waits for a new snapshot."""
    return b'%d {"e":"gap","E":%d,"reason":%s}\n' % (ns, ns // 1_000_000, json.dumps(reason).encode())


def needs_any(scanner, n):
    """Does a book of the first n symbols need a snapshot (one numba call: asked every step)?"""
    return S.needs_snapshot(scanner.state[0], scanner.state[1], n)


def wanted(scanner, symbols, refresh):
    """The symbols whose book needs a snapshot: every one on a refresh; else one the scanner has not
    met, or not synced with no snapshot applied since (its first diff held, or its continuity broke)."""
    I = scanner.state[0]
    known = {name: k for k, name in enumerate(scanner.instruments)}
    out = []
    for name in symbols:
        k = known.get(name, -1)
        if refresh or k < 0 or (I[k, S.I_SYNCED] == 0 and I[k, S.I_SID] < 0):
            out.append(name)
    return out


def synced(scanner, names):
    """Those of `names` whose book is synced."""
    I = scanner.state[0]
    known = {name: k for k, name in enumerate(scanner.instruments)}
    return [name for name in names if known.get(name, -1) >= 0 and I[known[name], S.I_SYNCED]]


def compact_held(scanner):
    """Drop the dead entries of the scanner's held arena once they are most of it. The scanner
    compacts only when the arena is full outside a snapshot's replay, and a stale snapshot's
    replay holds every diff again (a copy each): under a venue that keeps sending them, nearly
    every fill came during a replay and the arena doubled each time, without bound."""
    st = scanner.state
    G = st[1]
    n = int(G[S.G_HN])
    if n > 1024 and G[S.G_RP_INST] < 0 and n - int(st[0][:G[S.G_NSYM], S.I_HELD].sum()) > n // 2:
        S.compact(G, st[5], st[6])
