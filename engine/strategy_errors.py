"""Explaining a strategy that does not compile: numba's reason, the strategy's file and line, and
a hint for the common mistakes.

numba reports a typing error inside the generated host module as a nest of errors (the user's
function, then every host frame that called it), with candidate lists and compiler passes around
the reason. What a user needs is the innermost reason, the line of *their* file it is about, that
line's code, and what to do. Every message is one StrategyError whose first line stands alone:

    strategy FILE:LINE: on_tick does not compile: <numba's reason>
      <the rest of the reason, if any>
      LINE | <the code>
      hint: <the fix>
"""
import ast
import os
import re
from pathlib import Path


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FILE_LINE = re.compile(r'^File "([^"]+)", line (\d+)')
_LOCATIONS = (re.compile(r'File "([^"]+)", line (\d+)'),
              re.compile(r" at (\S+\.py) \((\d+)\)"),
              re.compile(r"Raised from (\S+\.py) \((\d+)\)"),
              re.compile(r"Var\([^,()]+, (\S+\.py):(\d+)\)"))
# lines of numba's report that say how it looked, not what is wrong
_NOISE = re.compile(r"^(Failed in \w+ mode pipeline|During:|There are \d+ candidate implementations|"
                    r"- Of which \d+ did not match|(Operator )?Overload (of|in) function|With argument\(s\):|"
                    r"No match|\* \(|Rejected as the implementation raised|raised from |Enable logging|"
                    r"For more information about typing|https?://|<source elided>|\^$|"
                    r"TypingError: All arguments must be Sets)")
_RAISED = re.compile(r"\s*Raised from \S+ \(\d+\)")
_PHI = re.compile(r" for '\$[^']*', defined at \S+ \(\d+\)")
_IR_NAME = re.compile(r"Return of: IR name '[^']*', type")
BOOK_FIELDS = "bid_px, bid_sz, ask_px, ask_sz"
# numba's error for a write to a read-only array (the word "readonly" alone is in any signature
# that shows the tick's type)
READONLY_WRITE = "cannot modify readonly array"



class StrategyError(ValueError):
    """A strategy file that cannot be used: the message names the file and the problem (defined
    here, beside what explains compile errors; engine/strategy_load.py raises it too)."""

def _same_file(name, path):
    """Is numba's `name` (absolute, relative to the working directory, or a bare file name) `path`?"""
    if os.sep not in name:
        return name == os.path.basename(path)
    return os.path.realpath(name) == os.path.realpath(path)


def _user_files(s):
    return [s.path, *s.sources]


def _locations(msg, s):
    """(file, line) numba names in the strategy's own files, innermost first; a compiler variable's
    location (Var(...)) is only a fallback."""
    out, late = [], []
    for k, rx in enumerate(_LOCATIONS):
        for m in rx.finditer(msg):
            f = next((u for u in _user_files(s) if _same_file(m.group(1), u)), None)
            if f is not None:
                (late if k == 3 else out).append((m.start(), f, int(m.group(2))))
    out.sort()
    late.sort(key=lambda x: -x[2])  # of a call's variables, the last line is the call's
    return [(f, n) for _, f, n in out + late]


def _tree(path):
    try:
        return ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return ast.Module([], [])


def _function(path, name):
    """The module-level `def name` of the file, or None."""
    return next((n for n in _tree(path).body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _functions(path):
    """[(name, first line, last line)] of every function defined in the file."""
    return [(n.name, n.lineno, n.end_lineno) for n in ast.walk(_tree(path)) if isinstance(n, ast.FunctionDef)]


def def_line(path, name):
    """The line of `def name` in the file (0 if it is not there)."""
    return next((a for n, a, _ in _functions(path) if n == name), 0)


def _enclosing(path, line):
    inner = [(a, n) for n, a, b in _functions(path) if a <= line <= b]
    return max(inner)[1] if inner else None


def _code(path, line):
    try:
        return Path(path).read_text().splitlines()[line - 1].strip()
    except (OSError, IndexError, ValueError):
        return ""


def _name_line(path, name):
    """The first line of the file that reads `name` inside a function (for a NameError, which numba
    reports without a location)."""
    for fn in (n for n in ast.walk(_tree(path)) if isinstance(n, ast.FunctionDef)):
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
                return n.lineno
    return 0


def _reason(msg, s):
    """numba's reason without its noise: every line of the report but the compiler's passes, the
    candidate lists and the source excerpts; a `location:` line gets its line number and code."""
    lines = [x.rstrip() for x in _ANSI.sub("", msg).splitlines()]
    out, i = [], 0
    while i < len(lines):
        x = lines[i].strip()
        m = _FILE_LINE.match(x)
        if m:  # a source excerpt: `File "...", line N:`, the def line, context, the code, `^`
            j = i + 1
            while j < len(lines) and lines[j].strip() != "^" and not _FILE_LINE.match(lines[j].strip()):
                j += 1
            f = next((u for u in _user_files(s) if _same_file(m.group(1), u)), None)
            if out and out[-1].endswith("location:") and f is not None:
                n = int(m.group(2))
                out[-1] = f"{out[-1][:-len('location:')].rstrip(' ,')} at line {n}: {_code(f, n)}"
            i = j + 1
            continue
        x = _PHI.sub("", _RAISED.sub("", _IR_NAME.sub("return of type", x)))
        if x and not _NOISE.match(x) and x not in out:
            out.append(x)
        i += 1
    return out


def _return_type(fname):
    return "an int (the target position)" if fname == "decide" else "a bool" if fname == "on_tick" else "one type"


# the common mistakes: (what numba's message says, a regular expression; the hint, a text or
# fn(match, function name, strategy)), the first that matches wins
HINTS = (
    (r"Unknown attribute '(\w+)' of type Book",
     lambda m, fname, s: f"book has {BOOK_FIELDS} (int64[DEPTH] arrays, best level first, prices at 1e-9), no "
                         f"{m.group(1)!r}: the mid is (book.bid_px[0] + book.ask_px[0]) / 2"),
    (r"Unknown attribute '(\w+)' of type Params",
     lambda m, fname, s: f"params has the names in PARAMS ({', '.join(s.param_names) or 'none'}); add "
                         f"{m.group(1)!r} to PARAMS (a number) to read params.{m.group(1)}"),
    (r"NameError: name '(\w+)' is not defined",
     lambda m, fname, s: f"{m.group(1)} is not defined where {fname} can see it: import it or define it at module "
                         "level (numba reads globals when it compiles)"),
    (r"Untyped global name '(\w+)'.*<class '(function|builtin_function_or_method)'>",
     lambda m, fname, s: f"{m.group(1)} is a plain Python function: decorate it with @njit too (everything {fname} "
                         "calls runs compiled)"),
    (r"Untyped global name|reflected (list|set)|Cannot determine Numba type of <class",
     "compiled code cannot use Python objects (dict, list, set, class instances) from the module: keep constants "
     "as numbers, tuples or numpy arrays, and per-instrument values in state"),
    (r"Unknown attribute '(\w+)' of type Module\(<module '([\w.]+)'",
     lambda m, fname, s: f"numba cannot compile {m.group(2)}.{m.group(1)}: inside on_tick/decide use numbers, "
                         "numpy arrays, math and the numpy functions numba supports"),
    (r"Unsupported array index type (unicode_type|Literal\[str\])",
     "arrays are indexed by integers: state[0], row[1]; to name columns, define module-level constants (S_MID = 0) "
     "and write state[S_MID]"),
    (r"cannot index array\(\w+, 1d", "state, row and book's arrays are 1-d: index them with one integer (row[j])"),
    (r"setitem\(array\(float(32|64), 1d, \w\), [^,]+, (unicode_type|Literal\[str\]\([^)]*\)|none)\)",
     "row (float32) and state (float64) hold numbers: store a number (float(x); np.nan for a missing feature), "
     "never a str or None"),
    (r"Cannot unify \S+ and \S+",
     "a variable or an `x if c else y` gets two types here: give every branch the same type (a number; np.nan for "
     "missing, not None or a str)"),
    (r"Can't unify return type",
     lambda m, fname, s: f"every return of {fname} must give the same type: {_return_type(fname)}"),
    (r"Cannot bind .* (too many positional arguments|missing a required argument)",
     "a function on this line is called with the wrong number of arguments (the tick accessors take the tick "
     "alone: kind(tick), bid_px(tick), ...)"),
    (r"IMPORT_NAME", "import at the top of the file, not inside a compiled function"),
    (r"unsupported opcode|Unsupported",
     "numba cannot compile this construct: move it out of on_tick/decide (they run compiled, per tick)"),
    (r"No implementation of function",
     "no operation for these types (the >>> line): score is float32, position int64, state float64[], row "
     "float32[], book's arrays and the tick int64[], params' fields float64"),
)


def _hint(msg, fname, s):
    """One line for the common mistakes; else the general rule."""
    for pattern, hint in HINTS:
        m = re.search(pattern, msg)
        if m:
            return hint if isinstance(hint, str) else hint(m, fname, s)
    return ("on_tick, decide and what they call are compiled by numba (nopython mode): numbers, numpy arrays and "
            "@njit functions only; see docs/guides/strategies.md")


def _block(path, line, headline, more, hint):
    where = f"{path}:{line}" if line else f"{path}"
    body = [f"strategy {where}: {headline}", *(f"  {x}" for x in more)]
    code = _code(path, line) if line else ""
    if code:
        body.append(f"  {line} | {code}")
    body.append(f"  hint: {hint}")
    return StrategyError("\n".join(body))


def compile_error(e, s):
    """A numba error raised while compiling strategy `s` into the host -> a StrategyError."""
    msg = _ANSI.sub("", str(e))
    locs = _locations(msg, s)
    path, line = locs[0] if locs else (s.path, 0)
    m = re.search(r"NameError: name '(\w+)' is not defined", msg)
    if m and not locs:
        line = _name_line(path, m.group(1))
    fname = _enclosing(path, line) if line else None
    if fname is None:  # no line of the user's own: the host's call names the function
        fname = "decide" if s.has_decide and re.search(r"\bdecide\(|function decide\b", msg) else "on_tick"
        if not line:
            line = def_line(path, fname)
    reason = _reason(msg, s) or [" ".join(msg.split())[:300]]
    returns = sorted((int(m.group(2)), m.group(1), x) for x in reason
                     for m in [re.match(r"return of type '(.*)' at line (\d+)", x)] if m)
    if returns:  # the returns that disagree, in line order; the headline at one that is not the contract's type
        reason = [x for x in reason if x not in {r[2] for r in returns}] + [r[2] for r in returns]
        want = {"decide": r"Literal\[int\]\(-?\d+\)|u?int\d+", "on_tick": r"Literal\[bool\]\(\w+\)|bool"}.get(fname)
        line = next((n for n, ty, _ in returns if want and not re.fullmatch(want, ty)), line)
    return _block(path, line, f"{fname} does not compile: {reason[0]}", reason[1:], _hint(msg, fname, s))


def _written_root(path, line):
    """The name an item assignment on that line writes through (`tick[3] = 0`: tick; `u.ist[0, 0] += 1`:
    u), or None."""
    for n in ast.walk(_tree(path)):
        if isinstance(n, (ast.Assign, ast.AugAssign)) and n.lineno == line:
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                while isinstance(t, (ast.Subscript, ast.Attribute)):
                    t = t.value
                if isinstance(t, ast.Name):
                    return t.id
    return None


def readonly_error(e, s):
    """on_tick wrote to what it may only read: `tick` (a backtest reads it from the mapped file),
    `book` (the engine's: every later tick reads it) or, with a UNIVERSE, what `u` shows of the
    members. Told apart by what the line numba names writes through (on_tick's parameters by
    position: state, book, tick, row, params, u)."""
    locs = _locations(_ANSI.sub("", str(e)), s)
    path, line = locs[0] if locs else (s.path, 0)
    fn = _function(s.path, "on_tick")
    names = [a.arg for a in fn.args.args] if fn is not None else []
    said = {1: "`book`, which is read-only (the engine's book, which every later tick reads); copy what you need "
               "into state",
            2: "`tick`, which is read-only (backtests read it from the mapped file); copy what you need into state"}
    if s.universe:
        said[5] = ("what `u` shows of the members (their books and columns are read-only); keep what you need in "
                   "state or u.shared")
    root = _written_root(path, line) if line else None
    what = next((said[k] for k in said if k < len(names) and names[k] == root), None)
    where = f"{path}:{line}" if line else path
    unplaced = ("an array it may only read (`tick`, `book`" + (", what `u` shows of the members" if s.universe else "")
                + "); copy what you need into state")
    return StrategyError(f"{where}: on_tick writes to {what or unplaced}")


def _falls_through(stmts):
    """Can control reach the end of these statements (and so return None)?"""
    if not stmts:
        return True
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return False
    if isinstance(last, ast.If):
        return _falls_through(last.body) or _falls_through(last.orelse)
    return True


def _none_line(path, name):
    """The line where `name` returns None: a bare `return` / `return None`, else its last statement
    (control falls off the end there)."""
    fn = _function(path, name)
    if fn is None:
        return 0
    nones = [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Return) and _is_none(n.value)]
    if nones:
        return min(nones)
    return fn.body[-1].lineno if _falls_through(fn.body) else fn.lineno


def _is_none(v):
    return v is None or (isinstance(v, ast.Constant) and v.value is None)


def _wrong_return_line(path, name, rt):
    """The first `return` of `name` that visibly gives another type than the contract's: for
    on_tick one that is not a comparison, `not`, and/or, True/False or bool(...); for decide a
    float or bool constant, a comparison, or (for a float) a division. 0 when none is visible."""
    from numba.core import types
    fn = _function(path, name)
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None] if fn else []

    def boolish(v):
        return (isinstance(v, (ast.Compare, ast.BoolOp)) or (isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not))
                or (isinstance(v, ast.Constant) and isinstance(v.value, bool))
                or (isinstance(v, ast.Call) and getattr(v.func, "id", None) == "bool"))

    def floatish(v):
        return any((isinstance(x, ast.Constant) and isinstance(x.value, float))
                   or (isinstance(x, ast.BinOp) and isinstance(x.op, ast.Div)) for x in ast.walk(v))
    for r in sorted(rets, key=lambda r: r.lineno):
        if name == "on_tick" and not boolish(r.value):
            return r.lineno
        if name == "decide" and (boolish(r.value) if isinstance(rt, types.Boolean) else floatish(r.value)):
            return r.lineno
    return 0


WANT = {"on_tick": ("a bool", "True: score this tick"), "decide": ("an int", "the target position, signed units"),
        "on_tick_universe": ("an int", "the member to score, or -1")}


def return_type_error(s, fname, rt):
    """A StrategyError if on_tick's return type `rt` is not a bool or decide's not an int, else None."""
    from numba.core import types
    if rt is None:
        return None
    universe = fname == "on_tick" and bool(getattr(s, "universe", ()))
    want, what = WANT["on_tick_universe" if universe else fname]
    if isinstance(rt, types.Boolean if fname == "on_tick" and not universe else types.Integer):  # (a bool is no Integer)
        return None
    if universe:
        line = def_line(s.path, fname)
        return _block(s.path, line, f"on_tick returns {rt}; with a UNIVERSE it must return {want} ({what})", [],
                      "return m (0 <= m < len(UNIVERSE)) to score the row as member m's, -1 for nothing; u.me is the "
                      "tick's own member")
    if isinstance(rt, (types.Optional, types.NoneType)):
        line = _none_line(s.path, fname)
        end = "return position" if fname == "decide" else "return False"
        some = "on some path " if isinstance(rt, types.Optional) else ""
        return _block(s.path, line, f"{fname} returns None {some}({rt}); it must return {want} ({what})", [],
                      f"every path of {fname} must end in a return: a path that reaches the end returns None "
                      f"(e.g. end it with `{end}`)")
    line = _wrong_return_line(s.path, fname, rt) or def_line(s.path, fname)
    if fname == "on_tick":
        hint = ("return a comparison, e.g. `return state[0] >= params.warmup`, or bool(x): True scores this tick "
                "with the row just filled")
    elif isinstance(rt, types.Boolean):
        hint = "True/False is not a position: return signed units (1 long, -1 short, 0 flat, position to keep it)"
    else:
        hint = "decide gives whole units: convert, e.g. `return int(round(x))` (int(x) truncates toward zero)"
    return _block(s.path, line, f"{fname} returns {rt}; it must return {want} ({what})", [], hint)
