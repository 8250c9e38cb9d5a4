"""The hftbacktest side of bench/backtest_speed.py's execution comparison, run in its own virtualenv.

Strategy (the same rule as strategies/touch_imbalance.py): on every feed event, once `warmup`
two-sided touches were seen, the touch imbalance (bid qty - ask qty) / (bid qty + ask qty) at or
above `threshold` wants +1 lot, at or below -threshold -1 lot, else keeps the last want; when
the want changes, cancel what works and post (GTX) the difference at our side's touch.
hftbacktest: PowerProbQueueModel(power), partial fills, constant order latency, fees on traded
value. Prints one JSON object: pnl (quote currency), fees, fills, traded lots, seconds (its
backtest loop, the second run: the first compiles the strategy)."""
import json
import sys
import time

from numba import njit

from hftbacktest import GTX, LIMIT, BacktestAsset, HashMapMarketDepthBacktest
from hftbacktest.data.utils import binancefutures


@njit
def touch_maker(hbt, threshold, warmup, lot):
    seen = 0
    want = 0
    oid = 0
    while True:
        r = hbt.wait_next_feed(True, 60_000_000_000)
        if r == 1:  # end of data
            break
        if r != 2:
            continue
        d = hbt.depth(0)
        bq = d.bid_qty_at_tick(d.best_bid_tick)
        aq = d.ask_qty_at_tick(d.best_ask_tick)
        if bq <= 0 or aq <= 0:
            continue
        seen += 1
        if seen < warmup:
            continue
        imb = (bq - aq) / (bq + aq)
        new = want
        if imb >= threshold:
            new = 1
        elif imb <= -threshold:
            new = -1
        if new == want:
            continue
        want = new
        orders = hbt.orders(0)
        it = orders.values()
        while it.has_next():
            o = it.get()
            if o.cancellable:
                hbt.cancel(0, o.order_id, False)
        hbt.clear_inactive_orders(0)
        diff = want * lot - hbt.position(0)
        if abs(diff) < lot / 2:
            continue
        oid += 1
        if diff > 0:
            hbt.submit_buy_order(0, oid, d.best_bid, diff, GTX, LIMIT, False)
        else:
            hbt.submit_sell_order(0, oid, d.best_ask, -diff, GTX, LIMIT, False)
    d = hbt.depth(0)
    mid = (d.best_bid + d.best_ask) / 2.0
    sv = hbt.state_values(0)
    return sv.balance + hbt.position(0) * mid - sv.fee, sv.fee, sv.num_trades, sv.trading_volume, hbt.position(0)


def main():
    path = sys.argv[1]
    a = json.loads(sys.argv[2])
    data = binancefutures.convert(path, buffer_size=5_000_000)
    times = []
    for _ in range(2):  # the first run compiles the strategy; the second is timed
        asset = (BacktestAsset().data([data]).linear_asset(1.0)
                 .constant_order_latency(a["entry_ns"], a["response_ns"])
                 .power_prob_queue_model(a["queue_power"]).partial_fill_exchange()
                 .trading_value_fee_model(a["maker_bps"] / 1e4, a["taker_bps"] / 1e4)
                 .tick_size(0.1).lot_size(0.001))
        hbt = HashMapMarketDepthBacktest([asset])
        t = time.perf_counter()
        pnl, fee, fills, volume, pos = touch_maker(hbt, a["threshold"], a["warmup"], 0.001)
        times.append(time.perf_counter() - t)
        hbt.close()
    dt = times[-1]
    print(json.dumps({"pnl": pnl, "fees": fee, "fills": int(fills), "traded_lots": round(volume / 0.001),
                      "position_lots": round(pos / 0.001), "events": int(len(data)), "seconds": dt}))


if __name__ == "__main__":
    main()
