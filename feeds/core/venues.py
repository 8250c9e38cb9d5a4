"""What each venue's instruments are worth and cost to trade: the one owner of these facts.

Sources make their instrument records here (engine/instruments.py says what a record holds) from
what they know of their data (Binance's size_unit and market, a CME symbol's root, an ITCH
stock); backtests take the venue's standard fees from `fees()`. An older tick file that carries
only names is described from its source URI by `from_uri`, with the same defaults its source
would use today.
"""
import re
from urllib.parse import parse_qsl, urlsplit

from engine import instruments as I

# Binance defaults (feeds/binance/capture.py reads them too): a record size unit is 1e-5 of the base asset
# (BTC's step on spot; futures steps are multiples of it)
BINANCE_SIZE_UNIT = 1e-5
BINANCE_MARKETS = {"spot": "BINANCE", "usdm": "BINANCE-F", "coinm": "BINANCE-D"}
_QUOTES = ("USDT", "USDC", "FDUSD", "BUSD", "TUSD", "BTC", "ETH", "BNB", "EUR", "TRY", "USD")

# CME Globex futures by root: (USD per 1.0 of price per contract, tick size). CME Group contract specs.
CME_ROOTS = {"ES": (50.0, 0.25), "MES": (5.0, 0.25), "NQ": (20.0, 0.25), "MNQ": (2.0, 0.25),
             "YM": (5.0, 1.0), "MYM": (0.5, 1.0), "RTY": (50.0, 0.1), "M2K": (5.0, 0.1),
             "CL": (1000.0, 0.01), "MCL": (100.0, 0.01), "GC": (100.0, 0.1), "MGC": (10.0, 0.1),
             "ZN": (1000.0, 1 / 64), "ZB": (1000.0, 1 / 32), "6E": (125000.0, 0.00005)}

# Standard fees: the published tier of an account with no volume and no discounts, as of the date
# given. They are defaults for backtests, not your account's: give yours with --maker-bps,
# --fee-bps, --per-lot or an --instruments file. bp of notional (negative = rebate); per_lot in
# the instrument's currency per lot per fill.
FEE_DATE = "2026-11"
FEES = {
    # https://www.binance.com/en/fee/schedule: Regular user (VIP 0), spot, without the BNB discount
    "BINANCE": {"maker_bps": 10.0, "taker_bps": 10.0, "per_lot": 0.0,
                "source": f"Binance spot, Regular user (VIP 0) without BNB discount: 0.1000% maker, 0.1000% taker "
                          f"(binance.com/en/fee/schedule, {FEE_DATE})"},
    # https://www.binance.com/en/fee/futureFee: USD-M, Regular user (VIP 0), without the BNB discount
    "BINANCE-F": {"maker_bps": 2.0, "taker_bps": 5.0, "per_lot": 0.0,
                  "source": f"Binance USD-M futures, Regular user (VIP 0) without BNB discount: 0.0200% maker, "
                            f"0.0500% taker (binance.com/en/fee/futureFee, {FEE_DATE})"},
    # the same page, COIN-M tab: Regular user (VIP 0)
    "BINANCE-D": {"maker_bps": 2.0, "taker_bps": 5.0, "per_lot": 0.0,
                  "source": f"Binance COIN-M futures, Regular user (VIP 0): 0.0200% maker, 0.0500% taker "
                            f"(binance.com/en/fee/futureFee, {FEE_DATE})"},
}
# CME Globex exchange fee for non-members per contract per side, plus the NFA's 0.02 regulatory fee;
# not the broker's commission nor clearing (your FCM's). As CME's fee schedule lists them, seen on
# interactivebrokers.com/en/accounts/fees/CME.php (exchange fee recovery, non-member), 2026-11.
CME_FEE_GROUPS = (
    (("ES", "NQ", "RTY", "YM"), 1.38, "E-mini equity index"),
    (("MES", "MNQ", "M2K", "MYM"), 0.35, "Micro E-mini equity index"),
    (("6E",), 1.60, "FX futures"),
)
NFA_FEE = 0.02


def _cme_root(sym):
    m = re.match(r"^([A-Z0-9]{1,3}?)[FGHJKMNQUVXZ]\d{1,2}$", sym)
    return m.group(1) if m else None


def binance(symbol, size_unit=BINANCE_SIZE_UNIT, market="spot"):
    """A Binance instrument: a lot is size_unit of the base asset, priced in the quote asset.
    COIN-M contracts are inverse (priced in USD, settled in the coin)."""
    quote = next((q for q in _QUOTES if symbol.upper().endswith(q) and len(symbol) > len(q)), "quote currency")
    inverse = market == "coinm"
    if inverse:  # BTCUSD_PERP: contracts of USD, PnL in the base coin
        quote = symbol.split("_")[0][:-3] if symbol.split("_")[0].upper().endswith("USD") else quote
    return I.make(symbol, BINANCE_MARKETS[market], multiplier=size_unit, currency=quote, calendar="crypto",
                  lot_size=size_unit, inverse=inverse)


def cme(symbol):
    """A CME Globex future by its root (ESH4: ES, 50 USD a point, tick 0.25); an unknown root is
    CME's calendar and currency with a placeholder multiplier (said as unknown)."""
    root = _cme_root(symbol)
    if root in CME_ROOTS:
        mult, tick = CME_ROOTS[root]
        return I.make(symbol, "CME", multiplier=mult, currency="USD", calendar="cme", tick_size=tick, lot_size=1.0)
    return I.make(symbol, "CME", currency="USD", calendar="cme", known=False)


def nasdaq(symbol):
    """A Nasdaq-listed stock: a lot is a share, priced in USD to the cent."""
    return I.make(symbol, "NASDAQ", multiplier=1.0, currency="USD", calendar="us_equities", tick_size=0.01,
                  lot_size=1.0)


SYNTHETIC_TICK = 0.01  # the simulator's price increment (feeds/synthetic/market.py quotes in it)


def synthetic(symbol, tick_size=SYNTHETIC_TICK):
    """An instrument of the built-in simulator: a lot is 1 unit, it never closes, it has no fees."""
    return I.make(symbol, "SYNTHETIC", multiplier=1.0, currency="USD", calendar="crypto", tick_size=tick_size,
                  lot_size=1.0)


def fees(spec):
    """{maker_bps, taker_bps, per_lot, source} of an instrument's venue's standard tier, or None
    when no published fee is known here (the caller says so: a zero-cost run). By the venue's own
    symbol, whatever the record is called in a run (CME:ESH4 is ESH4 at CME)."""
    from engine.universe import venue_symbol
    venue, sym = spec["venue"], venue_symbol(spec)
    if venue in FEES:
        return dict(FEES[venue])
    if venue == "CME":
        root = _cme_root(sym)
        for roots, fee, what in CME_FEE_GROUPS:
            if root in roots:
                return {"maker_bps": 0.0, "taker_bps": 0.0, "per_lot": round(fee + NFA_FEE, 4),
                        "source": f"CME {what} exchange fee {fee:.2f} + NFA {NFA_FEE:.2f} USD per contract per side, "
                                  f"non-member, no broker commission (CME fee schedule, {FEE_DATE})"}
    return None


def from_uri(uri, symbol):
    """The record a source named by `uri` would make for `symbol` today (for files that carry only
    names: older tick files, rings of older feeds). Sources that cannot say (a ring) give unknown."""
    scheme = (uri or "").split(":", 1)[0].lower()
    if scheme == "binance":
        q = dict(parse_qsl(urlsplit(uri.split(":", 1)[1]).query))
        try:
            unit = float(q.get("size_unit", BINANCE_SIZE_UNIT))
        except ValueError:
            unit = BINANCE_SIZE_UNIT
        market = q.get("market", "spot")
        if market not in BINANCE_MARKETS:
            market = "coinm" if "_" in symbol else "spot"
        return binance(symbol, unit, market)
    if scheme == "dbn":
        return cme(symbol)
    if scheme in ("itch", "moldudp64"):
        return nasdaq(symbol)
    if scheme == "synthetic":
        return synthetic(symbol)
    return I.unknown(symbol)


class Specs:
    """A source's instrument records, made once per name as its table grows (`of(names)`)."""

    def __init__(self, make):
        self.make = make
        self.cache = []

    def of(self, names):
        names = list(names)
        if [s["symbol"] for s in self.cache] != names[:len(self.cache)]:
            self.cache = []
        for n in names[len(self.cache):]:
            self.cache.append(self.make(n))
        return list(self.cache)


def of_file(tf):
    """A tick file's instrument records: its own, or for an older file that has names only, what
    its source would say today (`from_uri`; unknown for a recording of a ring)."""
    specs = tf.specs
    return specs if specs is not None else [from_uri(tf.source, n) for n in tf.instruments]
