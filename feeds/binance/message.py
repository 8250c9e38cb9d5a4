"""The Binance message scanner: one capture line "<recv ns> <json>" -> a table of the known keys'
value types and spans (F[k, 0]: the key's JSON value type, jscan.V_*; F[k, 1:3] its span), and
the readers of those values (integers, fixed-point decimals, price levels, the message's kind).

Every read is bounds-checked against the line's end (numba does not check indices): any key
order, any whitespace, unknown keys skipped (the byte primitives in feeds/core/jscan.py).
"""
import numpy as np
from engine.jit import njit

from feeds.binance.layout import (E_DEC, E_FORMAT, E_INT, E_JSON, E_LEVEL, E_MISSING, E_NOTOBJ, K_A, K_E, K_T,
                                  K_asks, K_b, K_bids, K_data, K_e, K_last, K_pu, K_u, KEYS, NK, R_VALS)
from feeds.books.ticks import price_ok
from feeds.core.borrow import borrow
from feeds.core.jscan import V_ARR, V_FALSE, V_NONE, V_NULL, V_NUM, V_OBJ, V_STR, dec as _dec, find_byte, \
    plain_scalar as _plain_scalar, plain_str_end as _plain_str_end, skip as _skip, \
    str_end as _str_end, uint as _uint, ws as _ws

_KEY1 = np.full(256, -1, np.int64)  # the one-byte keys' ids by byte
for _k, _name in enumerate(KEYS):
    if len(_name) == 1:
        _KEY1[ord(_name)] = _k
_LAST_ID = np.frombuffer(b"lastUpdateId", np.uint8).copy()
_DEPTH_UPDATE = np.frombuffer(b"depthUpdate", np.uint8).copy()
_TRADE = np.frombuffer(b"trade", np.uint8).copy()
_AGG_TRADE = np.frombuffer(b"aggTrade", np.uint8).copy()
_GAP = np.frombuffer(b"gap", np.uint8).copy()
_BOOK_TICKER = np.frombuffer(b"bookTicker", np.uint8).copy()


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
def _first(b, i, e, F):
    """Clear F; at the object's '{' (after whitespace): (1, its first member) or (0, after it) when
    it is empty, or (-1, -1)."""
    for k in range(NK):
        F[k, 0] = V_NONE
    i = _ws(b, i, e)
    if i >= e or b[i] != 123:
        return -1, np.int64(-1)
    i = _ws(b, i + 1, e)
    if i < e and b[i] == 125:
        return 0, i + 1
    return 1, i


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
def _member_end(b, F, k, t, s, v, e):
    """A member's value read (type t, b[s:v]; v < 0: it was not): kept, then (1, next member) on
    ',', (0, after the object) on '}', (-1, -1) else."""
    if v < 0:
        return -1, np.int64(-1)
    if k >= 0:  # (an unknown key is not kept)
        F[k, 0] = t
        F[k, 1] = s
        F[k, 2] = v
    i = _ws(b, v, e)
    if i < e and b[i] == 44:
        return 1, _ws(b, i + 1, e)
    if i < e and b[i] == 125:
        return 0, i + 1
    return -1, np.int64(-1)


@njit(nogil=True, cache=True)
def _object(b, i, e, F):
    """Parse the JSON object starting at or after b[i] (whitespace first): the known keys' value
    types and spans go to F (a repeated key: the last wins). Returns the index after it, or -1."""
    F = borrow(F)
    more, i = _first(b, i, e, F)
    while more == 1:
        k, i = _member_key(b, i, e)
        if k == -2:
            return np.int64(-1)
        t, v = _skip(b, i, e)
        more, i = _member_end(b, F, k, t, i, v, e)
    return i


@njit(nogil=True, cache=True)
def _wrapper(b, i, e, F, F1):
    """_object, where a "data" object's own keys go to F1 as it is read (F[K_data] spans it):
    the combined-stream wrapper costs one pass, not two."""
    F, F1 = borrow(F), borrow(F1)
    more, i = _first(b, i, e, F)
    while more == 1:
        k, i = _member_key(b, i, e)
        if k == -2:
            return np.int64(-1)
        if k == K_data and b[i] == 123:
            t, v = V_OBJ, _object(b, i, e, F1)
        else:
            t, v = _skip(b, i, e)
        more, i = _member_end(b, F, k, t, i, v, e)
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
            if k >= 0:  # (written out, as below: an array handed to a helper costs a call to count it)
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
def int_field(b, F, k):
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
def dec_field(b, F, k, scale):
    if F[k, 0] == V_NONE:
        return E_MISSING, np.int64(0)
    if F[k, 0] != V_STR:
        return E_DEC, np.int64(0)
    ok, v, _ = _dec(b, F[k, 1] + 1, F[k, 2] - 1, scale, True, -1)
    return (0 if ok else E_DEC), v


@njit(nogil=True, inline="always", cache=True)
def ts_field(b, F):
    """Event time in ns: T when present and non-zero, else E (as `int(d.get("T") or d["E"])`)."""
    if F[K_T, 0] == V_NUM:
        t = _uint(b, F[K_T, 1], F[K_T, 2])
        if t < 0:
            return E_INT, K_T, np.int64(0)
        if t != 0:
            return 0, 0, t * 1_000_000
    elif F[K_T, 0] != V_NONE and F[K_T, 0] != V_NULL and F[K_T, 0] != V_FALSE:
        return E_INT, K_T, np.int64(0)
    err, v = int_field(b, F, K_E)
    return err, K_E, v * 1_000_000


# a message's kind (kind())
(MSG_SNAPSHOT, MSG_DEPTH, MSG_TRADE, MSG_AGG_TRADE, MSG_GAP, MSG_TICKER, MSG_OTHER) = range(7)


@njit(nogil=True, inline="always", cache=True)
def kind(b, F):
    """What the parsed message F is: a REST depth snapshot (it has lastUpdateId), a depth diff, a
    trade or aggTrade, binance-live's gap line, a bookTicker (named, or spot's unnamed one: u, b
    and A without an event type), or another message (counted, skipped)."""
    if F[K_last, 0] != V_NONE:
        return MSG_SNAPSHOT
    if _is(b, F, K_e, _DEPTH_UPDATE):
        return MSG_DEPTH
    if _is(b, F, K_e, _AGG_TRADE):
        return MSG_AGG_TRADE
    if _is(b, F, K_e, _TRADE):
        return MSG_TRADE
    if _is(b, F, K_e, _GAP):
        return MSG_GAP
    if _is(b, F, K_e, _BOOK_TICKER) or ((F[K_e, 0] == V_NONE or F[K_e, 0] == V_NULL) and F[K_u, 0] != V_NONE
                                        and F[K_b, 0] != V_NONE and F[K_A, 0] != V_NONE):
        return MSG_TICKER
    return MSG_OTHER


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


@njit(nogil=True, cache=True)
def book_levels(b, F, kb, ka, V, required):
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
