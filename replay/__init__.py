"""Tick files, recording, replay and backtests (issue 5).

Layer: above the core, feeds/, models/ and fpga/, all of which it may import; never the
application (app/), which drives it. tests/test_layers.py checks this.
"""

from engine.components import name_components

NUMBA_CACHE_KEY = True  # these sources key the numba cache (engine/__init__.py): compiled code here inlines across modules

name_components({"replay": ("backtest", "the execution simulator and evaluation")})  # (engine/compile_notice.py)
