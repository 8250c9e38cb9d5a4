"""Market-data sources that turn a feed into the engine's normalised 64-byte ticks."""
