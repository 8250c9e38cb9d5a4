"""Low-latency trading-signal engine: rings, strategy loop, latency, CLI."""

__version__ = "0.1.0"
