"""JSON text as bytes, for the numba parsers (feeds/binance/scan.py): whitespace, strings,
skipping values, unsigned integers and exact fixed-point decimals.

Every read is checked against the span's end e (numba does not check indices). Where a loop
would look at one byte at a time over long runs (string bodies, digit runs), it reads eight
at once as a little-endian word (SWAR) when eight bytes remain, and one at a time otherwise.
"""
import numpy as np
from engine.jit import njit

from feeds.core.borrow import ctz_u64, load_u64

V_NONE, V_STR, V_NUM, V_ARR, V_OBJ, V_TRUE, V_FALSE, V_NULL = range(8)  # value types

_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(0x2222222222222222)
_BACKSLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
_ZEROS = np.uint64(0x3030303030303030)
_F0 = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIXES = np.uint64(0x0606060606060606)
_SEVENTY_SIXES = np.uint64(0x7676767676767676)
_THREES = np.uint64(0x3333333333333333)
_M8 = np.uint64(0x000000FF000000FF)
_MUL1 = np.uint64(100 + (1_000_000 << 32))
_MUL2 = np.uint64(1 + (10_000 << 32))
# bytes a JSON number may hold (what _skip takes as one; _uint/_dec judge it after)
_POW10 = np.array([10**k for k in range(19)], np.int64)
_FIT = np.array([(2**63 - 1) // 10**k for k in range(19)], np.int64)  # v * 10^k fits in int64 iff v <= _FIT[k]
_NUM = np.zeros(256, np.bool_)
for _c in b"0123456789+-.eE":
    _NUM[_c] = True


@njit(nogil=True, inline="always", cache=True)
def byte_mask(x, pattern):
    """The high bit of each byte of word x equal to pattern's (all its bytes the same). Exact up
    to the first match (a borrow may also flag bytes above it): ctz_u64(mask) >> 3 is the first."""
    y = x ^ pattern
    return (y - _ONES) & ~y & _HIGH


@njit(nogil=True, inline="always", cache=True)
def find_byte(b, i, e, c):
    """Index of the first byte c in b[i:e], or e."""
    pattern = np.uint64(c) * _ONES  # c in every byte of a word
    while i + 8 <= e:
        m = byte_mask(load_u64(b, i), pattern)
        if m != 0:
            return i + np.int64(ctz_u64(m) >> np.uint64(3))
        i += 8
    while i < e and b[i] != c:
        i += 1
    return i


@njit(nogil=True, inline="always", cache=True)
def nondigits(x):
    """The high bit of each byte of word x that is not an ASCII digit. Exact up to the first such
    byte (a carry may also flag bytes above it): ctz_u64(mask) >> 3 is the digits' count."""
    t = x ^ _ZEROS  # a digit byte is now 0..9
    return (t | (t + _SEVENTY_SIXES)) & _HIGH  # (a byte >= 10 sets its high bit)


@njit(nogil=True, inline="always", cache=True)
def digits_end(b, i, e):
    """Index of the first byte in b[i:e] that is not an ASCII digit, or e."""
    while i + 8 <= e:
        m = nondigits(load_u64(b, i))
        if m != 0:
            return i + np.int64(ctz_u64(m) >> np.uint64(3))
        i += 8
    while i < e and 48 <= b[i] <= 57:
        i += 1
    return i


@njit(nogil=True, inline="always", cache=True)
def eight_digits(x):
    """Are the 8 bytes of word x all ASCII digits?"""
    return ((x & _F0) | (((x + _SIXES) & _F0) >> np.uint64(4))) == _THREES


@njit(nogil=True, inline="always", cache=True)
def eight_digits_value(x):
    """The value of 8 ASCII digits in word x, the first byte the most significant (three
    multiplications instead of eight steps)."""
    x = x - _ZEROS
    x = x * np.uint64(10) + (x >> np.uint64(8))
    x = ((x & _M8) * _MUL1 + ((x >> np.uint64(16)) & _M8) * _MUL2) >> np.uint64(32)
    return np.int64(x & np.uint64(0xFFFFFFFF))


@njit(nogil=True, inline="always", cache=True)
def ws(b, i, e):
    while i < e and b[i] <= 32 and (b[i] == 32 or b[i] == 9 or b[i] == 10 or b[i] == 13):
        i += 1
    return i


@njit(nogil=True, inline="always", cache=True)
def quote_or_escape(b, i, e):
    """Index of the first '"' or backslash in b[i:e], or e."""
    while i + 8 <= e:
        x = load_u64(b, i)
        m = byte_mask(x, _QUOTES) | byte_mask(x, _BACKSLASHES)
        if m != 0:
            return i + np.int64(ctz_u64(m) >> np.uint64(3))
        i += 8
    while i < e and b[i] != 34 and b[i] != 92:
        i += 1
    return i


@njit(nogil=True, inline="always", cache=True)
def str_end(b, i, e):
    """b[i] is '"': index after the closing quote, or -1."""
    i += 1
    while True:
        i = quote_or_escape(b, i, e)
        if i >= e:
            return np.int64(-1)
        if b[i] == 34:
            return i + 1
        i += 2  # a backslash: skip the escaped byte


@njit(nogil=True, inline="always", cache=True)
def skip(b, i, e):
    """Skip the JSON value at b[i] (i < e): (type, index after it) or (V_NONE, -1)."""
    c = b[i]
    if c == 34:
        return V_STR, str_end(b, i, e)
    if c == 123 or c == 91:
        lvl = 0
        while i < e:
            c = b[i]
            if c == 34:
                i = str_end(b, i, e)
                if i < 0:
                    return V_NONE, -1
                continue
            if c == 123 or c == 91:
                lvl += 1
                if lvl > 64:
                    return V_NONE, -1
            elif c == 125 or c == 93:
                lvl -= 1
                if lvl == 0:
                    return (V_OBJ if b[i] == 125 else V_ARR), i + 1
            i += 1
        return V_NONE, -1
    if c == 116 and i + 4 <= e and b[i + 1] == 114 and b[i + 2] == 117 and b[i + 3] == 101:
        return V_TRUE, i + 4
    if c == 102 and i + 5 <= e and b[i + 1] == 97 and b[i + 2] == 108 and b[i + 3] == 115 and b[i + 4] == 101:
        return V_FALSE, i + 5
    if c == 110 and i + 4 <= e and b[i + 1] == 117 and b[i + 2] == 108 and b[i + 3] == 108:
        return V_NULL, i + 4
    j = digits_end(b, i, e)  # (most numbers are all digits: the table only for the rest)
    while j < e and _NUM[b[j]]:
        j += 1
    if j == i:
        return V_NONE, -1
    return V_NUM, j


@njit(nogil=True, inline="always", cache=True)
def plain_str_end(b, i, e):
    """b[i] is '"': index after the closing quote of a string without escapes, or -1 (a backslash
    first, or no end: the caller takes the general path, str_end)."""
    i = quote_or_escape(b, i + 1, e)
    return i + 1 if i < e and b[i] == 34 else np.int64(-1)


@njit(nogil=True, inline="always", cache=True)
def plain_scalar(b, i, e):
    """`skip`, with a string that holds an escape refused: (V_NONE, -1) (the caller reads the line
    the general way)."""
    if b[i] == 34:
        j = plain_str_end(b, i, e)
        return (V_STR if j >= 0 else V_NONE), j
    return skip(b, i, e)


@njit(nogil=True, inline="always", cache=True)
def uint(b, s, e):
    """Digits in b[s:e] -> value (< 2^63), or -1."""
    if s >= e or e - s > 19:
        return np.int64(-1)
    v = np.int64(0)
    i = s
    while i + 8 <= e:  # (at most 16 digits so: the 19th, the only one that can overflow, is below)
        x = load_u64(b, i)
        if not eight_digits(x):
            return np.int64(-1)
        v = v * 100_000_000 + eight_digits_value(x)
        i += 8
    while i < e:
        c = b[i]
        if c < 48 or c > 57:
            return np.int64(-1)
        if i == s + 18 and v > np.int64(922337203685477579):
            if v > np.int64(922337203685477580) or c > 55:
                return np.int64(-1)
        v = v * 10 + (c - 48)
        i += 1
    return v


@njit(nogil=True, inline="always", cache=True)
def _digit_word(b, i, e, most):
    """The leading ASCII digits of b[i:i + 8], at most `most` of them, when 8 bytes remain: (how many,
    their value) in a few word operations instead of a step a digit; (0, 0) otherwise."""
    if i + 8 > e or most <= 0:
        return 0, np.int64(0)
    x = load_u64(b, i)
    m = nondigits(x)
    k = 8 if m == 0 else np.int64(ctz_u64(m) >> np.uint64(3))
    if k > most:
        k = most
    if k == 0:
        return 0, np.int64(0)
    if k == 8:
        return 8, eight_digits_value(x)
    sh = np.uint64(8 * (8 - k))  # the k digits to the word's top, '0's before them: "000" + digits
    return k, eight_digits_value((x << sh) | (_ZEROS >> np.uint64(8 * k)))


@njit(nogil=True, inline="always", cache=True)
def dec(b, s, e, scale, neg_ok, stop):
    """An ASCII decimal b[s:e] ([-]digits[.digits]) -> int at 10^-scale (scale <= 18) exactly: (ok, value,
    index of the byte `stop` that ended it, or e). Digits past the scale must be zeros; at most 17
    significant digits (leading zeros count). stop = -1: the whole span; 34: a string's closing
    quote, so a level's numbers are read in the pass that finds their end."""
    neg = False
    i = s
    if neg_ok and i < e and b[i] == 45:
        neg = True
        i += 1
    st = i
    k, v = _digit_word(b, i, e, 8)  # (most numbers: their integer digits, then their decimals, a word each)
    i += k
    while i < e and 48 <= b[i] <= 57:
        v = v * 10 + (b[i] - 48)
        i += 1
    nd = i - st
    frac = 0
    if i < e and b[i] == 46:
        i += 1
        k, f = _digit_word(b, i, e, scale)
        if k > 0:
            v = v * _POW10[k] + f
            i += k
            frac = k
        while i < e and frac < scale and 48 <= b[i] <= 57:
            v = v * 10 + (b[i] - 48)
            frac += 1
            i += 1
        while i < e and b[i] == 48:  # past the scale: zeros only
            i += 1
    if i < e and b[i] != stop:
        return False, np.int64(0), i
    if nd + frac == 0 or nd + frac > 17:
        return False, np.int64(0), i
    m = scale - frac
    if m > 0:  # one multiply (a digit at a time was a chain of a dozen dependent steps a number)
        if v > _FIT[m]:  # would not fit in int64 at this scale
            return False, np.int64(0), i
        v *= _POW10[m]
    return True, (-v if neg else v), i
