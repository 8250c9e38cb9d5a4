"""The market simulator's declaration (feeds/core/params.py): `synthetic://?...`."""
from feeds.core import uri as U
from feeds.core.params import DEPTH, Kind, Param

SYNTHETIC = Kind(
    "synthetic", "", "the market simulator",
    "The market simulator (feeds/synthetic/market.py): instruments whose books, trades and "
    "order flow carry learnable information about the next mid.",
    (Param("instruments", U.int_in(1, 65535), 4, "1..65535",
           "how many instruments"),
     Param("rate", U.finite_nonneg, 100_000.0, "number >= 0", "ticks a second, every tick counted (0: as fast as "
           "it goes); a pace: the commands that read flat out refuse another", unit="ticks/s",
           pace=(0.0, "count= says how many ticks")),
     Param("seed", int, 1, "integer", "the random seed: one seed, one market"),
     Param("trade_prob", U.float_in(0, 1), 0.1, "0..1",
           "the chance an event is a trade"),
     Param("gap_us", U.finite_pos, 10.0, "number > 0", "mean exchange-time gap between events", unit="us"),
     Param("count", U.nonneg_int, 0, "integer >= 0", "stop after this many ticks, every tick counted (0: never)"),
     DEPTH),
    "synthetic://?instruments=4&seed=1&rate=100000", slashes=True,
    notes="An event writes its level ticks, its trade, then a quote if the touch changed or a book tick if only "
          "deeper levels did (engine/records.py).")
