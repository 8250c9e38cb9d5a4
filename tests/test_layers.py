"""The layers, checked from outside (README "Layout"): the source is parsed with ast, nothing is
imported, and every import counts, module-level or inside a function.

- folders: each top-level package imports only the packages below it (LAYERS), so a map of the
  top-level folders and their imports has no arrow running back up: engine/ (the core) imports
  nothing of the project; feeds/ and strategies/ only the core; models/ the core and feeds/;
  fpga/ models/ and below; replay/ everything but app/; app/ (the command line, the run, the
  daemon) sits on top and nothing imports it.
- no import cycle among the project's modules.
- sizes a newcomer can hold: no function over MAX_LINES lines, no class over MAX_CLASS, no file
  over MAX_FILE (TEMPLATES aside: a template is copied whole into each strategy's module), in
  every package and in bench/.
- no private name (`_x`) of one module used by another: a name another module needs is public.
  The feed parsers' numba loops (feeds/nasdaq/itch.py, feeds/databento/dbn.py `parse`) count too: their message
  families are helpers inlined into the loop (inline="always", on borrowed arrays, feeds/core/borrow.py),
  so the split costs no call and no reference counting (measured with bench/feed_parsers.py).

Each rule is a function over a module graph, so the tests below also show that each rule fails
on a graph that breaks it.
"""
import ast
import pytest

from tests.conftest import ROOT

PACKAGES = ("engine", "feeds", "models", "replay", "fpga", "strategies", "app")
# what each top-level folder may import (README "Layout"): a DAG, the core at the bottom
LAYERS = {
    "engine": set(),
    "feeds": {"engine"},
    "strategies": {"engine"},
    "models": {"engine", "feeds"},
    "fpga": {"engine", "feeds", "models"},
    "replay": {"engine", "feeds", "models", "fpga", "strategies"},
    "app": {"engine", "feeds", "models", "fpga", "replay", "strategies"},
}
SIZED = ("engine", "feeds", "models", "replay", "fpga", "strategies", "app", "bench")
# inside feeds/ (feeds/__init__.py): what each room may import of feeds/; a venue never another
SHARED_ROOMS = {"core": set(), "books": {"core"}, "transport": {"core"}}
VENUES = ("binance", "databento", "nasdaq", "synthetic")
FEED_ROOMS = {**SHARED_ROOMS, **{v: {"core", "books", "transport"} for v in VENUES}}
MAX_LINES = 80
MAX_CLASS = 300
MAX_FILE = 800
TEMPLATES = {"engine.host_template"}


def module_files(root=ROOT, packages=PACKAGES):
    """{module name: path} for every .py file of the project's packages."""
    out = {}
    for pkg in packages:
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


def folder_graph(graph):
    """{top-level folder: the other top-level folders its modules import}."""
    out = {}
    for mod, deps in graph.items():
        top = mod.split(".")[0]
        out.setdefault(top, set()).update(d.split(".")[0] for d in deps if d.split(".")[0] != top)
    return out


def upward_imports(graph):
    """[(module, what it imports that sits above it or beside it)]: each folder's modules may
    import only the folders LAYERS lists below it."""
    return [(mod, d) for mod, deps in sorted(graph.items()) for d in sorted(deps)
            if d.split(".")[0] != mod.split(".")[0] and d.split(".")[0] not in LAYERS[mod.split(".")[0]]]


def feed_room_imports(graph):
    """[(module, what it imports of another room of feeds/ that FEED_ROOMS does not allow)]."""
    bad = []
    for mod, deps in sorted(graph.items()):
        parts = mod.split(".")
        if parts[0] != "feeds" or len(parts) < 3:  # (feeds/__init__ and feeds/convert.py sit above the rooms)
            continue
        for d in sorted(deps):
            dp = d.split(".")
            if dp[0] == "feeds" and len(dp) >= 2 and dp[1] != parts[1] and dp[1] in FEED_ROOMS \
                    and dp[1] not in FEED_ROOMS[parts[1]]:
                bad.append((mod, d))
            elif dp == ["feeds", "convert"]:
                bad.append((mod, d)) if parts[1] in SHARED_ROOMS else None
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
    return oversized(files, (ast.FunctionDef, ast.AsyncFunctionDef), limit)


def oversized(files, kinds, limit):
    """[(lines, module, name)] of the functions or classes (kinds) over limit lines."""
    out = []
    for mod, path in files.items():
        if not _within(mod, SIZED):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kinds):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append((n, mod, node.name))
    return sorted(out, reverse=True)


def long_files(files, limit=MAX_FILE):
    """[(lines, module)] of the files over the limit, templates aside."""
    out = []
    for mod, path in files.items():
        n = path.read_text().count("\n")
        if _within(mod, SIZED) and mod not in TEMPLATES and n > limit:
            out.append((n, mod))
    return sorted(out, reverse=True)


def private_uses(files):
    """[(module, line, what)]: a private name of one project module (`_x`, not `__x__`) imported or
    read by another: `from m import _x` or `m._x` where m names a project module."""
    out = []
    for mod, path in files.items():
        tree = ast.parse(path.read_text())
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        aliases = {}  # local name -> project module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
                if base.split(".")[0] not in PACKAGES or base == mod:
                    continue
                for a in node.names:
                    if _private(a.name):
                        out.append((mod, node.lineno, f"from {base} import {a.name}"))
                    elif f"{base}.{a.name}" in files:
                        aliases[a.asname or a.name] = f"{base}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PACKAGES and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != mod):
                out.append((mod, node.lineno, f"{aliases[node.value.id]}.{node.attr}"))
    return out


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# -- the rules on this tree --

def test_the_core_and_the_packages_import_nothing_above_them():
    bad = upward_imports(import_graph())
    assert not bad, "imports against the layers (README 'Layout'):\n" + "\n".join(f"  {m} imports {d}" for m, d in bad)


def test_a_venue_imports_no_other_venue_and_the_shared_rooms_no_venue():
    g = import_graph()
    rooms = {m.split(".")[1] for m in g if m.startswith("feeds.") and m.count(".") >= 2}
    assert rooms == set(FEED_ROOMS), sorted(rooms)  # (a new room is placed in FEED_ROOMS)
    bad = feed_room_imports(g)
    assert not bad, "feeds/ rooms (feeds/__init__.py):\n" + "\n".join(f"  {m} imports {d}" for m, d in bad)


def test_the_room_rule_fails_when_broken():
    g = import_graph()
    for mod, dep in (("feeds.binance.live", "feeds.databento.live"), ("feeds.core.publisher", "feeds.synthetic.source"),
                     ("feeds.books.book", "feeds.transport.ws_client")):
        assert feed_room_imports({**g, mod: g[mod] | {dep}}) == [(mod, dep)]


def test_the_folder_map_has_no_arrow_back_up():
    """The top-level folders and their imports, as a map: every arrow points down LAYERS, and
    the map itself has no cycle (so LAYERS is a real order, not only a list of permissions)."""
    folders = folder_graph(import_graph())
    assert set(folders) == set(LAYERS), sorted(folders)
    for top, deps in folders.items():
        assert deps <= LAYERS[top], f"{top}/ imports {sorted(deps - LAYERS[top])}, above it"
    assert folders["engine"] == set(), folders["engine"]
    assert find_cycle({k: set(v) for k, v in LAYERS.items()}) is None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_function_over_the_limit():
    long = long_functions(module_files(packages=SIZED))
    assert not long, f"functions over {MAX_LINES} lines:\n" + "\n".join(f"  {m}.{f}: {n}" for n, m, f in long)


def test_no_class_over_the_limit():
    big = oversized(module_files(packages=SIZED), ast.ClassDef, MAX_CLASS)
    assert not big, f"classes over {MAX_CLASS} lines:\n" + "\n".join(f"  {m}.{c}: {n}" for n, m, c in big)


def test_no_file_over_the_limit():
    big = long_files(module_files(packages=SIZED))
    assert not big, f"files over {MAX_FILE} lines:\n" + "\n".join(f"  {m}: {n}" for n, m in big)


def test_no_private_name_is_used_outside_its_module():
    bad = private_uses(module_files())
    assert not bad, "private names used by another module:\n" + "\n".join(f"  {m}:{n}: {w}" for m, n, w in bad)


def test_the_graph_sees_the_known_edges():
    """The parser finds function-level and relative imports (else the rules above prove nothing)."""
    g = import_graph()
    assert "engine.realtime" in g["engine.waits"]            # `from .realtime import parse_cpulist` inside a function
    assert "app.live" in g["app.cli.run_cmds"]  # `from app.live import ...` inside cmd_run
    assert "app.cli.common" in g["app.cli.run_cmds"]  # `from .common import ...`
    assert "app.cli" in g["app.__main__"]
    assert "engine.records" in g["feeds.books.ticks"]
    assert "models.artifact" in g["replay.jobs"]


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
    ("engine/tickring.py", "from app import live", ("engine.tickring", "app.live")),
    ("engine/latency.py", "import feeds.synthetic.market", ("engine.latency", "feeds.synthetic.market")),
    ("replay/jobs.py", "def g():\n    from app.run_summary import table", ("replay.jobs", "app.run_summary")),
    ("feeds/databento/dbn.py", "from models import flat", ("feeds.databento.dbn", "models.flat")),
    ("models/flat.py", "from replay import execsim", ("models.flat", "replay.execsim")),
    ("strategies/microstructure.py", "import feeds.books.book", ("strategies.microstructure", "feeds.books.book")),
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


def test_a_big_class_and_a_long_file_are_caught(tree):
    body = "\n".join(f"    x{i} = {i}" for i in range(max(MAX_CLASS, MAX_FILE)))
    _append(tree, "app/cli/sources_cmd.py", f"class TooBig:\n{body}")
    files = module_files(tree, packages=SIZED)
    assert any(c == "TooBig" for _, _, c in oversized(files, ast.ClassDef, MAX_CLASS))
    assert any(m == "app.cli.sources_cmd" for _, m in long_files(files))


@pytest.mark.parametrize("line, what", [
    ("from feeds.books.book import _hidden", "from feeds.books.book import _hidden"),
    ("from feeds.books import book as bk\ndef f():\n    return bk._hidden(1)", "feeds.books.book._hidden"),
    ("from .common import _private_helper", "from app.cli.common import _private_helper"),
])
def test_a_private_name_used_elsewhere_is_caught(tree, line, what):
    _append(tree, "app/cli/sources_cmd.py", line)
    assert what in [w for m, _, w in private_uses(module_files(tree)) if m == "app.cli.sources_cmd"]


# -- the core names nothing above it --

def upper_names_in_core(files):
    """[(module, line, text)]: a string in engine/'s code (docstrings and comments aside) that names a
    package above the core or one of its modules ("feeds", "feeds.databento.dbn"), so the core would know the
    layers built on it without importing them (a table of their module names, a list of their
    folders). Those layers register what the core needs instead (engine/components.py) or mark
    themselves (engine/__init__.py NUMBA_CACHE_KEY). strategies/ is left out: it holds the built-in
    strategy files, which the core loads by path as it loads a user's (engine/strategy_load.py),
    never as modules."""
    upper = {m for m in files if m.split(".")[0] not in ("engine", "strategies")}
    out = []
    for mod, path in files.items():
        if not _within(mod, ("engine",)):
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                text = node.value.strip().replace("/", ".").removesuffix(".py")
                if any(text == m or text.startswith(m + ".") for m in upper):
                    out.append((mod, node.lineno, node.value))
    return out


def test_the_core_names_no_module_above_it():
    bad = upper_names_in_core(module_files())
    assert not bad, "engine/ names the layers above it:\n" + "\n".join(f"  {m}:{n}: {t!r}" for m, n, t in bad)


@pytest.mark.parametrize("line", ['NAMES = {"feeds.databento.dbn": ("feed", "the DBN parser")}',
                                  'PACKAGES = ("engine", "replay")',
                                  'SOURCES = "models/"'])
def test_an_upper_name_in_the_core_is_caught(tree, line):
    _append(tree, "engine/compile_notice.py", line)
    assert [t for m, _, t in upper_names_in_core(module_files(tree)) if m == "engine.compile_notice"]
