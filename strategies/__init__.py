"""The shipped strategies, each one file written to the contract in engine/strategy_api.py:
microstructure (the default: touch features, hysteresis) and depth_imbalance (ten book levels,
sizing by conviction). Copy one to start your own; run it with --strategy FILE.py."""
