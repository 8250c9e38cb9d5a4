"""Binance: the capture reader (binance:FILE), the live client (binance-live://), its JSON scanner,
book rules and native reader."""
