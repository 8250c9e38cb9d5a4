"""Compiling a strategy into the host loops: a generated module per strategy, cached by hash.

The host loops live in engine/host_template.py. For a strategy we write
$XDG_CACHE_HOME/engine/hosts/host_<name>_<key>.py: a header binding the strategy's functions
and constants (engine/templates/host_*.tpl, rendered by the checked templates of engine/render.py
as the C/HLS/RTL are), then the template's body. numba compiles the strategy's on_tick/decide into
the loops and caches the machine code per file. numba's cache checks only a cached function's
own file, so the key in the name covers everything compiled into it: the strategy's sources,
its constants and parameter names, the templates, and the numba/llvmlite/numpy versions (the
engine's own modules are covered by NUMBA_CACHE_DIR, engine/__init__.py). An edited strategy
gets a new file and never runs stale code.

Check mode (`engine run --check`, `engine backtest --check`: ENGINE_CHECK=1, which worker processes
inherit): the strategy's own numba functions are compiled again with numba's boundscheck, into a
host file of their own (its own cache: a normal run never loads checked code, nor the reverse),
and on_tick and decide are wrapped so that an index out of bounds stops the run with one line
naming the file and the function, where without it the write lands in memory that is not the
strategy's.
"""
import ast
import copy
import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import defaults, risk
from .loop_args import LOOP_TICK_WORDS, HostArrays, LiveArgs, SignalView, TickView, new_tick, run_args
from .readonly import read_only
from .records import SIGNAL_WORDS
from .render import render
from .strategy_errors import READONLY_WRITE, compile_error, readonly_error, return_type_error
from .strategy_load import StrategyError

TEMPLATE = Path(__file__).with_name("host_template.py")
TEMPLATES = Path(__file__).with_name("templates")  # the header's (engine/render.py)
MARKER = "# ==== host body ====\n"
KEEP_HOSTS = 64  # generated files kept (the oldest go)
CHECK_ENV = "ENGINE_CHECK"  # "1": strategies are compiled in check mode (see above)


def check_mode():
    return os.environ.get(CHECK_ENV) == "1"


def hosts_dir():
    from . import cache_dir
    return Path(cache_dir("hosts"))


def build_key(s, check=False):
    import llvmlite
    import numba
    h = hashlib.sha256()
    h.update(json.dumps({"sha256": s.sha256, "features": list(s.features), "depth": s.depth, "state": s.state,
                         "params": list(s.param_names), "decide": s.has_decide, "path": s.path,
                         "versions": [numba.__version__, llvmlite.__version__, np.__version__, sys.version]}
                        | ({"check": True} if check else {}), sort_keys=True).encode())
    h.update(TEMPLATE.read_bytes())
    h.update(Path(__file__).read_bytes())  # the generator itself, and its header's templates
    for t in sorted(TEMPLATES.glob("host_*.tpl")):
        h.update(t.read_bytes())
    return h.hexdigest()[:16]


def checked_functions(mod):
    """Check mode: every numba function the strategy file defines, compiled again with boundscheck
    (and not cached), sharing one copy of the module's globals so that helpers they call by name
    are the checked ones too. Returns that globals dict."""
    import types

    import numba
    from numba.core.dispatcher import Dispatcher
    g = dict(vars(mod))
    for k, v in vars(mod).items():
        if isinstance(v, Dispatcher) and getattr(v.py_func, "__module__", None) == mod.__name__:
            f = v.py_func
            copy_ = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
            opts = {o: x for o, x in v.targetoptions.items() if o not in ("nopython", "cache", "boundscheck")}
            g[k] = numba.njit(boundscheck=True, **opts)(copy_)
    return g


def _block(name, **fields):
    """A template of engine/templates/ that fills a placeholder alone on its line of the header
    (that line's own newline ends it)."""
    return render(TEMPLATES / name, **fields)[:-1]


def _checked_wrapper(s, fn, args):
    """Check mode: fn(args) of the strategy, its checked copy called inside a try, so that what it
    raises (numba's bare "index is out of bounds") becomes a line naming the file and function."""
    why = (f"{s.path}: {fn} indexed an array out of bounds (caught by --check), or raised an exception "
           "of its own")
    return _block("host_checked.py.tpl", fn=fn, fn_literal=repr(fn), args=args, why_literal=repr(why))


def _header(s, check=False):
    """The generated module's header (engine/templates/host_header.py.tpl): what binds one strategy."""
    names = list(s.param_names)
    targets = getattr(s, "decide_targets", False)
    if s.has_decide:
        decide = _checked_wrapper(s, "decide", "state, score, targets, params, u" if targets else
                                  "state, score, position, params") if check else _block("host_user_decide.py.tpl")
    else:
        decide = _block("host_hysteresis.py.tpl")
    return render(TEMPLATES / "host_header.py.tpl", name_literal=repr(s.name), path=s.path, sha256=s.sha256,
                  path_literal=repr(s.path), module_literal=repr(s.module_name),
                  checked_import=_block("host_checked_import.py.tpl") if check else "",
                  depth=s.depth, state=s.state, nfeat=len(s.features), param_names=repr(names),
                  param_values=", ".join(f"p[{i}]" for i in range(len(names))),
                  universe_n=len(s.universe), shared=s.shared, decide_targets=int(targets),
                  call_decide_targets=_block("host_call_decide_targets.py.tpl" if targets else
                                             "host_no_decide_targets.py.tpl"),
                  checked_on_tick=_checked_wrapper(s, "on_tick", "state, book, tick, row, params"
                                                   + (", u" if s.universe else "")) if check else "",
                  call_on_tick=_block("host_call_on_tick_universe.py.tpl" if s.universe else "host_call_on_tick.py.tpl"),
                  decide=decide)


EXPANDED = ("book_apply", "host_step")  # innermost first


def expand_host_step(body):
    """Write the bodies of book_apply and host_step in place of every `x = f(...)` that calls
    them (as a one-pass `while True` whose returns become `x = ...; break`, their own locals
    renamed `_f_name`). numba's own inlining reference-counts every array argument of an
    inlined function on every call, ~15-20 ns a tick; spelled out in the loop, the arrays are
    the loop's own and nothing is counted. A `return` must not sit inside one of their loops."""
    tree = ast.parse(body)
    for name in EXPANDED:
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        tree = _expand(tree, fn)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


def _expand(tree, fn):
    params = [a.arg for a in fn.args.args]
    stmts = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    for loop in (n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))):
        if any(isinstance(x, ast.Return) for x in ast.walk(loop)):
            raise RuntimeError(f"{fn.name}: a return inside a loop cannot be expanded")
    local = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - set(params)

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.Name(f"_{fn.name}_{node.id}", node.ctx) if node.id in local else node

    class Returns(ast.NodeTransformer):
        def __init__(self, target):
            self.target = target

        def visit_Return(self, node):
            return [ast.Assign([ast.Name(self.target, ast.Store())], node.value), ast.Break()]

    class Calls(ast.NodeTransformer):
        def visit_FunctionDef(self, node):
            return node if node is fn else self.generic_visit(node)

        def visit_Assign(self, node):
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == fn.name:
                if [getattr(a, "id", None) for a in v.args] != params or len(node.targets) != 1:
                    raise RuntimeError(f"line {node.lineno}: call {fn.name} with exactly its own names {params}")
                block = [Returns(node.targets[0].id).visit(Rename().visit(copy.deepcopy(x))) for x in stmts]
                flat = [y for x in block for y in (x if isinstance(x, list) else [x])]
                return ast.While(ast.Constant(True), flat, [])
            return node

    return Calls().visit(tree)


def generate(s, check=False):
    """Write (once) the host module for strategy `s`; returns (module name, path)."""
    key = build_key(s, check)
    stem = "".join(c if c.isalnum() else "_" for c in s.name)
    name = f"engine_host_{stem}{'_check' if check else ''}_{key}"
    d = hosts_dir()
    path = d / f"{name}.py"
    if not path.exists():  # written once: rewriting would change its stamp and void numba's cache
        d.mkdir(parents=True, exist_ok=True)
        body = TEMPLATE.read_text()
        if MARKER not in body:
            raise RuntimeError(f"{TEMPLATE}: no host body marker")
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(_header(s, check) + expand_host_step(body.split(MARKER, 1)[1]))
        os.replace(tmp, path)
        _prune(d)
    return name, path


def _prune(d):
    """Keep the newest KEEP_HOSTS generated files (their numba caches are keyed by path)."""
    hosts = sorted(d.glob("engine_host_*.py"), key=lambda p: p.stat().st_mtime)
    for p in hosts[:-KEEP_HOSTS]:
        try:
            p.unlink()
        except OSError:
            pass


class HostState:
    """The host's per-instrument arrays (see host_template), allocated off the hot path. ids: a
    UNIVERSE's members bound to instruments (Strategy.bind_universe); None only to compile."""

    def __init__(self, s, n_instruments, levels, mod, ids=None):
        n = max(1, int(n_instruments))
        self.fstate = np.zeros((n, s.state), np.float64)
        self.book = np.zeros((n, 2, 2, levels if s.depth else 0), np.int64)
        self.ist = np.zeros((n, mod.IST_WIDTH), np.int64)
        self._pos = mod.I_POS
        # conflation: each instrument's pending row and tick, the pending list, the scalars
        self.prow = np.zeros((n, len(s.features)), np.float32)
        self.ptick = np.zeros((n, LOOP_TICK_WORDS), np.int64)  # (conflation's stash of live loop ticks)
        self.plist = np.zeros(n, np.int64)
        self.frows = np.zeros((n, len(s.features)), np.float32)  # a flush's rows in one call, and their scores
        self.fout = np.zeros(n, np.float32)
        self.cst = np.zeros(mod.CST_WIDTH, np.int64)
        from .universe import member_map
        self.uids = np.zeros(len(s.universe), np.int64) if ids is None else np.ascontiguousarray(ids, np.int64)
        self.umem = member_map(self.uids if ids is not None else self.uids[:1], n)
        self.ubook, self.uist = self.book.view(), self.ist.view()  # what on_tick's `u` reads: read-only
        self.ubook.flags.writeable = False
        self.uist.flags.writeable = False
        self.shared = np.zeros(max(1, s.shared), np.float64)
        # a targets decide's scratch: the members' targets, and its signals before they are pushed (live)
        self.targets = np.zeros(max(1, len(s.universe)), np.int64)
        self.dsig = np.zeros((max(1, len(s.universe)), SIGNAL_WORDS), np.int64)
        self.rlim, self.rb, self.rg = risk.new_state(n)  # (no limits until the run sets them: risk.configure)

    def arrays(self):
        """What data-set building takes."""
        return (self.fstate, self.book, self.ist, self.uids, self.umem, self.ubook, self.uist, self.shared, self.targets,
                self.dsig)

    def loop_arrays(self):
        """What the live and backtest loops take (engine/loop_args.py: in its groups)."""
        return HostArrays.of(self)

    @property
    def positions(self):
        return self.ist[:, self._pos]


class Host:
    """A strategy compiled into the host loops."""

    def __init__(self, s, module):
        self.strategy = s
        self.mod = module
        self.nfeat = len(s.features)

    def state(self, n_instruments, levels, ids=None):
        """Fresh per-instrument arrays; `levels`: the book window the tick stream carries; ids: the
        UNIVERSE's members' instruments (Strategy.bind_universe), required with one but to compile."""
        if self.strategy.depth > levels:
            raise StrategyError(f"{self.strategy.path}: DEPTH {self.strategy.depth} needs book levels, and the tick "
                                f"stream carries {levels} (convert or feed with depth={max(self.strategy.depth, 10)})")
        return HostState(self.strategy, n_instruments, levels, self.mod, ids)

    def bound_state(self, n_instruments, levels, names, specs, where):
        """state() for an input whose instruments are `names` (records `specs`): a UNIVERSE bound to them."""
        from .instruments import table
        ids = self.strategy.bind_universe(names, [r["venue"] for r in table(names, specs)], where)
        return self.state(n_instruments, levels, ids)

    def new_row(self):
        return np.zeros(self.nfeat, np.float32)

    def params(self):
        return self.strategy.params_array()

    def loop_cfg(self, exit_on_eof=False, warm_every=defaults.WARM_EVERY, sigmoid=True, wait=None, conflate=False,
                 conflate_max=defaults.CONFLATE_MAX,
                 conflate_ns=20_000):
        """The loops' float64 settings (host_template CFG_*); wait: an engine.waits.Wait (default
        busy-spin)."""
        from .waits import Wait
        m = self.mod
        w = wait or Wait("spin")
        cfg = np.zeros(m.CFG_WIDTH, np.float64)
        cfg[m.CFG_EXIT_ON_EOF] = 1.0 if exit_on_eof else 0.0
        cfg[m.CFG_WARM_EVERY] = warm_every
        cfg[m.CFG_SIGMOID] = 1.0 if sigmoid else 0.0
        cfg[m.CFG_WAIT] = {"spin": m.WAIT_SPIN, "backoff": m.WAIT_BACKOFF, "duty": m.WAIT_DUTY}[w.name]
        cfg[m.CFG_SPIN_NS], cfg[m.CFG_YIELD_NS], cfg[m.CFG_PARK_MAX_NS] = w.spin_ns, w.yield_ns, w.park_max_ns
        cfg[m.CFG_DUTY] = w.duty
        cfg[m.CFG_CONFLATE] = 1.0 if conflate else 0.0
        cfg[m.CFG_CONFLATE_MAX] = max(1, int(conflate_max))
        cfg[m.CFG_CONFLATE_NS] = max(0, int(conflate_ns))
        return cfg

    def compile_live(self):
        """Compile (or load from cache) the live loop with the exact argument types of a real run,
        before anything goes real time: it returns at once (CMD_STOP)."""
        from . import control as C
        from . import latency, shm
        cap = 16
        ctl = np.zeros(shm.HEADER_WORDS, np.int64)
        ctl[C.CTL_CMD] = C.CMD_STOP
        ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + defaults.LEASE_NS
        hs = self.state(1, max(self.strategy.depth, 1))
        ring = TickView(thdr=np.zeros(shm.HEADER_WORDS, np.int64), tdata=np.zeros(cap * 8, np.int64), tmask=cap - 1,
                        slot_base=shm.H_CONSUMERS)
        signals = SignalView(shdr=np.zeros(shm.HEADER_WORDS, np.int64), sdata=np.zeros(cap * 16, np.int64),
                             smask=cap - 1, spstate=np.zeros(4, np.int64))
        live = LiveArgs(signals=signals, ctl=ctl, hist=latency.new_counts(), state=hs.loop_arrays(),
                        row=self.new_row(), out=np.zeros(1, np.float32), tick=new_tick(),
                        sig=np.zeros(16, np.int64), pvals=self.params(), cfg=self.loop_cfg())
        self.mod.run_loop(*run_args(self.mod, ring, live))

    def featurize(self, words, n_instruments, levels, names=None, specs=None, where="the input"):
        """Rows for every scored tick: X (float32 [m, F]), instrument, mid (float64, 1e-9 units),
        tick index (into words). names, specs: the instruments (a UNIVERSE is bound to them)."""
        n = words.shape[0]
        hs = self.bound_state(n_instruments, levels, names or [], specs, where) if self.strategy.universe else \
            self.state(n_instruments, levels)
        X = np.empty((max(n, 1), self.nfeat), np.float32)
        inst = np.empty(n, np.int64)
        mid = np.empty(n, np.float64)
        idx = np.empty(n, np.int64)
        m = self.mod.featurize_loop(read_only(words), *hs.arrays(), self.params(), X, inst, mid, idx, self.new_row())
        return X[:m], inst[:m], mid[:m], idx[:m]


_HOSTS = {}


def _import_host(name, path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def _return_types_error(s):
    """on_tick must return a bool (an int with a UNIVERSE) and decide an int (a targets decide returns
    nothing it reads), in every signature numba compiled them with."""
    names = ("on_tick", "decide") if s.has_decide and not s.decide_targets else ("on_tick",)
    for name in names:
        for sig in getattr(s.module, name).nopython_signatures:
            err = return_type_error(s, name, sig.return_type)
            if err is not None:
                return err
    return None


def build(s, check=None):
    """Generate, import and compile-check a strategy's host (once per process per strategy):
    on_tick and decide are compiled with the loops' exact types here, so a strategy that does
    not compile, or returns the wrong type, fails before anything starts. check (default: the
    process's check mode, ENGINE_CHECK): with numba's boundscheck (see above)."""
    from numba.core import errors
    name, path = generate(s, check_mode() if check is None else check)
    if name in _HOSTS:  # compiled already; parameter values are runtime inputs, so bind these ones
        cached = _HOSTS[name]
        if cached.strategy.values == s.values and cached.strategy.universe == s.universe:
            return cached
        host = Host(s, cached.mod)
        host.compile_seconds = 0.0
        return host
    t0 = time.monotonic()
    mod = _import_host(name, path)
    host = Host(s, mod)
    hs = host.state(1, max(s.depth, 1)).arrays()
    # every loop gives on_tick the tick read-only (host_step's borrow_ro), so one probe, with the
    # backtest's read-only ticks, compiles the strategy's functions as every loop calls them
    try:
        mod.probe(*hs, *risk.new_state(1), read_only(np.zeros(8, np.int64)), host.new_row(), host.params(),
                  np.zeros(1, np.float32), np.zeros(16, np.int64))
    except (errors.NumbaError, errors.UnsupportedBytecodeError) as e:  # (the latter is no NumbaError)
        if READONLY_WRITE in str(e).lower():
            raise readonly_error(e, s) from None
        # a function that compiled alone but returns the wrong type (None on some path) fails
        # in the host's call: say that, not the host's cast
        raise _return_types_error(s) or compile_error(e, s) from None
    err = _return_types_error(s)
    if err is not None:
        raise err
    host.compile_seconds = time.monotonic() - t0
    _HOSTS[name] = host
    return host


def load_host(spec=None, overrides=None, universe=None):
    """load + build: the usual entry point (`--strategy SPEC --param ... --universe ...`)."""
    from .strategy_load import load
    return build(load(spec, overrides, universe))


_LOADED = {}


def loaded_host(spec, overrides, universe):
    """load_host once per process per strategy, parameters and universe (a worker's backtests and
    training tasks: replay/jobs.py, models/dask_train.py)."""
    key = (spec, tuple(sorted(overrides.items())), tuple(sorted(universe.items())))
    if key not in _LOADED:
        _LOADED[key] = load_host(spec, overrides, universe)
    return _LOADED[key]
