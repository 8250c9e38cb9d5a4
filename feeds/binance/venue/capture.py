"""The capture a venue replays: the `<receive ns> <json>` lines feeds/binance/capture.py reads,
kept as bytes (every websocket frame is a line's JSON byte for byte)."""
import gzip
import zlib
from pathlib import Path

import orjson


class CaptureError(ValueError):
    pass


class Capture:
    """The capture's lines: receive ns, JSON bytes, stream name (None: the REST snapshot) and depth
    diff number (from 1; 0 for other lines). Diffs are parsed only when a depth request needs them.
    `futures`: the depth diffs carry `pu` (spot's do not)."""

    def __init__(self, path, max_lines=None):
        path = Path(path)
        try:
            raw = path.read_bytes()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise CaptureError(f"{path}: cannot read the capture ({e})") from None
        self.ns, self.body, self.stream, self.diff_no = [], [], [], []
        self.snapshot_at, self.symbols, self.futures = None, [], False
        n_diff = 0
        for no, ln in enumerate(raw.split(b"\n"), 1):
            ln = ln.rstrip(b"\r")
            if not ln:
                continue
            if max_lines is not None and len(self.ns) >= max_lines:
                break
            ns, body, stream = _split(path, no, ln)
            diff_no = 0
            if stream is None:
                if self.snapshot_at is None:
                    self.snapshot_at = len(self.ns)
            elif "@depth@" in stream or stream.endswith("@depth"):  # diffs, not partial depth
                n_diff += 1
                diff_no = n_diff
                if n_diff == 1:
                    try:
                        data = orjson.loads(body)["data"]
                        self.symbols.append(data["s"])
                    except (ValueError, KeyError, TypeError):
                        raise CaptureError(f"{path}: line {no} is not a depth diff") from None
                    self.futures = "pu" in data
            self.ns.append(ns)
            self.body.append(body)
            self.stream.append(stream)
            self.diff_no.append(diff_no)
        if not self.ns:
            raise CaptureError(f"{path}: the capture has no lines")
        if not self.symbols:  # no depth stream: name the symbol from the first stream
            self.symbols = [s.split("@")[0].upper() for s in self.stream if s][:1]

    def market(self):
        """The market the capture was recorded on, as feeds/binance/capture.py's market=auto
        reads it: futures when the diffs carry `pu` (COIN-M for symbols like BTCUSD_PERP), else spot."""
        if not self.futures:
            return "spot"
        return "coinm" if any("_" in s for s in self.symbols) else "usdm"


def _split(path, no, ln):
    """(receive ns, JSON bytes, stream name or None) of capture line `no`."""
    sp = ln.find(b" ")
    try:
        ns, body = int(ln[:sp]), ln[sp + 1:]
        if sp < 1 or not body.startswith(b"{"):
            raise ValueError
        if body.startswith(b'{"stream":"'):
            stream = body[11:body.index(b'"', 11)].decode()
        else:
            stream = orjson.loads(body).get("stream")
    except ValueError:
        raise CaptureError(f"{path}: line {no} is not '<ns> <json>'") from None
    return ns, body, stream
