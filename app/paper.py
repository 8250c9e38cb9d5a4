"""`engine run --paper`: the backtest's execution simulator run online, on the live ticks and the
signals as the loop emits them, off the strategy core: positions, fills, PnL gross and net and
drawdown per instrument while the run goes, and at its end the figures a backtest of the run's
recording gives (the same code on the same ticks and signals: replay/evaluate.py).

Where the inputs come from: the ticks are the loop's own, in the order it read them (a second
consumer on the tap ring `--record` drains: host_template run_loop_multi, CFG_TAP), so a signal's
tick_seq is its tick's index here as in the recording; the signals are handed over by the control
plane's drain (app/daemon.py) as it moves them to the signal file. The simulator
(replay/execsim.simulate) keeps all its state in arrays and resumes where it stopped (final=False
until the run ends); a tick is simulated once every signal decided on it has been handed over (the
plane reads the tap's write cursor before each drain: decided()), so orders meet the book they would
have in the backtest. Orders are simulated as `engine backtest` simulates them with the same
execution options (--paper-exec takes the backtest's flags: replay/jobs.Params), entry latencies
handed out in order as a backtest draws them (replay/jobs.EntryLatencies).

Kept in memory: every tick of the run (64 bytes each, the recording's size) for the end's
evaluation. The loop never waits for us: a paper trader that falls a whole tap ring behind loses
ticks, which is counted (`gaps`) and said in the summary (its figures are then not the run's).
"""
import dataclasses
import threading
import time

import numpy as np

from engine.records import (KIND_BOOK, KIND_QUOTE, KIND_TRADE, PRICE_SCALE, SIGNAL_DTYPE, SIGNAL_FLAG_MARK,
                            signal_flags, tick_instruments, tick_kinds)
from engine import shm
from engine.tickring import TickConsumer

from .recorder import drain

BATCH = 4096
IDLE_S = 0.002
SPEC_EVERY_S = 0.2


class PaperTrader(threading.Thread):
    """tap: the tap ring (engine.tickring.TickRing); n_inst: the run's instrument ids; specs():
    the run's instrument records (engine/instruments.py), as the run knows them; kill(code): the
    control plane's kill switch, called when the net PnL falls below -loss or the drawdown passes
    `drawdown` (None: no such limit); p: replay.jobs.Params (the execution options), values: the
    strategy's parameters (its `maker`)."""

    def __init__(self, tap, n_inst, specs, depth, p, values, kill=None, loss=None, drawdown=None):
        super().__init__(name="engine-paper", daemon=True)
        from replay import execsim, jobs
        self.x, self.p = execsim, p
        self.lat = jobs.EntryLatencies(p)
        self.c = TickConsumer(tap.path.rsplit("/", 1)[-1])
        self.c.claim("oldest")  # no back-pressure: the loop never waits for us
        self.buf = np.zeros((BATCH, 8), np.int64)
        self.words = np.zeros((1 << 16, 8), np.int64)
        self.n = 0
        self.decided_upto = 0       # every signal of the ticks before this one is in (decided())
        self.late = 0               # orders whose tick was simulated before they came (conflation held them)
        self.sigs = []              # SIGNAL_DTYPE records handed over, not yet simulated
        self.finished, self.after_end = False, 0  # finish() ran; signals handed over after it
        self.done = []              # the records simulated (chunks)
        self.lock = threading.Lock()
        # the figures (cash, fees, positions, peaks) change together in _step; pnl() from another
        # thread (/status, /metrics) takes this, so a scrape never sees a re-pricing half done
        self.figures_lock = threading.Lock()
        self.specs_fn, self.kill, self.loss, self.drawdown = specs, kill, loss, drawdown
        self.depth = int(depth)
        self.xp = execsim.ExecParams(response_ns=p.response_ns, feed_ns=p.feed_ns, queue_power=p.queue_power,
                                     maker=jobs.maker_orders(p, values))
        k = max(1, int(n_inst))
        self.O = np.zeros((k, 6), np.int64)
        self.F = np.zeros((k, 4), np.float64)
        self.pos = np.zeros(k, np.int64)
        self.book = np.zeros((k, 2, 2, execsim.MAXLV), np.int64)
        self.bn = np.zeros((k, 2), np.int64)
        self.unfilled = np.zeros(4, np.int64)
        self.fbuf = np.zeros((4096, execsim.FILL_WORDS), np.int64)
        self.fee = np.zeros(4096, np.float64)
        self.sig = np.zeros((1024, 4), np.int64)  # the orders so far: sig[:m], arrival[:m], resp[:m]
        self.arrival, self.resp = np.zeros(1024, np.int64), np.zeros(1024, np.int64)
        self.m = 0
        self.j = self.k = 0
        self.fills = []             # (rows, fees) chunks
        self.cash = np.zeros(k)     # per instrument, quote currency, before fees
        self.fees_paid = np.zeros(k)
        self.nfills = np.zeros(k, np.int64)  # fills per instrument
        self.mid = np.zeros(k)      # last two-sided mid, price units
        self.peak = 0.0
        self.peaks = np.zeros(k)    # each instrument's net PnL peak (its drawdown is below it)
        self.spec, self.spec_at = None, 0.0
        self.stop_flag = threading.Event()
        self.error = None
        # compiled (or loaded) now for these exact types, no tick: a first compile in the thread would
        # hold the GIL for seconds while the run goes (the control thread's lease lapses)
        self._step(0)
        execsim.fees_of(self.fbuf[:0], self.spec, self.fee[:0])

    # -- inputs --------------------------------------------------------------------------------

    def signals(self, words):
        """The drain's records (int64 [n, 16]: signals and conflation marks), in emission order."""
        recs = words[(signal_flags(words) & SIGNAL_FLAG_MARK) == 0]
        if len(recs):
            with self.lock:
                if self.finished:  # (a drain thread that was stuck at the end: counted, not silently lost)
                    self.after_end += len(recs)
                    return
                self.sigs.append(recs.copy().view(SIGNAL_DTYPE).reshape(-1))

    def _take_ticks(self):
        n = drain(self.c.hdr, self.c.data, self.c.mask, self.c.slot_base, self.buf)
        if n:
            if self.n + n > len(self.words):
                w = np.zeros((2 * (self.n + n), 8), np.int64)
                w[:self.n] = self.words[:self.n]
                self.words = w
            self.words[self.n:self.n + n] = self.buf[:n]
            self._marks(self.buf[:n])
            self.n += n
        return n

    def tap_written(self):
        """How many ticks the loop has taken (the tap's write cursor): read by the control plane
        before it drains the signals, then handed to decided()."""
        return int(self.c.hdr[shm.H_WRITE])

    def decided(self, upto):
        """The control plane drained every signal there was after the loop had taken `upto` ticks:
        the decisions on all of them are in (a conflated one may come later: counted as late)."""
        self.decided_upto = max(self.decided_upto, int(upto))

    def _marks(self, w):
        """The last two-sided mid of each instrument in w (quotes, trades and book ticks carry it)."""
        kinds = tick_kinds(w)
        ok = ((kinds == KIND_QUOTE) | (kinds == KIND_TRADE) | (kinds == KIND_BOOK)) & (w[:, 4] > 0) & (w[:, 5] > 0)
        inst = tick_instruments(w)[ok]
        ok_inst = inst < len(self.mid)
        self.mid[inst[ok_inst]] = (w[ok, 4][ok_inst] + w[ok, 5][ok_inst]) / 2.0

    def _new_orders(self):
        """Signals whose tick we hold join the simulator's order list (in emission order)."""
        with self.lock:
            if not self.sigs:
                return
            s = np.concatenate(self.sigs)
            later = s["tick_seq"] >= self.n  # (the prefix whose ticks we hold: emission order kept)
            ready = int(np.argmax(later)) if later.any() else len(s)
            take, rest = s[:ready], s[ready:]
            self.sigs = [rest] if len(rest) else []
        if not len(take):
            return
        self.done.append(take)
        act = take[take["position"] != take["prev_position"]]  # (a refused decision sends no order)
        if not len(act):
            return
        # (arrival: exchange time + latency; a live run's receive stamps are CLOCK_MONOTONIC, never
        # comparable with the exchange's, so each order's arrival is fixed by its own tick alone)
        xp = dataclasses.replace(self.xp, entry_ns=self.lat.take(len(act)))
        sig, arrival, resp, _, _ = self.x.order_inputs(self.words[:self.n], act, xp)
        self.late += int((sig[:, 3] < self.j).sum())  # (simulated past already: they meet the book from here)
        m = self.m + len(sig)
        if m > len(self.sig):  # (grown by doubling: a long run's orders are not copied per batch)
            cap = max(2 * len(self.sig), m)
            self.sig = np.resize(self.sig, (cap, 4))
            self.arrival, self.resp = np.resize(self.arrival, cap), np.resize(self.resp, cap)
        self.sig[self.m:m], self.arrival[self.m:m], self.resp[self.m:m] = sig, arrival, resp
        self.m = m

    # -- the simulator -------------------------------------------------------------------------

    def _specs(self, dicts=False):
        """The instruments' money facts as the backtest resolves them (records, --instruments, fees
        given): float64[n, 4], or the per-instrument dicts."""
        from replay import costs, jobs
        from engine.instruments import unknown
        recs = list(self.specs_fn() or [])
        recs += [unknown(str(i)) for i in range(len(recs), len(self.pos))]
        specs = costs.resolve(recs[:len(self.pos)], self.p.instruments, jobs.fee_overrides(self.p))
        return specs if dicts else costs.spec_array(specs)

    def _refresh_spec(self, force=False):
        """The instruments' money facts, looked at every SPEC_EVERY_S: a feed names instruments as it
        reads, so fills may come before their record; then every fill so far is priced again."""
        now = time.monotonic()
        if not force and self.spec is not None and now - self.spec_at < SPEC_EVERY_S:
            return
        self.spec_at = now
        spec = self._specs()
        if self.spec is None or not np.array_equal(spec, self.spec):
            self.spec = spec
            self.cash[:] = 0.0
            self.fees_paid[:] = 0.0
            for rows, _ in self.fills:
                self._book(rows)
            p = self._pnl()  # (the peaks were of the old prices: from here on, the new ones'; a
            self.peak = p["total_net"]  # drawdown limit must not fire on a re-pricing)
            self.peaks[:] = p["net"]

    def _book(self, rows):
        """A batch of fills into the cash and fees per instrument, at the current spec."""
        inst = rows[:, 4]
        np.add.at(self.cash, inst, -rows[:, 5] * (rows[:, 6] / PRICE_SCALE) * self.spec[inst, self.x.SP_MULT])
        fee = np.zeros(len(rows))
        self.x.fees_of(rows, self.spec, fee)
        np.add.at(self.fees_paid, inst, fee)

    def _step(self, upto, final=False):
        with self.figures_lock:
            return self._step_locked(upto, final)

    def _step_locked(self, upto, final):
        self._refresh_spec(force=final)
        j, k, nf = self.x.simulate(self.words[:upto], self.j, self.k, self.sig[:self.m], self.arrival[:self.m],
                                   self.resp[:self.m], self.spec,
                                   float(self.xp.queue_power), self.depth, self.O, self.F, self.pos, self.book, self.bn, self.fbuf, self.fee,
                                   self.unfilled, final)
        self.j, self.k = j, k
        if nf:
            rows, fees = self.fbuf[:nf].copy(), self.fee[:nf].copy()
            self.fills.append((rows, fees))
            np.add.at(self.nfills, rows[:, 4], 1)  # (not in _book: a re-pricing books every fill again)
            self._book(rows)
        return nf

    def run(self):
        try:
            while not self.stop_flag.is_set():
                got = self._take_ticks()
                self._new_orders()
                upto = max(self.j, min(self.n, self.decided_upto))  # (a tick is simulated once its orders are in)
                while self._step(upto) >= len(self.fbuf) - 2 * self.x.MAXLV - 8:
                    pass  # (the fill buffer filled up: go on where it stopped)
                self._check_limits()
                if not got:
                    time.sleep(IDLE_S)
        except Exception as e:  # noqa: BLE001 - said in the summary; the run goes on without paper figures
            self.error = e

    # -- figures -------------------------------------------------------------------------------

    def pnl(self):
        """_pnl's figures, taken between two of this thread's steps (for any thread)."""
        with self.figures_lock:
            return self._pnl()

    def _pnl(self):
        """Per instrument and in total: position (lots filled), fills, gross and net PnL marked to
        the last mid, fees, and the drawdown of the net from its peak (each instrument's from its own)."""
        spec = self.spec if self.spec is not None else np.ones((len(self.pos), 4))
        mult = spec[:, self.x.SP_MULT]
        gross = self.cash + self.pos * (self.mid / PRICE_SCALE) * mult
        net = gross - self.fees_paid
        total = float(net.sum())
        return {"position": self.pos.copy(), "gross": gross, "net": net, "fees": self.fees_paid.copy(),
                "fills_by": self.nfills.copy(), "drawdown_by": np.maximum(self.peaks, net) - net,
                "total_net": total, "total_gross": float(gross.sum()), "drawdown": max(self.peak, total) - total,
                "fills": int(self.nfills.sum())}

    def _check_limits(self):
        with self.figures_lock:
            p = self._pnl()
            self.peak = max(self.peak, p["total_net"])  # (this thread alone moves the peaks)
            np.maximum(self.peaks, p["net"], out=self.peaks)
        if self.kill is None or (self.loss is None and self.drawdown is None):
            return
        from engine.risk import KILL_REASONS
        if self.loss is not None and p["total_net"] < -self.loss:
            self.kill(KILL_REASONS.index("loss"))
        elif self.drawdown is not None and p["drawdown"] > self.drawdown:
            self.kill(KILL_REASONS.index("drawdown"))

    def finish(self, names, hist, risk):
        """After the loop stopped: the last ticks and signals simulated, and a backtest's result for
        them (replay/jobs.backtest_one's dict: replay/jobs.write_report makes the report of it, as a
        backtest of the recording does) with its figures under "paper". hist: the run's latency
        counts (engine/latency.py); risk: what its gate cut ({rule: count})."""
        self.stop_flag.set()
        if self.is_alive():
            self.join()
        while self._take_ticks():
            pass
        self._new_orders()
        while self._step(self.n, final=True) >= len(self.fbuf) - 2 * self.x.MAXLV - 8:
            pass
        gaps = int(self.c.hdr[self.c.slot_base + shm.C_GAPS])
        self.c.close()
        with self.lock:  # signals whose tick never came (said, never dropped silently)
            unmatched = sum(len(x) for x in self.sigs)
            self.finished = True
        from replay.backtest import FileResult
        from replay.evaluate import evaluate_file
        words = self.words[:self.n]
        done = np.concatenate(self.done) if self.done else np.zeros(0, SIGNAL_DTYPE)
        res = FileResult("paper", list(names or []), len(words), 0, done,
                         np.full(len(words), np.nan, np.float32), None)
        from replay.jobs import entry_latencies
        xp = dataclasses.replace(self.xp, entry_ns=entry_latencies(self.p, len(done), 0))
        top = int(done["instrument"].max()) + 1 if len(done) else 1  # (the instruments a backtest reports)
        specs = self._specs(dicts=True)[:top]
        from replay import costs
        part, cols = evaluate_file(words, res, self.p.horizons_ms, depth=self.depth, spec=costs.spec_array(specs),
                                   xp=xp)
        online = self.pnl()
        scores = done["score"][np.isfinite(done["score"])].astype(np.float32)
        return {"path": "paper", "instruments": res.instruments, "signals": done, "cols": cols, "part": part,
                "hist": hist, "notes": [], "loop_seconds": 0.0, "eval_seconds": 0.0, "specs": specs, "risk": dict(risk),
                "scores": scores,
                "paper": {"online": {"fills": online["fills"], "late_orders": self.late,
                                     "net": round(online["total_net"], 6), "drawdown": round(online["drawdown"], 6)},
                          "positions": {str(i): int(p) for i, p in enumerate(online["position"]) if p},
                          "gaps": gaps, "ticks_read": int(self.n), "unmatched_signals": int(unmatched),
                          "error": str(self.error) if self.error else None}}
