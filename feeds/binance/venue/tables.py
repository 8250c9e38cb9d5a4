"""What the simulated Binance venue says and allows: its markets' REST rules, the instruments it
describes, the stream names it accepts, its error bodies, and the limits of its own machinery."""
import re

MARKETS = {
    # market: (REST prefix, depth max limit, default depth limit, exchangeInfo weight, default ping s)
    "spot": ("/api/v3", 5000, 100, 20, 20.0),
    "usdm": ("/fapi/v1", 1000, 500, 1, 180.0),
    "coinm": ("/dapi/v1", 1000, 500, 1, 180.0),
}

# The instruments the venue describes in exchangeInfo (values as Binance publishes them).
SYMBOLS = {
    ("spot", "BTCUSDT"): dict(base="BTC", quote="USDT", tick="0.01000000", min_px="0.01000000",
                              max_px="1000000.00000000", step="0.00001000", min_qty="0.00001000",
                              max_qty="9000.00000000"),
    ("spot", "ETHUSDT"): dict(base="ETH", quote="USDT", tick="0.01000000", min_px="0.01000000",
                              max_px="1000000.00000000", step="0.00010000", min_qty="0.00010000",
                              max_qty="9000.00000000"),
    ("usdm", "BTCUSDT"): dict(base="BTC", quote="USDT", tick="0.10", min_px="556.80", max_px="4529764",
                              step="0.001", min_qty="0.001", max_qty="1000", px_prec=2, qty_prec=3),
    ("usdm", "ETHUSDT"): dict(base="ETH", quote="USDT", tick="0.01", min_px="39.86", max_px="306177",
                              step="0.001", min_qty="0.001", max_qty="10000", px_prec=2, qty_prec=3),
    ("coinm", "BTCUSD_PERP"): dict(base="BTC", quote="USD", tick="0.1", min_px="1000", max_px="4520958",
                                   step="1", min_qty="1", max_qty="1000000", px_prec=1, qty_prec=0,
                                   contract_size=100),
    ("coinm", "ETHUSD_PERP"): dict(base="ETH", quote="USD", tick="0.01", min_px="50", max_px="306177",
                                   step="1", min_qty="1", max_qty="1000000", px_prec=2, qty_prec=0,
                                   contract_size=10),
}

# `<symbol>@<type>` as Binance names streams (lower case); `!` streams are market-wide.
STREAM_RE = re.compile(
    r"^(?:[a-z0-9_]+@(?:depth(?:5|10|20)?(?:@(?:0|100|250|500|1000)ms)?|bookTicker|trade|aggTrade"
    r"|kline_(?:1s|1m|3m|5m|15m|30m|1h|2h|4h|6h|8h|12h|1d|3d|1w|1M)|miniTicker|ticker|ticker_(?:1h|4h|1d)"
    r"|avgPrice|markPrice(?:@1s)?|indexPrice(?:@1s)?|forceOrder|rpiDepth@500ms)"
    r"|!(?:bookTicker|miniTicker@arr|ticker@arr|markPrice@arr(?:@1s)?|forceOrder@arr))$")

ERRORS = {  # HTTP status -> Binance's error body for rest_status faults
    429: {"code": -1003, "msg": "Too many requests; current limit of IP(127.0.0.1) request weight per minute is 6000. "
                               "Please use WebSocket Streams for live updates to avoid polling the API."},
    418: {"code": -1003, "msg": "Way too much request weight used; IP banned until {until}. "
                               "Please use WebSocket Streams for live updates to avoid bans."},
    403: {"code": -1003, "msg": "WAF limit violated."},
    500: {"code": -1001, "msg": "Internal error; unable to process your request. Please try again."},
    503: {"code": -1008, "msg": "Server is currently overloaded with other requests. Please try again in a few minutes."},
}
INVALID_SYMBOL = {"code": -1121, "msg": "Invalid symbol."}
UNKNOWN_ERROR = {"code": -1000, "msg": "An unknown error occured while processing the request."}
NO_SYMBOL = {"code": -1102, "msg": "Mandatory parameter 'symbol' was not sent, was empty/null, or malformed."}
BAD_LIMIT = {"code": -1100, "msg": "Illegal characters found in parameter 'limit'; legal range is '^[0-9]{1,20}$'."}
BAD_SYMBOLS = {"code": -1100, "msg": "Illegal characters found in parameter 'symbols'; legal range is "
                                     "'^\\[(\"[A-Z0-9-_.]{1,20}\"(,\"[A-Z0-9-_.]{1,20}\"){0,}){0,1}\\]$'."}
QUEUE_FRAMES = 1024  # how far the market may run ahead of one connection's socket
WRITE_BATCH = 256  # frames per socket write
OVERSIZED_BYTES = 2 * 1024 * 1024

# a connection's states
LIVE, SILENT, HALF_OPEN, CLOSED, HOSTILE = "live", "silent", "half_open", "closed", "hostile"
WS_FAULTS = ("fragments", "big_pings", "ping_flood", "trickle", "close")
REST_FAULTS = ("retry_after_0", "retry_after_huge", "garbage", "bad_json", "stale", "huge", "never", "list",
               "not_objects", "nested", "refused")
