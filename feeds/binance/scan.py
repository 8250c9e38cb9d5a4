"""The Binance capture scanner: raw line bytes -> continuity checks -> L2 book -> ticks, all in
numba (feeds/binance/capture.py drives it and documents the behaviour).

Why hand-written: orjson plus per-line Python ran ~180k lines/s, with the Python around the
parse costing more than the parse; a scanner for the few message shapes Binance sends (any key
order, any whitespace, unknown keys skipped; the byte primitives in feeds/core/jscan.py) parses a
bookTicker in ~130 ns and handles the spot capture at ~1.2M lines/s with its book (bench/feed_parsers.py).

Every read is bounds-checked against the line's end (numba does not check indices). A line is
handled in one step that first parses and validates everything it needs, then checks room (tick
buffer, book sides, scratch, held-event arena) and only then changes state; so a step that
returns for room (R_ROOM, R_VALS, R_HOLD) or fails (R_ERR) has changed nothing and is simply run
again (or skipped: counted in bad_lines).
"""
import numpy as np
from numba import types
from engine.jit import njit

from engine.records import KIND_TRADE, SIDE_BUY, SIDE_SELL

from feeds.books import book, book_deep as deep, depth
from feeds.core.jscan import V_ARR, V_FALSE, V_NONE, V_NULL, V_NUM, V_OBJ, V_STR, V_TRUE, dec as _dec, find_byte, \
    plain_scalar as _plain_scalar, plain_str_end as _plain_str_end, skip as _skip, \
    str_end as _str_end, uint as _uint, ws as _ws
from feeds.core.borrow import arrays_at, borrow, borrow_all, data_ptr
from feeds.books.ticks import emit, emit_gap, emit_quote, price_ok, touch_changed

# keys we read; any other key's value is skipped
KEYS = ("e", "E", "s", "U", "u", "b", "a", "B", "A", "p", "q", "T", "m", "pu", "data", "lastUpdateId", "bids",
        "asks", "t")
(K_e, K_E, K_s, K_U, K_u, K_b, K_a, K_B, K_A, K_p, K_q, K_T, K_m, K_pu, K_data, K_last, K_bids, K_asks,
 K_t) = range(19)
NK = len(KEYS)
_KEY1 = np.full(256, -1, np.int64)  # the one-byte keys' ids by byte
for _k, _name in enumerate(KEYS):
    if len(_name) == 1:
        _KEY1[ord(_name)] = _k
# F[k, 0]: the key's JSON value type (jscan.V_*); F[k, 1:3] is the value's span
_LAST_ID = np.frombuffer(b"lastUpdateId", np.uint8).copy()
_DEPTH_UPDATE = np.frombuffer(b"depthUpdate", np.uint8).copy()
_TRADE = np.frombuffer(b"trade", np.uint8).copy()
_AGG_TRADE = np.frombuffer(b"aggTrade", np.uint8).copy()
_GAP = np.frombuffer(b"gap", np.uint8).copy()
_BOOK_TICKER = np.frombuffer(b"bookTicker", np.uint8).copy()

# per-instrument state I[inst, .]
(I_SYNCED, I_SID, I_LAST, I_BOOKU, I_OVU, I_OVBP, I_OVBQ, I_OVAP, I_OVAQ, I_HELD, I_HFIRST, I_TS, I_TID) = range(13)
NI = 13
# globals G[.]
(G_NSYM, G_LINENO, G_RP_INST, G_RP_CUR, G_RP_END, G_RP_RECV, G_ERR, G_ERR_KEY, G_ERR_LINE, G_NEED, G_HN,
 G_HBYTES, G_STRICT, G_QUOTE, G_SIZE_DIV, G_HOLD_MAX, G_LAST_SYM) = range(17)
NG = 20
# counters C[.]
STATS = ("lines", "depth_events", "depth_applied", "depth_dropped_old", "snapshots", "resyncs", "gaps", "trades",
         "quotes", "book_tickers", "ticker_checked", "ticker_agree", "ticker_disagree", "bad_lines",
         "other_messages", "size_saturated", "crossed_quotes", "held_overflow", "ticker_quotes",
         "ticker_dropped_old", "ticker_no_book", "depth_duplicates", "trade_duplicates", "stream_gaps",
         "trade_bad_price", "trade_bad_size", "ticker_bad_price", "ticker_bad_size", "depth_bad_levels")
(C_LINES, C_DEPTH_EVENTS, C_DEPTH_APPLIED, C_DROPPED_OLD, C_SNAPSHOTS, C_RESYNCS, C_GAPS, C_TRADES, C_QUOTES,
 C_TICKERS, C_CHECKED, C_AGREE, C_DISAGREE, C_BAD, C_OTHER, C_SAT, C_CROSSED, C_HELD_OVERFLOW, C_TK_QUOTES,
 C_TK_OLD, C_TK_NO_BOOK, C_DEPTH_DUP, C_TRADE_DUP, C_STREAM_GAPS, C_TRADE_BAD_PRICE, C_TRADE_BAD_SIZE,
 C_TK_BAD_PRICE, C_TK_BAD_SIZE, C_BAD_LEVELS) = range(len(STATS))

# returns of scan (and of one step)
R_DONE, R_OUT, R_ROOM, R_VALS, R_HOLD, R_ERR, R_FATAL, R_DEEP = range(8)
_OK, _AGAIN = 100, 101
# errors (G_ERR); G_ERR_KEY names the field where one is concerned
(E_FORMAT, E_JSON, E_NOTOBJ, E_MISSING, E_INT, E_DEC, E_LEVEL, E_BOOL, E_SYMBOL, E_TOO_MANY_SYMBOLS,
 E_SNAPSHOT_SYMBOLS) = range(1, 12)
FATAL = (E_TOO_MANY_SYMBOLS, E_SNAPSHOT_SYMBOLS)
MAX_SYMBOLS = 256
SYM_LEN = 64
# held-event entries H[k, .]: owner (instrument, or the tags below), start and length in the
# arena, line number
H_OWNER, H_START, H_LEN, H_LINENO = range(4)
DEAD, ORPHAN = -1, -2   # a consumed entry; the snapshot that came before any symbol
_REPLAY = -10           # owner _REPLAY - inst: detached for replay against inst's new snapshot


def errors_text(code, key, strict_line):
    """The message for error `code` (Python side)."""
    k = KEYS[key] if 0 <= key < NK else "?"
    return {E_FORMAT: "expected '<receive ns> <json>'",
            E_JSON: "the message is not valid JSON",
            E_NOTOBJ: "the message is not a JSON object",
            E_MISSING: f"missing field '{k}'",
            E_INT: f"field '{k}' is not an unsigned integer",
            E_DEC: f"field '{k}' is not a decimal string within the fixed point (1e-9 prices, 1e-8 quantities)",
            E_LEVEL: 'a price level is not ["price", "quantity"] in decimals',
            E_BOOL: f"field '{k}' is not true or false",
            E_SYMBOL: f"the symbol is not a string of 1..{SYM_LEN} bytes",
            E_TOO_MANY_SYMBOLS: f"more than {MAX_SYMBOLS} symbols in one capture",
            E_SNAPSHOT_SYMBOLS: "a depth snapshot carries no symbol and this capture has several, so it cannot be "
                                "placed"}[code]


# --- JSON scanning (every index checked against e) -------------------------------------------

@njit(nogil=True, inline="always", cache=True)
def _key(b, s, n):
    if n == 1:
        return _KEY1[b[s]]
    if n == 2:
        return K_pu if b[s] == 112 and b[s + 1] == 117 else -1
    if n == 4:
        c0, c1, c2, c3 = b[s], b[s + 1], b[s + 2], b[s + 3]
        if c0 == 100 and c1 == 97 and c2 == 116 and c3 == 97:
            return K_data
        if c0 == 98 and c1 == 105 and c2 == 100 and c3 == 115:
            return K_bids
        if c0 == 97 and c1 == 115 and c2 == 107 and c3 == 115:
            return K_asks
        return -1
    if n == 12:
        for j in range(12):
            if b[s + j] != _LAST_ID[j]:
                return -1
        return K_last
    return -1


@njit(nogil=True, inline="always", cache=True)
def _open(b, i, e, F):
    """Clear F; skip to after the object's '{': (index, empty object?) or (-1, False)."""
    for k in range(NK):
        F[k, 0] = V_NONE
    i = _ws(b, i, e)
    if i >= e or b[i] != 123:
        return -1, False
    i = _ws(b, i + 1, e)
    return i, i < e and b[i] == 125


@njit(nogil=True, inline="always", cache=True)
def _member_key(b, i, e):
    """'"key"' ':' at b[i]: (key id or -1, index of the value) or (-2, -1)."""
    if i >= e or b[i] != 34:
        return -2, -1
    j = _str_end(b, i, e)
    if j < 0:
        return -2, -1
    k = _key(b, i + 1, j - i - 2)
    i = _ws(b, j, e)
    if i >= e or b[i] != 58:
        return -2, -1
    i = _ws(b, i + 1, e)
    if i >= e:
        return -2, -1
    return k, i


@njit(nogil=True, inline="always", cache=True)
def _member_end(b, v, e):
    """After a value: (1, next member) on ',', (0, after the object) on '}', (-1, -1) else."""
    i = _ws(b, v, e)
    if i < e and b[i] == 44:
        return 1, _ws(b, i + 1, e)
    if i < e and b[i] == 125:
        return 0, i + 1
    return -1, -1


@njit(nogil=True, cache=True)
def _object(b, i, e, F):
    """Parse the JSON object starting at or after b[i] (whitespace first): the known keys' value
    types and spans go to F (a repeated key: the last wins). Returns the index after it, or -1."""
    F = borrow(F)
    i, empty = _open(b, i, e, F)
    if i < 0 or empty:
        return i if i < 0 else i + 1
    while True:
        k, i = _member_key(b, i, e)
        if k == -2:
            return -1
        t, v = _skip(b, i, e)
        if v < 0:
            return -1
        if k >= 0:
            F[k, 0] = t
            F[k, 1] = i
            F[k, 2] = v
        more, i = _member_end(b, v, e)
        if more <= 0:
            return i


@njit(nogil=True, cache=True)
def _wrapper(b, i, e, F, F1):
    """_object, where a "data" object's own keys go to F1 as it is read (F[K_data] spans it):
    the combined-stream wrapper costs one pass, not two."""
    F, F1 = borrow(F), borrow(F1)
    i, empty = _open(b, i, e, F)
    if i < 0 or empty:
        return i if i < 0 else i + 1
    while True:
        k, i = _member_key(b, i, e)
        if k == -2:
            return -1
        if k == K_data and b[i] == 123:
            t, v = V_OBJ, _object(b, i, e, F1)
        else:
            t, v = _skip(b, i, e)
        if v < 0:
            return -1
        if k >= 0:
            F[k, 0] = t
            F[k, 1] = i
            F[k, 2] = v
        more, i = _member_end(b, v, e)
        if more <= 0:
            return i


# --- the shape Binance sends (no whitespace, no escapes), read straight: parse_line's fast path ---
# It fills F exactly as _wrapper / _object would for such a line, in fewer steps (no whitespace
# checks, a key's end found by the same word scan that checks it for escapes); anything else (a
# space, an escape, an object in an unknown key, trailing bytes) returns -1 and the line is read
# again the general way, from the start. bench/live.py: the tickers' and trades' parse, ~70% of a
# futures stream's frames.

@njit(nogil=True, inline="always", cache=True)
def _plain_member(b, i, e):
    """'"key":' at b[i]: (key id or -1, index of the value) or (-2, -1)."""
    if i >= e or b[i] != 34:
        return -2, np.int64(-1)
    j = _plain_str_end(b, i, e)
    if j < 0 or j + 1 >= e or b[j] != 58:
        return -2, np.int64(-1)
    return _key(b, i + 1, j - i - 2), j + 1


@njit(nogil=True, inline="always", cache=True)
def _plain_next(b, v, e):
    """After a value: (1, next member) on ',', (0, the '}') on '}', (-1, -1) else."""
    if v < e:
        if b[v] == 44:
            return 1, v + 1
        if b[v] == 125:
            return 0, v
    return -1, np.int64(-1)


@njit(nogil=True, cache=True)
def _plain_wrapper(b, i, e, F, F1):
    """_wrapper for the plain shape (b[i] is '{'), or -1: one loop over the members of both
    objects, the table it fills switching to F1 inside "data"'s; arrays (a diff's levels) and
    literals are skipped the general way."""
    F, F1 = borrow(F), borrow(F1)
    for k in range(NK):
        F[k, 0] = V_NONE
    T = F
    inner = False
    d0 = np.int64(0)  # where "data"'s object starts
    i += 1
    more = -1 if i >= e else (0 if b[i] == 125 else 1)
    while True:
        if more == 1:  # a member at i
            k, i = _plain_member(b, i, e)
            if k == -2:
                return np.int64(-1)
            if b[i] == 123:
                if inner or k != K_data:
                    return np.int64(-1)
                inner, T, d0 = True, F1, i
                for q in range(NK):
                    F1[q, 0] = V_NONE
                i += 1
                more = -1 if i >= e else (0 if b[i] == 125 else 1)
                continue
            t, v = _plain_scalar(b, i, e)
            if v < 0:
                return np.int64(-1)
            if k >= 0:
                T[k, 0] = t
                T[k, 1] = i
                T[k, 2] = v
            more, i = _plain_next(b, v, e)
        elif more == 0:  # b[i] closes an object
            if not inner:
                return i + 1
            inner, T = False, F
            F[K_data, 0] = V_OBJ
            F[K_data, 1] = d0
            F[K_data, 2] = i + 1
            more, i = _plain_next(b, i + 1, e)
        else:
            return np.int64(-1)


@njit(nogil=True, cache=True)
def _levels(b, s, e, V, k0):
    """The JSON array b[s:e] of ["price", "quantity"] pairs -> V[2k], V[2k+1] from pair k0 on; a
    pair whose price no tick can carry (0, or above ticks.MAX_PRICE) is left out. Returns (status,
    pairs, pairs left out): status 0 ok, 1 malformed, 2 V too small (pairs = how many needed so far)."""
    V = borrow(V)
    i = _ws(b, s + 1, e)  # b[s] is '['
    k = k0
    bad = np.int64(0)
    if i < e and b[i] == 93:
        return 0, 0, bad
    while True:
        if i >= e or b[i] != 91:
            return 1, 0, bad
        for half in range(2):
            i = _ws(b, i + 1, e)
            if i >= e or b[i] != 34:
                return 1, 0, bad
            if 2 * k + 1 >= V.shape[0]:
                return 2, k + 1, bad
            ok, v, j = _dec(b, i + 1, e, 9 if half == 0 else 8, False, 34)
            if not ok or j >= e:  # (a backslash is not a digit: an escape fails here too)
                return 1, 0, bad
            V[2 * k + half] = v
            i = _ws(b, j + 1, e)
            if i >= e or b[i] != (44 if half == 0 else 93):
                return 1, 0, bad
        if price_ok(V[2 * k]):  # (never negative: no sign is read)
            k += 1
        else:
            bad += 1
        i = _ws(b, i + 1, e)
        if i >= e:
            return 1, 0, bad
        if b[i] == 44:
            i = _ws(b, i + 1, e)
            continue
        if b[i] == 93:
            return 0, k - k0, bad
        return 1, 0, bad


@njit(nogil=True, inline="always", cache=True)
def _is(b, F, k, word):
    if F[k, 0] != V_STR or F[k, 2] - F[k, 1] - 2 != word.shape[0]:
        return False
    s = F[k, 1] + 1
    for j in range(word.shape[0]):
        if b[s + j] != word[j]:
            return False
    return True


@njit(nogil=True, inline="always", cache=True)
def _int_field(b, F, k):
    """(error or 0, value)."""
    if F[k, 0] == V_NONE:
        return E_MISSING, np.int64(0)
    if F[k, 0] == V_NUM:
        v = _uint(b, F[k, 1], F[k, 2])
    elif F[k, 0] == V_STR:  # digits in a string, as int() took them
        v = _uint(b, F[k, 1] + 1, F[k, 2] - 1)
    else:
        return E_INT, np.int64(0)
    return (E_INT if v < 0 else 0), v


@njit(nogil=True, inline="always", cache=True)
def _dec_field(b, F, k, scale):
    if F[k, 0] == V_NONE:
        return E_MISSING, np.int64(0)
    if F[k, 0] != V_STR:
        return E_DEC, np.int64(0)
    ok, v, _ = _dec(b, F[k, 1] + 1, F[k, 2] - 1, scale, True, -1)
    return (0 if ok else E_DEC), v


@njit(nogil=True, inline="always", cache=True)
def _ts_field(b, F):
    """Event time in ns: T when present and non-zero, else E (as `int(d.get("T") or d["E"])`)."""
    if F[K_T, 0] == V_NUM:
        t = _uint(b, F[K_T, 1], F[K_T, 2])
        if t < 0:
            return E_INT, K_T, np.int64(0)
        if t != 0:
            return 0, 0, t * 1_000_000
    elif F[K_T, 0] != V_NONE and F[K_T, 0] != V_NULL and F[K_T, 0] != V_FALSE:
        return E_INT, K_T, np.int64(0)
    err, v = _int_field(b, F, K_E)
    return err, K_E, v * 1_000_000


@njit(nogil=True, cache=True)
def parse_line(b, s, e, F0, F1):
    """One line "<recv ns> <json object>" -> (error, recv, which F holds the message: 0 or 1).
    The message is the object's "data" when it has one (the combined-stream wrapper)."""
    F0, F1 = borrow(F0), borrow(F1)
    i = find_byte(b, s, e, 32)
    if i >= e:
        return E_FORMAT, np.int64(0), 0
    recv = _uint(b, s, i)
    if recv < 0:
        return E_FORMAT, np.int64(0), 0
    j = _plain_wrapper(b, i + 1, e, F0, F1) if i + 1 < e and b[i + 1] == 123 else np.int64(-1)
    if j != e:  # (not the plain shape: the general way, from the start)
        j = _wrapper(b, i + 1, e, F0, F1)
    if j < 0:
        c = _ws(b, i + 1, e)
        if c < e and (b[c] == 91 or b[c] == 34 or (48 <= b[c] <= 57) or b[c] == 45 or b[c] == 116
                      or b[c] == 102 or b[c] == 110):
            return E_NOTOBJ, recv, 0
        return E_JSON, recv, 0
    if _ws(b, j, e) != e:
        return E_JSON, recv, 0
    if F0[K_data, 0] == V_NONE:
        return 0, recv, 0
    if F0[K_data, 0] != V_OBJ:
        return E_NOTOBJ, recv, 0
    return 0, recv, 1


# --- the book-ticker cross-check: per instrument, two rings in update-id order ------------------
# R[inst * K + j] = (u, bid px, bid qty, ask px, ask qty), X[inst] = (first, count), K = the ring's
# size (R's rows / X's rows). DR: the diffs' touches (a ticker looks for its id among them); TR: the
# tickers no diff has matched yet. Both streams' ids only grow (a repeat is dropped before here), so
# a ticker finds its diff, if any, among the newest few, and a diff drops every waiting ticker below
# its id (no later diff can match them) and takes the one at its id: every step touches the ends of
# two rings, cache lines already warm. (Two hash maps with a window of 50k entries were a cache miss
# per ticker on a futures stream, whose ids jump by ~70 a ticker: a tenth of the scan, perf.)
XD, XT = 256, 1024  # ring sizes per instrument: recent diffs, waiting tickers (the oldest forgotten)


@njit(nogil=True, inline="always", cache=True)
def _xrow(inst, K, j):
    """R's row of inst's ring slot j (j < 2K: first + count, wrapped)."""
    return inst * K + (j - K if j >= K else j)


@njit(nogil=True, inline="always", cache=True)
def _xpush(R, X, inst, u, bp, bq, ap, aq):
    K = R.shape[0] // X.shape[0]
    h, c = X[inst, 0], X[inst, 1]
    if c == K:  # full: the oldest goes
        h = h + 1 if h + 1 < K else 0
        c -= 1
    r = _xrow(inst, K, h + c)
    R[r, 0] = u
    R[r, 1] = bp
    R[r, 2] = bq
    R[r, 3] = ap
    R[r, 4] = aq
    X[inst, 0] = h
    X[inst, 1] = c + 1


@njit(nogil=True, inline="always", cache=True)
def _xdiff(DR, DX, inst, u):
    """The row of inst's diff with id u, or -1 (newest first, down to the first id below u)."""
    K = DR.shape[0] // DX.shape[0]
    h, c = DX[inst, 0], DX[inst, 1]
    while c > 0:
        c -= 1
        r = _xrow(inst, K, h + c)
        v = DR[r, 0]
        if v <= u:
            return r if v == u else -1
    return -1


@njit(nogil=True, inline="always", cache=True)
def _xticker(TR, TX, inst, u):
    """The row of inst's waiting ticker with id u, or -1; every waiting ticker up to u leaves."""
    K = TR.shape[0] // TX.shape[0]
    h, c = TX[inst, 0], TX[inst, 1]
    r = np.int64(-1)
    while c > 0:
        q = inst * K + h
        v = TR[q, 0]
        if v > u:
            break
        if v == u:
            r = q
        h = h + 1 if h + 1 < K else 0
        c -= 1
    TX[inst, 0] = h
    TX[inst, 1] = c
    return r


@njit(nogil=True, inline="always", cache=True)
def _xnewest(R, X, inst):
    """The newest id in inst's ring, or -1."""
    K = R.shape[0] // X.shape[0]
    c = X[inst, 1]
    if c == 0:
        return np.int64(-1)
    return R[_xrow(inst, K, X[inst, 0] + c - 1), 0]


# --- the book as published: the pure diff book, or it with a newer bookTicker over its touch ---

@njit(nogil=True, inline="always", cache=True)
def _view_walk(px, qty, j, off, s, p, vpx, vqty, vcnt, base, c, K):
    """Ladder levels px[j], px[j - 1].. px[off] worse than the ticker's price p join the view."""
    while j >= off and c < K:
        pj = px[j]
        if (pj < p) if s == 0 else (pj > p):
            vpx[base + c] = pj
            vqty[base + c] = qty[j]
            vcnt[base + c] = 1
            c += 1
        j -= 1
    return c


@njit(nogil=True, inline="always", cache=True)
def _build_view(L, D, VL, I, inst, bid, ask):
    """VL's sides of inst (those asked: bid, ask): L's top levels with the ticker's touch (I_OV*)
    over them: levels better than (or at) the ticker's price are gone, the ticker's level is the
    best. A ticker so far inside the book that the ladder runs out first pulls the table's next
    levels into the ladder (when it has room), then takes whatever is still missing from the table."""
    L, D, VL, I = borrow_all(L), borrow_all(D), borrow_all(VL), borrow(I)
    vmeta, vpx, vqty, vcnt = VL[0], VL[1], VL[2], VL[3]
    meta, px, qty = L[0], L[1], L[2]
    K = vpx.shape[0] // vmeta.shape[0]
    for s in range(2):
        if not (bid if s == 0 else ask):
            continue
        b = 2 * inst + s
        base = b * K
        p = I[inst, I_OVBP if s == 0 else I_OVAP]
        q = I[inst, I_OVBQ if s == 0 else I_OVAQ]
        c = 0
        if q > 0:  # (a zero quantity: Binance has no level on that side)
            vpx[base] = p
            vqty[base] = q
            vcnt[base] = 1
            c = 1
            off, n = meta[b, book.M_OFF], meta[b, book.M_LEN]
            c = _view_walk(px, qty, off + n - 1, off, s, p, vpx, vqty, vcnt, base, c, K)
            r = min(deep.TARGET, D[3][b])
            if c < K and r > 0 and n + r <= meta[b, book.M_CAP]:
                # the ladder ran out under the ticker (a fast move): the table's next levels join
                # it (the same book), so the tickers that follow find them there, not in a scan
                deep.refill(L, D, b, r)
                c = _view_walk(px, qty, off + r - 1, off, s, p, vpx, vqty, vcnt, base, c, K)
            if c < K and D[3][b] > 0:  # still short: the table's best
                m = deep.select_best(D, b, K - c, book._key(b, p), vpx, vqty, base + c)
                for a in range(m // 2):  # (worst first -> best first, as the view is built)
                    x, y = base + c + a, base + c + m - 1 - a
                    vpx[x], vpx[y] = vpx[y], vpx[x]
                    vqty[x], vqty[y] = vqty[y], vqty[x]
                for a in range(c, c + m):
                    vcnt[base + a] = 1
                c += m
        for a in range(c // 2):  # best first -> best last, the ladder's order
            x, y = base + a, base + c - 1 - a
            vpx[x], vpx[y] = vpx[y], vpx[x]
            vqty[x], vqty[y] = vqty[y], vqty[x]
        vmeta[b, book.M_OFF] = base
        vmeta[b, book.M_LEN] = c
        vmeta[b, book.M_CAP] = K


@njit(nogil=True, inline="always", cache=True)
def _book_event_ticks(L, W, inst, ts, recv, out, n, top, C, size_div, ticker):
    """End of a book event: level ticks, then a quote (touch changed) or a book tick."""
    n, nl = depth.publish(W, L, inst, ts, recv, out, n, C, C_SAT, size_div)
    if touch_changed(L, inst, top):
        C[C_QUOTES] += 1
        if ticker:
            C[C_TK_QUOTES] += 1
        if top[inst, 0] != 0 and top[inst, 2] != 0 and top[inst, 0] >= top[inst, 2]:
            C[C_CROSSED] += 1
        n = emit_quote(out, n, ts, recv, inst, top, C, C_SAT, size_div)
    elif nl:
        n = depth.emit_book(out, n, ts, recv, inst, top, C, C_SAT, size_div)
    return n


# --- held events (before a snapshot): raw line bytes in an arena ------------------------------

@njit(nogil=True, cache=True)
def _compact(G, H, HB):
    """Drop dead entries and their bytes (replay cursors follow)."""
    w = 0
    pos = 0
    cur, end = G[G_RP_CUR], G[G_RP_END]
    ncur, nend = 0, 0
    for k in range(G[G_HN]):
        if k == cur:
            ncur = w
        if k == end:
            nend = w
        if H[k, H_OWNER] == DEAD:
            continue
        s, ln = H[k, H_START], H[k, H_LEN]
        for j in range(ln):
            HB[pos + j] = HB[s + j]
        H[w, H_OWNER] = H[k, H_OWNER]
        H[w, H_START] = pos
        H[w, H_LEN] = ln
        H[w, H_LINENO] = H[k, H_LINENO]
        pos += ln
        w += 1
    if cur >= G[G_HN]:
        ncur = w
    if end >= G[G_HN]:
        nend = w
    G[G_RP_CUR], G[G_RP_END] = ncur, nend
    G[G_HN] = w
    G[G_HBYTES] = pos


@njit(nogil=True, cache=True)
def _hold_room(G, H, HB, ln):
    """Room for one more held line of ln bytes (compacting first if that makes it)? Else R_HOLD."""
    if G[G_HN] < H.shape[0] and G[G_HBYTES] + ln <= HB.shape[0]:
        return _OK
    if G[G_RP_INST] < 0:  # (not while replaying: the line being replayed lives in the arena)
        _compact(G, H, HB)
    if G[G_HN] < H.shape[0] and G[G_HBYTES] + ln <= HB.shape[0]:
        return _OK
    G[G_NEED] = ln
    return R_HOLD


@njit(nogil=True, cache=True)
def _hold(G, H, HB, I, C, owner, src, s, e, lineno):
    """Append a held line (room checked by _hold_room). An instrument holds at most G_HOLD_MAX:
    past that its oldest goes (counted)."""
    if owner >= 0:
        if I[owner, I_HELD] >= G[G_HOLD_MAX]:
            k = I[owner, I_HFIRST]
            while k < G[G_HN] and H[k, H_OWNER] != owner:
                k += 1
            if k < G[G_HN]:
                H[k, H_OWNER] = DEAD
                I[owner, I_HFIRST] = k + 1
                I[owner, I_HELD] -= 1
                C[C_HELD_OVERFLOW] += 1
        I[owner, I_HELD] += 1
    k = G[G_HN]
    p = G[G_HBYTES]
    for j in range(e - s):
        HB[p + j] = src[s + j]
    H[k, H_OWNER] = owner
    H[k, H_START] = p
    H[k, H_LEN] = e - s
    H[k, H_LINENO] = lineno
    G[G_HN] = k + 1
    G[G_HBYTES] = p + (e - s)


@njit(nogil=True, cache=True)
def _drop_held(G, H, I, owner):
    for k in range(G[G_HN]):
        if H[k, H_OWNER] == owner:
            H[k, H_OWNER] = DEAD
    if owner >= 0:
        I[owner, I_HELD] = 0
        I[owner, I_HFIRST] = 0


# --- the messages ---------------------------------------------------------------------------

@njit(nogil=True, inline="always", cache=True)
def _err(G, code, key):
    G[G_ERR] = code
    G[G_ERR_KEY] = key
    return R_FATAL if code == E_TOO_MANY_SYMBOLS or code == E_SNAPSHOT_SYMBOLS else R_ERR


@njit(nogil=True, cache=True)
def _need_room(L, D, G, b, V, off, k, cleared):
    """_OK, or R_ROOM (G_NEED = side b) / R_DEEP when book side b cannot take the k levels at V
    pairs off.. (those with q > 0 may be new; `cleared`: the side is emptied first)."""
    L, D, G, V = borrow_all(L), borrow_all(D), borrow(G), borrow(V)
    new = np.int64(0)
    for j in range(off, off + k):
        if V[2 * j + 1] > 0:
            new += 1
    r = deep.room(L, D, b, new, cleared)
    if r == 1:
        G[G_NEED] = b
        return R_ROOM
    return R_DEEP if r == 2 else _OK


@njit(nogil=True, inline="always", cache=True)
def _apply_levels(L, D, W, V, inst, nb, na):
    """The parsed levels (nb bids, then na asks, in V) set on inst's book sides (room checked)."""
    for j in range(nb + na):
        depth.changed(W, 2 * inst + (book.BID if j < nb else book.ASK), V[2 * j])
    deep.set_levels(L, D, 2 * inst, V, np.int64(0), nb)
    deep.set_levels(L, D, 2 * inst + 1, V, nb, na)


@njit(nogil=True, cache=True)
def _parse_book_levels(b, F, kb, ka, V, required):
    """Both sides' levels into V: (error or R_VALS or 0, key, nbid, nask, levels left out: the
    caller counts them in depth_bad_levels once it applies the rest)."""
    F, V = borrow(F), borrow(V)
    nb = np.int64(0)  # (not a literal: one compiled _levels)
    bad = np.int64(0)
    for side in range(2):
        k = kb if side == 0 else ka
        if F[k, 0] == V_NONE:
            if required:
                return E_MISSING, k, 0, 0, bad
            continue
        if F[k, 0] != V_ARR:
            return E_LEVEL, k, 0, 0, bad
        st, cnt, nbad = _levels(b, F[k, 1], F[k, 2], V, nb)
        bad += nbad
        if st == 1:
            return E_LEVEL, k, 0, 0, bad
        if st == 2:
            return R_VALS, nb + cnt, 0, 0, bad
        if side == 0:
            nb = cnt
        else:
            return 0, 0, nb, cnt, bad
    return 0, 0, nb, 0, bad


@njit(nogil=True, cache=True)
def _place_snapshot(b, F, inst, recv, L, D, W, VL, top, out, n, S):
    """A depth snapshot becomes inst's book; its held events are then replayed against it."""
    L, D, W, VL, S = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(VL), borrow_all(S)
    I, G, C, V = S[0], S[1], S[2], S[3]
    H = S[5]
    err, sid = _int_field(b, F, K_last)
    if err:
        return _err(G, err, K_last), n
    r, key, nb, na, nbad = _parse_book_levels(b, F, np.int64(K_bids), np.int64(K_asks), V, np.bool_(True))
    if r == R_VALS:
        G[G_NEED] = key
        return R_VALS, n
    if r:
        return _err(G, r, key), n
    for s in range(2):  # the side is cleared first: room for its levels with a quantity
        r = _need_room(L, D, G, 2 * inst + s, V, 0 if s == 0 else nb, nb if s == 0 else na, np.bool_(True))
        if r != _OK:
            return r, n
    size_div = G[G_SIZE_DIV]
    C[C_BAD_LEVELS] += nbad
    deep.clear(L, D, 2 * inst)
    deep.clear(L, D, 2 * inst + 1)
    _apply_levels(L, D, W, V, inst, nb, na)
    I[inst, I_OVU] = -1
    if W[0].shape[1] > 0:  # a clear tick, the whole window, a book tick with the touch
        depth.mark_stale(W, inst)
        n, nl = depth.publish(W, L, inst, recv, recv, out, n, C, C_SAT, size_div)
        touch_changed(L, inst, top)
        n = depth.emit_book(out, n, recv, recv, inst, top, C, C_SAT, size_div)
    for k in range(4):
        top[inst, k] = -1  # so the first event applied after it always quotes
    C[C_SNAPSHOTS] += 1
    I[inst, I_SID] = sid
    I[inst, I_SYNCED] = 0
    I[inst, I_LAST] = -1
    I[inst, I_BOOKU] = sid
    if I[inst, I_HELD] > 0:  # detach them (a gap while replaying holds afresh, as a new list)
        for k in range(G[G_HN]):
            if H[k, H_OWNER] == inst:
                H[k, H_OWNER] = _REPLAY - inst
        I[inst, I_HELD] = 0
        I[inst, I_HFIRST] = 0
        G[G_RP_INST] = inst
        G[G_RP_CUR] = 0
        G[G_RP_END] = G[G_HN]
        G[G_RP_RECV] = recv
    return _OK, n


@njit(nogil=True, cache=True)
def _depth(src, s, e, F, inst, recv, lineno, L, D, W, VL, top, out, n, S, DM, TM):
    """One diff event of a known instrument: continuity, then the book, ticks and the cross-check."""
    L, D, W, VL, S, DM, TM = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(VL), borrow_all(S), \
        borrow_all(DM), borrow_all(TM)
    F, top, out = borrow(F), borrow(top), borrow(out)
    I, G, C, V, H, HB = S[0], S[1], S[2], S[3], S[5], S[6]
    err, U_ = _int_field(src, F, K_U)
    if err:
        return _err(G, err, K_U), n
    err, u_ = _int_field(src, F, K_u)
    if err:
        return _err(G, err, K_u), n
    fut = F[K_pu, 0] != V_NONE
    synced = I[inst, I_SYNCED] != 0
    sid = I[inst, I_SID]
    if sid < 0 and not synced:  # no snapshot yet: hold it
        r = _hold_room(G, H, HB, e - s)
        if r != _OK:
            return r, n
        _hold(G, H, HB, I, C, inst, src, s, e, lineno)
        return _OK, n
    missed = np.int64(0)
    lose = False
    if not synced:
        if (u_ < sid) if fut else (u_ <= sid):
            C[C_DROPPED_OLD] += 1
            return _OK, n
        if not ((U_ <= sid <= u_) if fut else (U_ <= sid + 1 <= u_)):
            lose, missed = True, U_ - sid - 1  # the snapshot is older than the stream bridges
    elif u_ <= I[inst, I_LAST]:  # a diff the book already has (a duplicate, or a new connection's overlap)
        C[C_DEPTH_DUP] += 1
        return _OK, n
    elif fut:
        err, pu = _int_field(src, F, K_pu)
        if err:
            return _err(G, err, K_pu), n
        if pu != I[inst, I_LAST]:
            lose, missed = True, np.int64(1)
    elif U_ != I[inst, I_LAST] + 1:
        lose, missed = True, U_ - I[inst, I_LAST] - 1
    size_div = G[G_SIZE_DIV]
    if lose:  # a gap tick, an empty book, and wait for the next snapshot (holding this event)
        err, E = _int_field(src, F, K_E)
        if err:
            return _err(G, err, K_E), n
        r = _hold_room(G, H, HB, e - s)
        if r != _OK:
            return r, n
        C[C_RESYNCS] += 1
        C[C_GAPS] += 1
        I[inst, I_SYNCED] = 0
        I[inst, I_SID] = -1
        I[inst, I_LAST] = -1
        I[inst, I_BOOKU] = -1
        I[inst, I_OVU] = -1
        _drop_held(G, H, I, inst)
        _hold(G, H, HB, I, C, inst, src, s, e, lineno)
        deep.clear(L, D, 2 * inst)
        deep.clear(L, D, 2 * inst + 1)
        for k in range(4):
            top[inst, k] = 0
        n = emit_gap(out, n, E * 1_000_000, recv, max(np.int64(1), missed))
        depth.forget(W)  # the consumer voids every book: every window is re-sent
        return _OK, n
    err, key, ts = _ts_field(src, F)
    if err:
        return _err(G, err, key), n
    r, key, nb, na, nbad = _parse_book_levels(src, F, np.int64(K_b), np.int64(K_a), V, np.bool_(False))
    if r == R_VALS:
        G[G_NEED] = key
        return R_VALS, n
    if r:
        return _err(G, r, key), n
    for sd in range(2):
        r = _need_room(L, D, G, 2 * inst + sd, V, 0 if sd == 0 else nb, nb if sd == 0 else na, np.bool_(False))
        if r != _OK:
            return r, n
    # -- from here on, state changes
    C[C_BAD_LEVELS] += nbad
    if not synced:
        I[inst, I_SYNCED] = 1
        I[inst, I_SID] = -1
    _apply_levels(L, D, W, V, inst, nb, na)
    I[inst, I_LAST] = u_
    I[inst, I_BOOKU] = u_
    if ts > I[inst, I_TS]:
        I[inst, I_TS] = ts
    C[C_DEPTH_APPLIED] += 1
    view = False
    if I[inst, I_OVU] >= 0:
        if u_ >= I[inst, I_OVU]:  # the diff reaches the ticker: the diff's book replaces it
            I[inst, I_OVU] = -1
        else:  # an older diff: the newer ticker's touch stays over it
            _build_view(L, D, VL, I, inst, True, True)
            view = True
        depth.changed_all(W, inst)
    if view:
        n = _book_event_ticks(VL, W, inst, ts, recv, out, n, top, C, size_div, False)
    else:
        n = _book_event_ticks(L, W, inst, ts, recv, out, n, top, C, size_div, False)
    # the cross-check: the diff book's touch under this update id, against a ticker's
    bp, bq = book.best(L, 2 * inst)
    ap, aq = book.best(L, 2 * inst + 1)
    _xpush(DM[0], DM[1], inst, u_, bp, bq, ap, aq)
    p = _xticker(TM[0], TM[1], inst, u_)
    if p >= 0:
        _check(C, TM[0], p, bp, bq, ap, aq)
    return _OK, n


@njit(nogil=True, inline="always", cache=True)
def _check(C, R, p, bp, bq, ap, aq):
    C[C_CHECKED] += 1
    if R[p, 1] == bp and R[p, 2] == bq and R[p, 3] == ap and R[p, 4] == aq:
        C[C_AGREE] += 1
    else:
        C[C_DISAGREE] += 1


@njit(nogil=True, inline="always", cache=True)
def _tk_price_ok(p, q):
    """A bookTicker side's price: one a tick can carry, or 0 with quantity 0 (the side is empty)."""
    return price_ok(p) or (p == 0 and q == 0)


@njit(nogil=True, inline="always", cache=True)
def _ticker(b, F, inst, recv, L, D, W, VL, top, out, n, S, DM, TM):
    """A bookTicker: cross-checked against the diff book on a shared update id; newer than the
    book, its touch goes over the book's (quote tick) until a diff reaches its update id."""
    I, G, C = S[0], S[1], S[2]
    err, u_ = _int_field(b, F, K_u)
    if err:
        return _err(G, err, K_u), n
    err, bp = _dec_field(b, F, K_b, 9)
    if err:
        return _err(G, err, K_b), n
    err, bq = _dec_field(b, F, K_B, 8)
    if err:
        return _err(G, err, K_B), n
    err, ap = _dec_field(b, F, K_a, 9)
    if err:
        return _err(G, err, K_a), n
    err, aq = _dec_field(b, F, K_A, 8)
    if err:
        return _err(G, err, K_A), n
    ts = I[inst, I_TS]  # spot tickers carry no time: the instrument's latest exchange time
    if F[K_T, 0] != V_NONE or F[K_E, 0] != V_NONE:
        err, key, ts = _ts_field(b, F)
        if err:
            return _err(G, err, key), n
    elif ts == 0:
        ts = recv
    if bq < 0 or aq < 0:
        C[C_TK_BAD_SIZE] += 1
        return _OK, n
    if not (_tk_price_ok(bp, bq) and _tk_price_ok(ap, aq)):
        C[C_TK_BAD_PRICE] += 1
        return _OK, n
    C[C_TICKERS] += 1
    p = _xdiff(DM[0], DM[1], inst, u_)
    if p >= 0:
        _check(C, DM[0], p, bp, bq, ap, aq)
    elif u_ > _xnewest(TM[0], TM[1], inst):  # (a repeat waits once)
        _xpush(TM[0], TM[1], inst, u_, bp, bq, ap, aq)
    if G[G_QUOTE] == 0:
        return _OK, n
    if I[inst, I_BOOKU] < 0:
        C[C_TK_NO_BOOK] += 1
        return _OK, n
    if u_ <= I[inst, I_BOOKU] or u_ <= I[inst, I_OVU]:  # (or no newer than the ticker already over it:
        C[C_TK_OLD] += 1                                # a new connection's overlap repeats tickers)
        return _OK, n
    # While a ticker is over the book (I_OVU >= 0), VL is the view of the current ladder under it:
    # every ladder change either rebuilds VL (an older diff) or ends the overlay (a newer diff, a
    # snapshot, a gap). So a side whose touch the new ticker repeats has the same view: rebuilt
    # and re-published are only the sides it moves (most tickers move one).
    over = I[inst, I_OVU] >= 0
    nbid = not over or bp != I[inst, I_OVBP] or bq != I[inst, I_OVBQ]
    nask = not over or ap != I[inst, I_OVAP] or aq != I[inst, I_OVAQ]
    I[inst, I_OVU] = u_
    I[inst, I_OVBP] = bp
    I[inst, I_OVBQ] = bq
    I[inst, I_OVAP] = ap
    I[inst, I_OVAQ] = aq
    _build_view(L, D, VL, I, inst, nbid, nask)
    if nbid:
        depth.changed(W, 2 * inst, depth._ALL)
    if nask:
        depth.changed(W, 2 * inst + 1, -depth._ALL)
    n = _book_event_ticks(VL, W, inst, ts, recv, out, n, top, C, G[G_SIZE_DIV], True)
    return _OK, n


@njit(nogil=True, inline="always", cache=True)
def _trade(b, F, inst, recv, L, W, VL, top, out, n, S, agg):
    """A trade (or an aggTrade): a trade id at or below the last one seen is a duplicate (a new
    connection's overlap with the old one) and is dropped; a trade without an id is taken."""
    I, G, C = S[0], S[1], S[2]
    kid = K_a if agg else K_t
    tid = np.int64(-1)
    if F[kid, 0] != V_NONE:
        err, tid = _int_field(b, F, kid)
        if err:
            return _err(G, err, kid), n
        if tid <= I[inst, I_TID]:
            C[C_TRADE_DUP] += 1
            return _OK, n
    err, px = _dec_field(b, F, K_p, 9)
    if err:
        return _err(G, err, K_p), n
    err, qty = _dec_field(b, F, K_q, 8)
    if err:
        return _err(G, err, K_q), n
    err, T = _int_field(b, F, K_T)
    if err:
        return _err(G, err, K_T), n
    if F[K_m, 0] == V_TRUE:
        side = SIDE_SELL  # the buyer was the maker: a sell hit the bid
    elif F[K_m, 0] == V_FALSE:
        side = SIDE_BUY
    elif F[K_m, 0] == V_NONE:
        return _err(G, E_MISSING, K_m), n
    else:
        return _err(G, E_BOOL, K_m), n
    if not price_ok(px):  # (a sign is read: a negative price is a number here)
        C[C_TRADE_BAD_PRICE] += 1
        return _OK, n
    if qty <= 0:
        C[C_TRADE_BAD_SIZE] += 1
        return _OK, n
    if tid >= 0:
        I[inst, I_TID] = tid
    C[C_TRADES] += 1
    ts = T * 1_000_000
    if ts > I[inst, I_TS]:
        I[inst, I_TS] = ts
    size_div = G[G_SIZE_DIV]
    if I[inst, I_OVU] >= 0:
        n, nl = depth.publish(W, VL, inst, ts, recv, out, n, C, C_SAT, size_div)  # stale only
    else:
        n, nl = depth.publish(W, L, inst, ts, recv, out, n, C, C_SAT, size_div)
    n = emit(out, n, ts, recv, inst, KIND_TRADE, side, px, qty, top, C, C_SAT, size_div)
    if nl:
        n = depth.emit_book(out, n, ts, recv, inst, top, C, C_SAT, size_div)
    return _OK, n


@njit(nogil=True, cache=True)
def _symbol(b, F, S):
    """The instrument of the message's "s": (error, index or -1 when new)."""
    F, S = borrow(F), borrow_all(S)
    G, SYM = S[1], S[4]
    if F[K_s, 0] == V_NONE:
        return E_MISSING, -1
    ln = F[K_s, 2] - F[K_s, 1] - 2
    if F[K_s, 0] != V_STR or ln < 1 or ln > SYM_LEN:
        return E_SYMBOL, -1
    s = F[K_s, 1] + 1
    last = G[G_LAST_SYM]
    for a in range(G[G_NSYM]):
        i = (last + a) % G[G_NSYM]  # the last one seen first
        if SYM[i, SYM_LEN] != ln:
            continue
        same = True
        for j in range(ln):
            if SYM[i, j] != b[s + j]:
                same = False
                break
        if same:
            G[G_LAST_SYM] = i
            return 0, i
    return 0, -1


@njit(nogil=True, inline="always", cache=True)
def _stage_symbol(I, SYM, inst, b, s, ln):
    """Symbol row `inst` is b[s:s + ln], its instrument row fresh (no book, nothing seen)."""
    for j in range(ln):
        SYM[inst, j] = b[s + j]
    SYM[inst, SYM_LEN] = ln
    for k in range(NI):
        I[inst, k] = 0
    I[inst, I_SID] = -1
    I[inst, I_LAST] = -1
    I[inst, I_BOOKU] = -1
    I[inst, I_OVU] = -1
    I[inst, I_TID] = -1


@njit(nogil=True, cache=True)
def needs_snapshot(I, G, nsym):
    """Does a symbol need a depth snapshot: fewer than nsym symbols known yet, or one neither synced
    nor holding a snapshot (I_SID < 0: none placed, or a gap took it)? binance-live asks then."""
    k = G[G_NSYM]
    if k < nsym:
        return True
    for i in range(k):
        if I[i, I_SYNCED] == 0 and I[i, I_SID] < 0:
            return True
    return False


@njit(nogil=True, cache=True)
def declare(I, G, SYM, name):
    """Register the symbol `name` (uint8) before any line names it, as the next instrument (a live
    source knows its symbols at start: their ids are then fixed, in the order given). Returns its
    index, or -1 when the table is full or the name is not 1..SYM_LEN bytes."""
    ln = name.shape[0]
    if ln < 1 or ln > SYM_LEN:
        return -1
    for i in range(G[G_NSYM]):
        if SYM[i, SYM_LEN] == ln:
            same = True
            for j in range(ln):
                if SYM[i, j] != name[j]:
                    same = False
                    break
            if same:
                return i
    if G[G_NSYM] >= MAX_SYMBOLS:
        return -1
    inst = G[G_NSYM]
    _stage_symbol(I, SYM, inst, name, 0, ln)
    G[G_NSYM] = inst + 1
    return inst


@njit(nogil=True, cache=True)
def _new_symbol(b, F, recv, L, D, W, VL, top, out, n, S, F2):
    """Register the message's symbol; a snapshot that came before any symbol is its book."""
    I, G, SYM, H, HB = S[0], S[1], S[4], S[5], S[6]
    if G[G_NSYM] >= MAX_SYMBOLS:
        return _err(G, E_TOO_MANY_SYMBOLS, -1), n
    inst = G[G_NSYM]
    # staged first (unseen until G_NSYM moves on), so a return for room changes nothing
    _stage_symbol(I, SYM, inst, b, F[K_s, 1] + 1, F[K_s, 2] - F[K_s, 1] - 2)
    orphan = -1
    for k in range(G[G_HN]):
        if H[k, H_OWNER] == ORPHAN:
            orphan = k
    r = _OK
    if orphan >= 0:
        F3 = S[10]
        s0, e0 = H[orphan, H_START], H[orphan, H_START] + H[orphan, H_LEN]
        HR = data_ptr(HB)  # (the input's type: one compiled parser)
        err, orecv, which = parse_line(HR, s0, e0, F2, F3)
        if err == 0:
            r, n = _place_snapshot(HR, F2 if which == 0 else F3, inst, orecv, L, D, W, VL, top, out, n, S)
            if r == R_ROOM or r == R_VALS or r == R_DEEP:
                return r, n
        else:
            r = _err(G, err, -1)
        if r == R_ERR and G[G_STRICT] != 0:
            G[G_ERR_LINE] = H[orphan, H_LINENO]
        H[orphan, H_OWNER] = DEAD
    G[G_NSYM] = inst + 1
    G[G_LAST_SYM] = inst
    return (r if r == R_ERR else _AGAIN), n


@njit(nogil=True, cache=True)
def _gap_all(b, F, recv, L, D, W, top, out, n, S):
    """A `{"e":"gap","E":ms}` line (binance-live writes one when its connection is lost, so its
    recording replays the same ticks): every instrument waits for a new snapshot, its held events
    and book dropped, and one gap tick voids every book downstream."""
    L, D, W, S = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(S)
    I, G, C, H = S[0], S[1], S[2], S[5]
    ts = recv
    if F[K_E, 0] == V_NUM:
        t = _uint(b, F[K_E, 1], F[K_E, 2])
        if t > 0:
            ts = t * 1_000_000
    for inst in range(G[G_NSYM]):
        I[inst, I_SYNCED] = 0
        I[inst, I_SID] = -1
        I[inst, I_LAST] = -1
        I[inst, I_BOOKU] = -1
        I[inst, I_OVU] = -1
        _drop_held(G, H, I, np.int64(inst))
        deep.clear(L, D, 2 * inst)
        deep.clear(L, D, 2 * inst + 1)
        for k in range(4):
            top[inst, k] = 0
    C[C_GAPS] += 1
    C[C_STREAM_GAPS] += 1
    n = emit_gap(out, n, ts, recv, np.int64(1))
    depth.forget(W)
    return n


@njit(nogil=True, inline="always", cache=True)
def _step(b, s, e, lineno, L, D, W, VL, top, out, n, S, DM, TM):
    """One line b[s:e] (not blank)."""
    I, G, C, H, HB = S[0], S[1], S[2], S[5], S[6]
    F0, F1, F2 = S[7], S[8], S[9]
    err, recv, which = parse_line(b, s, e, F0, F1)
    if err:
        return _err(G, err, -1), n
    F = F0 if which == 0 else F1
    if F[K_last, 0] != V_NONE and F[K_s, 0] != V_NONE:  # a REST depth snapshot the live feed named ("s")
        err, inst = _symbol(b, F, S)
        if err:
            return _err(G, err, K_s), n
        if inst < 0:
            return _new_symbol(b, F, recv, L, D, W, VL, top, out, n, S, F2)
        r, n = _place_snapshot(b, F, inst, recv, L, D, W, VL, top, out, n, S)
        if r == _OK:
            C[C_LINES] += 1
        return r, n
    if F[K_last, 0] != V_NONE:  # a REST depth snapshot
        if G[G_NSYM] == 0:  # it is the book of the first symbol to come
            r = _hold_room(G, H, HB, e - s)
            if r != _OK:
                return r, n
            _drop_held(G, H, I, np.int64(ORPHAN))
            _hold(G, H, HB, I, C, np.int64(ORPHAN), b, s, e, lineno)
            C[C_LINES] += 1
            return _OK, n
        if G[G_NSYM] != 1:
            return _err(G, E_SNAPSHOT_SYMBOLS, -1), n
        r, n = _place_snapshot(b, F, np.int64(0), recv, L, D, W, VL, top, out, n, S)
        if r == _OK:
            C[C_LINES] += 1
        return r, n
    depth_ev = _is(b, F, K_e, _DEPTH_UPDATE)
    agg = not depth_ev and _is(b, F, K_e, _AGG_TRADE)
    trade = agg or (not depth_ev and _is(b, F, K_e, _TRADE))
    if not depth_ev and not trade and _is(b, F, K_e, _GAP):  # the live feed lost its stream
        n = _gap_all(b, F, recv, L, D, W, top, out, n, S)
        C[C_LINES] += 1
        return _OK, n
    ticker = not depth_ev and not trade and (
        _is(b, F, K_e, _BOOK_TICKER) or ((F[K_e, 0] == V_NONE or F[K_e, 0] == V_NULL) and F[K_u, 0] != V_NONE
                                         and F[K_b, 0] != V_NONE and F[K_A, 0] != V_NONE))
    if not (depth_ev or trade or ticker):
        C[C_LINES] += 1
        C[C_OTHER] += 1
        return _OK, n
    err, inst = _symbol(b, F, S)
    if err:
        return _err(G, err, K_s), n
    if inst < 0:
        r, n = _new_symbol(b, F, recv, L, D, W, VL, top, out, n, S, F2)
        if r == R_ERR and G[G_STRICT] == 0:  # (the snapshot's fault, counted; this line runs again)
            C[C_BAD] += 1
            r = _AGAIN
        return r, n
    if depth_ev:
        r, n = _depth(b, s, e, F, inst, recv, lineno, L, D, W, VL, top, out, n, S, DM, TM)
        if r == _OK:
            C[C_DEPTH_EVENTS] += 1
    elif trade:
        r, n = _trade(b, F, inst, recv, L, W, VL, top, out, n, S, agg)
    else:
        r, n = _ticker(b, F, inst, recv, L, D, W, VL, top, out, n, S, DM, TM)
    if r == _OK:
        C[C_LINES] += 1
    return r, n


@njit(nogil=True, inline="always", cache=True)
def _blank(b, s, e):
    for i in range(s, e):
        c = b[i]
        if not (c == 32 or (9 <= c <= 13)):
            return False
    return True


@njit(nogil=True, cache=True)
def _replay(L, D, W, VL, top, out, n, S, DM, TM):
    """Replay one held event detached for the snapshot just placed: (status, n); R_DONE when
    none are left."""
    G, C, H, HB = S[1], S[2], S[5], S[6]
    F0, F1 = S[7], S[8]
    inst = G[G_RP_INST]
    k = G[G_RP_CUR]
    while k < G[G_RP_END] and H[k, H_OWNER] != _REPLAY - inst:
        k += 1
    G[G_RP_CUR] = k
    if k >= G[G_RP_END]:
        G[G_RP_INST] = -1
        return R_DONE, n
    s0, e0 = H[k, H_START], H[k, H_START] + H[k, H_LEN]
    HR = data_ptr(HB)  # (the input's type: one compiled parser)
    err, recv, which = parse_line(HR, s0, e0, F0, F1)
    if err:
        r = _err(G, err, -1)
    else:
        r, n = _depth(HR, s0, e0, F0 if which == 0 else F1, inst, G[G_RP_RECV], H[k, H_LINENO], L, D, W, VL,
                      top, out, n, S, DM, TM)
    if r == R_ERR:
        if G[G_STRICT] == 0:
            C[C_BAD] += 1
            r = _OK
        else:
            G[G_ERR_LINE] = H[k, H_LINENO]
    if r == _OK:
        H[k, H_OWNER] = DEAD  # (no compaction runs while replaying: k is still this entry)
        G[G_RP_CUR] = k + 1
    return r, n


@njit(nogil=True, cache=True)
def scan(buf, pos, end, final, L, D, W, VL, top, out, n, S, DM, TM):
    """Run the lines of buf[pos:end] (the last one only if final, else up to the last newline).
    Returns (pos, n, status): R_DONE (all of it, or all whole lines), R_OUT (out is full: take
    out[:n] and call again), R_ROOM (grow book side G[G_NEED]), R_DEEP (grow the deep levels'
    table), R_VALS (V needs G[G_NEED]
    pairs), R_HOLD (the held arena needs G[G_NEED] bytes more), R_ERR (G_ERR at line
    G_ERR_LINE), R_FATAL. On any of these, pos is the line to run again."""
    # every array borrowed (feeds/core/borrow.py): the handlers below take tuples of ~40 arrays, and
    # numba's atomic reference counts on each call were most of a ticker's or trade's time. The
    # input is a bare pointer: every helper that reads it would otherwise call into the runtime
    # (a count of a borrowed array is still a call) and wrap negative indices, on every byte
    # helper: half a ticker's parse time
    buf, top, out = data_ptr(buf), borrow(top), borrow(out)
    L, D, W, VL, S, DM, TM = borrow_all(L), borrow_all(D), borrow_all(W), borrow_all(VL), borrow_all(S), \
        borrow_all(DM), borrow_all(TM)
    G, C = S[1], S[2]
    room = 2 + depth.room(W[0].shape[1])
    while True:
        if n + room > out.shape[0]:
            return pos, n, R_OUT
        if G[G_RP_INST] >= 0:
            r, n = _replay(L, D, W, VL, top, out, n, S, DM, TM)
            if r == _OK or r == R_DONE:
                continue
            return pos, n, r
        if pos >= end:
            return pos, n, R_DONE
        j = find_byte(buf, pos, end, 10)
        if j >= end and not final:
            return pos, n, R_DONE
        lineno = G[G_LINENO] + 1
        if _blank(buf, pos, j):
            r = _OK
        else:
            r, n = _step(buf, pos, j, lineno, L, D, W, VL, top, out, n, S, DM, TM)
            if r == _AGAIN:
                continue
            if r == R_ERR:
                if G[G_ERR_LINE] == 0:
                    G[G_ERR_LINE] = lineno
                if G[G_STRICT] == 0:
                    G[G_ERR_LINE] = 0
                    C[C_LINES] += 1
                    C[C_BAD] += 1
                    r = _OK
        if r != _OK:
            return pos, n, r
        G[G_LINENO] = lineno
        pos = j + 1 if j < end else end


# --- the scan through one handle table (feeds/core/borrow.py): what a live feed calls per socket read ---

_A1, _A2, _U1, _U2 = types.int64[::1], types.int64[:, ::1], types.uint8[::1], types.uint8[:, ::1]
# the state's tuples as Scanner (feeds/binance/capture.py) keeps them: ladders, deep levels, windows, view,
# state, the two cross-check rings; Scanner checks its arrays against these at start
PACKED = (types.Tuple((_A2, _A1, _A1, _A1, _A1)), types.UniTuple(_A1, 4), types.Tuple((_A2, _A2, _A1, _A2, _A1, _A1)),
          types.Tuple((_A2, _A1, _A1, _A1, _A1)), types.Tuple((_A2, _A1, _A1, _A1, _U2, _A2, _U1, _A2, _A2, _A2, _A2)),
          types.UniTuple(_A2, 2), types.UniTuple(_A2, 2))
_PL, _PD, _PW, _PV, _PS, _PM, _PT = PACKED
_OL, _OD = 0, len(_PL)
_OW = _OD + len(_PD)
_OV = _OW + len(_PW)
_OS = _OV + len(_PV)
_OM = _OS + len(_PS)
_OT = _OM + len(_PM)


@njit(nogil=True, cache=True)
def scan_packed(buf, pos, end, final, H, top, out, n):
    """scan() with the state's arrays given by their handles (H: borrow.handles of the PACKED
    tuples' arrays, in order): the same work for 4 arrays unboxed instead of ~45."""
    return scan(buf, pos, end, final, arrays_at(H, _OL, _PL), arrays_at(H, _OD, _PD), arrays_at(H, _OW, _PW),
                arrays_at(H, _OV, _PV), top, out, n, arrays_at(H, _OS, _PS), arrays_at(H, _OM, _PM),
                arrays_at(H, _OT, _PT))
