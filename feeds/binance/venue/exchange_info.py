"""exchangeInfo: the capture's symbol(s) with Binance's filters (tables.SYMBOLS), asked by
symbol=X, symbols=["X",...] or neither; any other symbol is HTTP 400 -1121."""
import json
import time

from aiohttp import web

from .rest import error
from .tables import BAD_SYMBOLS, INVALID_SYMBOL, SYMBOLS


async def reply(v, request):
    q = request.query
    if "symbol" in q:
        wanted = [q["symbol"]]
    elif "symbols" in q:
        try:
            wanted = json.loads(q["symbols"])
            if not isinstance(wanted, list) or not all(isinstance(s, str) for s in wanted):
                raise ValueError
        except ValueError:
            return error(BAD_SYMBOLS), v.info_weight
    else:
        wanted = list(v.cap.symbols)
    if any(s not in v.cap.symbols for s in wanted):
        return error(INVALID_SYMBOL), v.info_weight
    now = int(time.time() * 1000)
    body = {"timezone": "UTC", "serverTime": now,
            "rateLimits": [{"rateLimitType": "REQUEST_WEIGHT", "interval": "MINUTE", "intervalNum": 1,
                            "limit": 6000 if v.market == "spot" else 2400}],
            "exchangeFilters": [], "symbols": [symbol_info(v.market, s) for s in wanted]}
    return web.json_response(body), v.info_weight


def symbol_info(market, sym):
    """exchangeInfo's entry for `sym` on `market`."""
    info = SYMBOLS.get((market, sym))
    if info is None:  # a symbol the table lacks: sizes as the capture's strings show them
        info = dict(base=sym[:3], quote=sym[3:].split("_")[0], tick="0.01", min_px="0.01", max_px="1000000",
                    step="0.001", min_qty="0.001", max_qty="1000", px_prec=2, qty_prec=3, contract_size=1)
    filters = [
        {"filterType": "PRICE_FILTER", "minPrice": info["min_px"], "maxPrice": info["max_px"],
         "tickSize": info["tick"]},
        {"filterType": "LOT_SIZE", "minQty": info["min_qty"], "maxQty": info["max_qty"], "stepSize": info["step"]},
    ]
    if market == "spot":
        filters.append({"filterType": "NOTIONAL", "minNotional": "5.00000000", "applyMinToMarket": True,
                        "maxNotional": "9000000.00000000", "applyMaxToMarket": False, "avgPriceMins": 5})
        return {"symbol": sym, "status": "TRADING", "baseAsset": info["base"], "baseAssetPrecision": 8,
                "quoteAsset": info["quote"], "quotePrecision": 8, "quoteAssetPrecision": 8,
                "orderTypes": ["LIMIT", "LIMIT_MAKER", "MARKET", "STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"],
                "isSpotTradingAllowed": True, "filters": filters, "permissions": [], "permissionSets": [["SPOT"]]}
    filters.append({"filterType": "MARKET_LOT_SIZE", "minQty": info["min_qty"], "maxQty": info["max_qty"],
                    "stepSize": info["step"]})
    d = {"symbol": sym, "pair": sym.split("_")[0], "contractType": "PERPETUAL", "status": "TRADING",
         "baseAsset": info["base"], "quoteAsset": info["quote"],
         "marginAsset": info["quote"] if market == "usdm" else info["base"],
         "pricePrecision": info["px_prec"], "quantityPrecision": info["qty_prec"],
         "baseAssetPrecision": 8, "quotePrecision": 8, "filters": filters}
    if market == "coinm":
        d.update(contractStatus="TRADING", contractSize=info["contract_size"])
    return d
