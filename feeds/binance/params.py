"""The Binance sources' declarations (feeds/core/params.py): `binance:FILE` (a capture) and
`binance-live://MARKET` (the venue), with the venue facts their parameters name."""
from feeds.core import uri as U
from feeds.core.params import (BACKOFF_MAX_S, BACKOFF_S, BOOK_TICKER, DEPTH, IDLE_S, ON_ERROR, SIZE_UNIT, SYMBOLS,
                               Kind, Param, choice)

MARKETS = {  # (websocket base, REST base, REST prefix, weight budget a minute)
    "spot": ("wss://stream.binance.com:9443", "https://api.binance.com", "/api/v3", 6000),
    "usdm": ("wss://fstream.binance.com", "https://fapi.binance.com", "/fapi/v1", 2400),
    "coinm": ("wss://dstream.binance.com", "https://dapi.binance.com", "/dapi/v1", 2400),
}
UPDATES = ("100ms", "0ms", "250ms", "500ms", "1000ms", "none")
READERS = ("auto", "python", "native", "spin")
OVERLAP_S = 1.0  # a rotation's two connections run side by side this long

CAPTURE = Kind(
    "binance", "FILE", "a raw Binance websocket capture (gzip ok)",
    "A raw Binance websocket capture (gzip or plain): a line per message, the receive time "
    "in ns, a space, the JSON message (combined-stream form, or a REST depth snapshot).",
    (SIZE_UNIT, choice("market", ("auto", "spot", "usdm", "coinm"),
                       "the market, which names the venue in the instrument records (hence the fees); "
                       "auto: futures when the depth diffs carry `pu` (COIN-M for symbols like BTCUSD_PERP), "
                       "else spot"),
     ON_ERROR, DEPTH, BOOK_TICKER.only("quote", "check", why_not=(
         ("off", "off is binance-live's: a capture holds the bookTicker lines it was recorded with"),))),
    "binance:btcusdt.gz?size_unit=1e-5&depth=10")

LIVE = Kind(
    "binance-live", "MARKET", "Binance live: MARKET spot, usdm or coinm",
    "Binance's public market data, live: MARKET is spot, usdm (USD-M futures) "
    "or coinm (COIN-M futures).",
    (SYMBOLS, DEPTH,
     choice("update", UPDATES, "the depth stream's speed (where the market offers it); none: the plain @depth "
            "stream"),
     choice("trades", ("trade", "aggTrade", "none"), "the trade stream subscribed (none: no trades)"),
     BOOK_TICKER, SIZE_UNIT,
     Param("ws", str, None, "ws:// or wss:// URL", "the websocket base (default: the market's; tests and proxies "
           "point elsewhere)"),
     Param("rest", str, None, "http:// or https:// URL", "the REST base (default: the market's)"),
     Param("silence_s", U.finite_pos, 10.0, "number > 0", "a connection with no whole data frame for this long "
           "is dead: reconnect", unit="s"),
     Param("rotate_s", U.finite_pos, 84600.0, "number > 0", "replace the connection after this long, before the "
           "venue's 24-hour close, with no gap", unit="s"),
     BACKOFF_S, BACKOFF_MAX_S,
     Param("snapshot_limit", U.int_in(1, 5000), 1000, "1..5000", "levels asked of the REST depth snapshot"),
     Param("overlap_s", U.finite_pos, OVERLAP_S, "number > 0", "how long a rotation's two connections run side "
           "by side", unit="s"),
     IDLE_S,
     choice("reader", READERS, "who reads the socket once the books are synced: native (a thread of its own, "
            "no Python per read; ws:// only), spin (the same, never sleeping: a whole core), python (the event "
            "loop), auto (native on ws://, python on wss://)"),
     Param("reader_core", U.nonneg_int, None, "integer >= 0", "the CPU the native reader's thread runs on "
           "(default: wherever the feed process may run)")),
    "binance-live://usdm?symbols=BTCUSDT,ETHUSDT&depth=10", slashes=True,
    notes="symbols is required and checked against exchangeInfo at start. Durations are finite; "
          "backoff_max_s is at least backoff_s.")
