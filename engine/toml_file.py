"""A TOML file the engine is given (`engine run --config`, `--instruments`): its table, or one line
naming the file and what is wrong with it, whatever its bytes."""
import tomllib


def read_toml(path, what, error=ValueError, name=None):
    """The file's top-level table. error(one line) when it cannot be read or is not TOML: the line
    starts with `name` (default: the path); `what` the file should be ("an engine configuration")."""
    name = name or str(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise error(f"{name}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{name}: not valid TOML: {e}") from None
    except RecursionError:  # (tomllib parses nested arrays and inline tables recursively)
        raise error(f"{name}: nested too deeply to be {what}") from None
    except UnicodeDecodeError as e:  # a binary file: TOML is UTF-8 text
        raise error(f"{name}: not a TOML file (not UTF-8 text: byte {e.start} is {e.object[e.start]:#04x})") from None
