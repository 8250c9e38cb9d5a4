"""`engine run --shadow DIR`: a candidate model scored beside the live one, never published.

A shadow is the backtest run online: a thread off the strategy core reads the ticks the loop read,
in its order (a consumer of the tap ring, as the recorder and the paper trader: host_template
run_loop_multi, CFG_TAP), and runs them through replay's loop (host_template backtest_loop, the
strategy's on_tick and decide, the risk gate with the run's limits) with the candidate's model,
batch after batch, its state carried from one to the next. Its decisions go to its own signal
file, SIGNALS.shadow-NAME.sig beside the live one, in the live file's format. So a shadow's file
is what `engine backtest` of the run's recording gives with that model, bit for bit (the
recording holds the same ticks in the same order), and the live loop pays nothing but the tap's
publish, which --record and --paper pay too.

What a shadow does not share with the live run: the kill switch (it never sends anything) and
the live loop's conflation (it scores every tick, as a backtest does without
--conflate-as-recorded). It keeps no ticks: memory is fixed. A shadow that falls a whole tap
ring behind the loop loses ticks, counted (`gaps`) and said in the summary (its file is then not
the recording's backtest). `engine shadow report RUN.sig` compares the shadows with the live
model (app/shadow_report.py).
"""
import os
import re
import threading

import numpy as np

from engine import latency, risk
from engine.loop_args import BacktestArgs, backtest_args
from engine.records import SIGNAL_WORDS
from engine.signal_log import SignalLog

from .tap_reader import BATCH, TapReader

IDLE_S = 0.02  # (a shadow decides for no one: few wake-ups keep the other cores quiet)
SIG_ROWS = 1 << 12


def shadow_path(sig_path, name):
    """Where shadow NAME's signals go, beside the live run's signal file."""
    return sig_path.rsplit(".", 1)[0] + f".shadow-{name}.sig"


def check_spec(spec):
    """A shadow's model as given (--shadow, shadow.models, ctl shadow add): a directory or
    registry:NAME[@VERSION]; an empty one names no model (never the current directory)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"--shadow {spec!r}: names no model (a model directory, or registry:NAME[@VERSION])")
    return spec


def shadow_names(dirs, taken=()):
    """A file-name-safe name per shadow model: its registry NAME@VERSION or its directory's name,
    numbered when two share one (or one of `taken`); ValueError for a spec that names no model."""
    out, taken = [], list(taken)
    for d in map(check_spec, dirs):
        base = d.split(":", 1)[1] if d.startswith("registry:") else os.path.basename(os.path.normpath(d))
        base = re.sub(r"[^A-Za-z0-9._@-]+", "_", base).strip("._") or "model"
        name, k = base, 2
        while name in out or name in taken:
            name, k = f"{base}-{k}", k + 1
        out.append(name)
    return out


class Shadow(TapReader):
    """One candidate: run (app/tap_sides.py TapRun: the tap, the strategy host, the instruments,
    book depth and UNIVERSE binding), pred (its verified model, models.artifact.load),
    names/specs/limits (the run's instrument table and risk limits), path: its signal file; start:
    "oldest" (from the run's first tick) or "now" (one added while the run goes: from the next
    tick, its features cold)."""

    def __init__(self, run, name, model_dir, pred, *, names, specs, limits, path, start="oldest"):
        super().__init__(f"engine-shadow-{name}", IDLE_S)
        from models.artifact import uses_sigmoid
        host = run.host
        self.label, self.model_dir, self.pred, self.host, self.path = name, model_dir, pred, host, path
        self.hs = host.state(run.n_inst, run.depth, run.bound)
        risk.configure(self.hs.rlim, self.hs.rg, names, specs, limits)
        self.multipliers = len(specs or [])
        legs = max(1, len(host.strategy.universe))
        self.sigs = np.zeros((SIG_ROWS + (len(self.hs.ist) + 1) * legs, SIGNAL_WORDS), np.int64)
        self.parts = BacktestArgs(words=self.buf, state=self.hs.loop_arrays(), row=host.new_row(),
                                  out=np.zeros(1, np.float32), model=pred.addr, pvals=host.params(),
                                  cfg=host.loop_cfg(sigmoid=uses_sigmoid(pred)), sigs=self.sigs,
                                  margins=np.zeros(BATCH, np.float32), hist=latency.new_counts(),
                                  mrows=pred.rows_addr)
        # compiled (or loaded) now for these exact types, no tick: a first compile in the thread would
        # hold the GIL for seconds while the run goes (the control thread's lease lapses)
        host.mod.backtest_loop(*backtest_args(host.mod, self.parts._replace(words=self.buf[:0])))
        self.log = SignalLog(path)  # (0600, like the live file; an OutputError names it)
        try:
            self.claim(run.tap, start)
        except BaseException:
            self.log.close()
            os.unlink(path)  # (nothing was written: no empty file left behind)
            raise
        self.ticks = self.scored = self.signals = 0

    def multipliers_from(self, specs):
        """Instruments a live source named after the start get their multiplier (as the live gate)."""
        if specs is not None and len(specs) > self.multipliers:
            risk.set_multipliers(self.hs.rlim, specs)
            self.multipliers = len(specs)

    def _step(self):
        n = self.poll()
        i, mod = 0, self.host.mod
        while i < n:  # (stops early when sigs has no room for a flush: written out, then on)
            i, nsig, sc = mod.backtest_loop(*backtest_args(mod, self.parts._replace(words=self.buf[:n], start=i,
                                                                                      base=self.signals)))
            self.log.write(self.sigs[:nsig])
            self.signals += nsig
            self.scored += sc
        self.ticks += n
        return n

    def finish(self):
        """After the loop stopped: the last ticks scored, the file closed; this shadow's summary."""
        self.stop()
        if self.error is None:
            try:
                while self._step():
                    pass
            except Exception as e:  # noqa: BLE001
                self.error = e
        gaps = self.gaps()
        self.c.close()
        self.log.close("shadow stopped" if self.error else None)
        return {**self.status(gaps), "risk_blocked": risk.blocked(self.hs.rg)}

    def status(self, gaps=None):
        err = self.error or self.log.error
        return {"name": self.label, "model": self.model_dir, "model_id": self.pred.model_id,
                "backend": self.pred.backend, "signals_out": self.path, "signals": self.signals,
                "ticks": self.ticks, "scored": self.scored, "error": str(err) if err else None,
                "gaps": self.gaps() if gaps is None else gaps}


class Shadows:
    """A run's shadows: those it started with (--shadow) and those added and removed while it runs
    (`engine ctl shadow add MODEL` / `remove NAME`, from the control plane's threads). make(name,
    model_dir, pred, start) -> a Shadow; load(spec) -> (model_dir, pred), verified (ValueError
    saying why not)."""

    def __init__(self, make, load):
        self.make, self.load = make, load
        self.running, self.ended = [], []
        self.lock = threading.Lock()

    def start(self, name, model_dir, pred, start="oldest"):
        sh = self.make(name, model_dir, pred, start)
        sh.start()
        self.running.append(sh)
        return sh

    def add(self, spec):
        """A candidate from now on: {"ok", "name", "model_id", "signals_out"} or {"ok": False, "error"}
        (a model that fails to load or verify changes nothing)."""
        with self.lock:
            taken = [s.label for s in self.running] + [r["name"] for r in self.ended]
            try:
                name = shadow_names([spec], taken)[0]
                model_dir, pred = self.load(spec)
                sh = self.start(name, model_dir, pred, "now")
            except (ValueError, OSError, RuntimeError) as e:
                return {"ok": False, "error": str(e)}
        return {"ok": True, **sh.status()}

    def remove(self, name):
        """Stop shadow NAME and close its file: {"ok", its figures} or {"ok": False, "error"}."""
        with self.lock:
            hit = [s for s in self.running if s.label == name]
            if not hit:
                return {"ok": False, "error": f"no shadow {name!r} running (running: "
                                              f"{', '.join(s.label for s in self.running) or 'none'})"}
            self.running.remove(hit[0])
            res = hit[0].finish()
            self.ended.append(res)
        return {"ok": True, **res}

    def multipliers_from(self, specs):
        for sh in list(self.running):
            sh.multipliers_from(specs)

    def status(self):
        return [s.status() for s in list(self.running)]

    def finish(self):
        """At the end of the run: every shadow's figures, the removed ones' included."""
        with self.lock:
            for sh in self.running:
                self.ended.append(sh.finish())
            self.running = []
            return list(self.ended)
