"""The venue's own book, from which it answers REST depth."""


class Book:
    """One side per dict: price string -> (price as float for sorting, qty string). Exact strings in,
    exact strings out, as Binance's REST depth gives them."""

    def __init__(self):
        self.bids, self.asks, self.last_id = {}, {}, None
        self.E = self.T = None  # futures: the event/transaction time (ms) of what the book last applied

    def reset(self, snap):
        self.E, self.T = snap.get("E"), snap.get("T")
        self.bids = {p: (float(p), q) for p, q in snap["bids"]}
        self.asks = {p: (float(p), q) for p, q in snap["asks"]}
        self.last_id = snap["lastUpdateId"]

    def apply(self, d):
        u = d["u"]
        if self.last_id is not None and u <= self.last_id:
            return  # already in the snapshot
        for side, levels in ((self.bids, d["b"]), (self.asks, d["a"])):
            for p, q in levels:
                if float(q) == 0.0:
                    side.pop(p, None)
                else:
                    side[p] = (float(p), q)
        self.last_id = u
        self.E, self.T = d.get("E"), d.get("T", d.get("E"))

    def top(self, limit):
        b = sorted(self.bids.items(), key=lambda kv: kv[1][0], reverse=True)[:limit]
        a = sorted(self.asks.items(), key=lambda kv: kv[1][0])[:limit]
        return [[p, v[1]] for p, v in b], [[p, v[1]] for p, v in a]
