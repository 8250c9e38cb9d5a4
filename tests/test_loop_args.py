"""The host loops' argument lists have one owner (engine/loop_args.py): each named part lands on
the loop parameter of its name, as the def lines in engine/host_template.py spell them, and no
caller spells the flat list itself."""
import ast
import types
import typing
from pathlib import Path

import pytest

import engine.host_template as T
from engine.loop_args import (GROUPS, BacktestArgs, LiveArgs, MultiTickView, TickView, backtest_args, run_args,
                              run_multi_args)

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "engine" / "host_template.py"
LOOPS = ("run_loop", "run_loop_multi", "backtest_loop")


def _def_params(name):
    """The parameter names of the template's def line, read from its source."""
    tree = ast.parse(TEMPLATE.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return tuple(a.arg for a in fn.args.args)


def _sentinels(cls):
    """A part whose every value is its own field name (nested parts likewise)."""
    hints = typing.get_type_hints(cls)
    return cls(**{f: _sentinels(hints[f]) if hasattr(hints[f], "_fields") else f for f in cls._fields})


@pytest.mark.parametrize("loop,build", [
    ("run_loop", lambda: run_args(T, _sentinels(TickView), _sentinels(LiveArgs))),
    ("run_loop_multi", lambda: run_multi_args(T, _sentinels(MultiTickView), _sentinels(LiveArgs))),
    ("backtest_loop", lambda: backtest_args(T, _sentinels(BacktestArgs))),
])
def test_every_part_lands_on_the_parameter_of_its_name(loop, build):
    """A parameter that takes a group (GROUPS) gets that group, each field holding the part of its
    name; any other gets the part of its own name."""
    got = dict(zip(_def_params(loop), build(), strict=True))
    for name, value in got.items():
        if name in GROUPS:
            assert type(value) is GROUPS[name] and value == GROUPS[name]._fields, name
        else:
            assert value == name


def test_the_order_is_the_loops_own():
    """A loop that takes its parameters in another order gets them in that order, by name."""
    names = list(_def_params("backtest_loop"))[::-1]
    ns = {}
    exec(f"def backtest_loop({', '.join(names)}):\n    pass\n", ns)
    by_group = {g: name for name, g in GROUPS.items()}
    got = backtest_args(types.SimpleNamespace(**ns), _sentinels(BacktestArgs))
    assert tuple(by_group.get(type(a), a) for a in got) == tuple(names)


@pytest.mark.parametrize("change,needle", [
    (lambda p: p + ["spare"], "backtest_loop: no part for parameter(s) spare"),
    (lambda p: [x for x in p if x != "marks"], "backtest_loop: no parameter for part(s) marks"),
])
def test_a_loop_and_parts_that_disagree_are_refused_by_name(change, needle):
    ns = {}
    exec(f"def backtest_loop({', '.join(change(list(_def_params('backtest_loop'))))}):\n    pass\n", ns)
    with pytest.raises(TypeError) as e:
        backtest_args(types.SimpleNamespace(**ns), _sentinels(BacktestArgs))
    assert needle in str(e.value)


def _sources():
    for d in ("app", "engine", "replay", "bench", "tests", "feeds", "models", "fpga"):
        for p in sorted((ROOT / d).rglob("*.py")):
            if "results" not in p.relative_to(ROOT).parts:  # (bench/results/cache holds a peer's venv)
                yield p, ast.parse(p.read_text(), str(p))


def test_no_caller_spells_the_argument_list():
    """Every call of a host module's loop takes one starred tuple (built by engine/loop_args.py),
    and no tuple is assembled around the host's state arrays by hand."""
    bad = []
    for p, tree in _sources():
        for n in ast.walk(tree):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in LOOPS
                    and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "mod"):
                if len(n.args) != 1 or not isinstance(n.args[0], ast.Starred) or n.keywords:
                    bad.append(f"{p.relative_to(ROOT)}:{n.lineno}")
            if isinstance(n, (ast.Tuple, ast.Call)):
                for a in n.elts if isinstance(n, ast.Tuple) else n.args:
                    v = a.value if isinstance(a, ast.Starred) else None
                    if (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
                            and v.func.attr == "loop_arrays"):
                        bad.append(f"{p.relative_to(ROOT)}:{n.lineno}")
    assert bad == []


def test_backtest_ticks_are_passed_read_only():
    """A writable tick array (a shadow's buffer) reaches backtest_loop read-only, as a mapped file's
    ticks do: one compile of the loop, not a second for the writable type in a running engine."""
    import numpy as np
    words = np.zeros((4, 8), np.int64)
    args = backtest_args(T, _sentinels(BacktestArgs)._replace(words=words))
    got = args[_def_params("backtest_loop").index("words")]
    assert not got.flags.writeable and np.shares_memory(got, words) and words.flags.writeable


def test_the_template_copies_arrays_element_by_element():
    """Every strategy compiles the template anew (its host module). A slice copy (`a[j, :] = b[i]`)
    brings numba's shape-mismatch error with it (its message formatting: ~2 s of each first
    compile, stop 59); a slice filled with a number does not."""
    def has_slice(node):
        parts = node.elts if isinstance(node, ast.Tuple) else [node]
        return any(isinstance(p, ast.Slice) for p in parts)
    bad = [n.lineno for n in ast.walk(ast.parse(TEMPLATE.read_text())) if isinstance(n, ast.Assign)
           and any(isinstance(t, ast.Subscript) and has_slice(t.slice) for t in n.targets)
           and not isinstance(n.value, (ast.Constant, ast.UnaryOp))]
    assert bad == [], f"engine/host_template.py lines {bad}: copy element by element"
