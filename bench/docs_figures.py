"""The figures the docs quote, checked against (or updated from) the results files that measured them.

Two ways a doc quotes them. The results of every results file, between `<!-- bench-table -->` and
`<!-- /bench-table -->` (made here, `table()`: each benchmark, what it measures, its ratios against
its peers, the machine and date; docs/benchmarks.md holds it). And a figure in the text, written with the results key that
holds it right after it:

    the first run took 59<!--fig first_run.metrics.run_10s_cold_s--> s

`first_run` is bench/results/first_run.json (what `python bench/first_run.py` writes), the rest the
path to the value in it. The figure is shown as written (its decimals, its thousands commas), so
`--check` formats the value the same way and compares; `--update` writes the values in. A doc
figure that no results file backs is a stale figure waiting to happen: give it a key, or leave it
out. tests/test_docs.py runs the check.

    python bench/docs_figures.py [--check | --update] [FILE.md ...]   (default: README.md, docs/**/*.md)
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FIG = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)<!--fig ([A-Za-z0-9_\-]+)((?:\.[A-Za-z0-9_\-]+)+)-->")


def docs():
    return [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))] if p.exists()]


def value(name, path, cache):
    """The value at `path` ('.a.b.0') in bench/results/NAME.json; KeyError naming what is missing."""
    if name not in cache:
        f = RESULTS / f"{name}.json"
        try:
            cache[name] = json.loads(f.read_text())
        except FileNotFoundError:
            raise KeyError(f"no results file {f.relative_to(ROOT)} (make bench writes it)") from None
    v = cache[name]
    for part in path.strip(".").split("."):
        try:
            v = v[int(part)] if isinstance(v, list) else v[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise KeyError(f"{name}{path}: no such value in bench/results/{name}.json") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise KeyError(f"{name}{path}: {v!r} is not a number")
    return v


def shown(written, v):
    """v as the doc writes `written`: the same decimals, thousands commas if it has them."""
    decimals = len(written.split(".")[1]) if "." in written else 0
    return format(v, f"{',' if ',' in written else ''}.{decimals}f")


TABLE = re.compile(r"(<!-- bench-table -->\n)(.*?)(<!-- /bench-table -->)", re.S)


def _what(script):
    """The first sentence of the benchmark's docstring (what it measures)."""
    import ast
    f = ROOT / script
    doc = ast.get_docstring(ast.parse(f.read_text())) if f.exists() else None
    first = " ".join((doc or "").split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".")


def _cell(x):
    return str(x).replace("|", "/")


def table():
    """The results of every results file, in markdown: a section per benchmark (what it measures, its
    script and file, the machine and date) with its ratios against the peers it measured in the same
    run (> 1: ours ahead)."""
    out = []
    for f in sorted(RESULTS.glob("*.json")):
        r = json.loads(f.read_text())
        m = r.get("machine", {})
        script = r.get("script") or f"bench/{f.stem}.py"
        out += [f"### {f.stem}", "", f"{_what(script)}.", "",
                f"`python {script}` writes `bench/results/{f.name}`; measured on {_cell(m.get('cpu_model', '?'))}, "
                f"{m.get('cores', '?')} cores, {str(m.get('date', '?'))[:10]}.", ""]
        ratios = [(k, v) for k, v in (r.get("ratios") or {}).items() if v is not None]
        if ratios:
            out += ["| ours against the peer of the same run | ratio (> 1: ours ahead) |", "|---|---|"]
            out += [f"| `{k}` | {v} |" for k, v in ratios]
        else:
            out.append("No peer: the figures are in the file.")
        out.append("")
    return "\n".join(out)


def figures(text):
    """(written, key, start, end of the written figure) of every marked figure."""
    return [(m.group(1), m.group(2) + m.group(3), m.start(1), m.end(1)) for m in FIG.finditer(text)]


def _name(p):
    try:
        return p.relative_to(ROOT)
    except ValueError:
        return p


def check(paths):
    """[problem] of every marked figure that its results file does not back, and of a results
    table that is not the one the results make."""
    cache, out = {}, []
    for p in paths:
        text = p.read_text()
        for m in TABLE.finditer(text):
            if m.group(2) != table():
                out.append(f"{_name(p)}:{text.count(chr(10), 0, m.start()) + 1}: the results table is not "
                           "bench/results' (python bench/docs_figures.py --update)")
        for written, key, start, _ in figures(text):
            line = text.count("\n", 0, start) + 1
            name, _, path = key.partition(".")
            try:
                want = shown(written, value(name, "." + path, cache))
            except KeyError as e:
                out.append(f"{_name(p)}:{line}: {e.args[0]}")
                continue
            if want != written:
                out.append(f"{_name(p)}:{line}: {written} but {key} is {want}")
    return out


def update(paths):
    """Write every marked figure from its results file; returns how many changed."""
    cache, changed = {}, 0
    for p in paths:
        text = p.read_text()
        out, last = [], 0
        for written, key, start, end in figures(text):
            name, _, path = key.partition(".")
            new = shown(written, value(name, "." + path, cache))
            out += [text[last:start], new]
            last = end
            changed += new != written
        out.append(text[last:])
        new_text = TABLE.sub(lambda m: m.group(1) + table() + m.group(3), "".join(out))
        if new_text != text:
            p.write_text(new_text)
    return changed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true", help="say what the results do not back (the default)")
    ap.add_argument("--update", action="store_true", help="write the results' values into the docs")
    a = ap.parse_args()
    paths = a.files or docs()
    if a.update:
        try:
            n = update(paths)
        except KeyError as e:
            raise SystemExit(f"docs_figures: {e.args[0]}") from None
        print(f"{n} figure(s) updated")
        return 0
    bad = check(paths)
    for b in bad:
        print(b)
    print(f"{sum(len(figures(p.read_text())) for p in paths)} figures checked, {len(bad)} not backed by bench/results")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
