"""Strategy files written by the tests (not the shipped ones), from the README's contract alone,
and pure-Python references for what they must compute."""
import textwrap

import numpy as np

from engine.records import KIND_BOOK, KIND_GAP, KIND_LEVEL, KIND_QUOTE, SIDE_BUY, SIDE_NONE, TICK_DTYPE

# touch only: a mid-return EWMA, the touch imbalance and a trade count; scored on quotes
TOUCH = '''
import numpy as np
from numba import njit
from engine.strategy_api import KIND_QUOTE, KIND_TRADE, kind, bid_px, ask_px, bid_sz, ask_sz

FEATURES = ("ret_ewma_bps", "touch_imbalance", "trades_seen")
DEPTH = 0
STATE = 4
PARAMS = {"alpha": 0.25, "warmup": 3.0}

@njit
def on_tick(state, book, tick, row, params):
    k = kind(tick)
    if k == KIND_TRADE:
        state[2] += 1.0
        return False
    if k != KIND_QUOTE or bid_px(tick) <= 0 or ask_px(tick) <= 0:
        return False
    mid = 0.5 * (bid_px(tick) + ask_px(tick))
    if state[3] > 0:
        r = (mid - state[0]) / state[0] * 1e4
        state[1] += params.alpha * (r - state[1])
    state[0] = mid
    state[3] += 1.0
    if state[3] < params.warmup:
        return False
    b = float(bid_sz(tick))
    a = float(ask_sz(tick))
    row[0] = state[1]
    row[1] = (b - a) / (b + a) if b + a > 0 else np.nan
    row[2] = state[2]
    return True
'''

# five levels: the features ARE the book it was handed (prices and sizes split into exact
# float32 halves), so a test sees exactly what on_tick saw
LEVELS5 = '''
from numba import njit
from engine.strategy_api import KIND_TRADE, kind

N = 5
FEATURES = tuple(f"{s}{f}{k}_{h}" for s in ("bid", "ask") for f in ("px", "sz") for k in range(N) for h in ("hi", "lo"))
DEPTH = 5
STATE = 1
PARAMS = {}

@njit
def put(row, j, v):
    row[j] = v >> 24
    row[j + 1] = v & 0xFFFFFF

@njit
def on_tick(state, book, tick, row, params):
    state[0] += 1.0
    j = 0
    for arr in (book.bid_px, book.bid_sz, book.ask_px, book.ask_sz):
        for k in range(5):
            put(row, j, arr[k])
            j += 2
    return True
'''

IMBALANCE = "row[0] = (b - a) / (b + a) if b + a > 0 else 0.0"


def quotes_strategy(params, features=("imb",), head="", first="", row=IMBALANCE, ready="state[0] >= 3",
                    decide=None):
    """A strategy file's text: on_tick scores quotes only, counts them in state[0], runs `first`
    (lines, after the count), then puts the touch imbalance of sizes b and a into the row (`row`:
    the lines that do) and is ready once `ready` holds; `head`: module-level lines before on_tick;
    `decide`: decide's body (none: the engine's hysteresis rule decides)."""
    src = (f"\nfrom numba import njit\nfrom engine.strategy_api import KIND_QUOTE, kind, bid_sz, ask_sz\n\n"
           f"FEATURES = {tuple(features)!r}\nDEPTH = 0\nSTATE = 2\nPARAMS = {params!r}\n{_lines(head, 0)}\n"
           "@njit\ndef on_tick(state, book, tick, row, params):\n    if kind(tick) != KIND_QUOTE:\n"
           f"        return False\n    state[0] += 1.0\n{_lines(first, 4)}    b = float(bid_sz(tick))\n"
           f"    a = float(ask_sz(tick))\n{_lines(row, 4)}    return {ready}\n")
    if decide is not None:
        src += f"\n@njit\ndef decide(state, score, position, params):\n{_lines(decide, 4)}"
    return src


def _lines(text, indent):
    text = textwrap.dedent(text).strip("\n")
    return textwrap.indent(text, " " * indent) + "\n" if text else ""


# a decide that sizes: the further the score from 0.5, the bigger the position
SIZING = quotes_strategy({"scale": 40.0, "cap": 7.0}, ("imb", "quotes"), row=IMBALANCE + "\nrow[1] = state[0]",
                         ready="state[0] >= 2.0", decide='''
    units = int(round((score - 0.5) * params.scale))
    if units > params.cap:
        units = int(params.cap)
    if units < -params.cap:
        units = -int(params.cap)
    return units
''')


def trained(d, name, src, count):
    """{"strategy", "ticks", "model"} in directory d: strategy file NAME.py with text src, a synthetic
    tick file of `count` ticks (two instruments, top of book) and a small model `engine train`
    made for the strategy from it."""
    from tests.helpers.feedutil import cli
    strat = d / f"{name}.py"
    strat.write_text(src)
    ticks = d / "s.ticks"
    r = cli("convert", f"synthetic://?instruments=2&count={count}&seed=3&depth=0", "--out", str(ticks))
    assert r.returncode == 0, r.stderr
    r = cli("train", f"tickfile:{ticks}", "--strategy", str(strat), "--out", str(d / "model"), "--trees", "5",
            "--depth", "2", "--backends", "flat", timeout=900)
    assert r.returncode == 0, r.stderr
    return {"strategy": strat, "ticks": ticks, "model": d / "model"}


def write(tmp_path, name, src):
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(src))
    return p


def split(v):
    return np.float32(v >> 24), np.float32(v & 0xFFFFFF)


def python_host_calls(words, depth):
    """The ticks on_tick must be called with (indices into words) and the instrument's top-`depth`
    book at each call, computed in plain Python from the stream by the contract's rules."""
    recs = words.view(TICK_DTYPE).reshape(-1)
    books, dirty, calls = {}, {}, []
    for t, r in enumerate(recs):
        k, inst = int(r["kind"]), int(r["instrument"])
        if k == KIND_GAP:
            books.clear()
            dirty.clear()
            continue
        if k == KIND_LEVEL:
            if depth == 0:
                continue
            b = books.setdefault(inst, ({}, {}))
            if int(r["side"]) == SIDE_NONE:
                b[0].clear()
                b[1].clear()
                dirty[inst] = True
                continue
            side = b[0] if int(r["side"]) == SIDE_BUY else b[1]
            before = top(b, depth)
            if int(r["size"]) == 0:
                side.pop(int(r["price"]), None)
            else:
                side[int(r["price"])] = int(r["size"])
            if top(b, depth) != before:
                dirty[inst] = True
            continue
        if k == KIND_BOOK and (depth == 0 or not dirty.get(inst)):
            continue
        if k in (KIND_QUOTE, KIND_BOOK):
            dirty[inst] = False
        calls.append((t, inst, top(books.get(inst, ({}, {})), depth)))
    return calls


def top(b, depth):
    """((bid prices), (bid sizes), (ask prices), (ask sizes)) of the best `depth` levels, 0-padded."""
    bids = sorted(b[0].items(), reverse=True)[:depth]
    asks = sorted(b[1].items())[:depth]
    pad = [(0, 0)] * depth
    bids, asks = (bids + pad)[:depth], (asks + pad)[:depth]
    return (tuple(p for p, _ in bids), tuple(q for _, q in bids), tuple(p for p, _ in asks), tuple(q for _, q in asks))


def row_of_book(bk):
    out = []
    for arr in bk:
        for v in arr:
            out.extend(split(v))
    return np.array(out, np.float32)
