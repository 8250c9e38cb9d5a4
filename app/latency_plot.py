"""`engine latency-plot FILE.hlog --out FILE.png`: each stage's percentile distribution over the
whole log (its intervals added up), on the usual log scale of 1 / (1 - percentile)."""
import numpy as np

from engine import hlog, latency

PCTS = np.array([50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999])


def plot(path, out, stages=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    try:
        intervals = hlog.read(path)
    except (OSError, ValueError, IndexError) as e:
        raise ValueError(f"{path}: not a readable HdrHistogram log: {e}") from None
    if not intervals:
        raise ValueError(f"{path}: no intervals in this log")
    totals = {}
    for tag, _, _, h in intervals:
        if stages and tag not in stages:
            continue
        if tag not in totals:
            totals[tag] = latency.to_hdrh(np.zeros(latency.COUNTS_LEN, np.int64))
        totals[tag].add(h)
    if stages and not totals:
        raise ValueError(f"{path}: no stage named {', '.join(stages)} (it has {', '.join(sorted({t for t, *_ in intervals}))})")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = 1 / (1 - PCTS / 100)
    for tag, h in totals.items():
        if h.get_total_count():
            ax.plot(x, [max(1, h.get_value_at_percentile(p)) for p in PCTS], marker="o", ms=3,
                    label=f"{tag} ({h.get_total_count():,})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{p:g}" for p in PCTS], rotation=45)
    ax.set_xlabel("percentile")
    ax.set_ylabel("ns")
    ax.set_title(f"latency by percentile, {len(intervals) // max(1, len(set(t for t, *_ in intervals)))} intervals")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out
