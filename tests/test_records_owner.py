"""engine/records.py is the only module that packs or unpacks a record word: an AST check over the
tree (which fails on a planted violation), and round trips of its accessors, packers and column
readers against the dtypes' own fields."""
import ast

import numpy as np
import pytest

from engine import records as R
from tests.conftest import ROOT

FOLDERS = ("engine", "feeds", "replay", "models", "app", "fpga", "strategies", "bench")
# Word positions that hold more than one field: tick words 6 and 7, signal words 9-11.
PACKED = {6, 7, 9, 10, 11}
PACKED_NAMES = {"SW_SCORE_MARGIN", "SW_GEN_INST_SIDES", "SW_FOLDED_FLAGS"}
BIT_OPS = (ast.RShift, ast.LShift, ast.BitAnd, ast.BitOr)
# Peers and baselines written as someone else would: they model other code, not ours.
EXEMPT = {"engine/records.py",
          "bench/tick_to_signal.py",  # the peer: the pipeline a Python developer writes first
          "bench/_v1_loop.py"}        # the v1 loop, frozen as it was (its own 8-word signal layout)


def _index(node):
    s = node.slice
    return s.elts[-1] if isinstance(s, ast.Tuple) else s


def _is_word(node, names):
    """A packed word of a record: x[7], x[:, 7], x[..., SW_FOLDED_FLAGS], int(x[6]), or a name
    bound to one in the same function."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and ast.unparse(node.func) in ("int", "np.int64", "np.uint64"):
        return _is_word(node.args[0], names)
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Subscript) and not isinstance(node.value, ast.Call):  # (not f()[6]: a parsed line)
        i = _index(node)
        return (isinstance(i, ast.Constant) and i.value in PACKED and type(i.value) is int) or \
            (isinstance(i, ast.Name) and i.id in PACKED_NAMES)
    return False


def hand_packing(source):
    """(line, text) of every shift or mask on a packed record word, and every store of a shifted
    or or-ed value into one."""
    tree = ast.parse(source)
    out = []
    for scope in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda))]:
        names = {t.id for n in ast.walk(scope) if isinstance(n, ast.Assign) and _is_word(n.value, set())
                 for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(scope):
            if isinstance(n, ast.BinOp) and isinstance(n.op, BIT_OPS) and (_is_word(n.left, names) or
                                                                             _is_word(n.right, names)):
                out.append((n.lineno, ast.unparse(n)))
            elif isinstance(n, (ast.Assign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if any(isinstance(t, ast.Subscript) and _is_word(t, set()) for t in targets) and any(
                        isinstance(b, ast.BinOp) and isinstance(b.op, BIT_OPS) for b in ast.walk(n.value)):
                    out.append((n.lineno, ast.unparse(n)))
    return sorted(set(out))


def test_no_module_but_records_packs_or_unpacks_a_word():
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).glob("**/*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in EXEMPT or "results" in path.parts or "__pycache__" in path.parts:
                continue
            found += [f"{rel}:{line}: {text}" for line, text in hand_packing(path.read_text())]
    assert not found, "record words packed or unpacked outside engine/records.py:\n" + "\n".join(found)


@pytest.mark.parametrize("planted", [
    "def f(w):\n    return (w[7] >> 32) & 0xFFFF\n",
    "def f(words):\n    return words[:, 7] >> 48\n",
    "def f(w):\n    w7 = w[7]\n    return w7 & 0xFF\n",
    "def f(buf, n):\n    return (buf[:n, SW_FOLDED_FLAGS] >> 32) & 1\n",
    "def f(sig, a, b):\n    sig[10] = a | (b << 32)\n",
    "def f(w):\n    return int(w[6]) & 0xFFFFFFFF\n",
])
def test_the_check_finds_a_planted_violation(planted):
    assert hand_packing(planted)


def test_the_check_leaves_other_shifts_alone():
    assert not hand_packing("def f(b, i, w):\n    x = (b[i] << 8) | b[i + 1]\n    w[7] = x\n    return w[3] >> 1\n")
    assert not hand_packing("def f(sig, n):\n    sig[11] = n\n")


def _ticks(n, seed=3):
    rng = np.random.default_rng(seed)
    t = np.zeros(n, R.TICK_DTYPE)
    for name in ("size", "bid_sz", "ask_sz"):
        t[name] = rng.integers(0, 2**32, n, dtype=np.uint64)
    t["instrument"] = rng.integers(0, R.MAX_INSTRUMENTS, n)
    t["instrument"][:2] = (0, R.MAX_INSTRUMENTS - 1)
    t["kind"] = rng.integers(0, 256, n)
    t["side"] = rng.integers(0, 256, n)
    t["price"] = rng.integers(-2**62, 2**62, n)
    return t


def test_tick_accessors_read_what_the_dtype_holds_and_the_packer_writes_it_back():
    t = _ticks(500)
    words = t.view(np.int64).reshape(-1, R.RECORD_WORDS)
    for j in range(len(t)):
        w = words[j]
        assert R.tick_size(w) == t["size"][j] and R.tick_bid_sz(w) == t["bid_sz"][j]
        assert R.tick_ask_sz(w) == t["ask_sz"][j] and R.tick_instrument(w) == t["instrument"][j]
        assert R.tick_kind(w) == t["kind"][j] and R.tick_side(w) == t["side"][j] and R.tick_price(w) == t["price"][j]
        back = np.zeros(8, np.int64)
        R.pack_tick_tail(back, R.tick_size(w), R.tick_bid_sz(w), R.tick_ask_sz(w), R.tick_instrument(w),
                         R.tick_kind(w), R.tick_side(w))
        assert back[6] == w[6] and back[7] == w[7]
    assert np.array_equal(R.tick_instruments(words), t["instrument"])
    assert np.array_equal(R.tick_kinds(words), t["kind"])
    new = (t["instrument"].astype(np.int64) * 7 + 1) % R.MAX_INSTRUMENTS
    R.set_tick_instruments(words, new)
    assert np.array_equal(t["instrument"], new) and np.array_equal(R.tick_kinds(words), t["kind"])


def test_the_strategy_contract_reads_ticks_with_the_records_accessors():
    from engine import strategy_api as A
    assert A.kind is R.tick_kind and A.size is R.tick_size and A.instrument is R.tick_instrument
    assert A.bid_sz is R.tick_bid_sz and A.ask_sz is R.tick_ask_sz and A.side is R.tick_side


def test_signal_packers_write_the_fields_the_signal_dtype_reads():
    s = np.zeros(3, R.SIGNAL_DTYPE)
    w = s.view(np.int64).reshape(-1, R.SIGNAL_WORDS)
    cases = [(0, 0, 1, 1, 2**32 - 1, 1, 0), (2**32 - 1, R.MAX_INSTRUMENTS - 1, -1, 0, 1, 0, 1), (7, 300, 0, -1, 1, 5, 1)]
    for k, (gen, inst, side, prev, folded, sbits, mark) in enumerate(cases):
        w[k, R.SW_SCORE_MARGIN] = R.signal_word_scores(np.int64(sbits), np.int64(0x3F800000))
        w[k, R.SW_GEN_INST_SIDES] = R.signal_word_ids(gen, inst, side, prev)
        w[k, R.SW_FOLDED_FLAGS] = R.signal_word_folded(folded, R.SIGNAL_FLAG_MARK if mark else 0)
        assert (s["model_gen"][k], s["instrument"][k], s["side"][k], s["prev_side"][k]) == (gen, inst, side, prev)
        assert s["folded"][k] == folded and s["margin"][k] == np.float32(1.0)
        assert s["score"].view(np.uint32)[k] == sbits
        assert bool(s["flags"][k] & R.SIGNAL_FLAG_MARK) == bool(mark)
    assert np.array_equal(R.signal_instruments(w), s["instrument"])
    assert np.array_equal(R.signal_flags(w), s["flags"])
    # the mark: one bit, the flags field's SIGNAL_FLAG_MARK seen through the int64 word
    m = np.zeros(1, R.SIGNAL_DTYPE)
    m.view(np.int64)[R.SW_FOLDED_FLAGS] = R.SIGNAL_MARK_WORD
    assert m["flags"][0] == R.SIGNAL_FLAG_MARK and m["folded"][0] == 0


def test_max_instruments_is_every_index_the_instrument_field_holds():
    assert R.MAX_INSTRUMENTS == np.iinfo(R.TICK_DTYPE["instrument"]).max + 1 == \
        np.iinfo(R.SIGNAL_DTYPE["instrument"]).max + 1
    from app import live
    from feeds.books import crossed
    from feeds.databento import dbn
    from feeds.nasdaq import itch
    assert dbn.MAX_INSTRUMENTS is itch.MAX_INSTRUMENTS is crossed.N_INSTRUMENTS is live.MAX_INSTRUMENTS is \
        R.MAX_INSTRUMENTS
