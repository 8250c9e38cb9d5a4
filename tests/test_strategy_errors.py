"""A strategy that does not compile is explained: numba's reason, the file and line, the code on
that line and a hint, as one block on stderr with exit 2; and README's strategy compiles as printed.

Every case is a real strategy file compiled for real by the engine's CLI, as a user would run it."""
import re
import textwrap

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.strategy_api import hysteresis
from engine.strategy_build import build
from engine.strategy_load import load

from tests.conftest import ROOT
from tests.helpers.feedutil import cli
from tests.helpers.strategies import quotes_strategy

GOOD = quotes_strategy({"warmup": 3.0}, ready="state[0] >= params.warmup", decide="""
    if score > 0.6:
        return 1
    if score < 0.4:
        return -1
    return position""")

# name: (GOOD's text -> the broken text, what numba's reason says, what the hint says); the line
# the message must name is the one marked `# <-`
CASES = {
    "decide_returns_none_on_a_path": (
        ("    return position\n", "    if position == 0:  # <-\n        return position\n"),
        "decide returns None on some path", "every path of decide must end in a return"),
    "str_stored_into_the_float_row": (
        ("row[0] = (b - a) / (b + a) if b + a > 0 else 0.0", 'row[0] = "imbalance"  # <-'),
        "setitem(array(float32, 1d, C), Literal[int](0), Literal[str](imbalance))", "hold numbers"),
    "on_tick_returns_a_float": (
        ("return state[0] >= params.warmup", "return state[0]  # <-"),
        "on_tick returns float64; it must return a bool", "return a comparison"),
    "decide_returns_a_float": (
        ("        return 1\n", "        return 1.0  # <-\n"),
        "decide returns float64; it must return an int", "int(round(x))"),
    "book_field_that_does_not_exist": (
        ("    state[0] += 1.0\n", "    state[0] += book.mid_px[0]  # <-\n"),
        "Unknown attribute 'mid_px' of type Book", "book has bid_px, bid_sz, ask_px, ask_sz"),
    "parameter_not_in_PARAMS": (
        ("return state[0] >= params.warmup", "return state[0] >= params.warm_up  # <-"),
        "Unknown attribute 'warm_up' of type Params", "params has the names in PARAMS (warmup)"),
    "plain_python_helper": (
        ("@njit\ndef on_tick", "def twice(x):\n    return 2.0 * x\n\n@njit\ndef on_tick"),
        "Untyped global name 'twice'", "decorate it with @njit too"),
    "dict_from_the_module": (
        ("@njit\ndef on_tick", "WEIGHTS = {'imb': 1.0}\n\n@njit\ndef on_tick"),
        "Cannot determine Numba type of <class 'dict'>", "cannot use Python objects (dict, list"),
    "wrong_number_of_arguments_in_a_call": (
        ("if kind(tick) != KIND_QUOTE:", "if kind(tick, 0) != KIND_QUOTE:  # <-"),
        "too many positional arguments", "wrong number of arguments"),
    "returns_of_mixed_types": (
        ("        return -1\n", "        return -1, 0  # <-\n"),
        "Can't unify return type", "every return of decide must give the same type: an int"),
    "name_not_defined": (
        ("    state[0] += 1.0\n", "    state[0] += step  # <-\n"),
        "NameError: name 'step' is not defined", "define it at module level"),
}
# the two edits that add a use of the helper / the dict in on_tick
USES = {"plain_python_helper": ("    state[0] += 1.0\n", "    state[0] += twice(1.0)  # <-\n"),
        "dict_from_the_module": ("    state[0] += 1.0\n", "    state[0] += WEIGHTS['imb']  # <-\n")}


def write_case(tmp_path, name):
    (old, new), _, _ = CASES[name]
    src = textwrap.dedent(GOOD)
    assert old in src
    src = src.replace(old, new)
    if name in USES:
        src = src.replace(*USES[name])
    f = tmp_path / f"{name}.py"
    f.write_text(src)
    return f, next(i for i, x in enumerate(src.splitlines(), 1) if "# <-" in x)


def error_block(res, path):
    """Exit 2, no traceback, one block: the first line `engine: error: strategy FILE:LINE: ...`,
    the rest indented, the last a hint. Returns (line, the block's text)."""
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    lines = [x for x in res.stderr.splitlines() if not x.startswith("[")]
    m = re.match(rf"engine: error: strategy {re.escape(str(path))}:(\d+): \S", lines[0])
    assert m, res.stderr
    assert all(x.startswith("  ") for x in lines[1:]) and lines[-1].startswith("  hint: "), res.stderr
    return int(m.group(1)), "\n".join(lines)


def features(f, out):
    return cli("features", "--strategy", str(f), "synthetic://?count=3000&instruments=2", "--out", str(out), "--quiet")


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_strategy_that_does_not_compile_is_explained(tmp_path, name):
    f, marked = write_case(tmp_path, name)
    out = tmp_path / "rows.parquet"
    line, text = error_block(features(f, out), f)
    _, reason, hint = CASES[name]
    assert line == marked, text
    code = f.read_text().splitlines()[marked - 1].strip()
    assert f"\n  {marked} | {code}\n" in text, text  # the code of the line it names
    assert reason in text and hint in text.splitlines()[-1], text
    for noise in ("During:", "Failed in nopython mode", "<source elided>", "engine_host_", "candidate implementations"):
        assert noise not in text, text
    assert not out.exists()


def test_the_error_names_a_helper_module_next_to_the_strategy(tmp_path):
    """The mistake is in a module the strategy imports: its file and line, not the strategy's."""
    (tmp_path / "imbalance.py").write_text(
        "from numba import njit\n\n@njit\ndef imb(b, a):\n    return (b - a) / (b + a) if b + a > 0 else 'flat'\n")
    src = textwrap.dedent(GOOD).replace("from numba import njit", "from numba import njit\nfrom imbalance import imb")
    f = tmp_path / "uses_helper.py"
    f.write_text(src.replace("row[0] = (b - a) / (b + a) if b + a > 0 else 0.0", "row[0] = imb(b, a)"))
    res = features(f, tmp_path / "rows.parquet")
    line, text = error_block(res, tmp_path / "imbalance.py")
    assert line == 5 and "imb does not compile: Cannot unify" in text and "Literal[str](flat)" in text, text
    assert "give every branch the same type" in text and "$phi" not in text


@pytest.fixture(scope="module")
def ticks(tmp_path_factory):
    p = tmp_path_factory.mktemp("t") / "s.ticks"
    r = cli("convert", "synthetic://?instruments=2&count=20000&seed=3&depth=0", "--out", str(p))
    assert r.returncode == 0, r.stderr
    return p


def test_backtest_and_run_explain_the_same_way(tmp_path, ticks, shm_name):
    f, marked = write_case(tmp_path, "decide_returns_none_on_a_path")
    _, want = error_block(features(f, tmp_path / "rows.parquet"), f)
    bt = cli("backtest", str(ticks), "--strategy", str(f), "--out", str(tmp_path / "bt"))
    run = cli("run", "--strategy", str(f), "--feed", f"tickfile:{ticks}", "--name", shm_name, "--duration", "2",
              "--http", "none", "--pub", "none")
    for res in (bt, run):
        line, text = error_block(res, f)
        assert line == marked and text == want
    assert not (tmp_path / "bt").exists()


def readme_strategy():
    """The first ```python block of the strategies guide, verbatim."""
    text = (ROOT / "docs/guides/strategies.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_readme_strategy_compiles_as_printed(tmp_path):
    f = tmp_path / "readme_strategy.py"
    f.write_text(readme_strategy())
    out = tmp_path / "rows.parquet"
    r = features(f, out)
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out)
    assert t.num_rows > 1000 and t.column_names[-2:] == ["imb1", "imb5"]
    host = build(load(str(f)))  # on_tick and decide, with the loops' own types
    s = host.strategy
    assert s.has_decide and s.depth == 5 and s.score == "probability"
    # its decide is the hysteresis rule README says it is, on its own PARAMS
    from collections import namedtuple
    p = namedtuple("P", s.param_names)(*s.params_array())
    v = s.values
    state = np.zeros(s.state)
    for position in (-1, 0, 1):
        for score in np.linspace(0, 1, 101, dtype=np.float32):
            want = hysteresis(position, score, v["enter_long"], v["exit_long"], v["enter_short"], v["exit_short"])
            assert s.module.decide(state, score, position, p) == want
