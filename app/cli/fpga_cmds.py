"""`engine fpga generate|sim|build`: the FPGA offload (fpga/)."""
import argparse
import json
import os
import subprocess
import sys

from .common import SIGN_KEY_HELP, Flag, command, overrides, positive_int, subcommands, verify_key_arg


def cmd_fpga_generate(a):
    from fpga.export import generate
    from fpga.fixed import FixedPointError
    strategy = None
    if a.strategy or a.param:
        from engine.strategy_load import load
        strategy = load(a.strategy, overrides(a))
    try:
        m = generate(a.model, a.out, leaf_bits=a.leaf_bits, max_width=a.max_width, strategy=strategy,
                     say=lambda msg: print(f"[fpga] {msg}", file=sys.stderr, flush=True))
    except FixedPointError as e:
        raise ValueError(str(e)) from None
    v = m["validation"]
    print(f"{a.out}: {m['n_trees']} trees, {m['n_features']} features; leaf agreement {v['leaf_agreement']:.0%} on "
          f"{v['rows']} rows; max |score - XGBoost margin| {v['max_score_error']:.3g} <= bound "
          f"{v['score_error_bound']:.3g}; accumulator {m['acc_bits']} bits; RTL latency {m['rtl_cycles']} cycles "
          f"({m['rtl_cycles'] * 1000 / m['clock_mhz']:.0f} ns at {m['clock_mhz']} MHz)")
    return 0


def cmd_fpga_sim(a):
    from fpga import sim
    from fpga.fixed import FixedPointError
    try:
        res = sim.run(a.dir, rows=a.rows, with_rtl=a.rtl)
    except FixedPointError as e:
        raise ValueError(str(e)) from None
    if a.json:
        print(json.dumps({k: res[k] for k in sim.KEYS}))
    else:
        for k in sim.KEYS + ("latency_ns",):
            print(f"  {k:<20} {res[k]}")
        if not res["cycles_measured"]:
            print("  (cycles: the generator's prediction; --rtl measures them in simulation)")
    ok = res["leaf_agreement"] == 1.0 and res["cpp_bit_exact"] and res["rtl_bit_exact"] in (None, True)
    return 0 if ok else 1


def cmd_fpga_build(a):
    import shutil
    from fpga.export import read
    from fpga.fixed import FixedPointError
    try:
        read(a.dir)
    except FixedPointError as e:
        raise ValueError(str(e)) from None
    hls_dir = os.path.join(a.dir, "hls")
    steps = [(["vitis_hls", "-f", "run_hls.tcl"], hls_dir),
             (["v++", "-l", "--config", "v++.cfg", "-t", a.target, "--platform", a.platform, "engine_tree.xo",
               "-o", "engine_tree.xclbin"], hls_dir)]
    missing = [c[0][0] for c in steps if not shutil.which(c[0][0])]
    if missing:
        print(f"{', '.join(missing)} not found: no AMD/Xilinx tools here, so nothing was built. With Vitis installed "
              f"(source <Vitis>/settings64.sh and /opt/xilinx/xrt/setup.sh) this runs, in {hls_dir}:")
        for cmd, _ in steps:
            print("  " + " ".join(cmd))
        print("then loads engine_tree.xclbin with fpga.driver.CardPredictor (pyxrt), batched or streaming.")
        return 3
    for cmd, cwd in steps:
        print("+ " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd, cwd=cwd)
        if r.returncode:
            raise RuntimeError(f"{cmd[0]} failed with status {r.returncode}")
    print(os.path.join(hls_dir, "engine_tree.xclbin"))
    return 0


def add_parsers(sub):
    """`engine fpga generate|sim|build`."""
    fp = command(sub, "fpga", None, help="FPGA offload: HLS tree kernel, bit-accurate C++ and RTL simulation",
                 description="generate: exact fixed point, HLS C++ (+ g++ emulation), Verilog, checked against "
                             "XGBoost; sim: golden vs C++ emulation vs RTL; build: Vitis, where installed. "
                             "`engine run --backend fpga-sim` runs the engine through the emulation.")
    fps = subcommands(fp, "fpga_cmd")
    fg = command(fps, "generate", cmd_fpga_generate, help="fixed point + HLS C++ + emulation + RTL from a model")
    fg.add_argument("model", help="engine model artifact directory, or an XGBoost .json model")
    fg.add_argument("--out", required=True, help="directory to write (replaced whole when complete)")
    fg.add_argument("--leaf-bits", type=positive_int, default=16,
                    help="fractional bits of the rounded leaves (default 16)")
    fg.add_argument("--strategy", default=None, metavar="NAME|FILE.py",
                    help="check the model was trained for this strategy and takes its FEATURES (default: the "
                         "strategy the artifact records)")
    fg.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help=argparse.SUPPRESS)
    fg.add_argument("--max-width", type=positive_int, default=None,
                    help="cap every feature's integer width (default: as wide as exactness needs, up to 127)")
    verify_key_arg(fg)
    fg.add_argument("--sign-key", default=None, metavar="PRIVATE_KEY", help=SIGN_KEY_HELP + " (writes fpga.sig)")
    fsim = command(fps, "sim", cmd_fpga_sim, help="run rows through golden model, C++ emulation and (--rtl) the RTL")
    fsim.add_argument("dir")
    fsim.add_argument("--rtl", action=Flag, help="also simulate the Verilog with Icarus (slower)")
    fsim.add_argument("--rows", type=positive_int, default=None, help="first N validation rows (default all)")
    fsim.add_argument("--json", action=Flag, help="exactly one JSON object")
    verify_key_arg(fsim)
    fb = command(fps, "build", cmd_fpga_build, help="synthesize and link an xclbin with Vitis (where installed)")
    fb.add_argument("dir")
    fb.add_argument("--platform", default="xilinx_u250_gen3x16_xdma_4_1_202210_1")
    fb.add_argument("--target", default="hw", choices=("sw_emu", "hw_emu", "hw"))
    verify_key_arg(fb)
