"""A strategy's UNIVERSE (the contract: engine/strategy_api.py): checking it at load, binding its
members to a run's instruments, and merging several tick streams into the one a run reads.

Binding happens once, before anything runs, from the instruments the inputs name (a tick file's
table, a run's sources). Names are compared in their run form, VENUE:SYMBOL (`run_name`: what a
run with several sources calls an instrument, app/multi_rings.py, and what its recording keeps),
so a strategy names `BINANCE-F:BTCUSDT` whether the input is a converted capture that calls it
BTCUSDT on venue BINANCE-F, a merged recording, or a live run of several feeds.
"""
import fnmatch

import numpy as np
from .jit import njit

from .records import tick_instrument, tick_instruments, tick_kind, tick_side, tick_word7, w_lo32
from .strategy_errors import StrategyError

MAX_MEMBERS = 64


def check(path, mod):
    """(roles or None, member specs, SHARED) from a strategy module; StrategyError naming the file."""
    u = getattr(mod, "UNIVERSE", None)
    shared = getattr(mod, "SHARED", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared <= 4096:
        raise StrategyError(f"{path}: SHARED must be an integer 0..4096, got {shared!r:.80}")
    if u is None:
        if shared:
            raise StrategyError(f"{path}: SHARED is state shared by a UNIVERSE's members; the file names no UNIVERSE")
        return None, (), 0
    if isinstance(u, dict):
        roles, specs = tuple(u), tuple(u.values())
        bad = [r for r in roles if not isinstance(r, str) or not r.isidentifier()]
        if bad:
            raise StrategyError(f"{path}: UNIVERSE role {bad[0]!r} must be an identifier (it is bound with "
                                "--universe ROLE=NAME)")
    elif isinstance(u, (tuple, list)):
        roles, specs = None, tuple(u)
    else:
        raise StrategyError(f"{path}: UNIVERSE must be a tuple of instrument names or a dict of role -> name, got "
                            f"{type(u).__name__}")
    if not 1 <= len(specs) <= MAX_MEMBERS:
        raise StrategyError(f"{path}: UNIVERSE names {len(specs)} members; it takes 1..{MAX_MEMBERS}")
    for x in specs:
        if not (x is None and roles is not None) and not (isinstance(x, str) and x.strip()):
            raise StrategyError(f"{path}: UNIVERSE member {x!r:.80} must be an instrument name or pattern"
                                + (" (or None: a role bound at run time)" if roles is not None else ""))
    return roles, specs, int(shared)


def parse_bindings(items):
    """["role=NAME", ...] (--universe, repeatable) -> {role: NAME}."""
    out = {}
    for it in items or ():
        role, sep, name = str(it).partition("=")
        if not sep or not role.strip() or not name.strip():
            raise StrategyError(f"--universe {it!r}: expected ROLE=INSTRUMENT")
        out[role.strip()] = name.strip()
    return out


def apply_bindings(path, roles, specs, bindings):
    """The member specs with --universe's bindings applied; every role bound."""
    if not bindings:
        bindings = {}
    if bindings and roles is None:
        raise StrategyError(f"{path}: --universe binds roles, and its UNIVERSE is a tuple (no roles): make it a dict "
                            "of role -> name")
    unknown = sorted(set(bindings) - set(roles or ()))
    if unknown:
        raise StrategyError(f"{path}: --universe {unknown[0]}=...: no such role (UNIVERSE's roles: "
                            f"{', '.join(roles or ())})")
    out = tuple(bindings.get(r, s) for r, s in zip(roles, specs)) if roles else specs
    unbound = [r for r, s in zip(roles or (), out) if s is None]
    if unbound:
        raise StrategyError(f"{path}: UNIVERSE role {unbound[0]} is not bound: --universe {unbound[0]}=INSTRUMENT")
    return out


def run_name(name, venue, label=""):
    """An instrument's name in a run: VENUE:SYMBOL (the source's label when its record has no
    venue; a name that has a venue already is kept)."""
    name = str(name)
    if ":" in name:
        return name
    v = venue or label
    return f"{v}:{name}" if v else name


def venue_symbol(rec):
    """The venue's own name of an instrument record (run_name's inverse): a run's or a merge's
    record is named VENUE:SYMBOL (VENUE:SYMBOL@LABEL when two sources had it), a source's SYMBOL; what
    the venue says of it (fees, a CME root) is looked up by this name."""
    name, label = str(rec["symbol"]), rec.get("source") or ""
    if label and name.endswith("@" + label):
        name = name[:-len(label) - 1]
    v = rec.get("venue") or label
    return name[len(v) + 1:] if v and name.startswith(v + ":") else name


def _matches(spec, full):
    sym = full.rsplit(":", 1)[-1]
    target = full if ":" in spec else sym
    return fnmatch.fnmatchcase(target, spec)


def bind(strategy, names, venues, where):
    """The run instrument id of each member: int64 [M]. names, venues: the input's instruments by
    id; where: what the input is (for the error). StrategyError when a member matches no
    instrument, or several."""
    full = [run_name(n, v) if n else "" for n, v in zip(names, venues)]
    ids = []
    for m, spec in enumerate(strategy.universe):
        hit = [i for i, f in enumerate(full) if f and _matches(spec, f)]
        role = f"role {strategy.roles[m]} ({spec})" if strategy.roles else spec
        if not hit:
            have = [f for f in full if f]
            raise StrategyError(f"{strategy.path}: UNIVERSE member {role}: no instrument of {where} is named so "
                                f"(it has {', '.join(have[:8]) or 'none'}{' ...' if len(have) > 8 else ''})")
        if len(hit) > 1:
            raise StrategyError(f"{strategy.path}: UNIVERSE member {role} matches {len(hit)} instruments of {where} "
                                f"({', '.join(full[i] for i in hit[:4])}): name one")
        ids.append(hit[0])
    dup = sorted({full[i] for i in ids if ids.count(i) > 1})
    if dup:
        raise StrategyError(f"{strategy.path}: UNIVERSE names {dup[0]} twice")
    return np.array(ids, np.int64), [full[i] for i in ids]


def member_map(ids, n):
    """int64 [n]: each run instrument's member index, -1 outside the universe."""
    umem = np.full(max(1, n), -1, np.int64)
    for m, i in enumerate(ids):
        if i < len(umem):
            umem[i] = m
    return umem


# --- several tick streams as one, in receive-time order ------------------------------------------

def source_labels(uris):
    """A short unique label per source URI: its scheme, numbered when several share one (a run's
    sources' labels: metrics, /status, and a name for an instrument whose record has no venue)."""
    schemes = [u.split(":", 1)[0] if ":" in u else u for u in uris]
    out = []
    for i, s in enumerate(schemes):
        n = schemes[:i + 1].count(s)
        out.append(s if schemes.count(s) == 1 else f"{s}-{n}")
    return out


@njit(cache=True)
def _merge(words, starts, ends, offsets, out):
    """The k-way merge run_loop_multi does over its rings (engine/host_template.py _take_next):
    among the streams' next ticks, the smallest receive time (ties: the first stream); each tick's
    instrument moved by its stream's offset and its seq renumbered in the merged order."""
    k = starts.shape[0]
    pos = starts.copy()
    n = 0
    while True:
        best = -1
        for s in range(k):
            if pos[s] < ends[s] and (best < 0 or words[pos[s], 2] < words[pos[best], 2]):
                best = s
        if best < 0:
            return n
        for w in range(8):
            out[n, w] = words[pos[best], w]
        out[n, 0] = n
        t = out[n]
        out[n, 7] = tick_word7(w_lo32(t[7]), tick_instrument(t) + offsets[best], tick_kind(t), tick_side(t))
        pos[best] += 1
        n += 1


def merge(streams, labels):
    """streams: [(words, names, specs)] -> (words, names, specs) of one stream, its instruments
    named VENUE:SYMBOL (each stream's label where its record has no venue), ids one block per
    stream in the streams' order."""
    from .instruments import table
    names, specs, offsets, seen = [], [], [], set()
    for (w, nm, sp), label in zip(streams, labels):
        offsets.append(len(names))
        for n, rec in zip(nm, table(nm, sp)):
            g = run_name(n, rec["venue"], label)
            if g in seen:
                g = f"{g}@{label}"
            seen.add(g)
            names.append(g)
            specs.append({**rec, "symbol": g, "source": label})
    for (w, nm, _), label in zip(streams, labels):  # (a run skips such ticks: POLL_SKIP)
        if len(w) and int(tick_instruments(w).max()) >= max(1, len(nm)):
            raise ValueError(f"{label}: a tick of instrument {int(tick_instruments(w).max())}, past the "
                             f"{len(nm)} its table names")
    lens = [len(w) for w, _, _ in streams]
    allw = np.concatenate([w for w, _, _ in streams]) if streams else np.zeros((0, 8), np.int64)
    starts = np.cumsum([0] + lens[:-1]).astype(np.int64)
    out = np.empty_like(allw)
    n = _merge(allw, starts, starts + np.array(lens, np.int64), np.array(offsets, np.int64), out)
    return out[:n], names, specs
