"""Help that fits a screen: every command's --help is under 80 rows of an 80-column terminal, its
common options under their headings, and says where the rest are; --help-all lists every option;
docs/reference/commands.md is `engine commands --markdown` (the same parsers), valid markdown;
`make run` ends with three lines on what to try next, whose commands work."""
import argparse
import contextlib
import io
import math
import re
import shlex
import shutil
import subprocess

import pytest

from app.cli import build_parser
from app.cli.commands_cmd import walk

from tests.conftest import ROOT, engine_cmd, engine_env

COLUMNS = 80


@pytest.fixture
def parsers(monkeypatch):
    monkeypatch.setenv("COLUMNS", str(COLUMNS))  # (argparse wraps to the terminal's width)
    return [(" ".join(path), p) for path, p, _ in walk(build_parser())]


def _rows(text):
    """The rows text takes in a terminal COLUMNS wide (a longer line wraps)."""
    return sum(max(1, math.ceil(len(line) / COLUMNS)) for line in text.splitlines())


def _options(p):
    return [a for a in p._actions if a.option_strings and a.help != argparse.SUPPRESS]


def test_every_help_fits_a_screen(parsers):
    assert len(parsers) > 40, len(parsers)
    too_long = {name: _rows(p.format_help()) for name, p in parsers if _rows(p.format_help()) >= 80}
    assert not too_long, too_long
    # (the commands with the most options: only their common ones, under headings)
    for name in ("engine run", "engine backtest", "engine sweep", "engine train", "engine shadow report"):
        p = dict(parsers)[name]
        assert p.common_groups() and len(_options(p)) > 15, name


def test_help_all_lists_every_option_and_help_says_so(parsers):
    for name, p in parsers:
        brief, full = p.format_help(), p.format_help(full=True)
        for a in _options(p):
            assert all(o in full for o in a.option_strings), (name, a.option_strings)
        hidden = [a.option_strings[0] for a in _options(p) if a.option_strings[0] not in brief]
        if hidden or p.sources:
            assert f"{name} --help-all" in brief, (name, hidden)
            assert "docs/reference/commands.md" in brief
        if p.common_groups():  # every common option, under its heading, before the rest
            for g in p.common_groups():
                assert f"\n{g.title}:\n" in brief, (name, g.title)
                assert all(a.option_strings[0] in brief for a in g._group_actions), (name, g.title)
            assert full.index(f"\n{p.common_groups()[0].title}:\n") < full.index("\nmore options:\n"), name


def test_engine_run_help_in_a_terminal():
    """The real command, as a newcomer types it: the common options grouped, one line each
    (--strategy, which names every shipped strategy, aside), and where the others are."""
    r = subprocess.run(engine_cmd("run", "--help"), cwd=ROOT, env=engine_env(COLUMNS=str(COLUMNS)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert _rows(r.stdout) < 80, r.stdout
    heads = [ln for ln in r.stdout.splitlines() if re.fullmatch(r"[a-z][a-z ,]*:", ln)]
    assert heads == ["what to run:", "where it runs:", "what it writes and serves:", "safety:"], heads
    for flag in ("--feed URI", "--duration", "--core", "--record", "--paper, --no-paper", "--kill-file"):
        assert flag in r.stdout, flag
    assert "--priority" not in r.stdout and "--risk-max-position" not in r.stdout
    options = [ln for ln in r.stdout.splitlines() if ln.startswith("  --")]
    assert all(len(ln) <= COLUMNS for ln in options), options
    assert "engine run --help-all" in r.stdout.split("safety:")[1]
    full = subprocess.run(engine_cmd("run", "--help-all"), cwd=ROOT, env=engine_env(COLUMNS=str(COLUMNS)),
                          capture_output=True, text=True, timeout=120)
    assert full.returncode == 0 and "--risk-max-position" in full.stdout and "--priority" in full.stdout


def test_the_commands_page_is_the_parsers():
    out = subprocess.run(engine_cmd("commands", "--markdown"), cwd=ROOT, env=engine_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    page = (ROOT / "docs/reference/commands.md").read_text()
    assert page == out.stdout, "docs/reference/commands.md is stale: engine commands --markdown > " \
                               "docs/reference/commands.md"
    for path, p, _ in walk(build_parser()):
        if len(path) > 1:
            assert f"\n{'#' * len(path)} {' '.join(path)}\n" in page, path
        for a in _options(p):
            if not isinstance(a, argparse._HelpAction):
                assert f"| `{a.option_strings[0]}" in page, (path, a.option_strings)


def test_the_commands_page_is_valid_markdown():
    """Rendered as the docs site renders it: every table row two cells, no tag the page did not
    mean (a raw <label> in a help text would be one), every option in a code span."""
    import markdown  # (the test extra has it: a page that does not render is a failure, not a skip)
    from app.cli.commands_cmd import commands_markdown
    html = markdown.markdown(commands_markdown(build_parser()), extensions=["tables", "attr_list", "toc"])
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", html))
    assert tags <= {"h1", "h2", "h3", "p", "strong", "code", "pre", "table", "thead", "tbody", "tr", "th", "td",
                    "a"}, tags
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    assert len(rows) > 300 and all(len(re.findall(r"<t[dh]>", r)) == 2 for r in rows)
    assert "<td><code>--core CORE</code></td>" in html
    # and what an escape guards against, rendered through the same path
    from app.cli.commands_cmd import text
    got = markdown.markdown(text("DIR/<label>/x_*_y | [[feed]] `a|b` {ticks,ctl}"), extensions=["tables"])
    assert got == "<p>DIR/&lt;label&gt;/x_*_y | [[feed]] <code>a|b</code> {ticks,ctl}</p>", got


def test_engine_commands_shows_one_and_refuses_an_unknown_one():
    one = subprocess.run(engine_cmd("commands", "backtest"), cwd=ROOT, env=engine_env(), capture_output=True,
                         text=True, timeout=120)
    assert one.returncode == 0 and "--queue-power" in one.stdout and "--isolate" not in one.stdout
    bad = subprocess.run(engine_cmd("commands", "bogus"), cwd=ROOT, env=engine_env(), capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1
    assert "'bogus'" in bad.stderr


def _next_steps():
    """The lines `make run` prints after the run, as make would run them."""
    r = subprocess.run(["make", "-n", "run", "CORE=0"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env=engine_env())
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.replace("\\\n", " ").splitlines() if ln.startswith("printf "))
    return shlex.split(line)[2:]


@pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")
def test_make_run_says_what_to_try_next_and_it_works(tmp_path, monkeypatch, default_model):
    lines = _next_steps()
    assert len(lines) == 3, lines
    commands = [c.strip() for ln in lines for c in re.findall(r"\.venv/bin/engine ([^,(]+?)(?=&&|,|\(|$| lists)", ln)]
    assert [c.split()[0] for c in commands] == ["convert", "backtest", "venue", "run", "run"], commands
    for path in re.findall(r"\b((?:tests|docs)/[\w./-]+\w)", " ".join(lines)):
        assert (ROOT / path).exists(), path
    for target in re.findall(r"\bmake (\w+)", " ".join(lines)):
        assert subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, timeout=60).returncode == 0
    monkeypatch.chdir(ROOT)
    for c in commands[2:]:  # (the venue and the run against it: as the parser reads them)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            build_parser().parse_args(shlex.split(c))
    # the backtest of the capture, run as printed (from a directory of its own, where tests/ is the repo's)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    for c in commands[:2]:
        r = subprocess.run(engine_cmd(*shlex.split(c)), cwd=tmp_path, env=engine_env(), capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, (c, r.stderr)
    assert (tmp_path / "bt" / "report.md").is_file()
