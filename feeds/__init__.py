"""Market-data sources that turn a feed into the engine's normalised 64-byte ticks.

Layer: above the core. Imports the engine core (engine/*.py: records, rings, shm) only; never
models/, replay/, fpga/ or the application (app/). tests/test_layers.py checks this.
"""

from engine.components import name_components

NUMBA_CACHE_KEY = True  # these sources key the numba cache (engine/__init__.py): compiled code here inlines across modules

# what the compile notices call this package's compiled functions (engine/compile_notice.py)
name_components({
    "feeds": ("feed", "the order book and tick publisher"),
    "feeds.binance_scan": ("feed", "the Binance parser"),
    "feeds.jscan": ("feed", "the Binance parser"),
    "feeds.dbn": ("feed", "the DBN parser"),
    "feeds.itch": ("feed", "the ITCH 5.0 parser"),
    "feeds.synthetic": ("feed", "the market simulator"),
    "feeds.itch_writer": ("feed", "the ITCH writer"),
    "feeds.mold_server": ("feed", "the MoldUDP64 server"),
})
