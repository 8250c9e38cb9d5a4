"""The `engine` command line: one module per command group, each with its handlers and the
argparse definitions of its commands (`add_parsers(sub)`); common.py holds what they share.

Application layer (app/): may import the core (engine/*.py), feeds/, models/, replay/,
fpga/, strategies/ and the rest of app/; nothing below imports it. Entry points:
`engine` (pyproject.toml) and `python -m app` (app/__main__.py).
"""
import os
import signal
import sys

from . import commands_cmd, data_cmds, fpga_cmds, model_cmds, ops_cmds, replay_cmds, run_cmds, sources_cmd, venue_cmd
from .common import Parser, model_keys
from app.source_params import check_command

# the groups, in the order `engine --help` lists their commands
GROUPS = (run_cmds, data_cmds, replay_cmds, model_cmds, ops_cmds, fpga_cmds, sources_cmd, venue_cmd, commands_cmd)
# commands that end with os._exit once everything is flushed (see main)
FAST_EXIT = ("run", "feed", "replay", "backtest", "sweep")


def build_parser():
    p = Parser(prog="engine", description="Low-latency trading-signal engine.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parsers(sub)
    p._run_parser = sub.choices["run"]  # main applies --config to `engine run` with it
    sub.choices["commands"].set_defaults(root=p)  # (engine commands prints every parser)
    return p


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    try:
        if args.cmd == "run":
            from app.config import apply
            apply(args, parser._run_parser, argv)
        check_command(parser, args, argv)  # a source parameter or flag the command cannot honour: refused
        model_keys(args)
        from engine.compile_notice import shown
        with shown(not getattr(args, "quiet", False)):  # a cold numba cache says what it compiles
            rc = args.fn(args)
    except KeyboardInterrupt:
        rc = 130
    except BrokenPipeError as e:
        if not _stdout_gone():
            print(f"engine: error: {e}", file=sys.stderr)
            rc = 2
        else:
            rc = _quiet_broken_pipe()
    except (ValueError, RuntimeError, OSError) as e:
        print(f"engine: error: {e}", file=sys.stderr)
        rc = 2
    if args.cmd in FAST_EXIT:
        # Everything is flushed, fsynced and unlinked by now. Tearing down an interpreter with
        # numba/LLVM and XGBoost loaded takes ~300 ms, which a stop "within a second" cannot spare.
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            rc = _quiet_broken_pipe()
        sys.stderr.flush()
        os._exit(rc)
    return rc


def _stdout_gone():
    """Is stdout a pipe whose reader has gone (`engine signals show F | head`)?"""
    import select
    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError):
        return False


def _quiet_broken_pipe():
    """The reader of our output went away: stop quietly, as a tool killed by SIGPIPE does (exit
    status 141), with nothing on stderr and nothing more written (Python's own flush at exit
    goes to /dev/null)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE

