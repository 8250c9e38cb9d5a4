"""The Nasdaq sources' declarations (feeds/core/params.py): `itch:FILE` and `moldudp64://HOST:PORT`."""
import datetime as dt

from feeds.core import uri as U
from feeds.core.params import DEPTH, IDLE_S, ON_ERROR, SYMBOLS, Kind, Param


def _day(ns):
    return dt.datetime.fromtimestamp(ns // 10**9, dt.timezone.utc).date().isoformat()


ITCH_PARAMS = (
    SYMBOLS,
    Param("date", U.date_ns, 0, "YYYY-MM-DD", "the trading day: ITCH times count from its midnight (default: none, "
          "so ts_event is ns since midnight)", write=lambda ns: _day(ns) if ns else None),
    Param("utc_offset", U.float_in(-24, 24), 0.0, "-24..24", "how far the exchange's midnight is from UTC (Nasdaq: -5, or -4 in "
          "summer)", unit="h"),
    ON_ERROR, DEPTH)

ITCH = Kind(
    "itch", "FILE", "Nasdaq ITCH 5.0 day file (gzip ok)",
    "A Nasdaq ITCH 5.0 day file (a 2-byte length before each message; gzip or plain). ts_recv is "
    "the exchange time: an ITCH file carries no receive time.", ITCH_PARAMS,
    "itch:01302019.NASDAQ_ITCH50.gz?symbols=AAPL,MSFT&date=2019-01-30&utc_offset=-5")

MOLD = Kind(
    "moldudp64", "HOST:PORT", "live ITCH over MoldUDP64",
    "Live ITCH 5.0 over MoldUDP64 (UDP, unicast or multicast); a malformed message is "
    "counted, never an error.",
    ITCH_PARAMS[:3] + (
        Param("rerequest", U.hostport, None, "HOST:PORT", "the session's re-request server: lost messages are asked "
              "for again, the packets after a gap held until they come (or recover_ms passes)",
              write=lambda hp: f"{hp[0]}:{hp[1]}"),
        Param("recover_ms", U.finite_pos, 200.0, "number > 0", "how long to wait for a re-request before the "
              "messages are lost (counted in rerequest_timeouts)", unit="ms"),
        Param("iface", str, "0.0.0.0", "address", "the local interface of a multicast group"),
        IDLE_S,
        Param("start_seq", U.nonneg_int, 0, "integer >= 0", "sequence number of the first message expected (0: the "
              "first packet's, so a late join is not a gap; 1 recovers a session from its start)"),
        Param("max_gap", U.pos_int, 1_000_000, "integer >= 1", "a packet claiming more messages lost than this is "
              "corrupt (bad_packets), not a gap"),
        Param("session", str, "", "up to 10 ASCII characters", "the session accepted (default: the first "
              "packet's); others' packets are dropped and counted (wrong_session)"),
        DEPTH),
    "moldudp64://239.1.1.1:26400?rerequest=10.0.0.5:26401&symbols=AAPL", slashes=True,
    notes="on_error does not apply: a live feed never stops on a malformed message.")
