"""`engine fpga sim DIR`: the same rows through the golden model, the C++ emulation and (with
--rtl) the RTL; agreement with XGBoost, bit-exactness, the error bound and the cycle latency."""
import ctypes
import json
import subprocess
from pathlib import Path

import numpy as np

from . import export, rtl
from .fixed import check_against_xgboost


def _emulation_acc(lib_path, X):
    lib = ctypes.CDLL(str(lib_path))
    f = lib.engine_predict_acc
    f.restype, f.argtypes = ctypes.c_int64, [ctypes.c_void_p]
    X = np.ascontiguousarray(X, np.float32)
    return np.array([f(X[i].ctypes.data) for i in range(len(X))], np.int64)


def run(out_dir, rows=None, with_rtl=False):
    d = Path(out_dir)
    m = export.read(d)
    fm = export.fixed_model(d, m)
    X = np.fromfile(d / "rows.f32", np.float32).reshape(-1, m["n_features"])
    golden_file = np.fromfile(d / "golden.i64", np.int64)
    if rows:
        X, golden_file = X[:rows], golden_file[:rows]
    golden = fm.score_int(X)
    if not np.array_equal(golden, golden_file):  # the stored vectors are what this model computes
        raise RuntimeError(f"{d}: golden.i64 disagrees with the golden model rebuilt from model.json")
    res = check_against_xgboost(fm, d / "model.json", X)
    res["cpp_bit_exact"] = bool(np.array_equal(_emulation_acc(d / "libfpga_sim.so", X), golden))
    tb = subprocess.run([str(d / "tb"), str(d)], capture_output=True, text=True, timeout=600)
    tb_res = json.loads(tb.stdout.strip() or "{}")
    res["testbench"] = tb_res
    if rows is None:
        res["cpp_bit_exact"] = res["cpp_bit_exact"] and tb.returncode == 0 and tb_res.get("mismatches") == 0
    res["rtl_bit_exact"] = None
    res["cycles"] = m["rtl_cycles"]
    res["cycles_measured"] = False
    if with_rtl:
        acc, cycles = rtl.simulate(fm, str(d), X)
        res["rtl_bit_exact"] = bool(len(acc) == len(golden) and np.array_equal(acc, golden))
        res["cycles"] = cycles
        res["cycles_measured"] = True
        res["cycles_predicted"] = m["rtl_cycles"]
    res["clock_mhz"] = m["clock_mhz"]
    res["latency_ns"] = res["cycles"] * 1000.0 / m["clock_mhz"]
    return res


KEYS = ("rows", "leaf_agreement", "max_score_error", "score_error_bound", "decision_agreement", "cpp_bit_exact",
        "rtl_bit_exact", "cycles")
