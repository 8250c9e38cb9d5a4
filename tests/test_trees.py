"""The tree IR (models/trees.py): read once from XGBoost's model, it walks to XGBoost's own leaves
and sums to its margins bit for bit (a model trained with missing values, on rows sitting on
every split value; real-data features: tests/test_fpga.py, which computes those rows already);
the flat kernel's tables and the fixed-point model are both built from it; float32 values are
rounded once from their decimal text."""
import json
from fractions import Fraction

import numpy as np
import pytest
import xgboost as xgb

from fpga import export
from fpga.fixed import FixedPointError, load_xgboost_json, make_fixed
from models import flat
from models.compile import CompileError
from models.trees import ModelFormatError, float32_of, read_model

from tests.helpers.tree_walk import flat_margin, ir_leaves, ir_margin, same_bits, xgboost_says


@pytest.fixture(scope="module")
def missing_model(tmp_path_factory):
    """40 trees of depth 5, trained with 10% missing values: both default directions occur."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(5000, 5)).astype(np.float32) * np.array([1, 30, 1e-3, 1, 7], np.float32)
    y = (X[:, 0] - X[:, 1] / 30 + X[:, 2] * 400 + rng.normal(size=5000) > 0).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    b = xgb.train({"objective": "binary:logistic", "max_depth": 5, "eta": 0.3, "tree_method": "hist",
                   "nthread": 1, "seed": 0}, xgb.DMatrix(X, y, missing=np.nan), 40)
    p = tmp_path_factory.mktemp("trees") / "missing.json"
    b.save_model(str(p))
    return p


def test_ir_walks_to_xgboost_leaves_and_margins_with_missing_values(missing_model):
    forest = read_model(missing_model)
    inner = forest.feature >= 0
    assert forest.default_left[inner].any() and not forest.default_left[inner].all()
    X = export.probe_rows(forest, n_random=3000)  # on, and one float32 step either side of, every split value
    assert np.isnan(X).any()
    leaves, margin = xgboost_says(missing_model, X)
    node = ir_leaves(forest, X)
    assert np.array_equal(node, leaves)
    assert same_bits(ir_margin(forest, node), margin)


def test_flat_and_fixed_point_are_built_from_the_ir(missing_model):
    """Both consumers take the Forest itself: a leaf changed in the IR shows in the flat kernel's
    tables and in the fixed-point leaves, and each still walks to the IR's own result."""
    forest = load_xgboost_json(missing_model)
    assert type(forest) is type(flat.read_forest(missing_model))
    X = export.probe_rows(forest, n_random=500)
    t, n = 3, int(np.nonzero(forest.feature[3] < 0)[0][0])
    forest.leaf[t, n] = np.float32(0.75)
    node = ir_leaves(forest, X)
    want = ir_margin(forest, node)
    assert same_bits(flat_margin(flat.build_tables(forest), forest, X), want)
    fm = make_fixed(forest)
    assert fm.leaf_q[t, n] == 0.75 * (1 << fm.leaf_bits)
    q, m = fm.quantize(X)
    assert np.array_equal(fm.leaves(q, m), node)


def _nearest_float32(text):
    """Reference: the float32 nearest the exact decimal (ties to even), by exact arithmetic."""
    x = Fraction(text)
    lo = np.float32(float(x))  # within one step of the answer
    cands = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(np.array(c).view(np.int32)) & 1))


def test_float32_values_are_rounded_once_from_the_decimal():
    # 1 + 2^-24 is halfway between float32 1 and 1 + 2^-23; a decimal just above it rounds to a
    # double exactly on the midpoint, and then (ties to even) to 1.0: one rounding gives 1 + 2^-23
    above, below = "1.000000059604644775390625000001", "1.000000059604644775390624999999"
    assert np.float32(float(above)) == np.float32(1.0)  # the double route
    got = float32_of([above, below, "1.000000059604644775390625", "-0E0", "1.5E-1", 3])
    assert got[0] == np.nextafter(np.float32(1), np.float32(2)) and got[1] == got[2] == np.float32(1)
    assert np.signbit(got[3]) and got[4] == np.float32(0.15) and got[5] == 3
    rng = np.random.default_rng(3)
    texts = [f"{m}E{e}" for m, e in zip(rng.integers(1, 10 ** 12, 2000), rng.integers(-40, 25, 2000))]
    ref = np.array([_nearest_float32(s) for s in texts], np.float32)
    assert same_bits(float32_of(texts), ref)


def test_models_the_tree_back_ends_cannot_take_are_refused_with_the_reason(missing_model, tmp_path):
    m = json.loads(missing_model.read_text())
    m["learner"]["gradient_booster"]["model"]["trees"][2]["split_type"][0] = 1
    cat = tmp_path / "cat.json"
    cat.write_text(json.dumps(m))
    with pytest.raises(ModelFormatError, match="cat.json: tree 2 has categorical splits"):
        read_model(cat)
    with pytest.raises(CompileError, match="tree 2 has categorical splits"):
        flat.compile_flat(cat, tmp_path / "out", 5)
    with pytest.raises(FixedPointError, match="tree 2 has categorical splits"):
        load_xgboost_json(cat)
    m = json.loads(missing_model.read_text())
    m["learner"]["learner_model_param"]["num_class"] = "3"
    multi = tmp_path / "multi.json"
    multi.write_text(json.dumps(m))
    with pytest.raises(ModelFormatError, match="one output only"):
        read_model(multi)
    (tmp_path / "junk.json").write_text("{\"learner\": 1}")
    with pytest.raises(ModelFormatError, match="junk.json: not an XGBoost JSON model"):
        read_model(tmp_path / "junk.json")


def test_a_split_value_reads_as_xgboost_reads_it(missing_model, tmp_path):
    """A split value written as a decimal whose double lies exactly halfway between two float32s:
    XGBoost rounds the text to float32 once (1 + 2^-23), a reader going through a double gets 1.0.
    The IR goes where XGBoost goes for x = 1.0."""
    m = json.loads(missing_model.read_text())
    root = m["learner"]["gradient_booster"]["model"]["trees"][0]
    f = root["split_indices"][0]
    root["split_conditions"][0] = 12345.678  # a marker, replaced by the decimal in the text
    text = json.dumps(m)
    assert text.count("12345.678") == 1
    p = tmp_path / "halfway.json"
    p.write_text(text.replace("12345.678", "1.000000059604644775390625000001"))
    forest = read_model(p)
    assert forest.threshold[0, 0] == np.nextafter(np.float32(1), np.float32(2))
    X = np.full((2, forest.n_features), np.nan, np.float32)
    X[:, f] = [1.0, np.nextafter(np.float32(1), np.float32(2))]
    leaves, margin = xgboost_says(p, X)
    node = ir_leaves(forest, X)
    assert np.array_equal(node, leaves) and same_bits(ir_margin(forest, node), margin)
    assert _under(forest, 0, int(forest.left[0, 0]), node[0, 0])  # x = 1.0 went left, as x < 1 + 2^-23
    assert _under(forest, 0, int(forest.right[0, 0]), node[1, 0])


def _under(forest, t, top, n):
    """Node n is in the subtree of tree t rooted at top."""
    stack = [top]
    while stack:
        i = stack.pop()
        if i == n:
            return True
        if forest.feature[t, i] >= 0:
            stack += [int(forest.left[t, i]), int(forest.right[t, i])]
    return False
