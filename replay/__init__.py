"""Tick files, recording, replay and backtests (issue 5).

Layer: above the core, feeds/, models/ and fpga/, all of which it may import; never the
application (app/), which drives it. tests/test_layers.py checks this.
"""
