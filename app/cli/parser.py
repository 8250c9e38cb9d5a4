"""The commands' argparse parser: `--help` fits a screen, `--help-all` says everything.

An option declared with group="HEADING" (add_argument's, or app/run_options.py's Opt.group) is one
of its command's common options: `--help` lists it under that heading, with its `brief` as its
one line (else its help). A command with common options lists only those (and its arguments) in
`--help`, then says where the rest are; `--help-all` lists every option with its whole help: the
common ones under their headings, then argparse's own groups, then the rest. A command with none
lists everything in both. docs/reference/commands.md is made from the same sections
(app/cli/commands_cmd.py)."""
import argparse
import sys
import textwrap

REFERENCE = "docs/reference/commands.md"
BRIEF_HELP_AT = 30  # the column --help's one-line helps start at (argparse's default: 24)


def sources_help():
    """The sources part of a command's --help-all, made from the source declarations
    (feeds/core/params.py): each kind's URI and the names of its parameters; `engine sources` says
    what each one means."""
    from feeds.core.sources import kinds
    out = ["sources (engine sources SCHEME: what each parameter means):"]
    for k in kinds():
        out.append(f"  {k.usage():<30} {k.title}")
        if k.params:
            out.append(textwrap.fill(" ".join(p.name for p in k.params), 96, initial_indent=" " * 6,
                                     subsequent_indent=" " * 6))
    out += ["  depth=0..32: book levels a side sent as level ticks; commands that run a strategy ask for what it",
            "  reads (0 for a touch-only strategy) unless the URI says",
            "  rate= is a pace: feed, run and record keep it; the commands that read as fast as they can refuse it"]
    return "\n".join(out)


def sources_line(width=80):
    """The sources part of a command's --help: the URI of each kind, wrapped."""
    from feeds.core.sources import kinds
    uris = ", ".join(k.usage().removesuffix("?PARAMS") for k in kinds())
    return textwrap.fill(f"sources: {uris} (engine sources SCHEME: what each one takes)", width,
                         subsequent_indent="  ")


class Help(argparse._HelpAction):
    """-h/--help: the command's common options; --help-all: every option, in full."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(parser.format_help(full=option_string == "--help-all"), sys.stdout)
        parser.exit()


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, sources=False, **kw):
        """sources: the command reads source URIs; its help says which (sources_help)."""
        kw["add_help"] = False
        super().__init__(*args, **kw)
        self.sources = sources
        self.add_argument("-h", "--help", "--help-all", action=Help,
                          help="show this help (--help-all: every option, in full)")

    def error(self, message):
        """One line, not the usage block: which argument and why, and where to look."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def add_argument(self, *args, group=None, brief=None, **kw):
        """argparse's, and: group, the heading `--help` lists this option under (one of the
        command's common options; none: `--help-all` only, once the command has common ones);
        brief, its one line there (default: its help)."""
        a = (super() if group is None else self.heading(group)).add_argument(*args, **kw)
        if brief is not None:
            a.brief = brief
        return a

    def heading(self, title):
        """The group of common options under `title` (made on first use: --help's order)."""
        for g in self._action_groups:
            if g.title == title and getattr(g, "common", False):
                return g
        g = self.add_argument_group(title)
        g.common = True
        return g

    def headings(self, *titles):
        """Make the headings in this order (--help's), before their options are declared."""
        for t in titles:
            self.heading(t)

    def show(self, title, options):
        """Options declared elsewhere (a shared set: app/exec_options.py exec_args; an argparse
        group) among this command's common ones, under `title`: {option string: its one line}."""
        g = self.heading(title)
        for o, brief in options.items():
            a = self._option_string_actions[o]
            for other in self._action_groups:
                if a in other._group_actions:
                    other._group_actions.remove(a)
            g._group_actions.append(a)
            a.brief = brief

    def common_groups(self):
        return [g for g in self._action_groups if getattr(g, "common", False) and g._group_actions]

    def sections(self, full=True):
        """[(title, description, actions)]: what --help (full: --help-all) lists, in order."""
        common = self.common_groups()
        if not common:
            groups = self._action_groups
        elif not full:
            groups = [self._positionals, *common]
        else:
            groups = [self._positionals, *common,
                      *(g for g in self._action_groups if g not in common and g not in (self._positionals,
                                                                                         self._optionals)),
                      self._optionals]
        title = {self._optionals: "more options" if common else self._optionals.title}
        return [(title.get(g, g.title), g.description, g._group_actions) for g in groups if g._group_actions]

    def usage_actions(self, full=True):
        """The actions the usage line shows: all of them, or (--help of a command with common
        options, after `[options]`) the required options and the arguments."""
        if full or not self.common_groups():
            return self._actions
        return [a for a in self._actions if a.required or not a.option_strings]

    def usage_prog(self, full=True):
        return self.prog if full or not self.common_groups() else f"{self.prog} [options]"

    def hides(self):
        """Does --help leave something out (options, the sources' parameters) that --help-all says?"""
        return bool(self.common_groups()) or self.sources

    def format_help(self, full=False):
        brief = not full and bool(self.common_groups())
        top = self.formatter_class(prog=self.usage_prog(full))
        top.add_usage(self.usage, self.usage_actions(full), [] if brief else self._mutually_exclusive_groups)
        top.add_text(self.description)
        parts = [top.format_help()]
        if self.sources:
            parts.append(sources_help() if full else sources_line(top._width))
        fmt = self.formatter_class(prog=self.prog, **({"max_help_position": BRIEF_HELP_AT} if brief else {}))
        swapped = []
        try:
            for title, description, actions in self.sections(full):
                if brief:
                    swapped += [(a, a.help) for a in actions if getattr(a, "brief", None)]
                    for a, _ in swapped:
                        a.help = a.brief
                fmt.start_section(title)
                fmt.add_text(description)
                fmt.add_arguments(actions)
                fmt.end_section()
            fmt.add_text(self.epilog)
            parts.append(fmt.format_help())
        finally:
            for a, h in swapped:
                a.help = h
        if not full and self.hides():
            parts.append(textwrap.fill(f"All options: {self.prog} --help-all; all commands: {REFERENCE}", top._width))
        return "\n\n".join(p.strip("\n") for p in parts if p.strip()) + "\n"
