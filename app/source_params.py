"""Which command honours which source parameter, in one place: checked before a command opens a
source, so a parameter or flag that the command could not honour is one line naming it (exit 2),
never silently dropped.

A source URI's parameters say what its ticks are (symbols=, depth=, on_error=, instruments=, seed=,
count=, ...): the source reads them itself, so every command that opens it honours them. The
exceptions are the parameters that set the pace the ticks come at (declared `pace=`,
feeds/core/params.py): only a command that
hands ticks on in real time (COMMANDS: paced) keeps a pace; the others read as fast as they can
and refuse a pace other than "flat out".

A command's own flags that stand for a source parameter, or for the pace of a file (FLAGS), apply
to some sources only; one given where none of the command's sources is such a source is refused.
"""
import argparse
from dataclasses import dataclass

# The commands that take source URIs: the argparse dest holding them (a URI or a list), and
# whether the command hands the ticks on in real time (feed and run publish them at their pace,
# record records them at it)
COMMANDS = {
    "feed": ("source", True),
    "run": ("feed", True),
    "record": ("sources", True),
    "convert": ("source", False),
    "features": ("sources", False),
    "train": ("sources", False),
    "model drift": ("source", False),
    "moldudp64 serve": ("source", False),
}


@dataclass(frozen=True)
class Src:
    """One source of a command, as its URI says (kind: synthetic, file or live)."""
    uri: str
    scheme: str | None  # (None: not a source URI, e.g. the path of a tick file)
    kind: str | None
    params: dict
    builtin: bool = False  # engine run's built-in synthetic feed (no --feed, no --ring)


def _synthetic_without(param):
    return lambda s: s.kind == "synthetic" and param not in s.params


def _not_synthetic_with(param):
    return lambda s: not (s.kind == "synthetic" and param in s.params)


def _file(s):
    return s.kind == "file"


def _paced(s):
    return s.kind in ("file", "synthetic")


def _builtin(s):
    return s.builtin


@dataclass(frozen=True)
class Use:
    """A flag of a command that applies to some of its sources only."""
    dest: str       # its argparse dest
    said: object    # (value, given on the command line or in --config) -> does it ask for anything
    applies: object  # Src -> does it apply to that source
    what: str       # the sources it applies to, in words


GIVEN = lambda v, given: given  # noqa: E731
NOT_ONE = lambda v, given: v not in (None, 1, 1.0)  # noqa: E731  (--speed 1: the pace as it comes)
ON = lambda v, given: bool(v)  # noqa: E731
_TICKS = Use("ticks", GIVEN, _synthetic_without("count"), "synthetic sources without count= (the ticks each gives)")

FLAGS = {
    "feed": {
        "--rate": Use("rate", GIVEN, _synthetic_without("rate"), "a synthetic source without rate= in its URI"),
        "--count": Use("count", GIVEN, _not_synthetic_with("count"), "a source without count= in its URI"),
        "--speed": Use("speed", NOT_ONE, _file, "a file source (its recorded pace times X)"),
        "--max": Use("max", ON, _paced, "file and synthetic sources (a live source comes at its venue's pace)"),
    },
    "run": {
        "--rate": Use("rate", GIVEN, _synthetic_without("rate"),
                      "the built-in synthetic feed and a synthetic --feed without rate="),
        "--sim-instruments": Use("sim_instruments", GIVEN, _builtin,
                                 "the built-in synthetic feed (with --feed, say synthetic://?instruments=N)"),
        "--sim-seed": Use("sim_seed", GIVEN, _builtin,
                          "the built-in synthetic feed (with --feed, say synthetic://?seed=N)"),
        "--speed": Use("speed", NOT_ONE, _file, "file feeds (their recorded pace times X)"),
        "--max": Use("max", ON, _paced, "file and synthetic feeds (a live feed comes at its venue's pace)"),
    },
    "features": {"--ticks": _TICKS},
    "train": {"--ticks": _TICKS},
    "model drift": {"--ticks": _TICKS},
}


def source(uri):
    """The Src of a URI (scheme and kind None for what is not a source URI: a path, a signal file;
    the command says what is wrong with it)."""
    from feeds.core.sources import FILE_SCHEMES, SCHEMES, as_uri
    from feeds.core.uri import FeedError, split
    try:
        scheme, _, params = split(as_uri(uri))  # (a tick file's plain path is a file source)
    except FeedError:
        return Src(uri, None, None, {})
    if scheme not in SCHEMES:
        return Src(uri, None, None, {})
    return Src(uri, scheme, "synthetic" if scheme == "synthetic" else "file" if scheme in FILE_SCHEMES else "live",
               params)


BUILTIN = Src("the built-in synthetic feed", "synthetic", "synthetic", {}, builtin=True)


def sources_of(name, a):
    """The sources command `name` was given (engine run: its --feed list, the built-in feed without
    one, none with --ring)."""
    v = getattr(a, COMMANDS[name][0], None)
    uris = [] if v is None else [v] if isinstance(v, str) else list(v)
    if name == "run" and not uris and not getattr(a, "ring", None):
        return [BUILTIN]
    return [source(u) for u in uris]


def check(name, a, given):
    """ValueError (one line) for a pace command `name` cannot keep, or a flag of it that applies to
    none of its sources; given: the dests the command line (or --config) set."""
    if name not in COMMANDS:
        return
    srcs = sources_of(name, a)
    if not COMMANDS[name][1]:
        for s in srcs:
            _flat_out(name, s)
    flags = FLAGS.get(name, {})
    if name == "feed" and getattr(a, "die_with_parent", False):
        flags = {}  # a run's feed process: the run gave its flags to every feed and checked them against all
    for flag, use in flags.items():
        if not use.said(getattr(a, use.dest, None), use.dest in given):
            continue
        if not any(use.applies(s) for s in srcs):
            ring = getattr(a, "ring", None) if name == "run" else None
            them = (f"--ring {ring} (a ring another process writes)" if ring else
                    ", ".join(s.uri for s in srcs) or "any source given")
            raise ValueError(f"{flag}{_key(name, use.dest)} of engine {name} applies to {use.what}, not to {them}")


def _key(name, dest):
    """ (KEY in --config) of an engine run option that has one."""
    if name != "run":
        return ""
    from app.run_options import keys
    key = next((k for k, (d, _) in keys().items() if d == dest), None)
    return f" (config: {key})" if key else ""


def _flat_out(name, s):
    """ValueError for a source whose URI sets a pace other than flat out (its kind declares which
    parameters are a pace); a URI its kind refuses is left to the source to say."""
    if s.scheme is None:
        return
    from feeds.core.sources import parse
    from feeds.core.uri import FeedError
    try:
        _, v, kind = parse(s.uri)
    except FeedError:
        return
    for p in kind.params:
        if p.pace and p.name in s.params and getattr(v, p.name) != p.pace[0]:
            raise ValueError(f"{s.uri}: {p.name}={s.params[p.name]} is a pace, and engine {name} reads its "
                             f"sources as fast as it can: leave {p.name}= out ({p.pace[1]})")


def command(parser, args):
    """(the command's name as typed, e.g. "moldudp64 serve", its own parser, how many words of argv
    named it)."""
    words = []
    while True:
        subs = [x for x in parser._actions if isinstance(x, argparse._SubParsersAction)]
        if not subs:
            return " ".join(words), parser, len(words)
        word = getattr(args, subs[0].dest, None)
        if word is None:  # (a command whose subcommand is optional: `engine signals --follow`)
            return " ".join(words), parser, len(words)
        words.append(word)
        parser = subs[0].choices[word]


def check_command(parser, args, argv):
    """check() for the command argv ran (nothing to do for one that takes no source URI)."""
    name, leaf, n = command(parser, args)
    if name not in COMMANDS:
        return
    given = getattr(args, "given", None)
    if given is None:
        from app.config import given_on_command_line
        given = given_on_command_line(leaf, argv[n:])
    check(name, args, given)
