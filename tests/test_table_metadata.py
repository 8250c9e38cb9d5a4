"""Every table the engine writes names its instruments: a `symbol` column, and schema metadata
with the instrument table and the price scale (engine/records.py table_metadata)."""
import json

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from engine.records import PRICE_SCALE, TICK_DTYPE, table_metadata
from feeds.convert import _Tabular

from tests.helpers.feedutil import cli

SYN = "synthetic://?count=3000&instruments=3&seed=5"
NAMES = ["SYN0000", "SYN0001", "SYN0002"]


def _meta(t):
    m = t.schema.metadata
    return int(m[b"engine.price_scale"]), json.loads(m[b"engine.symbols"])


def test_convert_writes_a_symbol_column_and_the_instrument_table(tmp_path):
    for ext in ("parquet", "csv"):
        out = tmp_path / f"t.{ext}"
        r = cli("convert", SYN, "--out", str(out))
        assert r.returncode == 0, r.stderr
        t = pq.read_table(out) if ext == "parquet" else pcsv.read_csv(out)
        inst = t.column("instrument").to_numpy()
        assert len(set(inst)) == 3
        assert t.column("symbol").to_pylist() == [NAMES[i] for i in inst]
        if ext == "parquet":
            assert _meta(t) == (PRICE_SCALE, NAMES)
            assert t.schema.metadata[b"engine.source"].startswith(b"synthetic://")


class _Growing:
    """A source that finds its second instrument after the first batch (as a live ITCH or DBN
    feed does): the file's metadata must still name both."""
    uri = "test://growing"

    def __init__(self):
        self.instruments = ["AAA"]


def _batch(inst, n):
    a = np.zeros(n, TICK_DTYPE)
    a["instrument"], a["kind"], a["price"] = inst, 2, 100 * PRICE_SCALE
    return a.view(np.int64).reshape(n, 8)


def test_instruments_found_after_the_first_batch_are_in_the_metadata(tmp_path):
    src = _Growing()
    path = str(tmp_path / "g.parquet")
    sink = _Tabular(path, ".parquet", src)
    sink.write(_batch(0, 10), 0)
    src.instruments.append("BBB")
    sink.write(_batch(1, 5), 10)
    sink.close()
    t = pq.read_table(path)
    assert _meta(t) == (PRICE_SCALE, ["AAA", "BBB"])
    assert t.column("symbol").to_pylist() == ["AAA"] * 10 + ["BBB"] * 5
    assert t.column("seq").to_pylist() == list(range(15))
    assert not list(tmp_path.glob("*.restamp"))


def test_features_table_names_its_instruments(tmp_path):
    out = tmp_path / "f.parquet"
    r = cli("features", SYN, "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out)
    assert _meta(t) == (PRICE_SCALE, NAMES)
    assert t.column("symbol").to_pylist() == [NAMES[i] for i in t.column("instrument").to_numpy()]


def test_inputs_with_other_instrument_tables_are_named_each():
    """An index means another instrument in each of two files: no single table is claimed."""
    one = table_metadata([["A", "B"], ["A", "B"]])
    assert json.loads(one[b"engine.symbols"]) == ["A", "B"] and b"engine.symbols_by_input" not in one
    two = table_metadata([["A", "B"], ["C"]], **{"engine.inputs": "x,y"})
    assert b"engine.symbols" not in two and json.loads(two[b"engine.symbols_by_input"]) == [["A", "B"], ["C"]]
    assert two[b"engine.inputs"] == b"x,y" and int(two[b"engine.price_scale"]) == PRICE_SCALE
