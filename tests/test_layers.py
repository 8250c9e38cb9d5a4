"""The layers, checked from outside (README "Layout"): the source is parsed with ast, nothing is
imported, and every import counts, module-level or inside a function.

- core: every module directly in engine/ (records, rings, latency, the strategy host and loop...)
  imports nothing from feeds/, models/, replay/, fpga/, strategies/ or the application layer
  engine/app/. engine/__main__.py is the one exception: an entry point (`python -m engine`).
- feeds/, models/, replay/, fpga/, strategies/ import nothing from engine/app/.
- no import cycle among the project's modules.
- no function over MAX_LINES lines in engine/, feeds/, models/, replay/, fpga/, strategies/.
  The feed parsers' numba loops (feeds/itch.py, feeds/dbn.py `parse`) count too: their message
  families are helpers inlined into the loop (inline="always", on borrowed arrays, feeds/nrt.py),
  so the split costs no call and no reference counting (measured with bench/feeds.py).

Each rule is a function over a module graph, so the tests below also show that each rule fails
on a graph that breaks it.
"""
import ast
import pytest

from tests.conftest import ROOT

PACKAGES = ("engine", "feeds", "models", "replay", "fpga", "strategies")
ABOVE_CORE = ("feeds", "models", "replay", "fpga", "strategies", "engine.app")
SIZED = ("engine", "feeds", "models", "replay", "fpga", "strategies")
MAX_LINES = 120
ENTRY_POINTS = {"engine.__main__"}


def module_files(root=ROOT):
    """{module name: path} for every .py file of the project's packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def imports_of(name, path, known):
    """The project modules that module `name` (file `path`) imports: anywhere in the file,
    relative ones resolved; `from pkg import mod` counts as importing pkg.mod when that is a
    module."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known)
    return {m for m in out if m and m.split(".")[0] in PACKAGES and m != name}


def import_graph(root=ROOT):
    files = module_files(root)
    return {name: imports_of(name, path, files) for name, path in files.items()}


def _within(mod, prefixes):
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def is_core(mod):
    return mod.startswith("engine.") and mod.count(".") == 1 and mod not in ENTRY_POINTS


def upward_imports(graph):
    """[(module, what it imports that sits above it)] for the two one-way rules."""
    bad = []
    for mod, deps in sorted(graph.items()):
        if is_core(mod):
            bad += [(mod, d) for d in sorted(deps) if _within(d, ABOVE_CORE)]
        elif _within(mod, ("feeds", "models", "replay", "fpga", "strategies")):
            bad += [(mod, d) for d in sorted(deps) if _within(d, ("engine.app",))]
    return bad


def find_cycle(graph):
    """One import cycle as a list [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def long_functions(files, limit=MAX_LINES):
    """[(lines, module, function)] over the limit, in the packages that are sized."""
    out = []
    for mod, path in files.items():
        if not _within(mod, SIZED):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append((n, mod, node.name))
    return sorted(out, reverse=True)


# -- the rules on this tree --

def test_the_core_and_the_packages_import_nothing_above_them():
    bad = upward_imports(import_graph())
    assert not bad, "imports against the layers (README 'Layout'):\n" + "\n".join(f"  {m} imports {d}" for m, d in bad)


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_function_over_the_limit():
    long = long_functions(module_files())
    assert not long, f"functions over {MAX_LINES} lines:\n" + "\n".join(f"  {m}.{f}: {n}" for n, m, f in long)


def test_the_graph_sees_the_known_edges():
    """The parser finds function-level and relative imports (else the rules above prove nothing)."""
    g = import_graph()
    assert "engine.rt" in g["engine.waits"]            # `from .rt import parse_cpulist` inside a function
    assert "engine.app.runner" in g["engine.app.cli.run"]  # `from engine.app.runner import ...` inside cmd_run
    assert "engine.app.cli.common" in g["engine.app.cli.run"]  # `from .common import ...`
    assert "engine.app.cli" in g["engine.__main__"]
    assert "models.artifact" in g["replay.runner"]


# -- each rule fails when broken --

@pytest.fixture
def tree(tmp_path):
    """A copy of the project's sources (only the .py files) to break."""
    for mod, path in module_files().items():
        dest = tmp_path / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(path.read_text())
    return tmp_path


def _append(tree, rel, text):
    p = tree / rel
    p.write_text(p.read_text() + "\n" + text + "\n")


@pytest.mark.parametrize("rel, line, edge", [
    ("engine/shm.py", "def f():\n    from models.artifact import load", ("engine.shm", "models.artifact")),
    ("engine/tickring.py", "from engine.app import runner", ("engine.tickring", "engine.app.runner")),
    ("engine/latency.py", "import feeds.synthetic", ("engine.latency", "feeds.synthetic")),
    ("replay/runner.py", "def g():\n    from engine.app.report import table", ("replay.runner", "engine.app.report")),
])
def test_an_upward_import_is_caught(tree, rel, line, edge):
    _append(tree, rel, line)
    assert edge in upward_imports(import_graph(tree))


def test_a_cycle_is_caught_and_named(tree):
    _append(tree, "engine/records.py", "def h():\n    from engine import tickring")  # tickring imports records
    cycle = find_cycle(import_graph(tree))
    assert cycle is not None and cycle[0] == cycle[-1] and {"engine.records", "engine.tickring"} <= set(cycle), cycle


def test_a_long_function_is_caught(tree):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    _append(tree, "replay/evaluate.py", f"def too_long():\n{body}")
    assert any(f == "too_long" for _, _, f in long_functions(module_files(tree)))
