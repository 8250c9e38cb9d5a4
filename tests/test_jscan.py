"""The JSON byte primitives (feeds/core/jscan.py) against plain Python on many strings: the
word-at-a-time paths (8 digits, 8 string bytes) must read exactly what a byte loop reads, at
every length and alignment around 8 and 16."""
import random
import re

import numpy as np

from feeds.core import jscan

_DEC = re.compile(r"(-?)([0-9]*)(?:\.([0-9]*))?")


def ref_dec(t, scale, neg_ok):
    m = _DEC.fullmatch(t)
    if not m or (m.group(1) and not neg_ok):
        return None
    ip, fp = m.group(2), m.group(3) or ""
    if fp[scale:].strip("0"):
        return None
    fp = fp[:scale]
    if not 1 <= len(ip) + len(fp) <= 17:
        return None
    v = int(ip + fp.ljust(scale, "0"))
    return None if v >= 2**63 else (-v if m.group(1) else v)


def ref_uint(t):
    return int(t) if 1 <= len(t) <= 19 and t.isdigit() and t.isascii() and int(t) < 2**63 else -1


def _strings(rng, n):
    out = ["", "0", ".", "-", "-.", "1.", ".5", "-0.0", "1.2.3", "9" * 17, "9" * 18, "1" + "0" * 16 + ".0",
           "92233720368.54775807", "9223372036854775807", "9223372036854775808", "00000000.00000000",
           "61837.63000000", "0.00100000", "1.000000000000", "1.0000000001"]
    for _ in range(n):
        kind = rng.random()
        if kind < 0.6:  # a decimal of random shape
            s = "-" if rng.random() < 0.2 else ""
            s += "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 12)))
            if rng.random() < 0.8:
                s += "." + "".join(rng.choice("0000123456789") for _ in range(rng.randint(0, 14)))
        else:  # noise around digits
            s = "".join(rng.choice("0123456789.-+e x/:") for _ in range(rng.randint(0, 24)))
        out.append(s)
    return out


def test_decimals_read_as_python_reads_them():
    rng = random.Random(7)
    for t in _strings(rng, 20_000):
        for scale in (8, 9):
            for neg_ok in (False, True):
                want = ref_dec(t, scale, neg_ok)
                b = np.frombuffer(t.encode(), np.uint8)
                ok, v, _ = jscan.dec(b, 0, len(b), scale, neg_ok, -1)
                assert (v if ok else None) == want, (t, scale, neg_ok)
                # the same number as a string's body, ended by its quote (the level arrays)
                q = np.frombuffer(b'x"' + t.encode() + b'",["1"]', np.uint8)
                ok, v, j = jscan.dec(q, 2, len(q), scale, neg_ok, 34)
                if '"' not in t:
                    assert (v if ok else None) == want, (t, scale, neg_ok)
                    assert not ok or j == 2 + len(t)


def test_unsigned_integers_read_as_python_reads_them():
    rng = random.Random(8)
    cases = [str(rng.randint(0, 10**rng.randint(1, 20))) for _ in range(5000)] + _strings(rng, 5000)
    cases += ["9223372036854775807", "9223372036854775808", "18446744073709551616", "0" * 19, "0" * 20]
    for t in cases:
        b = np.frombuffer(b"  " + t.encode() + b"  ", np.uint8)
        assert jscan.uint(b, 2, 2 + len(t)) == ref_uint(t), t


def test_string_ends_at_every_offset_of_a_word():
    for n in range(0, 40):
        for esc in (None, *range(n)):
            body = bytearray(b"a" * n)
            if esc is not None:
                body[esc:esc] = b'\\"'  # an escaped quote inside
            whole = b'"' + bytes(body) + b'"tail'
            b = np.frombuffer(whole, np.uint8)
            assert jscan.str_end(b, 0, len(b)) == len(body) + 2, (n, esc)
            assert jscan.str_end(b, 0, len(body) + 1) == -1  # cut before the closing quote
