"""`engine run --config FILE.toml`: every `engine run` option in a TOML file (ops/engine.toml is
the commented sample). A flag given on the command line wins over the file; the file wins over
the defaults. Unknown keys, wrong types and bad values are errors naming the file and key."""
import tomllib

from .run_options import keys

# "section.key" -> (argparse dest, type): generated from the RunConfig fields (app/run_options.py)
KEYS = keys()
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
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:  # (tomllib parses nested arrays and inline tables recursively)
        raise ConfigError(f"{path}: nested too deeply to be an engine configuration") from None
    except UnicodeDecodeError as e:  # a binary file: TOML is UTF-8 text
        raise ConfigError(f"{path}: not a TOML file (not UTF-8 text: byte {e.start} is {e.object[e.start]:#04x})") \
            from None
    out = {}
    params = data.get("strategy", {}).pop("params", None) if isinstance(data.get("strategy"), dict) else None
    if params is not None:  # [strategy.params]: the strategy's own names, checked against its PARAMS later
        if not isinstance(params, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                               for v in params.values()):
            raise ConfigError(f"{path}: [strategy.params] must map parameter names to numbers")
        out["param_table"] = {str(k): float(v) for k, v in params.items()}
    try:
        flat = list(_flatten(data))
    except RecursionError:  # tables within tables (a.b.c... = 1) parse flat but flatten deep
        raise ConfigError(f"{path}: nested too deeply to be an engine configuration") from None
    for key, v in flat:
        if key not in KEYS:
            near = [k for k in KEYS if k.split(".")[-1] == key.split(".")[-1]]
            hint = f" (did you mean {near[0]!r}?)" if near else f" (known keys: {', '.join(sorted(KEYS))})"
            raise ConfigError(f"{path}: unknown key {key!r}{hint}")
        dest, typ = KEYS[key]
        ok = (isinstance(v, bool) if typ is bool else
              isinstance(v, int) and not isinstance(v, bool) if typ is int else
              isinstance(v, (int, float)) and not isinstance(v, bool) if typ is float else isinstance(v, str))
        if not ok:
            raise ConfigError(f"{path}: {key} must be {_TYPE_NAMES[typ]}, got {v!r}")
        out[dest] = float(v) if typ is float else v
    return out


def given_on_command_line(parser, argv):
    """The dests of the options that appear in argv (so a config file does not override them), as
    argparse itself reads argv: both forms of a flag (--isolate, --no-isolate), --opt=value, and
    abbreviations. argv is parsed again into a namespace where every dest already holds a marker;
    argparse fills in no default where a value is present, so what no longer holds it was given."""
    import argparse
    unset = object()
    marked = {a.dest for a in parser._actions
              if a.dest != argparse.SUPPRESS and not isinstance(a, argparse._AppendAction)}  # (no file key appends)
    ns = argparse.Namespace(**dict.fromkeys(marked, unset))
    parser.parse_known_args(argv, ns)  # argv has been parsed once already: no error can come from here
    return {dest for dest in marked if getattr(ns, dest) is not unset}


def apply(args, parser, argv):
    """Fill args from --config where the command line did not say."""
    if not getattr(args, "config", None):
        return args
    explicit = given_on_command_line(parser, argv)
    choices = {a.dest: a.choices for a in parser._actions if a.choices and a.option_strings}
    keys = {dest: key for key, (dest, _) in KEYS.items()}
    for dest, v in load(args.config).items():
        if dest in choices and v not in choices[dest]:
            raise ConfigError(f"{args.config}: {keys[dest]} must be one of {', '.join(map(str, choices[dest]))}, "
                              f"got {v!r}")
        if dest not in explicit:
            setattr(args, dest, v)
    return args
