"""Tick files, recording, replay and backtests (issue 5)."""
