"""The Databento sources' declarations (feeds/core/params.py): `dbn:FILE` and `dbn-live://DATASET`."""
import datetime as dt

from feeds.core import uri as U
from feeds.core.params import BACKOFF_MAX_S, BACKOFF_S, DEPTH, IDLE_S, ON_ERROR, SYMBOLS, Kind, Param, choice

SCHEMAS = ("mbo", "mbp-10", "mbp-1", "tbbo", "trades")


def start_ns(s):
    """ns since the epoch, or an ISO 8601 time (UTC when it names no zone) -> ns."""
    if s.isdigit():
        return int(s)
    t = dt.datetime.fromisoformat(s)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 10**9 + t.microsecond * 1000


def bit(s):
    if s not in ("0", "1"):
        raise ValueError("must be 0 or 1")
    return int(s)


FILE = Kind(
    "dbn", "FILE", "Databento DBN: MBO, MBP-1, MBP-10, trades (zstd ok)",
    "Databento DBN (v1-v3; zstd or plain): MBO into an L3 book, MBP-1 / MBP-10 and trades "
    "straight to ticks.",
    (SYMBOLS, ON_ERROR, DEPTH), "dbn:glbx.mbo.dbn.zst?symbols=ESH4&depth=10",
    notes="depth is capped by what the file has: MBO any, MBP-10 10, MBP-1/TBBO 1, trades 0.")

LIVE = Kind(
    "dbn-live", "DATASET", "Databento live (key: $DATABENTO_API_KEY or key_file=)",
    "Databento's live subscription gateway (e.g. GLBX.MDP3), spoken natively; the key is "
    "$DATABENTO_API_KEY or key_file=.",
    (SYMBOLS, choice("schema", SCHEMAS, "the record schema subscribed"),
     Param("snapshot", bit, 0, "0|1", "1: with mbo, ask for a book snapshot on every (re)subscription"),
     Param("start", start_ns, None, "ns or ISO 8601", "intraday replay from this time (first session only)",
           write=str),
     Param("gateway", U.hostport, None, "HOST:PORT", "the gateway (default: the dataset's, as the official "
           "client computes it)", write=lambda hp: f"{hp[0]}:{hp[1]}"),
     Param("key_file", str, "", "path", "a file holding the API key (yours, mode 0600)"),
     Param("heartbeat_s", U.pos_int, 30, "integer >= 1", "heartbeat interval asked of the gateway", unit="s"),
     Param("timeout_s", U.finite_nonneg, 0.0, "number >= 0", "silence that makes the connection dead "
           "(0: heartbeat_s + 10, the official client's margin)", unit="s"),
     BACKOFF_S.with_default(0.5), BACKOFF_MAX_S, IDLE_S,
     Param("connect_timeout_s", U.finite_nonneg, 10.0, "number >= 0", "how long a connect and the greeting may "
           "take", unit="s"),
     DEPTH),
    "dbn-live://GLBX.MDP3?schema=mbo&symbols=ESH4&snapshot=1&depth=10", slashes=True,
    notes="symbols is required. The symbols are subscribed as raw_symbol.")
