"""`engine sources [SCHEME]`: what every source URI takes, printed from the source declarations
(feeds/core/params.py), the same text as docs/reference/sources.md."""
import re
import sys

from .common import Flag, command

HEADER = ("# Sources\n\nEvery source the engine reads is a URI: `scheme:TARGET?name=value&...` (a file) or "
          "`scheme://TARGET?...` (a place). A plain path of an engine tick file is `tickfile:PATH`. An unknown "
          "parameter or a value its rule refuses is one line naming the URI and the parameter. This page is "
          "generated from the declarations (`engine sources --markdown`).\n")


def reference(schemes=None):
    """The reference text of the given schemes (all when None), markdown."""
    from feeds.core.sources import declaration, kinds
    chosen = kinds() if not schemes else [declaration(s) for s in schemes]
    return HEADER + "\n" + "\n".join(k.reference() for k in chosen)


def cmd_sources(args):
    from feeds.core.sources import SCHEMES
    for s in args.scheme:
        if s not in SCHEMES:
            print(f"engine sources: unknown scheme {s!r} (known: {', '.join(SCHEMES)})", file=sys.stderr)
            sys.exit(2)
    text = reference(args.scheme)
    sys.stdout.write(text if args.markdown else _plain(text))


def _plain(md):
    """The markdown, readable in a terminal: tables as aligned columns, no backticks."""
    out, rows = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            if not set(line) <= set("|-"):
                cells = re.split(r"(?<!\\)\|", line.strip("|"))
                rows.append([c.strip().replace("`", "").replace("\\|", "|") for c in cells])
            continue
        if rows:
            w = [max(len(r[i]) for r in rows) for i in range(3)]
            out += ["  " + "  ".join(r[i].ljust(w[i]) for i in range(3)) + "  " + r[3] for r in rows]
            rows = []
        out.append(line.replace("`", "").lstrip("# "))
    return "\n".join(out).rstrip() + "\n"


def add_parsers(sub):
    p = command(sub, "sources", cmd_sources, help="what each source URI takes: every parameter, its values, default "
                "and meaning", description="Prints the source reference from the source declarations.")
    p.add_argument("scheme", nargs="*", help="the schemes to show (default: all)")
    p.add_argument("--markdown", action=Flag, help="as markdown (docs/reference/sources.md is this)")
