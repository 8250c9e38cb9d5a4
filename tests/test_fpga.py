"""FPGA offload: exact fixed point, C++ emulation and RTL bit for bit, refusals, the card driver."""
import ctypes
import json
import shutil

import numpy as np
import pytest

from fpga import export, rtl, sim
from fpga.fixed import FixedPointError, check_against_xgboost, load_xgboost_json, make_fixed

from tests.helpers.data import USDM
from tests.helpers.feedutil import cli

HAVE_IVERILOG = shutil.which("iverilog") is not None


def emulation(lib_path):
    lib = ctypes.CDLL(str(lib_path))
    lib.engine_predict_batch.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    lib.engine_predict_batch.restype = None
    return lib


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """30 trees of depth 4 on 6 features, with missing values in training (default directions)."""
    import xgboost as xgb
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4000, 6)).astype(np.float32) * np.array([1, 10, 0.01, 100, 1e-4, 3], np.float32)
    y = ((X[:, 0] + X[:, 1] / 10 - X[:, 2] * 50 + rng.normal(size=4000)) > 0).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    b = xgb.train({"objective": "binary:logistic", "max_depth": 4, "eta": 0.3, "tree_method": "hist"},
                  xgb.DMatrix(X, y, missing=np.nan), 30)
    p = tmp_path_factory.mktemp("m") / "small.json"
    b.save_model(str(p))
    return p


@pytest.fixture(scope="module")
def small_dir(small_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("f") / "fpga"
    export.generate(small_model, d)
    return d


def test_leaf_agreement_is_exact_even_on_split_values_and_missing(small_model):
    fm = make_fixed(load_xgboost_json(small_model))
    X = export.probe_rows(fm.trees, n_random=5000)
    res = check_against_xgboost(fm, small_model, X)
    assert res["leaf_agreement"] == 1.0 and res["decision_agreement"] == 1.0
    assert res["max_score_error"] <= res["score_error_bound"]
    assert fm.exact.all()
    # the accumulator proof: leaf bits + ceil(log2 trees) + 1
    assert fm.acc_bits == fm.leaf_width + int(np.ceil(np.log2(fm.n_trees + 1))) + 1


def test_leaf_agreement_on_real_data_features(default_model):
    """The default model on features computed from the real Binance capture; the tree IR both
    back ends build from (models/trees.py) on the same rows: XGBoost's leaves, and through the
    flat kernel's tables XGBoost's margins bit for bit."""
    from models import flat
    from tests.conftest import strategy_rows
    from tests.helpers.tree_walk import flat_margin, ir_leaves, ir_margin, same_bits, xgboost_says
    X, *_ = strategy_rows(f"binance:{USDM}?size_unit=1e-3")
    mj = default_model / "model.json"
    fm = make_fixed(load_xgboost_json(mj))
    res = check_against_xgboost(fm, mj, X)
    assert len(X) > 10_000 and res["leaf_agreement"] == 1.0 and res["max_score_error"] <= res["score_error_bound"]
    X = X[np.linspace(0, len(X) - 1, 20_000).astype(np.int64)]
    leaves, margin = xgboost_says(mj, X)
    node = ir_leaves(fm.trees, X)
    assert np.array_equal(node, leaves) and same_bits(ir_margin(fm.trees, node), margin)
    assert same_bits(flat_margin(flat.build_tables(flat.read_forest(mj)), fm.trees, X), margin)


def test_emulation_equals_the_golden_model(small_dir):
    m = export.read(small_dir)
    fm = export.fixed_model(small_dir, m)
    X = np.fromfile(small_dir / "rows.f32", np.float32).reshape(-1, m["n_features"])
    acc = sim._emulation_acc(small_dir / "libfpga_sim.so", X)
    assert np.array_equal(acc, fm.score_int(X))
    # the C ABI the engine calls: float32 scores = acc * 2^-L, exactly
    lib = emulation(small_dir / "libfpga_sim.so")
    out = np.zeros(len(X), np.float32)
    Xc = np.ascontiguousarray(X)
    lib.engine_predict_batch(Xc.ctypes.data, len(X), out.ctypes.data)
    want = (fm.score_int(X) / float(1 << fm.leaf_bits)).astype(np.float32)
    assert np.array_equal(out.view(np.int32), want.view(np.int32))


@pytest.mark.skipif(not HAVE_IVERILOG, reason="Icarus Verilog not installed (apt-get install iverilog); CI installs it")
def test_rtl_equals_the_golden_model_with_the_predicted_latency(small_dir):
    m = export.read(small_dir)
    fm = export.fixed_model(small_dir, m)
    X = np.fromfile(small_dir / "rows.f32", np.float32).reshape(-1, m["n_features"])[:1500]
    acc, cycles = rtl.simulate(fm, str(small_dir), X)
    assert np.array_equal(acc, fm.score_int(X))
    assert cycles == m["rtl_cycles"] == rtl.latency_cycles(30) == 3 + 5


@pytest.mark.skipif(not HAVE_IVERILOG, reason="Icarus Verilog not installed; CI installs it")
def test_sim_cli_prints_exactly_one_object(small_dir):
    r = cli("fpga", "sim", str(small_dir), "--rtl", "--rows", "400", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert list(res) == ["rows", "leaf_agreement", "max_score_error", "score_error_bound", "decision_agreement",
                         "cpp_bit_exact", "rtl_bit_exact", "cycles"]
    assert res["rows"] == 400 and res["leaf_agreement"] == 1.0 and res["cpp_bit_exact"] and res["rtl_bit_exact"]
    assert res["cycles"] == 8 and res["max_score_error"] <= res["score_error_bound"]


def test_refusals_are_clear(small_model, tmp_path):
    m = json.loads(small_model.read_text())
    trees = m["learner"]["gradient_booster"]["model"]["trees"]
    trees[3]["split_type"][0] = 1
    p = tmp_path / "cat.json"
    p.write_text(json.dumps(m))
    with pytest.raises(FixedPointError, match="tree 3 has categorical splits"):
        load_xgboost_json(p)
    m = json.loads(small_model.read_text())
    t0 = m["learner"]["gradient_booster"]["model"]["trees"][0]
    leaf = t0["left_children"].index(-1)
    t0["split_conditions"][leaf] = 1.0e6  # a leaf of 10^6 at 2^-40: 61 bits, plus 30 trees' worth
    big = tmp_path / "big.json"
    big.write_text(json.dumps(m))
    with pytest.raises(FixedPointError, match="accumulator would need 67 bits"):
        make_fixed(load_xgboost_json(big), leaf_bits=40)
    tr = load_xgboost_json(small_model)
    assert make_fixed(tr, leaf_bits=16).acc_bits <= 63
    with pytest.raises(FixedPointError, match="needs|do not fit"):
        make_fixed(tr, max_width=6)  # a 10x-scaled feature cannot fit 6 bits
    # a narrower grid than exactness needs: export refuses unless every validation row agrees
    r = cli("fpga", "generate", str(small_model), "--out", str(tmp_path / "narrow"), "--max-width", "16")
    assert r.returncode == 2 and "refusing to export" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "narrow").exists()


def test_build_without_vitis_explains_what_it_would_run(small_dir):
    if shutil.which("v++"):
        pytest.skip("Vitis is installed here")
    r = cli("fpga", "build", str(small_dir))
    assert r.returncode == 3 and "vitis_hls -f run_hls.tcl" in r.stdout and "v++ -l" in r.stdout


def test_tampered_directory_is_refused(small_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(small_dir, d)
    with open(d / "hls" / "kernel.cpp", "a") as f:
        f.write("// edited\n")
    r = cli("fpga", "sim", str(d), "--json")
    assert r.returncode == 2 and "kernel.cpp does not match its hash" in r.stderr


class FakeXRT:
    """A stand-in for pyxrt that records every call and runs the emulation library on the bytes
    the driver put in the input buffer."""

    def __init__(self, lib_path, nf):
        self.calls = []
        self.lib = emulation(lib_path)
        self.nf = nf
        self.in_flight = 0
        self.max_in_flight = 0
        fake = self

        class xclBOSyncDirection:
            XCL_BO_SYNC_BO_TO_DEVICE = "to_device"
            XCL_BO_SYNC_BO_FROM_DEVICE = "from_device"
        self.xclBOSyncDirection = xclBOSyncDirection

        class bo:
            normal = "normal"

            def __init__(self, device, size, flags, group):
                self.buf = bytearray(size)
                self.synced_in = False
                fake.calls.append(("bo", size, group))

            def write(self, data, off):
                self.buf[off:off + len(data)] = data
                self.synced_in = False
                fake.calls.append(("write", len(data)))

            def sync(self, direction, size, off):
                fake.calls.append(("sync", direction, size))
                if direction == "to_device":
                    self.synced_in = True

            def read(self, size, off):
                fake.calls.append(("read", size))
                return bytes(self.buf[off:off + size])
        self.bo = bo

        class run:
            def __init__(self, rows, scores, n):
                assert rows.synced_in, "kernel started before its input was synced to the device"
                fake.calls.append(("run", n))
                x = np.frombuffer(bytes(rows.buf[:n * fake.nf * 4]), np.float32).copy()
                out = np.zeros(n, np.float32)
                fake.lib.engine_predict_batch(x.ctypes.data, n, out.ctypes.data)
                self.scores, self.out = scores, out
                fake.in_flight += 1
                fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                self.done = False

            def wait(self):
                fake.calls.append(("wait",))
                if not self.done:
                    self.scores.buf[:len(self.out) * 4] = self.out.tobytes()  # the card wrote its results
                    fake.in_flight -= 1
                    self.done = True

        class kernel:
            class cu_access_mode:
                shared = "shared"

            def __init__(self, device, uuid, name, mode):
                assert uuid == "uuid-1", "kernel opened before the xclbin was loaded"
                fake.calls.append(("kernel", name))

            def group_id(self, i):
                return i

            def __call__(self, rows, scores, n):
                return run(rows, scores, n)
        self.kernel = kernel

        class device:
            def __init__(self, index):
                fake.calls.append(("device", index))

            def load_xclbin(self, x):
                fake.calls.append(("load_xclbin", x))
                return "uuid-1"
        self.device = device
        self.xclbin = lambda path: f"xclbin:{path}"


def test_card_driver_batched_and_streaming_against_a_fake_runtime(small_dir):
    from fpga.driver import CardPredictor
    m = export.read(small_dir)
    fm = export.fixed_model(small_dir, m)
    X = np.fromfile(small_dir / "rows.f32", np.float32).reshape(-1, m["n_features"])[:2500]
    want = (fm.score_int(X) / float(1 << fm.leaf_bits)).astype(np.float32)
    fake = FakeXRT(small_dir / "libfpga_sim.so", m["n_features"])
    card = CardPredictor("k.xclbin", m["n_features"], batch=1000, runtime=fake)
    got = card.predict(X)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    names = [c[0] for c in fake.calls]
    assert names[:3] == ["device", "load_xclbin", "kernel"] and fake.calls[1][1] == "xclbin:k.xclbin"
    # each batch: write the rows, sync them to the card, run, wait, sync back, read
    body = names[names.index("bo"):]
    n = len(X)
    assert n > 2000 and body.count("run") == -(-n // 1000)
    first = body.index("write")
    assert body[first:first + 6] == ["write", "sync", "run", "wait", "sync", "read"]
    assert ("write", 1000 * m["n_features"] * 4) in fake.calls and ("run", n % 1000 or 1000) in fake.calls
    assert ("sync", "to_device", 1000 * m["n_features"] * 4) in fake.calls
    assert ("sync", "from_device", 4000) in fake.calls
    assert fake.max_in_flight == 1
    fake.calls.clear()
    batches = [X[i:i + 700] for i in range(0, len(X), 700)]
    outs = list(card.stream(batches))
    assert np.array_equal(np.concatenate(outs).view(np.int32), want.view(np.int32))
    assert fake.max_in_flight == 2  # double-buffered: the next batch was on the card while one came back
    with pytest.raises(ValueError, match="rows must be float32"):
        card.predict(np.zeros((3, m["n_features"] + 1), np.float32))


def test_engine_runs_through_the_fpga_emulation(default_model, tmp_path):
    r = cli("run", "--no-rt", "--duration", "2", "--backend", "fpga-sim", "--http", "none", "--pub", "none",
            "--hlog", "none", "--signals-out", str(tmp_path / "s.sig"), "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["backend"] == "fpga-sim" and res["scored"] > 100


@pytest.mark.skipif(shutil.which("yosys") is None, reason="Yosys not installed (apt-get install yosys); CI installs it")
def test_yosys_gives_a_resource_estimate(tmp_path):
    # a 6-tree model: synthesis time grows fast with size, and the estimate is what is tested here
    import xgboost as xgb
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 4)).astype(np.float32)
    y = (X[:, 0] - X[:, 1] + rng.normal(size=2000) > 0).astype(np.float32)
    b = xgb.train({"objective": "binary:logistic", "max_depth": 3, "tree_method": "hist"}, xgb.DMatrix(X, y), 6)
    b.save_model(str(tmp_path / "m.json"))
    export.generate(tmp_path / "m.json", tmp_path / "fpga")
    res = rtl.resources(str(tmp_path / "fpga"), timeout=600)
    assert res["luts"] > 20 and res["ffs"] > 20 and "CARRY4" in res["cells"], res
