"""A benchmark before and after a change, in one run: `python bench/ab.py REV BENCH [-- ARGS]`
runs bench/BENCH.py from a checkout of REV (before) and from this tree as it is (after, uncommitted
edits included), alternately, `--rounds` times each, and prints every figure both wrote with the
ratio after / before (the median of the rounds). The figures are the bench's own (what each
measures is said in its docstring); the ratio only says whether a change moved them.

Writes bench/results/ab_BENCH.json. Nothing of REV's checkout is kept."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _common

ROOT = _common.ROOT


def _extra(p):
    p.add_argument("rev", help="the revision before the change (a commit, a branch, HEAD)")
    p.add_argument("bench", help="the benchmark, by name (ring, tick_to_signal, feed_parsers, ...)")
    p.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating (default 2)")
    p.add_argument("args", nargs="*", help="the bench's own arguments (after --)")


def numbers(d, prefix=""):
    """{dotted key: number} of a results file's metrics."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(numbers(v, key + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = v
    return out


def run(tree, bench, args):
    """The metrics one run of bench/BENCH.py in `tree` wrote."""
    script = tree / "bench" / f"{bench}.py"
    subprocess.run([sys.executable, str(script), *args], cwd=tree, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(tree)})
    found = sorted((tree / "bench" / "results").glob("*.json"), key=lambda p: p.stat().st_mtime)[-1]
    return numbers(json.loads(found.read_text())["metrics"])


def main():
    a = _common.args(__doc__, _extra)
    if not (ROOT / "bench" / f"{a.bench}.py").is_file():
        sys.exit(f"bench/ab.py: no benchmark bench/{a.bench}.py")
    args = [*a.args, *(["--quick"] if a.quick else [])]
    with tempfile.TemporaryDirectory(prefix="ab-") as tmp:
        before = Path(tmp) / "before"
        try:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(before), a.rev],
                           check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            sys.exit(f"bench/ab.py: {a.rev}: {e.stderr.strip().splitlines()[-1]}")
        try:
            runs = {"before": [], "after": []}
            for k in range(a.rounds):
                for side, tree in (("before", before), ("after", ROOT)):
                    print(f"round {k + 1}/{a.rounds}: {side}", flush=True)
                    runs[side].append(run(tree, a.bench, args))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False)
    keys = [k for k in runs["after"][0] if k in runs["before"][0]]
    metrics, rows = {}, []
    for k in keys:
        b = statistics.median(r[k] for r in runs["before"] if k in r)
        f = statistics.median(r[k] for r in runs["after"] if k in r)
        metrics[k] = {"before": b, "after": f, "after_over_before": round(f / b, 3) if b else None}
        rows.append((k, metrics[k]))
    _common.table(f"{a.bench}: {a.rev} (before) vs this tree (after), median of {a.rounds} runs each",
                  ["before", "after", "after_over_before"], rows)
    _common.save(f"ab_{a.bench}", metrics, {}, {}, notes=f"before: {a.rev}; after: the working tree; "
                 f"args: {' '.join(args) or 'none'}; rounds: {a.rounds}")


if __name__ == "__main__":
    main()
