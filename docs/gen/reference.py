"""The reference pages made from the code's declarations, so they cannot drift from it:

    docs/reference/config.md    every key of `engine run --config FILE` (app/run_options.py)
    docs/reference/metrics.md   every Prometheus metric and its labels (app/metrics.py)
    docs/reference/records.md   the tick and signal records, instrument records, tick files
                                (engine/records.py, engine/instruments.py, engine/tickfile.py)

    python docs/gen/reference.py [--check]     (writes them; --check: exit 1 naming a stale page)

tests/test_docs.py fails when a committed page is not what this makes. (docs/reference/sources.md is
`engine sources --markdown`; docs/reference/commands.md is made from the command line's parser.)"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
REF = ROOT / "docs" / "reference"
MADE = "This page is generated from {src} (`python docs/gen/reference.py`): edit the declarations, not the page."


def _cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def _paragraphs(doc):
    return [" ".join(p.split()) for p in (doc or "").split("\n\n") if p.strip()]


# --- config keys ---

def _run_help():
    """{dest: help} of `engine run`'s argparse options, as --help prints them (the declarations leave
    some to the command line: --strategy, --crossed-after are added by shared functions)."""
    from app.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    fmt = run._get_formatter()
    return {a.dest: fmt._expand_help(a) for a in run._actions if a.help and a.help != argparse.SUPPRESS}


def _default(v):
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"' if v else '""'
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def config_page():
    from dataclasses import MISSING, fields

    from app import config, run_options
    from engine.waits import WAIT_HELP
    helps = _run_help()
    by_name = {f.name: f for f in fields(run_options.RunConfig)}
    types = {int: "integer", float: "number", str: "string", bool: "true/false"}
    rows = {}
    for name, o in run_options.opts():
        if not o.key:
            continue
        f = by_name[name]
        default = f.default if f.default is not MISSING else f.default_factory()
        dest = o.dest or name
        text = o.help or helps.get(dest, "")
        text = text.replace("%(wait_help)s", WAIT_HELP)
        text = re.sub(r"%\(default\)[sg]", str(_default(default)).strip('"'), text)
        flag = o.flag or next((fl for fl in (f"--{dest.replace('_', '-')}",) if dest in helps), "")
        kind = ("list of strings or a string" if o.many else types.get(o.kind or str, "string"))
        if o.choices is not None:
            ch = o.choices() if callable(o.choices) else o.choices
            kind = " \\| ".join(f"`{c}`" for c in ch)
        rows[o.key] = (flag, kind, _default(default), text)
    for key, (dest, typ) in run_options.EXTRA_KEYS.items():
        flag = f"--{dest.replace('_', '-')}"
        rows[key] = (flag if dest in helps else "", types[typ], "none" if typ is str else "false",
                     helps.get(dest, ""))
    out = ["# Configuration keys", "", MADE.format(src="`app/run_options.py`"), ""]
    out += [p + "\n" for p in _paragraphs(config.__doc__)]
    out += ["Besides these keys, `[strategy.params]` maps the strategy's PARAMS names to numbers (as "
            "`--param NAME=VALUE`) and `[strategy.universe]` binds a UNIVERSE's roles to instruments (as "
            "`--universe ROLE=INSTRUMENT`).", ""]
    sections = {}
    for key in sorted(rows, key=lambda k: (k.count("."), k.partition(".")[0] if "." in k else "", k)):
        sect = key.rpartition(".")[0]
        sections.setdefault(sect, []).append(key)
    for sect, keys in sections.items():
        out += [f"## `[{sect}]`" if sect else "## Top level", "",
                "| key | flag | value | default | meaning |", "|---|---|---|---|---|"]
        for key in keys:
            flag, kind, default, text = rows[key]
            out.append(f"| `{key.rpartition('.')[2]}` | {f'`{flag}`' if flag else ''} | {_cell(kind)} | "
                       f"`{_cell(default)}` | {_cell(text)} |")
        out.append("")
    return "\n".join(out)


# --- metrics ---

def metrics_page():
    from app import metrics
    out = ["# Metrics and labels", "",
           "What `engine run` exports to Prometheus (`--http`, default `127.0.0.1:9464`). `/metrics` answers any "
           "local process; `/metrics/private` answers the engine's owner and a scraper given "
           "`--metrics-token-file`'s token (money, positions, the kill switch). Counters are shown with "
           "`_total`. " + MADE.format(src="`app/metrics.py`"), "",
           "| metric | type | labels | on | exported by | meaning |", "|---|---|---|---|---|---|"]
    for m in metrics.DECLARED:
        labels = ", ".join(f"`{x}`" for x in m.labels)
        on = "/metrics/private" if m.private else "/metrics"
        out.append(f"| `{m.exported}` | {m.kind} | {labels} | {on} | {_cell(m.only or 'every run')} | "
                   f"{_cell(m.help)} |")
    out += ["", "## The feed's own counters", ""]
    out += [p + "\n" for p in _paragraphs(metrics.__doc__.split("\n\n", 1)[1])]
    out += ["The feed counters each source has are listed with the source "
            "([sources](sources.md)); these are the ones alerts and people read most:", "",
            "| metric | meaning |", "|---|---|"]
    for name, text in metrics.FEED_HELP.items():
        out.append(f"| `{name}_total` | {_cell(text)} |" if not name.endswith(("_instruments", "_offset_us"))
                   else f"| `{name}` | {_cell(text)} |")
    out.append("")
    return "\n".join(out)


# --- records ---

def _md(doc):
    """A docstring's text as markdown: paragraphs as they are, a numbered list set apart."""
    import textwrap
    out, in_list = [], False
    for line in textwrap.dedent(doc).strip("\n").splitlines():
        item = re.match(r"\s*\d+\. ", line)
        if item and not in_list or (in_list and not item and not line.startswith(" ")):
            out.append("")
        in_list = bool(item) or (in_list and line.startswith(" "))
        out.append(line.strip() if not in_list or item else "   " + line.strip())
    return "\n".join(out)


def _field_comments(path, var):
    """{field: comment} of the np.dtype([...]) list assigned to `var` in `path`: a field's trailing
    comment and the comment lines that continue it."""
    src = path.read_text()
    start = src.index(f"{var} = np.dtype([")
    out, last = {}, None
    for line in src[start:src.index("])", start)].splitlines()[1:]:
        m = re.match(r'\s*\("(\w+)",[^#]*(?:#\s*(.*))?$', line)
        if m:
            last = m.group(1)
            out[last] = m.group(2) or ""
        elif line.strip().startswith("#") and last is not None:
            out[last] += " " + line.strip().lstrip("# ")
    return out


def _dtype_table(dtype, comments):
    rows = ["| offset | field | type | bytes | meaning |", "|---|---|---|---|---|"]
    for name in dtype.names:
        sub, off = dtype.fields[name][:2]
        kind = sub.base.name + (f"[{sub.shape[0]}]" if sub.shape else "")
        rows.append(f"| {off} | `{name}` | {kind} | {sub.itemsize} | {_cell(comments.get(name, ''))} |")
    return rows


def _constants(module, prefix):
    """(name, value, comment) of module-level NAME = value lines starting with prefix, in source order."""
    src = Path(module.__file__).read_text().splitlines()
    out = []
    for line in src:
        m = re.match(rf"({prefix}[A-Z_]*)\s*=\s*([^#]+?)\s*(?:#\s*(.*))?$", line)
        if m and m.group(1) in vars(module) and isinstance(vars(module)[m.group(1)], int):
            out.append((m.group(1), vars(module)[m.group(1)], m.group(3) or ""))
    return out


def records_page():
    from engine import instruments, records, tickfile
    rec = ROOT / "engine" / "records.py"
    out = ["# Record layouts", "",
           "Little-endian, as `engine/records.py` declares them. " + MADE.format(src="`engine/records.py`, `engine/instruments.py` and `engine/tickfile.py`"), ""]
    out += [p + "\n" for p in _paragraphs(records.__doc__.split("\n\n", 1)[0])]
    out += [f"## Tick ({records.TICK_DTYPE.itemsize} bytes)", "",
            f"Prices are int64 fixed point: `PRICE_SCALE` = {records.PRICE_SCALE:,} is 1.0.", ""]
    out += _dtype_table(records.TICK_DTYPE, _field_comments(rec, "TICK_DTYPE"))
    out += ["", "### Kinds", "", "| kind | value | meaning |", "|---|---|---|"]
    kinds = {n: c for n, _, c in _constants(records, "KIND_")}
    src = rec.read_text()
    for n, v, c in _constants(records, "KIND_"):
        more = re.findall(rf"^{n} = .*\n((?:\s+#.*\n)*)", src, re.M)
        extra = " ".join(x.strip().lstrip("# ") for x in (more[0].splitlines() if more else []))
        out.append(f"| `{n}` | {v} | {_cell((kinds[n] + ' ' + extra).strip())} |")
    out += ["", "Sides: " + ", ".join(f"`{n}` = {v}" for n, v, _ in _constants(records, "SIDE_")) +
            " (a trade's aggressor; a level tick's book side: buy = bid, sell = ask).", ""]
    out += ["### The depth window", "", _md(records.__doc__.split("\n\n", 1)[1]), ""]
    out += ["", f"## Signal ({records.SIGNAL_DTYPE.itemsize} bytes)", "",
            "A signal is a change of the strategy's target position for one instrument; the signal file, the "
            "signal ring and the zmq message carry this record.", ""]
    out += _dtype_table(records.SIGNAL_DTYPE, _field_comments(rec, "SIGNAL_DTYPE"))
    out += ["", "### Flags", "", "| flag | value |", "|---|---|"]
    for n in [k for k in vars(records) if k.startswith("SIGNAL_FLAG")]:
        out.append(f"| `{n}` | {vars(records)[n]} |")
    out += ["", f"Bits from `SIGNAL_RULES_SHIFT` = {records.SIGNAL_RULES_SHIFT} up hold the mask of the risk "
            "rules that cut a signal.", ""]
    blocks = re.findall(r"^((?:# .*\n)+)(?=SIGNAL_FLAG)", src, re.M)
    out += [" ".join(x.lstrip("# ").strip() for x in b.splitlines()) + "\n" for b in blocks]
    idoc = instruments.__doc__.split("\n\n")
    out += ["## Instrument records", ""] + [p + "\n" for p in _paragraphs("\n\n".join(idoc[:2]))]
    out += ["| field | meaning |", "|---|---|"]
    fields_text = "\n".join(idoc[2:])
    for name in (*instruments.FIELDS, *instruments.OPTIONAL):
        m = re.search(rf"^\s+{name}\s+(.*(?:\n\s{{16,}}.*)*)", fields_text, re.M)
        out.append(f"| `{name}` | {_cell(m.group(1) if m else '')} |")
    tdoc = tickfile.__doc__
    layout = tdoc.split("Layout (little-endian):", 1)[1].split("\n\n", 2)
    out += ["", "## Tick files", "", _paragraphs(tdoc)[0], "", "Layout (little-endian):", "",
            "```", layout[1].strip("\n"), "```", ""]
    out += [p + "\n" for p in _paragraphs(layout[2]) if p]
    return "\n".join(out).rstrip() + "\n"


PAGES = {"config.md": config_page, "metrics.md": metrics_page, "records.md": records_page}


def stale():
    """Names of the pages whose committed text is not what the declarations make."""
    return [name for name, make in PAGES.items()
            if not (REF / name).exists() or (REF / name).read_text() != make()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="say which pages are stale, write nothing")
    a = ap.parse_args()
    if a.check:
        bad = stale()
        for name in bad:
            print(f"docs/reference/{name} is stale: python docs/gen/reference.py")
        return 1 if bad else 0
    REF.mkdir(parents=True, exist_ok=True)
    for name, make in PAGES.items():
        (REF / name).write_text(make())
    return 0


if __name__ == "__main__":
    sys.exit(main())
