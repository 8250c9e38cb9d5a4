"""Market-data sources that turn a feed into the engine's normalised 64-byte ticks.

Layer: above the core. Imports the engine core (engine/*.py: records, rings, shm) only; never
models/, replay/, fpga/ or the application (app/). tests/test_layers.py checks this.
"""
