"""The paper trader's money (app/paper.py): per instrument, cash and fees of the fills booked at the
instruments' money facts, the last two-sided mid, PnL gross and net marked to it, and the net's
peaks; per currency the same figures summed (never across currencies), and a converted total only
at the rates the user gave (--fx). The trader's thread alone changes them, under its figures lock."""
import numpy as np

from engine.records import KIND_BOOK, KIND_QUOTE, KIND_TRADE, PRICE_SCALE, tick_instruments, tick_kinds

from replay.evaluate import UNKNOWN_CURRENCY

CONVERTED = object()  # (the converted total's peak, beside each currency's)


class PaperMoney:
    """k instruments; x: replay.execsim (its spec columns and fee rule); fx: --fx's rates or None."""

    def __init__(self, k, x, fx):
        self.x, self.fx = x, fx
        self.fills = []             # (rows, fees) chunks
        self.cash = np.zeros(k)     # per instrument, quote currency, before fees
        self.fees_paid = np.zeros(k)
        self.nfills = np.zeros(k, np.int64)  # fills per instrument
        self.mid = np.zeros(k)      # last two-sided mid, price units
        self.peak = {}              # each currency's net PnL peak (and the converted total's: CONVERTED)
        self.peaks = np.zeros(k)    # each instrument's net PnL peak (its drawdown is below it)
        self.cur = np.full(k, UNKNOWN_CURRENCY, object)  # each instrument's currency, as its record says
        self.known = np.zeros(k, bool)  # (an instrument nothing describes names no currency until it trades)
        self.spec, self.spec_at = None, 0.0

    def marks(self, w):
        """The last two-sided mid of each instrument in w (quotes, trades and book ticks carry it)."""
        kinds = tick_kinds(w)
        ok = ((kinds == KIND_QUOTE) | (kinds == KIND_TRADE) | (kinds == KIND_BOOK)) & (w[:, 4] > 0) & (w[:, 5] > 0)
        inst = tick_instruments(w)[ok]
        ok_inst = inst < len(self.mid)
        self.mid[inst[ok_inst]] = (w[ok, 4][ok_inst] + w[ok, 5][ok_inst]) / 2.0

    def price(self, dicts, pos):
        """The instruments' money facts (replay/costs.py resolve's dicts); when they changed, every
        fill so far is priced again."""
        from replay.costs import spec_array
        spec = spec_array(dicts)
        cur = np.array([d["currency"] for d in dicts], object)
        self.known = np.array([d["known"] for d in dicts], bool)
        if self.spec is None or not np.array_equal(spec, self.spec) or not np.array_equal(cur, self.cur):
            self.spec, self.cur = spec, cur
            self.cash[:] = 0.0
            self.fees_paid[:] = 0.0
            for rows, _ in self.fills:
                self.book(rows)
            p = self.pnl(pos)  # (the peaks were of the old prices: from here on, the new ones'; a
            self.peak = {c: f["net"] for c, f in p["by_currency"].items()}  # drawdown limit must not fire
            if p["converted"] is not None:                                   # on a re-pricing)
                self.peak[CONVERTED] = p["converted"]["net"]
            self.peaks[:] = p["net"]

    def book(self, rows):
        """A batch of fills into the cash and fees per instrument, at the current spec."""
        inst = rows[:, 4]
        np.add.at(self.cash, inst, -rows[:, 5] * (rows[:, 6] / PRICE_SCALE) * self.spec[inst, self.x.SP_MULT])
        fee = np.zeros(len(rows))
        self.x.fees_of(rows, self.spec, fee)
        np.add.at(self.fees_paid, inst, fee)

    def filled(self, rows, fees):
        """New fills, kept (a re-pricing books them all again) and booked."""
        self.fills.append((rows, fees))
        np.add.at(self.nfills, rows[:, 4], 1)  # (not in book: a re-pricing books every fill again)
        self.book(rows)

    def pnl(self, pos):
        """Per instrument: position (lots filled), fills, gross and net PnL marked to the last mid,
        fees, and the drawdown of the net from its own peak, each in its currency (`currency`); per
        currency of the instruments traded (none yet: of those described), `by_currency`: net,
        gross, fees, fills, drawdown. Never a sum across currencies: `converted` is
        the total at the rates the user gave (replay/currency.py), else None."""
        spec = self.spec if self.spec is not None else np.ones((len(pos), 4))
        mult = spec[:, self.x.SP_MULT]
        gross = self.cash + pos * (self.mid / PRICE_SCALE) * mult
        net = gross - self.fees_paid
        traded = (self.nfills > 0) | (pos != 0)
        by = {}
        # the currencies of the instruments traded (none yet: of those described; an id nothing
        # describes, as a run's unused ids between two sources' blocks, names no currency)
        for c in sorted(set(self.cur[traded]) or set(self.cur[self.known])):
            sel = self.cur == c
            n = float(net[sel].sum())
            by[str(c)] = {"net": n, "gross": float(gross[sel].sum()), "fees": float(self.fees_paid[sel].sum()),
                          "fills": int(self.nfills[sel].sum()), "drawdown": max(self.peak.get(c, 0.0), n) - n}
        return {"position": pos.copy(), "gross": gross, "net": net, "fees": self.fees_paid.copy(),
                "fills_by": self.nfills.copy(), "drawdown_by": np.maximum(self.peaks, net) - net,
                "currency": self.cur.copy(), "by_currency": by, "converted": self.converted(by),
                "fills": int(self.nfills.sum())}

    def converted(self, by):
        """The run's net, gross, fees and drawdown at the --fx rates, when they cover every currency."""
        from replay.currency import rate
        fx = self.fx
        if not fx or not by or any(rate(fx, c) is None for c in by):
            return None
        out = {k: sum(rate(fx, c) * f[k] for c, f in by.items()) for k in ("net", "gross", "fees")}
        out["drawdown"] = max(self.peak.get(CONVERTED, 0.0), out["net"]) - out["net"]
        return {"currency": fx["to"], "rates": dict(fx["rates"]), **out}

    def raise_peaks(self, p):
        """The peaks moved up to pnl()'s figures `p`."""
        for c, f in p["by_currency"].items():
            self.peak[c] = max(self.peak.get(c, 0.0), f["net"])
        if p["converted"] is not None:
            self.peak[CONVERTED] = max(self.peak.get(CONVERTED, 0.0), p["converted"]["net"])
        np.maximum(self.peaks, p["net"], out=self.peaks)
