"""`engine commands [COMMAND...]`: every command and every option, in full, made from the parsers
themselves (the sections of `--help-all`: app/cli/parser.py); --markdown: the same as markdown,
which docs/reference/commands.md is."""
import argparse
import re
import sys

from .common import Flag, command

HEADER = ("# Commands\n\nEvery `engine` command and all its options. `engine COMMAND --help` lists a command's "
          "common options, under the headings they have here; `engine COMMAND --help-all` lists them all. Every "
          "command that reads market data takes the source URIs of the [sources reference](sources.md). This page "
          "is generated from the command line's parser (`engine commands --markdown`).\n")

# outside `code`: what markdown (or the HTML it becomes) would read as markup; | ends a table cell
_MARKUP = re.compile(r"[\\*_{}\[\]|]")


def text(s):
    """Prose for a markdown page: `code` spans kept, everything else escaped."""
    parts = re.split(r"(`[^`]*`)", " ".join(s.split()))
    return "".join(p if p.startswith("`") else _MARKUP.sub(lambda m: "\\" + m.group(0), p)
                   .replace("<", "&lt;").replace(">", "&gt;") for p in parts)


def walk(p, path=("engine",), help=None):
    """(path, parser, one-line help) of p and its subcommands, depth first, in --help's order."""
    yield path, p, help
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in a._choices_actions}
            for name, q in a.choices.items():
                yield from walk(q, path + (name,), helps.get(name))


def parsers(parser, names=None):
    """The commands (and their subcommands) named, all when none."""
    for path, p, help in walk(parser):
        if len(path) > 1 and (not names or path[1] in names):
            yield path, p, help


def usage(p):
    """The command's usage line, as its --help shows it."""
    f = p.formatter_class(prog=p.usage_prog(full=False), width=1000)
    f.add_usage(p.usage, p.usage_actions(full=False), [], prefix="")
    return f.format_help().strip()


def _rows(p, actions):
    f = p.formatter_class(prog=p.prog)
    for a in actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
            continue
        yield f"| `{f._format_action_invocation(a)}` | {text(f._expand_help(a)) if a.help else ''} |"


def section(path, p, help):
    """One command's part of the page."""
    out = [f"{'#' * len(path)} {' '.join(path)}", ""]
    out += [text(s) + "\n" for s in (help, p.description) if s]
    out += ["```text", usage(p), "```", ""]
    if p.sources:
        out += ["It reads the source URIs of the [sources reference](sources.md).", ""]
    for title, description, actions in p.sections(full=True):
        rows = list(_rows(p, actions))
        if rows:
            head = "argument" if title == p._positionals.title else "option"
            out += [f"**{text(title)}**" + (f": {text(description)}" if description else ""), "",
                    f"| {head} | meaning |", "|---|---|", *rows, ""]
    return out


def commands_markdown(parser, names=None):
    """The reference page of parser's (app.cli.build_parser()'s) commands named (all when none):
    docs/reference/commands.md."""
    out = [HEADER]
    for path, p, help in parsers(parser, names):
        out += section(path, p, help)
    return "\n".join(out).rstrip() + "\n"


def cmd_commands(a):
    parser = a.root  # (the whole command line: app/cli/__init__.py build_parser)
    known = [path[1] for path, _, _ in walk(parser) if len(path) == 2]
    for name in a.name:
        if name not in known:
            print(f"engine commands: unknown command {name!r} (known: {', '.join(known)})", file=sys.stderr)
            return 2
    if a.markdown:
        sys.stdout.write(commands_markdown(parser, a.name))
        return 0
    sys.stdout.write("\n".join(f"{'=' * 8} {' '.join(path)}\n{p.format_help(full=True)}"
                               for path, p, _ in parsers(parser, a.name)))
    return 0


def add_parsers(sub):
    p = command(sub, "commands", cmd_commands, help="every command and all its options, in full",
                description="Prints every command's --help-all (or those of the commands named).")
    p.add_argument("name", nargs="*", metavar="COMMAND", help="the commands to show (default: all)")
    p.add_argument("--markdown", action=Flag, help="as markdown (docs/reference/commands.md is this)")
