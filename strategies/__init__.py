"""The shipped strategies, each one file written to the contract in engine/strategy_api.py:
microstructure (the default: touch features, hysteresis), depth_imbalance (ten book levels,
sizing by conviction) and touch_imbalance (a maker: joins the touch the imbalance favours). Copy
one to start your own; run it with --strategy FILE.py.

Layer: strategy code imports only the engine core (engine/strategy_api.py and what it names),
never the application (app/). tests/test_layers.py checks this.
"""
