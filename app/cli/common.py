"""What every command group shares: argparse type= validators (a bad value is one line naming
the option, before any work starts), the shared option sets (--strategy/--param, --verify-key,
a tick ring's publisher options), the one-line parser error, and small helpers of the handlers."""
import argparse
import os
import sys

import numpy as np

from app.arg_types import (existing_file, int_range, nonneg_float, nonneg_int,  # noqa: F401  (the shared
                           positive_float, positive_int, pow2)  # validators: app/exec_options.py takes them too)
from app.run_options import RunConfig, http_addr  # noqa: F401  (http_addr: for the clients as for engine run)

from .parser import Parser, sources_help  # noqa: F401  (the commands' parser, and its sources part)


def npy_file(s):
    """An existing .npy array file (checked by reading its header)."""
    existing_file(s)
    try:
        np.load(s, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        why = str(e).splitlines()[0] if str(e) else "empty"
        raise argparse.ArgumentTypeError(f"{s}: not a .npy array file ({why})") from None
    return s


def zmq_endpoint(s, bind=True):
    """tcp://HOST:PORT, ipc://PATH (to bind: in an existing directory) or inproc://NAME."""
    s = str(s)
    if s.startswith("tcp://"):
        host, sep, port = s[6:].rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"{s!r} is not tcp://HOST:PORT (PORT 1-65535)")
    elif s.startswith("ipc://"):
        path = s[6:]
        if not path or len(os.fsencode(path)) > 107:
            raise argparse.ArgumentTypeError(f"{s!r}: ipc://PATH needs a path of 1-107 bytes")
        d = os.path.dirname(os.path.abspath(path))
        if bind and not os.path.isdir(d):
            raise argparse.ArgumentTypeError(f"{s!r}: no directory {d}")
    elif not (s.startswith("inproc://") and len(s) > 9):
        raise argparse.ArgumentTypeError(f"{s!r} is not a zmq endpoint (tcp://HOST:PORT or ipc://PATH)")
    return s


def pub_endpoint(s):
    return s if s in ("", "none") else zmq_endpoint(s, bind=True)


def sub_endpoint(s):
    return zmq_endpoint(s, bind=False)


class Flag(argparse.BooleanOptionalAction):
    """A boolean option, declared once with both forms: --X sets it, --no-X clears it, so a flag on
    the command line can undo a `true` from `engine run --config` (or from a wrapper's own flags).
    Default False unless given; the help says what each form does."""

    def __init__(self, option_strings, dest, default=False, help=None, **kw):
        super().__init__(option_strings, dest, default=default, **kw)
        self.help = help  # (Python 3.11 appends "(default: ...)"; the texts say it where it matters)


class Later:
    """A part of a help text filled in when the help is printed, from the fact's owner: its import
    is too slow to pay on every command (set as an attribute of the action, named in the help as
    %(NAME)s)."""

    def __init__(self, fn):
        self.fn = fn

    def __str__(self):
        return self.fn()


def help_from(action, **parts):
    """Fill %(NAME)s in action's help from parts' functions when the help is printed."""
    for name, fn in parts.items():
        setattr(action, name, Later(fn))
    return action


def refused(parse, *args):
    """parse(*args) for an argparse type=: its ValueError becomes argparse's one line naming the option."""
    try:
        return parse(*args)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def command(sub, name, fn, help, description=None, sources=False, **kw):
    """The parser of command `name` (or of a subcommand: `sub` from subcommands()), which runs
    fn(args) (None: one of its subcommands does). sources: the command reads source URIs; its
    help says which (app/cli/parser.py)."""
    p = sub.add_parser(name, help=help, description=description, sources=sources, **kw)
    if fn is not None:
        p.set_defaults(fn=fn)
    return p


def subcommands(p, dest, required=True):
    """p's subcommands (args.DEST names the one given)."""
    return p.add_subparsers(dest=dest, required=required, metavar="SUBCOMMAND")


STRATEGY_BRIEF = "one of %(shipped)s: strategies/; or a FILE.py (default %(default_strategy)s)"
STRATEGY_HELP = ("strategy: a shipped one by name (%(shipped)s: strategies/) or a .py file written to the "
                 "contract in README 'Strategies' (default %(default_strategy)s)")


def _shipped():
    from engine.strategy_load import builtin_names
    return ", ".join(builtin_names())


def _default_strategy():
    from engine.strategy_load import DEFAULT_STRATEGY
    return DEFAULT_STRATEGY


def strategy_args(q, group=None):
    """--strategy and --param (common options under `group`, given one: app/cli/parser.py), --universe:
    every command that runs a strategy's code takes them."""
    help_from(q.add_argument("--strategy", default=None, metavar="NAME|FILE.py", help=STRATEGY_HELP, group=group,
                             brief=STRATEGY_BRIEF), shipped=_shipped, default_strategy=_default_strategy)
    q.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", group=group,
                   brief="set one of the strategy's PARAMS (repeatable)",
                   help="set one of the strategy's PARAMS for this run (repeatable); unknown names are an error")
    q.add_argument("--universe", action="append", default=[], metavar="ROLE=INSTRUMENT", dest="universe_bind",
                   help="bind a role of the strategy's UNIVERSE to an instrument (VENUE:SYMBOL, a SYMBOL or an fnmatch "
                        "pattern; repeatable)")


def overrides(a):
    """--param NAME=VALUE (repeatable), over [strategy.params] from --config."""
    from engine.strategy_load import parse_params
    return {**(getattr(a, "param_table", None) or {}), **parse_params(a.param)}


def merge_arg(q):
    """--merge: the inputs as one stream (a strategy across instruments reads them together)."""
    q.add_argument("--merge", action=Flag, help="read the inputs as one stream, merged by receive time (the order "
                   "`engine run --feed A --feed B` reads them in; instruments named VENUE:SYMBOL): for a strategy "
                   "whose UNIVERSE spans them")


def universe(a):
    """--universe ROLE=INSTRUMENT (repeatable), over [strategy.universe] from --config -> {role: instrument}."""
    from engine.universe import parse_bindings
    return {**(getattr(a, "universe_table", None) or {}), **parse_bindings(getattr(a, "universe_bind", None))}


def strategy_host(a):
    from engine.strategy_build import load_host
    return load_host(a.strategy, overrides(a), universe(a))


VERIFY_KEY_HELP = ("refuse every model artifact (and FPGA directory) not signed by this key: an ed25519 public key "
                   "(engine model keygen) or an HMAC secret (default $ENGINE_MODEL_VERIFY_KEY)")
SIGN_KEY_HELP = ("sign what this writes with this private key (ed25519, or an HMAC secret; default "
                 "$ENGINE_MODEL_SIGN_KEY)")


def verify_key_arg(q):
    """--verify-key: every command that loads a model (or runs an FPGA directory) takes it."""
    q.add_argument("--verify-key", default=None, metavar="KEY", help=VERIFY_KEY_HELP)


def model_keys(a):
    """--verify-key / [model] verify_key and --sign-key: checked now (a bad key file is an error
    before any work) and put in the environment, where every load, the reload and child
    processes find them (models/signing.py)."""
    if not hasattr(a, "verify_key") and not hasattr(a, "sign_key"):
        return
    from models import signing
    if hasattr(a, "verify_key"):
        signing.use_verify_key(a.verify_key)
    if hasattr(a, "sign_key"):
        key = signing.use_sign_key(a.sign_key)
        vkey = signing.verify_key() if key is None and a.cmd in ("train", "compile") else None
        if vkey is not None:  # before the work: write_manifest would refuse it at the end
            raise ValueError(f"a verify key is configured ({vkey.describe()}) but no signing key, so the artifact "
                             f"would be unsigned and refused; give --sign-key PRIVATE_KEY (or {signing.ENV_SIGN})")


def publisher_args(q):
    """What every process that writes a tick ring takes."""
    q.add_argument("--ring", default=f"{RunConfig.name}.ticks",
                   help="ring name in /dev/shm or a path (default %(default)s)")
    q.add_argument("--speed", type=positive_float, default=RunConfig.speed,
                   help="files: the recorded pace times X (default %(default)g)")
    q.add_argument("--max", action=Flag, help="files and synthetic sources: publish as fast as possible")
    q.add_argument("--capacity", type=pow2, default=RunConfig.ring_capacity,
                   help="ring slots (power of two, default %(default)s)")
    q.add_argument("--wait-consumers", type=nonneg_int, default=0,
                   help="hold ticks until this many consumers attach")
    q.add_argument("--wait-timeout", type=nonneg_float, default=60.0, metavar="SECONDS",
                   help="with --wait-consumers: give up (exit 2, naming the ring) when they have not attached "
                        "within SECONDS (default %(default)g; 0: wait as long as it takes. `engine run` starts its "
                        "feeds with 0: they die with it, and its first compile can outlast any fixed wait)")
    q.add_argument("--keep", action=Flag, help="leave the ring file in place on exit")
    q.add_argument("--quiet", action=Flag, help="no progress lines (errors and the result still print)")
    q.add_argument("--die-with-parent", action="store_true", help=argparse.SUPPRESS)
    # engine run's file feeds: pace on the clock the run sets in the ring (one clock for its files)
    q.add_argument("--run-clock", action="store_true", help=argparse.SUPPRESS)


def print_warnings(ws, json_out=False):
    """An input's or output's warnings (an incomplete tick file...): in the printed summary, or on
    stderr when stdout is one JSON object."""
    for w in ws:
        print(f"engine: warning: {w}" if json_out else f"  warning: {w}", file=sys.stderr if json_out else sys.stdout,
              flush=True)
