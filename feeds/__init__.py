"""Market-data sources that turn a feed into the engine's normalised 64-byte ticks.

A folder per venue, each with its capture reader, live client and book rules: binance/,
databento/, nasdaq/ (ITCH, MoldUDP64), synthetic/ (the simulator). What they share has its own:
core/ (the source registry and URI grammar, capture files, publishing into the ring, venue
facts, feed latency), books/ (the order books, the ticks written from them, depth windows, the
crossed-book watch), transport/ (the websocket client). A venue imports core/, books/ and
transport/, never another venue; those three import no venue (feeds/core/sources.py names each
venue's source class as a string, imported when a URI names it). Above the rooms: process.py (the
feed process, which runs any source into its ring) and convert.py (`engine convert`: any source to
any format).

Layer: above the core. Imports the engine core (engine/*.py: records, rings, shm) only; never
models/, replay/, fpga/ or the application (app/). tests/test_layers.py checks this.
"""

from engine.components import name_components

NUMBA_CACHE_KEY = True  # these sources key the numba cache (engine/__init__.py): compiled code here inlines across modules

# what the compile notices call this package's compiled functions (engine/compile_notice.py)
name_components({
    "feeds": ("feed", "the order book and tick publisher"),
    **{f"feeds.binance.{m}": ("feed", "the Binance parser") for m in (
        "scan", "message", "depth_events", "book_ticker", "trades", "symbols", "held", "view", "crosscheck", "layout")},
    "feeds.core.jscan": ("feed", "the Binance parser"),
    "feeds.databento.dbn": ("feed", "the DBN parser"),
    "feeds.nasdaq.itch": ("feed", "the ITCH 5.0 parser"),
    "feeds.synthetic.market": ("feed", "the market simulator"),
    "feeds.nasdaq.itch_writer": ("feed", "the ITCH writer"),
    "feeds.nasdaq.mold_server": ("feed", "the MoldUDP64 server"),
})
