"""The hftbacktest side of bench/backtest.py, run in its own virtualenv (hftbacktest pins an
older numpy than the engine). Converts the Binance USD-M capture with hftbacktest's own
converter, then replays it through HashMapMarketDepthBacktest with a trivial strategy that
reads the touch on every feed event (wait_next_feed) and keeps a running imbalance signal.
Prints one JSON object: events, feed events seen, seconds (best of --reps)."""
import json
import sys
import time

from numba import njit

from hftbacktest import BacktestAsset, HashMapMarketDepthBacktest
from hftbacktest.data.utils import binancefutures


@njit
def trivial(hbt):
    seen = 0
    acc = 0.0
    while hbt.wait_next_feed(False, 10_000_000_000) == 2:  # 2: a feed event arrived
        d = hbt.depth(0)
        bq = d.bid_qty_at_tick(d.best_bid_tick)
        aq = d.ask_qty_at_tick(d.best_ask_tick)
        if bq + aq > 0:
            acc += (bq - aq) / (bq + aq)
        seen += 1
    return seen, acc


def main():
    path, reps = sys.argv[1], int(sys.argv[2])
    data = binancefutures.convert(path, buffer_size=5_000_000)
    times = []
    for _ in range(reps + 1):  # the first run compiles
        asset = (BacktestAsset().data([data]).linear_asset(1.0).constant_order_latency(0, 0)
                 .risk_adverse_queue_model().no_partial_fill_exchange().trading_value_fee_model(0.0, 0.0)
                 .tick_size(0.1).lot_size(0.001))
        hbt = HashMapMarketDepthBacktest([asset])
        t = time.perf_counter()
        seen, _ = trivial(hbt)
        dt = time.perf_counter() - t
        hbt.close()
        times.append(dt)
    print(json.dumps({"events": int(len(data)), "feed_events": int(seen), "seconds": min(times[1:])}))


if __name__ == "__main__":
    main()
