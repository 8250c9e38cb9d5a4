"""What the docs say is what the engine does: every flag an `engine ...` command line in README.md,
the site's pages (docs/), ops/*.md, a docstring or a help text names exists on that command
(checked against the real argparse parser, built once); the help lists what is shipped from the
owner of each list; the pandas examples of the backtests guide run as printed on outputs the engine
writes here; the generated reference pages are their declarations'; README stays short and the
docs hold no development history."""
import argparse
import ast
import re
import shlex
import subprocess
import sys

import pytest

from app.cli import build_parser

from tests.conftest import ROOT, engine_cmd, engine_env

# the site's pages (every docs/**/*.md: guides, the generated reference, ARCHITECTURE) and the rest
MARKDOWN = ("README.md", "ops/README.md", "ops/tuning.md",
            *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")))
# the page whose ```python blocks read the engine's Parquet outputs
TABLES_GUIDE = "docs/guides/backtests.md"
PACKAGES = ("engine", "feeds", "models", "replay", "fpga", "strategies", "bench")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _children(p):
    """{name: parser} of p's subcommands."""
    return next((a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})


def _options(p):
    return {o for a in p._actions for o in a.option_strings}


def _positional_choices(p):
    return {str(c) for a in p._actions if not a.option_strings and a.choices
            and not isinstance(a, argparse._SubParsersAction) for c in a.choices}


def _walk(p, path=("engine",)):
    yield path, p
    for name, q in _children(p).items():
        yield from _walk(q, path + (name,))


def _commands(text, parser):
    """(command path, flags) for each `engine CMD ...` in text: where the command ends is where
    a plain word follows something that is not a flag (prose: `engine doctor for the core`)."""
    top = _children(parser)
    for m in re.finditer(r"\bengine ([a-z][\w-]*(?:/[a-z][\w-]*)*)(?=([^\n`]*))", text):
        names, rest = m.group(1).split("/"), m.group(2)
        if any(n not in top for n in names):
            continue  # prose: "the engine runs", "engine is"
        for name in names:
            p, path, flags, prev_flag = top[name], ["engine", name], [], False
            for t in rest.split():
                word = t.strip("[](){}|,;:.'\"")
                if word in _children(p):
                    p = _children(p)[word]
                    path.append(word)
                elif FLAG.search(word):  # --flag, --flag=V, X|--max
                    flags += FLAG.findall(re.sub(r"=\S*", "", word))
                    prev_flag = word.startswith("-")
                elif re.fullmatch(r"[a-z]+", word) and not prev_flag and word not in _positional_choices(p):
                    break
                else:
                    prev_flag = False
                if re.search(r"[,;)]$", t) or t == "#":
                    break
            yield names, " ".join(path), p, flags


def _docs():
    """(where, text, standalone) of every doc: README and ops/*.md, every docstring of the packages;
    standalone: a backticked `--flag` alone must be some command's (not in bench/: scripts' own)."""
    for name in MARKDOWN:
        # (the results table is made from bench/ scripts' own docstrings, read below as theirs)
        text = re.sub(r"<!-- bench-table -->.*?<!-- /bench-table -->", " ", (ROOT / name).read_text(), flags=re.S)
        # a code block's continuation lines ("    engine backtest ...\n        [--orders maker ...]")
        yield name, re.sub(r"\n {5,}(?=\[|--)", " ", text), True
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if "results" in f.relative_to(ROOT).parts:
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=False)
                    if doc:
                        yield f"{f.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", doc, pkg != "bench"


def _spans(text):
    """Backticked spans (joined across line breaks), and the text without them (fenced code blocks
    are text: their lines are read as lines)."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    text = re.sub(r"```[a-z]*\n.*?```", " ", text, flags=re.S)
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", text)]
    return spans, re.sub(r"`[^`]*`", " ", text) + "\n" + "\n".join(fenced)


def _problems():
    parser = build_parser()
    every = set().union(*(_options(p) for _, p in _walk(parser)))
    out, seen = [], 0

    def check(where, text):
        nonlocal seen
        for names, path, p, flags in _commands(text, parser):
            seen += 1
            known = set().union(*(_options(q) for n, q in _children(parser).items() if n in names)) \
                if len(names) > 1 else _options(p)
            out.extend(f"{where}: `{path}` has no {f}" for f in flags if f not in known)

    for where, text, standalone in _docs():
        spans, prose = _spans(text)
        for s in spans:
            check(where, s)
            if standalone and s.startswith("--"):
                out.extend(f"{where}: no engine command has {f} (`{s}`)" for f in FLAG.findall(s)[:1]
                           if f not in every)
        check(where, prose)
    # the parsers' own texts: a command named there, and a bare --flag in a command's help is its own
    for path, p in _walk(parser):
        texts = [p.description or ""] + [a.help for a in p._actions if a.help and a.help != argparse.SUPPRESS]
        for t in texts:
            spans, prose = _spans(t)
            for s in spans + [prose]:
                check(f"`{' '.join(path)} --help`", s)
            bare = re.sub(r"\bengine [a-z][^`;)]*", " ", prose)  # other commands' lines, checked above
            out.extend(f"`{' '.join(path)} --help` names {f}, which it does not have"
                       for f in FLAG.findall(bare) if f not in _options(p) and len(path) > 1)
    return out, seen


def test_every_flag_the_docs_name_exists():
    problems, seen = _problems()
    assert seen > 100, seen  # the scan finds the command lines (the guides alone have dozens)
    assert not problems, "\n".join(problems)


def test_the_scan_finds_a_wrong_flag():
    """The checker itself: a wrong flag in each kind of place is found, a right one is not."""
    parser = build_parser()
    got = {(path, tuple(flags)) for _, path, _, flags in _commands(
        "    engine backtest day.ticks --taker-bps 1 [--workers 4]   # taker fee\n"
        "the engine runs; `engine model keygen --out DIR [--hmac]`; engine doctor for the core with --strict\n"
        "engine ctl status --json, then --not-this\n`engine feed SOURCE --ring N [--speed X|--maxx]`", parser)}
    assert got == {("engine backtest", ("--taker-bps", "--workers")), ("engine model keygen", ("--out", "--hmac")),
                   ("engine doctor", ()), ("engine ctl", ("--json",)), ("engine feed", ("--ring", "--speed", "--maxx"))}, got


def test_help_lists_what_is_shipped_from_its_owner():
    """--strategy's help names every strategy in strategies/ (engine.strategy_load), convert's
    --out every format feeds/convert.py writes."""
    from engine.strategy_load import DEFAULT_STRATEGY, builtin_names
    from feeds.convert import FORMATS
    assert {"microstructure", "depth_imbalance", "touch_imbalance"} <= set(builtin_names())
    helps = {}
    for cmd in ("run", "backtest", "train", "features", "sweep", "compile", "convert"):
        r = subprocess.run(engine_cmd(cmd, "--help"), cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        helps[cmd] = " ".join(r.stdout.split())
    for cmd, text in helps.items():
        if cmd == "convert":
            out = text.split("--out OUT", 2)[-1]
            assert all(f in out for f in FORMATS), out
            assert ".ticks" in out
        else:
            assert f"{', '.join(builtin_names())}: strategies/" in text, text
            assert f"default {DEFAULT_STRATEGY}" in text


@pytest.fixture(scope="module")
def pandas():
    return pytest.importorskip("pandas", reason="pandas is not installed: pip install -e '.[research]' (make test "
                                                "installs it) to run the backtests guide's Parquet examples")


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_parquet_examples_run_as_printed(pandas, tmp_path, default_model):
    """Each ```python block of the backtests guide that reads Parquet runs, as printed, in a
    directory where the commands its comments name (`# engine ...`) wrote their outputs."""
    blocks = [b for b in _python_blocks((ROOT / TABLES_GUIDE).read_text()) if "read_parquet" in b]
    assert blocks, f"{TABLES_GUIDE} has no pandas example"
    source = "synthetic://?instruments=2&count=30000&seed=5"

    def engine(*args):
        r = subprocess.run(engine_cmd(*args), cwd=tmp_path, env=engine_env(), capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, (args, r.stderr[-2000:])

    engine("convert", source, "--out", "day.ticks", "--quiet")  # the tick file the comments' backtests read
    for block in blocks:
        cmds = re.findall(r"#\s*(engine [^\n]*)", block)
        assert cmds, block
        for c in cmds:  # as printed, with a source for SOURCE
            engine(*[source if t == "SOURCE" else t for t in shlex.split(c)[1:]])
        for path in re.findall(r"read_parquet\(\"([^\"]+)\"\)", block):
            assert (tmp_path / path).is_file(), f"{TABLES_GUIDE} reads {path}, which no command in its comments writes"
        r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=engine_env(), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"{TABLES_GUIDE}'s example fails:\n{block}\n{r.stderr}"
        assert "SYN0000" in r.stdout and "SYN0001" in r.stdout, r.stdout  # the tables' symbols, per instrument


def test_every_documented_figure_is_its_results_files():
    """A measured figure in the docs is its benchmark's results file's (bench/docs_figures.py): each
    one marked with its key equals the committed bench/results value as written, and the results
    table is made from the files; a figure changed by hand, or a results file rerun without
    `--update`, fails here."""
    sys.path.insert(0, str(ROOT / "bench"))
    import docs_figures
    paths = docs_figures.docs()
    assert docs_figures.check(paths) == []
    marked = sum(len(docs_figures.figures(p.read_text())) for p in paths)
    assert marked >= 20 and any(docs_figures.TABLE.search(p.read_text()) for p in paths)


def test_a_figure_that_is_not_its_results_fails(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import docs_figures
    doc = tmp_path / "x.md"
    doc.write_text("it made 123456789<!--fig lead_lag.metrics.trees--> trees\n")
    assert docs_figures.check([doc]) and "but" in docs_figures.check([doc])[0]
    doc.write_text("<!-- bench-table -->\n| stale |\n<!-- /bench-table -->\n")
    assert "results table" in docs_figures.check([doc])[0]


README_LIMIT = 12 * 1024  # what a newcomer reads first: everything else is on the site (docs/)
# development history has no place in user docs: "stop 12", "this session", "before this change"
HISTORY = re.compile(r"\bstops? \d+\b|\b(?:this|previous|last|earlier) sessions?\b|"
                     r"\b(?:before|after|since) (?:this|that) (?:change|commit|session)\b|\bthis (?:commit|stop)\b", re.I)


def _user_docs():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_readme_is_short():
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes: keep it under {README_LIMIT} (move the detail to docs/)"


def test_docs_hold_no_development_history():
    found = [f"{p.relative_to(ROOT)}:{p.read_text().count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
             for p in _user_docs() for m in HISTORY.finditer(p.read_text())]
    assert not found, "development history in user docs:\n" + "\n".join(found)
    # the pattern itself finds what it is for, and leaves a venue's session alone
    assert HISTORY.search("as of stop 12 the loop") and HISTORY.search("(before this change: 3 us)")
    assert HISTORY.search("measured in this session") and HISTORY.search("the previous sessions' EPYC")
    assert not HISTORY.search("the end of its session; CME Globex sessions; a MoldUDP64 session")


def _reference():
    sys.path.insert(0, str(ROOT / "docs" / "gen"))
    import reference
    return reference


def test_the_generated_reference_pages_are_their_declarations():
    """docs/reference/{config,metrics,records}.md are what docs/gen/reference.py makes from
    app/run_options.py, app/metrics.py and engine/records.py (regenerate: python docs/gen/reference.py)."""
    ref = _reference()
    assert ref.stale() == [], f"stale: {ref.stale()}: python docs/gen/reference.py"
    from app.metrics import DECLARED
    from app.run_options import keys
    from engine.records import SIGNAL_DTYPE, TICK_DTYPE
    config, metrics, records = ((ROOT / "docs/reference" / n).read_text() for n in ("config.md", "metrics.md", "records.md"))
    assert all(f"| `{k.rpartition('.')[2]}` |" in config for k in keys())
    assert all(f"| `{m.exported}` |" in metrics for m in DECLARED)
    assert all(f"| `{n}` |" in records for n in (*TICK_DTYPE.names, *SIGNAL_DTYPE.names))


def test_a_stale_reference_page_is_found(tmp_path, monkeypatch):
    ref = _reference()
    for name, make in ref.PAGES.items():
        (tmp_path / name).write_text(make())
    monkeypatch.setattr(ref, "REF", tmp_path)
    assert ref.stale() == []
    page = tmp_path / "metrics.md"
    page.write_text(page.read_text().replace("engine_ticks_total", "engine_tick_total"))
    assert ref.stale() == ["metrics.md"]
