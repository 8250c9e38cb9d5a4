"""`engine run --paper`: the backtest's execution simulator run online, on the live ticks and the
signals as the loop emits them, off the strategy core: positions, fills, PnL gross and net and
drawdown per instrument and per currency (never added across currencies) while the run goes, and
at its end the figures a backtest of the run's recording gives (the same code on the same ticks
and signals: replay/evaluate.py). What /status, `engine stats` and the summary show of it:
app/paper_status.py; its metrics: app/prom.py.

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

from engine.records import SIGNAL_DTYPE, SIGNAL_FLAG_MARK, signal_flags
from engine import shm
from engine.tickring import TickConsumer

from .paper_money import PaperMoney
from .recorder import drain

BATCH = 4096
IDLE_S = 0.002
SPEC_EVERY_S = 0.2


class PaperTrader(threading.Thread):
    """run: app/tap_sides.py TapRun (the tap ring, the run's instrument ids, book depth, and its
    instrument table as it knows it: table()[1], the records of engine/instruments.py); kill(code):
    the control plane's kill switch, called when the net PnL falls below -loss or the drawdown
    passes `drawdown` (None: no such limit); p: replay.jobs.Params (the execution options), values:
    the strategy's parameters (its `maker`)."""

    def __init__(self, run, p, values, kill=None, loss=None, drawdown=None):
        super().__init__(name="engine-paper", daemon=True)
        from replay import execsim, jobs
        self.x, self.p = execsim, p
        self.lat = jobs.EntryLatencies(p)
        self.c = TickConsumer(run.tap.path.rsplit("/", 1)[-1])
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
        self.specs_fn, self.kill, self.loss, self.drawdown = (lambda: run.table()[1]), kill, loss, drawdown
        self.depth = int(run.depth)
        self.xp = execsim.ExecParams(response_ns=p.response_ns, feed_ns=p.feed_ns, queue_power=p.queue_power,
                                     maker=jobs.maker_orders(p, values))
        k = max(1, int(run.n_inst))
        self.O = np.zeros((k, 6), np.int64)
        self.F = np.zeros((k, 4), np.float64)
        self.pos = np.zeros(k, np.int64)
        self.book = np.zeros((k, 2, 2, execsim.MAXLV), np.int64)
        self.bn = np.zeros((k, 2), np.int64)
        self.lv = np.zeros(k, np.int64)  # (1 once an instrument's level tick came: execsim.simulate)
        self.unfilled = np.zeros(4, np.int64)
        self.fbuf = np.zeros((4096, execsim.FILL_WORDS), np.int64)
        self.fee = np.zeros(4096, np.float64)
        self.sig = np.zeros((1024, 4), np.int64)  # the orders so far: sig[:m], arrival[:m], resp[:m]
        self.arrival, self.resp = np.zeros(1024, np.int64), np.zeros(1024, np.int64)
        self.m = 0
        self.j = 0
        # each instrument's orders still to arrive (execsim.queues: its head, the next of each, its last)
        self.head, self.tail = np.full(k, -1, np.int64), np.full(k, -1, np.int64)
        self.nxt = np.full(1024, -1, np.int64)
        self.sources = []           # each instrument's source (its record's), as known: whose clocks
        self.money = PaperMoney(k, execsim, getattr(p, "fx", None))
        self.stop_flag = threading.Event()
        self.error = None
        # compiled (or loaded) now for these exact types, no tick: a first compile in the thread would
        # hold the GIL for seconds while the run goes (the control thread's lease lapses)
        self._step(0)
        execsim.fees_of(self.fbuf[:0], self.money.spec, self.fee[:0])

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
            self.money.marks(self.buf[:n])
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
        # (arrival: the backtest's, from the ticks held so far: a replay's receive times are the data's,
        # and a live source's CLOCK_MONOTONIC stamps are never comparable with the exchange's clock)
        xp = dataclasses.replace(self.xp, entry_ns=self.lat.take(len(act)))
        if int(act["instrument"].max()) >= len(self.sources):
            self.sources = [r.get("source", "") for r in self.specs_fn() or []]
        sig, arrival, resp, _, _ = self.x.order_inputs(self.words[:self.n], act, xp, self._groups())
        self.late += int((sig[:, 3] < self.j).sum())  # (simulated past already: they meet the book from here)
        m = self.m + len(sig)
        if m > len(self.sig):  # (grown by doubling: a long run's orders are not copied per batch)
            cap = max(2 * len(self.sig), m)
            self.sig = np.resize(self.sig, (cap, 4))
            self.arrival, self.resp = np.resize(self.arrival, cap), np.resize(self.resp, cap)
        self.sig[self.m:m], self.arrival[self.m:m], self.resp[self.m:m] = sig, arrival, resp
        if m > len(self.nxt):
            self.nxt = np.resize(self.nxt, len(self.sig))
        self.x.enqueue(self.head, self.tail, self.nxt, np.ascontiguousarray(sig[:, 0]), self.m)
        self.m = m

    def _groups(self):
        """Each instrument's source as a number (execsim.order_inputs' groups), None with one."""
        if len(set(self.sources)) < 2:
            return None
        src = self.sources + [""] * (len(self.pos) - len(self.sources))
        return np.unique(src[:len(self.pos)], return_inverse=True)[1]

    # -- the simulator -------------------------------------------------------------------------

    def _specs(self):
        """The instruments' money facts as the backtest resolves them (records, --instruments, fees
        given): the per-instrument dicts (replay/costs.py resolve)."""
        from replay import costs, jobs
        from engine.instruments import unknown
        recs = list(self.specs_fn() or [])
        recs += [unknown(str(i)) for i in range(len(recs), len(self.pos))]
        return costs.resolve(recs[:len(self.pos)], self.p.instruments, jobs.fee_overrides(self.p))

    def _refresh_spec(self, force=False):
        """The instruments' money facts, looked at every SPEC_EVERY_S: a feed names instruments as it
        reads, so fills may come before their record; then every fill so far is priced again."""
        now, m = time.monotonic(), self.money
        if not force and m.spec is not None and now - m.spec_at < SPEC_EVERY_S:
            return
        m.spec_at = now
        dicts = self._specs()
        self.sources = [d.get("source", "") for d in dicts]
        m.price(dicts, self.pos)

    def _step(self, upto, final=False):
        with self.figures_lock:
            return self._step_locked(upto, final)

    def _step_locked(self, upto, final):
        self._refresh_spec(force=final)
        j, nf = self.x.simulate(self.words[:upto], self.j, self.head, self.nxt, self.sig[:self.m],
                                self.arrival[:self.m], self.resp[:self.m], self.money.spec, float(self.xp.queue_power),
                                self.depth, self.O, self.F, self.pos, self.book, self.bn, self.lv, self.fbuf, self.fee,
                                self.unfilled, final)
        self.j = j
        if nf:
            self.money.filled(self.fbuf[:nf].copy(), self.fee[:nf].copy())
        return nf

    def run(self):
        try:
            while not self.stop_flag.is_set():
                got = self._take_ticks()
                decided = self.decided_upto  # (read before the orders are taken: the signals it covers came first)
                self._new_orders()
                upto = max(self.j, min(self.n, decided))  # (a tick is simulated once its orders are in)
                while self._step(upto) >= len(self.fbuf) - 2 * self.x.MAXLV - 8:
                    pass  # (the fill buffer filled up: go on where it stopped)
                self._check_limits()
                if not got:
                    time.sleep(IDLE_S)
        except Exception as e:  # noqa: BLE001 - said in the summary; the run goes on without paper figures
            self.error = e

    # -- figures -------------------------------------------------------------------------------

    def pnl(self):
        """The money's figures now (app/paper_money.py pnl), taken between two of this thread's steps
        (for any thread)."""
        with self.figures_lock:
            return self.money.pnl(self.pos)

    def _check_limits(self):
        with self.figures_lock:
            p = self.money.pnl(self.pos)
            self.money.raise_peaks(p)  # (this thread alone moves the peaks)
        if self.kill is None or (self.loss is None and self.drawdown is None):
            return
        from engine.risk import KILL_REASONS
        # a limit is money in one currency: each currency's figures, or the converted total's
        figs = [p["converted"]] if p["converted"] is not None else list(p["by_currency"].values())
        if self.loss is not None and any(f["net"] < -self.loss for f in figs):
            self.kill(KILL_REASONS.index("loss"))
        elif self.drawdown is not None and any(f["drawdown"] > self.drawdown for f in figs):
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
        specs = self._specs()[:top]
        from replay.evaluate import summarize
        part, cols = evaluate_file(words, res, self.p.horizons_ms, depth=self.depth, specs=specs, xp=xp)
        online = self.pnl()
        # the end's figures per currency (the report's, for the run's summary line: never one sum)
        s = summarize([part], self.p.horizons_ms, fx=getattr(self.p, "fx", None))[0]
        scores = done["score"][np.isfinite(done["score"])].astype(np.float32)
        name = (lambda i: str(names[i]) if i < len(names or []) and names[i] else str(i))
        return {"path": "paper", "instruments": res.instruments, "signals": done, "cols": cols, "part": part,
                "hist": hist, "notes": [], "loop_seconds": 0.0, "eval_seconds": 0.0, "specs": specs, "risk": dict(risk),
                "scores": scores,
                "paper": {"online": _online(online, self.late),
                          "by_currency": {c: {k: f[k] for k in ("pnl", "pnl_gross", "fees", "fills")}
                                          for c, f in s["by_currency"].items()},
                          **({"converted": s["converted"]} if "converted" in s else {}),
                          "positions": {name(i): int(p) for i, p in enumerate(online["position"]) if p},
                          "gaps": gaps, "ticks_read": int(self.n), "unmatched_signals": int(unmatched),
                          "error": str(self.error) if self.error else None}}


def _online(p, late):
    """The online figures the paper report keeps: fills, late orders, net and drawdown (per
    currency; the plain ones where there is one currency)."""
    by = {c: {"net": round(f["net"], 6), "drawdown": round(f["drawdown"], 6)} for c, f in p["by_currency"].items()}
    one = next(iter(by.values())) if len(by) == 1 else None
    out = {"fills": p["fills"], "late_orders": late, "net": one["net"] if one else None if by else 0.0,
           "drawdown": one["drawdown"] if one else None if by else 0.0, "by_currency": by}
    if p["converted"] is not None:
        out["converted"] = {k: round(v, 6) if isinstance(v, float) else v for k, v in p["converted"].items()}
    return out

