"""Loading a strategy: find the file, import it, check it against the contract
(engine/strategy_api.py), bind its parameters, and name it by hashes (its identity).

Every problem is a StrategyError: one line naming the file and what is wrong, raised before
anything starts (code that does not compile: one block with numba's reason, the line and a hint,
engine/strategy_errors.py).
"""
import hashlib
import importlib.util
import inspect
import keyword
import math
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .strategy_errors import StrategyError, def_line
from .strategy_api import (DEFAULT_SCORE, DEFAULT_THRESHOLDS, MAX_DEPTH, MAX_STATE, SCORE_KINDS, THRESHOLD_NAMES,
                           check_thresholds)

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "strategies"
DEFAULT_STRATEGY = "microstructure"
CONTRACT = ("a strategy defines FEATURES, DEPTH, STATE, PARAMS and @njit on_tick(state, book, tick, row, params), "
            "optionally @njit decide(state, score, position, params) and SCORE; see docs/guides/strategies.md")
SCORE_WORDS = {"probability": "a probability", "margin": "a raw margin"}


def builtin_names():
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.py") if not p.name.startswith("_"))


def resolve(spec):
    """A built-in name (strategies/NAME.py) or a path to a .py file."""
    spec = spec or DEFAULT_STRATEGY
    if os.sep not in spec and not spec.endswith(".py"):
        p = BUILTIN_DIR / f"{spec}.py"
        if not p.is_file():
            raise StrategyError(f"no built-in strategy {spec!r} (built-in: {', '.join(builtin_names())}; "
                                "or give the path of a .py file)")
        return p.resolve()
    p = Path(spec).expanduser()
    if not p.is_file():
        raise StrategyError(f"{spec}: no such strategy file")
    if p.suffix != ".py":
        raise StrategyError(f"{spec}: a strategy is a Python file (.py)")
    return p.resolve()


def module_name(path, sha):
    stem = "".join(c if c.isalnum() else "_" for c in Path(path).stem)
    return f"engine_strategy_{stem}_{sha[:12]}"


def _where(e, path):
    """' (line N)' of the innermost frame in the strategy file, if any."""
    if isinstance(e, SyntaxError) and e.filename == str(path):
        return f" (line {e.lineno})"
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
    return f" (line {frames[-1].lineno})" if frames else ""


def import_strategy_file(path, name):
    """Import the file as module `name` (once per process); its directory goes on sys.path so
    it can import helper modules next to it."""
    if name in sys.modules:
        return sys.modules[name]
    d = str(Path(path).parent)
    if d not in sys.path:
        sys.path.append(d)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException as e:
        del sys.modules[name]
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        what = f"syntax error: {e.msg}" if isinstance(e, SyntaxError) else f"{type(e).__name__}: {e}"
        raise StrategyError(f"{path}: importing it failed{_where(e, path)}: {one_line(what)}") from None
    return mod


def one_line(s, limit=300):
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _local_sources(mod, path):
    """Files of the user's own modules the strategy uses (next to it, not site-packages nor the
    engine): they are part of what it compiles, so part of its identity."""
    root = Path(path).parent
    engine_root = BUILTIN_DIR.parent
    out = set()
    for v in vars(mod).values():
        m = v if inspect.ismodule(v) else sys.modules.get(getattr(getattr(v, "py_func", v), "__module__", None) or "")
        f = getattr(m, "__file__", None)
        if not f or m is mod:
            continue
        f = Path(f).resolve()
        if root in f.parents and engine_root not in f.parents and "site-packages" not in f.parts:
            out.add(f)
    return sorted(out)


def _is_jitted(f):
    return hasattr(f, "py_func") and hasattr(f, "compile")


def _arity(f):
    try:
        return len(inspect.signature(getattr(f, "py_func", f)).parameters) if f is not None else -1
    except (TypeError, ValueError):
        return -1


def _check_function(path, mod, name, nargs, required):
    f = getattr(mod, name, None)
    if f is None:
        if required:
            raise StrategyError(f"{path}: no {name}: {CONTRACT}")
        return None
    if not _is_jitted(f):
        raise StrategyError(f"{path}: {name} must be compiled with numba: decorate it with @njit "
                            "(from numba import njit)")
    try:
        n = len(inspect.signature(f.py_func).parameters)
    except (TypeError, ValueError):
        n = -1
    if n != nargs:
        want = (("(state, score, targets, params, u)" if nargs == 5 else "(state, score, position, params)")
                if name == "decide" else "(state, book, tick, row, params, u)" if nargs == 6
                else "(state, book, tick, row, params)")
        if name == "on_tick" and n in (5, 6):
            want += " when the file " + ("names a UNIVERSE" if nargs == 6 else "names no UNIVERSE")
        raise StrategyError(f"strategy {path}:{def_line(path, name)}: {name} takes {n} arguments; the contract is "
                            f"{name}{want}")
    return f


def _check_constants(path, mod):
    missing = [n for n in ("FEATURES", "DEPTH", "STATE", "PARAMS") if not hasattr(mod, n)]
    if missing:
        raise StrategyError(f"{path}: no {', '.join(missing)}: {CONTRACT}")
    feats = mod.FEATURES
    if not isinstance(feats, (tuple, list)) or not feats or not all(isinstance(x, str) and x for x in feats):
        raise StrategyError(f"{path}: FEATURES must be a non-empty tuple of names (strings), got {feats!r:.80}")
    dup = sorted({x for x in feats if list(feats).count(x) > 1})
    if dup:
        raise StrategyError(f"{path}: FEATURES names {', '.join(dup)} more than once")
    bad = [x for x in feats if any(c in x for c in "[]<,") or x != x.strip()]
    if bad:
        raise StrategyError(f"{path}: feature name {bad[0]!r} cannot be a model feature name "
                            "(no [ ] < , or surrounding spaces)")
    for name, top in (("DEPTH", MAX_DEPTH), ("STATE", MAX_STATE)):
        v = getattr(mod, name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
            raise StrategyError(f"{path}: {name} must be an integer 0..{top}, got {v!r}")
    params = mod.PARAMS
    if not isinstance(params, dict):
        raise StrategyError(f"{path}: PARAMS must be a dict of name -> number, got {type(params).__name__}")
    for k, v in params.items():
        if not isinstance(k, str) or not k.isidentifier() or keyword.iskeyword(k) or k.startswith("_"):
            raise StrategyError(f"{path}: PARAMS name {k!r} must be a Python identifier not starting with _")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise StrategyError(f"{path}: PARAMS[{k!r}] must be a finite number, got {v!r}")
    return tuple(feats), int(mod.DEPTH), int(mod.STATE), {k: float(v) for k, v in params.items()}


def _check_score(path, mod, has_decide, params):
    """SCORE: the kind of score decide expects (strategy_api.SCORE_KINDS)."""
    score = getattr(mod, "SCORE", DEFAULT_SCORE)
    if score not in SCORE_KINDS:
        raise StrategyError(f"{path}: SCORE must be one of {', '.join(map(repr, SCORE_KINDS))}, got {score!r:.80}")
    if not has_decide and score == "any":
        raise StrategyError(f"{path}: SCORE = 'any' needs a decide: without one the engine's hysteresis rule compares "
                            "the score with thresholds, which are of one kind ('probability' or 'margin')")
    missing = [k for k in THRESHOLD_NAMES if k not in params]
    if not has_decide and score == "margin" and missing:
        raise StrategyError(f"{path}: SCORE = 'margin' without decide: define {', '.join(missing)} in PARAMS (the "
                            "default thresholds are probabilities)")
    return score


def parse_params(items):
    """["name=value", ...] (from --param, repeatable) -> {name: float}."""
    out = {}
    for it in items or ():
        name, sep, val = str(it).partition("=")
        name = name.strip()
        if not sep or not name:
            raise StrategyError(f"--param {it!r}: expected NAME=VALUE")
        try:
            v = float(val)
        except ValueError:
            raise StrategyError(f"--param {it!r}: {val.strip()!r} is not a number") from None
        if not math.isfinite(v):
            raise StrategyError(f"--param {it!r}: must be finite")
        out[name] = v
    return out


@dataclass
class Strategy:
    """A loaded, checked strategy with its parameter values for this run."""
    name: str
    path: str
    module_name: str
    features: tuple
    depth: int
    state: int
    defaults: dict                # PARAMS (plus the hysteresis thresholds without decide)
    values: dict                  # defaults with this run's overrides
    has_decide: bool
    sha256: str                   # the file and its local helper modules
    sources: list = field(default_factory=list)
    score: str = DEFAULT_SCORE    # SCORE: the kind of score decide (or hysteresis) expects
    roles: tuple = None           # UNIVERSE's roles (a dict's keys), or None
    universe: tuple = ()          # UNIVERSE's member specs, --universe applied (engine/universe.py)
    shared: int = 0               # SHARED
    members: tuple = None         # the member instruments as bound to this run's inputs (bind_universe)
    decide_targets: bool = False  # decide(state, score, targets, params, u): a UNIVERSE's targets at once

    @property
    def param_names(self):
        return tuple(self.defaults)

    @property
    def module(self):
        return sys.modules[self.module_name]

    def params_array(self):
        import numpy as np
        return np.array([self.values[k] for k in self.param_names], np.float64)

    def identity(self):
        """What a model trained for this strategy records, and is checked against (with a UNIVERSE:
        the instruments its members were bound to)."""
        return {"name": self.name, "file": self.path, "sha256": self.sha256, "features": list(self.features),
                "depth": self.depth, "state": self.state, "decide": self.has_decide,
                "params": dict(self.values)} | ({"universe": list(self.members or ())} if self.universe else {})

    def bind_universe(self, names, venues, where):
        """Bind the UNIVERSE's members to an input's instruments (engine/universe.py): their ids,
        int64 [M]; None without a UNIVERSE. A model checked afterwards must name the same members."""
        if not self.universe:
            return None
        from .universe import bind
        ids, self.members = bind(self, names, venues, where)
        return ids

    def describe(self):
        return f"'{self.name}' (sha256 {self.sha256[:12]}, {len(self.features)} features, depth {self.depth})"

    def source_depth(self):
        """The book levels a side this strategy asks of a source whose URI does not say: none for
        a touch-only strategy, at least its DEPTH otherwise."""
        return 0 if self.depth == 0 else max(self.depth, 10)

    def score_mismatch(self, kind, model):
        """Why a model whose score is `kind` ("probability" | "margin", models.manifest.score_kind)
        cannot drive this strategy, naming both (`model` says what the model is); None if it can."""
        if self.score in ("any", kind):
            return None
        declared = f"SCORE = {self.score!r}" + ("" if "SCORE" in vars(self.module) else ", the default")
        rule, fix = (("its decide", "write decide") if self.has_decide else
                     ("the hysteresis rule", "set the four thresholds in PARAMS"))
        return (f"{model} scores {SCORE_WORDS[kind]}, and strategy {self.describe()} from {self.path} expects "
                f"{SCORE_WORDS[self.score]} ({declared}: what {rule} compares). Train its model with --labels "
                f"{'binary' if self.score == 'probability' else 'ternary'}, or declare SCORE = {kind!r} in the "
                f"strategy and {fix} for {SCORE_WORDS[kind]}")

    def check_scale(self, probability, model=None):
        """A model of score kind probability (True) or margin (False) must suit SCORE; without
        decide, the hysteresis thresholds must suit it too."""
        model = model or f"a {'binary:logistic' if probability else 'regression (e.g. --labels ternary)'} model"
        why = self.score_mismatch("probability" if probability else "margin", model)
        if why:
            raise StrategyError(why)  # (it names the strategy's file)
        if not self.has_decide:
            try:
                check_thresholds(self.values, probability)
            except ValueError as e:
                raise StrategyError(f"{self.path}: {e}") from None


def load(spec=None, overrides=None, universe=None):
    """Resolve, import and check a strategy; `overrides` {name: value} (from --param / config);
    `universe` {role: instrument} (from --universe)."""
    path = resolve(spec)
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    name = module_name(path, sha)
    mod = import_strategy_file(str(path), name)
    feats, depth, state, params = _check_constants(path, mod)
    from .universe import apply_bindings, check as check_universe
    roles, specs, shared = check_universe(path, mod)
    specs = apply_bindings(path, roles, specs, universe) if specs else specs
    if universe and not specs:
        raise StrategyError(f"{path}: --universe binds a UNIVERSE's roles, and the file names no UNIVERSE")
    _check_function(path, mod, "on_tick", 6 if specs else 5, True)
    decide_targets = bool(specs) and _arity(getattr(mod, "decide", None)) == 5
    has_decide = _check_function(path, mod, "decide", 5 if decide_targets else 4, False) is not None
    defaults = dict(params)
    if not has_decide:
        for k in THRESHOLD_NAMES:
            defaults.setdefault(k, DEFAULT_THRESHOLDS[k])
    unknown = sorted(set(overrides or {}) - set(defaults))
    if unknown:
        raise StrategyError(f"{path}: unknown parameter {', '.join(unknown)} (known: "
                            f"{', '.join(defaults) or 'none'})")
    values = {**defaults, **(overrides or {})}
    sources = _local_sources(mod, path)
    if sources:
        h = hashlib.sha256(data)
        for f in sources:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        sha = h.hexdigest()
    score = _check_score(path, mod, has_decide, params)
    s = Strategy(path.stem, str(path), name, feats, depth, state, defaults, values, has_decide, sha,
                 [str(f) for f in sources], score, roles, specs, shared, decide_targets=decide_targets)
    if not has_decide:
        try:
            check_thresholds(values, probability=score == "probability")
        except ValueError as e:
            raise StrategyError(f"{path}: {e}") from None
    return s
