"""`engine run --config FILE.toml`: every `engine run` option in a TOML file (ops/engine.toml is
the commented sample). A flag given on the command line wins over the file; the file wins over
the defaults. Unknown keys, wrong types and bad values are errors naming the file and key: a
value is checked by its flag's own validator (--drift-half-life's, say), so the file accepts
nothing the command line refuses.

Several sources: one `[[feed]]` table per source instead of the `[feed]` table, each with its
`uri`; the other feed.* keys (rate, speed, ring_capacity, ...) are the run's and may be written in
any of the tables, once (or with the same value), as in [feed].

A feed's source parameters may also be a table beside its uri (`params = { symbols = ["BTCUSDT"],
depth = 10 }`): TOML values, checked by the source's declaration as the URI's would be
(feeds/core/params.py), and written into the uri the run is given."""
import argparse

from engine.toml_file import read_toml

from .run_options import keys, many_keys

# "section.key" -> (argparse dest, type): generated from the RunConfig fields (app/run_options.py)
KEYS = keys()
MANY = many_keys()
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


class ConfigError(ValueError):
    pass


def _flatten(d, prefix=""):
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flatten(v, key + ".")
        else:
            yield key, v


def load(path):
    """{argparse dest: value} from a TOML file."""
    data = read_toml(path, "an engine configuration", ConfigError)
    out = {}
    params = data.get("strategy", {}).pop("params", None) if isinstance(data.get("strategy"), dict) else None
    if params is not None:  # [strategy.params]: the strategy's own names, checked against its PARAMS later
        if not isinstance(params, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                               for v in params.values()):
            raise ConfigError(f"{path}: [strategy.params] must map parameter names to numbers")
        out["param_table"] = {str(k): float(v) for k, v in params.items()}
    roles = data.get("strategy", {}).pop("universe", None) if isinstance(data.get("strategy"), dict) else None
    if roles is not None:  # [strategy.universe]: role = "INSTRUMENT", checked against the UNIVERSE's roles later
        if not isinstance(roles, dict) or any(not isinstance(v, str) or not v.strip() for v in roles.values()):
            raise ConfigError(f"{path}: [strategy.universe] must map the UNIVERSE's roles to instrument names")
        out["universe_table"] = {str(k): v.strip() for k, v in roles.items()}
    feeds = data.get("feed")
    if isinstance(feeds, dict) and "params" in feeds:  # [feed] with its source's parameters as a table
        feeds = [feeds]
    if isinstance(feeds, list):  # [[feed]] tables: one source each
        data = {**data, "feed": _feed_tables(path, feeds)}
    try:
        flat = list(_flatten(data))
    except RecursionError:  # tables within tables (a.b.c... = 1) parse flat but flatten deep
        raise ConfigError(f"{path}: nested too deeply to be an engine configuration") from None
    for key, v in flat:
        if key not in KEYS:
            section, _, last = key.rpartition(".")  # the same name elsewhere, or a longer one of its section
            near = ([k for k in KEYS if k.rpartition(".")[2] == last] or
                    [k for k in KEYS if k.rpartition(".")[0] == section and k.endswith(f"_{last}")])
            hint = f" (did you mean {near[0]!r}?)" if near else f" (known keys: {', '.join(sorted(KEYS))})"
            raise ConfigError(f"{path}: unknown key {key!r}{hint}")
        dest, typ = KEYS[key]
        if key == "feed.uri" and isinstance(v, list):  # ([[feed]] tables: checked in _feed_tables)
            out[dest] = v[0] if len(v) == 1 else v
            continue
        if key in MANY and isinstance(v, list):  # (a repeatable flag's values: each checked as one)
            bad = [x for x in v if not isinstance(x, str)] if typ is str else []
            if bad or not v:
                raise ConfigError(f"{path}: {key} must be a list of strings, got {v!r}")
            out[dest] = v
            continue
        ok = (isinstance(v, bool) if typ is bool else
              isinstance(v, int) and not isinstance(v, bool) if typ is int else
              isinstance(v, (int, float)) and not isinstance(v, bool) if typ is float else isinstance(v, str))
        if not ok:
            raise ConfigError(f"{path}: {key} must be {_TYPE_NAMES[typ]}, got {v!r}")
        out[dest] = float(v) if typ is float else v
    return out


def _feed_tables(path, tables):
    """The [[feed]] tables as one [feed] table whose uri is the list of their uris (checked here:
    a uri each; any other key once, or the same value in every table that says it)."""
    merged, uris = {}, []
    for i, t in enumerate(tables, 1):
        if not isinstance(t, dict):
            raise ConfigError(f"{path}: feed must be a table ([feed]) or tables ([[feed]]), got {t!r}")
        uri = t.get("uri")
        if not isinstance(uri, str) or not uri:
            raise ConfigError(f"{path}: [[feed]] table {i} needs uri = \"SOURCE\" (a string)")
        uris.append(_with_params(path, i, uri, t["params"]) if "params" in t else uri)
        for k, v in t.items():
            if k in ("uri", "params"):
                continue
            if k in merged and merged[k] != v:
                raise ConfigError(f"{path}: feed.{k} is given twice with different values ({merged[k]!r}, {v!r}): "
                                  "it is the run's, not one source's")
            merged[k] = v
    if not uris:
        raise ConfigError(f"{path}: [[feed]] needs at least one table")
    return {**merged, "uri": uris}


def _with_params(path, i, uri, table):
    """The uri with a feed table's `params` written into it, each checked by the source's
    declaration (a list is a comma-separated value); ConfigError naming the file and table."""
    from urllib.parse import quote

    from feeds.core.sources import as_uri, parse
    from feeds.core.uri import FeedError, split
    where = f"{path}: feed table {i}"
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{where}: params must be a table of the source's parameters (params = {{ depth = 10 }})")
    words = []
    for k, v in table.items():
        if isinstance(v, dict) or isinstance(v, list) and not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{where}: params.{k} must be a string, a number, true/false or a list of strings")
        text = ",".join(v) if isinstance(v, list) else str(int(v)) if isinstance(v, bool) else str(v)
        words.append(f"{k}={quote(text, safe=',:/.@-_')}")
    try:
        uri = as_uri(uri)
        twice = [k for k in table if k in split(uri)[2]]
        if twice:
            raise ConfigError(f"{where}: {', '.join(twice)} is given both in the uri and in params: say it once")
        _, value, kind = parse(uri + ("&" if "?" in uri else "?") + "&".join(words))
    except FeedError as e:
        raise ConfigError(f"{where}: {e}") from None
    return kind.uri(value)


def given_on_command_line(parser, argv):
    """The dests of the options that appear in argv (so a config file does not override them), as
    argparse itself reads argv: both forms of a flag (--isolate, --no-isolate), --opt=value, and
    abbreviations. argv is parsed again into a namespace where every dest already holds a marker;
    argparse fills in no default where a value is present, so what no longer holds it was given."""
    unset = object()
    marked = {a.dest for a in parser._actions
              if a.dest != argparse.SUPPRESS and not isinstance(a, argparse._AppendAction)}  # (no file key appends)
    appended = {a.dest for a in parser._actions if isinstance(a, argparse._AppendAction) and a.option_strings}
    ns = argparse.Namespace(**dict.fromkeys(marked, unset), **dict.fromkeys(appended, None))
    parser.parse_known_args(argv, ns)  # argv has been parsed once already: no error can come from here
    return {dest for dest in marked if getattr(ns, dest) is not unset} | {d for d in appended if getattr(ns, d)}


def apply(args, parser, argv):
    """Fill args from --config where the command line did not say; args.given: the dests the
    command line or the file set (app/source_params.py: a flag for a source the run does not
    read is refused whichever said it)."""
    explicit = given_on_command_line(parser, argv)
    args.given = set(explicit)
    if not getattr(args, "config", None):
        return args
    choices = {a.dest: a.choices for a in parser._actions if a.choices and a.option_strings}
    types = {a.dest: a.type for a in parser._actions if a.type is not None and a.option_strings}
    keys = {dest: key for key, (dest, _) in KEYS.items()}
    for dest, v in load(args.config).items():
        if dest in choices and v not in choices[dest]:
            raise ConfigError(f"{args.config}: {keys[dest]} must be one of {', '.join(map(str, choices[dest]))}, "
                              f"got {v!r}")
        if dest in types and not isinstance(v, bool):  # the flag's own check, on the file's value too
            for x in v if isinstance(v, list) else [v]:
                try:
                    types[dest](x)
                except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
                    raise ConfigError(f"{args.config}: {keys[dest]}: {e}") from None
        if dest not in explicit:
            setattr(args, dest, v)
            args.given.add(dest)
    return args
