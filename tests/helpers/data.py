"""Where the tests' market data is: the one place that says so.

The tests read small cuts of real captures kept in the repository (tests/data, README.md there says
how each was cut), so a plain clone tests itself. The whole captures they were cut from are in
../shared/data beside the clone where CI runs; a test over a whole capture (a day, a full-file
parity) is collected only when that is here (`whole`), never skipped for want of it.

ENGINE_TEST_SHARED=none runs the suite as a plain clone would (../shared/data taken as absent);
ENGINE_TEST_SHARED=DIR reads the whole captures from DIR instead."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data"


def _shared():
    where = os.environ.get("ENGINE_TEST_SHARED", "")
    if where == "none":
        return None
    d = Path(where) if where else ROOT.parent / "shared" / "data"
    return d if d.is_dir() else None


SHARED_DATA = _shared()  # the directory of the whole captures, or None when it is not here

# the cuts, and the whole capture each was cut from (its path under ../shared/data)
SPOT = FIXTURES / "binance" / "spot_btcusdt_20240808_45s.gz"
USDM = FIXTURES / "binance" / "usdm_btcusdt_20240808_45s.gz"
ESH4 = FIXTURES / "dbn" / "esh4_glbx_mdp3_20231225_cut.mbo.dbn.zst"
_WHOLE = {SPOT: "binance/spot_btcusdt_20240808.gz", USDM: "binance/usdm_btcusdt_20240808.gz",
          ESH4: "dbn/esh4-glbx-mdp3-20231225.mbo.dbn.zst"}


def whole_capture(cut):
    """The whole capture `cut` was cut from, or None when ../shared/data is not here."""
    p = SHARED_DATA / _WHOLE[cut] if SHARED_DATA else None
    return p if p and p.exists() else None


def whole(*cuts, ids=None):
    """pytest params of the whole captures of `cuts` that are here (none in a plain clone): a
    test parametrized over them is collected only where they are. ids: one per cut."""
    ids = ids or [c.name.split("_")[0] for c in cuts]
    return [pytest.param(whole_capture(c), id=f"{i}-whole") for c, i in zip(cuts, ids) if whole_capture(c)]


def cut_and_whole(*cuts, ids=None):
    """pytest params of `cuts` (always) and of their whole captures where they are here."""
    ids = ids or [c.name.split("_")[0] for c in cuts]
    return [pytest.param(c, id=i) for c, i in zip(cuts, ids)] + whole(*cuts, ids=ids)
