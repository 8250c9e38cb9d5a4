"""`engine features`: a strategy's feature rows as a table, the data set a quant explores before
training (the same rows `engine train` builds its data set from, before labels)."""
import sys
import time

import numpy as np

from . import dataset
from .training import input_streams

FORMATS = (".parquet", ".csv")


def _say(msg):
    print(f"[features] {msg}", file=sys.stderr, flush=True)


def feature_table(host, words, names, X, inst, idx, source=None):
    """One row per scored tick: seq, ts_event, ts_recv, instrument, symbol, [source], features."""
    import pyarrow as pa
    from engine.records import symbol_column
    seq = idx.astype(np.uint64)  # the tick's number in its stream: a tick file's record number
    cols = {"seq": seq, "ts_event": words[idx, 1], "ts_recv": words[idx, 2], "instrument": inst.astype(np.uint16),
            "symbol": symbol_column(names, inst)}
    if source is not None:
        cols["source"] = np.full(len(idx), source, np.uint16)
    for k, f in enumerate(host.strategy.features):
        cols[f] = X[:, k]
    return pa.table(cols)


def write_features(host, sources, out, ticks=400_000, progress=True, merge=False):
    import pyarrow as pa
    say = _say if progress else (lambda m: None)
    if not out.endswith(FORMATS):
        raise ValueError(f"{out}: unknown output format (by extension: {', '.join(FORMATS)})")
    from engine.outputs import check_writable
    check_writable(out, "the feature table")  # before any work
    t0 = time.monotonic()
    tables, total, symbols = [], 0, []
    streams = input_streams(sources, ticks, host.strategy, merge)
    for k, (uri, words, n_inst, levels, names, specs) in enumerate(streams):
        symbols.append(names)
        X, inst, _, idx = dataset.featurize(host, words, n_inst, levels, names, specs, uri)
        tables.append(feature_table(host, words, names, X, inst, idx, k if len(sources) > 1 and not merge else None))
        total += len(words)
        say(f"{k + 1}/{1 if merge else len(sources)} {uri}: {len(words):,} ticks -> {len(X):,} rows")
    t = pa.concat_tables(tables)
    from engine.records import table_metadata
    meta = table_metadata(symbols, **{"engine.strategy": host.strategy.describe(),
                                             "engine.sources": " ".join(sources),
                                             "engine.params": repr(host.strategy.values)})
    from engine.outputs import atomic_file
    with atomic_file(out, "the feature table") as tmp:  # whole or not at all; an error names `out`
        if out.endswith(".parquet"):
            import pyarrow.parquet as pq
            pq.write_table(t.replace_schema_metadata(meta), tmp, compression="zstd")
        else:
            import pyarrow.csv as pcsv
            pcsv.write_csv(t, tmp)
    return {"out": out, "rows": t.num_rows, "features": len(host.strategy.features), "ticks": total,
            "sources": len(sources), "strategy": host.strategy.describe(), "seconds": round(time.monotonic() - t0, 2)}
