"""The binance-live:// URI that reads a venue: the capture's symbols and the streams it holds."""
from feeds.binance.params import LIVE


def live_uri(market, cap, ws_url, rest_url):
    """binance-live://MARKET?symbols=..&ws=..&rest=.., with update, trades and book_ticker where the
    capture's streams are not the source's defaults (else the client would subscribe streams the
    capture lacks, which stay quiet)."""
    streams = {s.split("@", 1)[1] for s in cap.stream if s and "@" in s}
    q = {"symbols": ",".join(cap.symbols)}
    depth = sorted(s for s in streams if s == "depth" or s.startswith("depth@"))
    update = "none" if "depth" in depth else depth[0].split("@")[1] if depth else "100ms"
    if update != "100ms":
        q["update"] = update
    if "trade" not in streams:
        q["trades"] = "aggTrade" if "aggTrade" in streams else "none"
    if "bookTicker" not in streams:
        q["book_ticker"] = "off"
    return LIVE.write(market, **q, ws=ws_url, rest=rest_url)
