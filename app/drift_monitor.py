"""`engine run --drift`: the live model's feature and score drift (models/drift.py), kept live.

A thread off the strategy core reads the ticks the loop took (a consumer of the tap ring, as the
recorder, the paper trader and the shadows), computes the strategy's feature rows with the data-set
loop (host_template featurize_loop, its state carried from batch to batch), scores them with the
live model, and bins them against the model's sketch, in fixed memory (counts that halve every
--drift-half-life rows). The rows are every tick the strategy scores: the loop's `scored` plus its
`conflated` (a tick conflation folded unscored is the market's all the same, and the sketch and
`engine model drift` count it too: like with like). It runs SCHED_IDLE, and SCHED_OTHER while it
is more than half a tap ring behind (_pace), so it is not lapped; were it lapped all the same, the
ticks it lost are counted (`gaps`, `lost`). At the end it reads what the tap still holds, so the
whole run is binned. While paused the loop scores nothing and the monitor still bins. A reload to a model with another sketch starts
the counts again. Exported as engine_feature_psi{feature} and engine_score_psi, in /status
(`drift`) and `engine stats`; ops/engine-alerts.yml fires when a feature's passes 0.25 for 10
minutes. Beside them it keeps the whole run's counts (no decay), written at the end beside the
signal file (RUN.sig.drift.json, `run_record`), which `engine model drift RUN.sig` reads.
"""
import json
import os
import threading

import numpy as np

from engine import shm
from engine.readonly import read_only
from engine.realtime import set_idle, set_other
from models import drift

from .metrics import METRICS as M, exported
from .tap_reader import BATCH, TapReader

IDLE_S = 0.01
# exported only by a run with --drift (tests/test_drift.py scrapes them; the ops files use them)
DRIFT_METRICS = exported("--drift")


class DriftMonitor(TapReader):
    """run: app/tap_sides.py TapRun (the tap, the strategy host, the instruments, book depth and
    UNIVERSE binding); live(): the model now live (models.artifact predictor)."""

    def __init__(self, run, live, half_life):
        super().__init__("engine-drift", IDLE_S)
        host = run.host
        self.host, self.live, self.half_life = host, live, half_life
        self.hs = host.state(run.n_inst, run.depth, run.bound)
        self.claim(run.tap)
        self.X = np.empty((BATCH, host.nfeat), np.float32)
        self.inst, self.mid, self.idx = np.empty(BATCH, np.int64), np.empty(BATCH, np.float64), np.empty(BATCH, np.int64)
        self.row, self.pvals = host.new_row(), host.params()
        self.model_id, self.tracker, self.whole, self.why = None, None, None, None
        self.last_whole = None  # (model id, whole-run tracker) of the last model that binned rows
        self.lock = threading.Lock()
        self.catching_up = False  # (_pace)
        self._follow()
        host.mod.featurize_loop(read_only(self.buf[:0]), *self.hs.arrays(), self.pvals, self.X, self.inst, self.mid, self.idx,
                                self.row)  # (no ticks: compiled or loaded now, not later under the run's GIL)

    def _follow(self):
        """The live model's sketch: a new tracker when the model changed."""
        pred = self.live()
        if pred.model_id == self.model_id:
            return pred
        try:
            sk = drift.check(pred.manifest, f"model {pred.model_id}")
            names = pred.manifest["feature_names"]
            t, w, why = drift.Tracker(sk, names, self.half_life), drift.Tracker(sk, names), None
        except ValueError as e:
            t, w, why = None, None, str(e)
        with self.lock:
            if self.whole is not None and self.whole.rows:  # (the run's record: the last model that had rows)
                self.last_whole = (self.model_id, self.whole)
            self.model_id, self.tracker, self.whole, self.why = pred.model_id, t, w, why
        return pred

    def _step(self):
        n = self.poll()
        if not n:
            return 0
        self._pace()
        m = self.host.mod.featurize_loop(read_only(self.buf[:n]), *self.hs.arrays(), self.pvals, self.X, self.inst, self.mid,
                                         self.idx, self.row)
        pred = self._follow()
        if m and self.tracker is not None:
            X = self.X[:m]
            margins = pred.predict_rows(X)
            cs = self.tracker.bins(X, margins)  # (binned once for both: the same sketch's bins)
            with self.lock:
                self.tracker.add_counts(cs, m)
                self.whole.add_counts(cs, m)
        return n

    def _pace(self):
        """Leftovers (SCHED_IDLE) while the tap has room for the ticks not yet read; a fair share
        (SCHED_OTHER) from half a ring behind until an eighth: with no idle core an idle thread
        gets no time, is lapped and loses rows, and the figures would be of part of the run. Only
        in the monitor's thread (finish's last reads run in the caller's)."""
        if self.stop_flag.is_set():
            return
        behind = int(self.c.hdr[shm.H_WRITE]) - int(self.c.hdr[self.c.slot_base + shm.C_CURSOR])
        cap = self.c.mask + 1
        if not self.catching_up and behind > cap // 2:
            set_other()
            self.catching_up = True
        elif self.catching_up and behind < cap // 8:
            self.catching_up = not set_idle()

    def lost(self):
        """Ticks the tap lapped before this reader took them (never binned)."""
        return int(self.c.hdr[self.c.slot_base + shm.C_LOST])

    def figures(self):
        """{"model_id", "rows", "features": {name: PSI}, "score": PSI, "gaps", "lost", "error"};
        features empty (and `error` saying why) for a model without a training sketch."""
        with self.lock:
            t = self.tracker
            feats, score = t.psi() if t is not None and t.rows else ({}, None)
            rows = t.rows if t is not None else 0
        err = str(self.error) if self.error else self.why
        return {"model_id": self.model_id, "rows": rows, "half_life_rows": self.half_life,
                "features": {k: round(v, 6) for k, v in feats.items()},
                "score": None if score is None else round(score, 6),
                "gaps": self.gaps(), "lost": self.lost(), "error": err}

    def run_record(self):
        """The whole run's drift under the last live model (rows since it went live, no decay):
        what RUN.sig.drift.json keeps; None when no row was binned."""
        with self.lock:
            mid, w = self.model_id, self.whole
            if (w is None or not w.rows) and self.last_whole is not None:
                mid, w = self.last_whole
            if w is None or not w.rows:
                return None
            feats, score = w.psi()
            return {"model_id": mid, "rows": w.rows, "features": feats, "score": score,
                    "reference_rows": w.reference_rows, "gaps": self.gaps(), "lost": self.lost()}

    def finish(self, sig_path=None):
        """After the loop stopped: the ticks the tap still holds binned, then stop; with sig_path (a
        regular signal file) write the run's record beside it (a record that cannot be written is
        said in the figures' `record_error`, the run's result stands)."""
        self.stop()
        if self.error is None:
            try:
                while self._step():
                    pass
            except Exception as e:  # noqa: BLE001 - said in the figures; the run's result stands
                self.error = e
        out = self.figures()
        self.c.close()
        rec = self.run_record()
        if sig_path is not None and rec is not None:
            from engine.outputs import OutputError, atomic_file
            try:
                with atomic_file(record_path(sig_path), "the run's drift record", private=True) as tmp, \
                        open(tmp, "w") as f:
                    json.dump(rec, f)
            except (OutputError, OSError) as e:
                out["record_error"] = str(e)
        return out


RECORD_KEYS = {"model_id", "rows", "features", "score", "reference_rows"}


def record_path(sig_path):
    """Where a run's drift record goes: beside its signal file."""
    return sig_path + ".drift.json"


def read_record(sig_path):
    """The drift record of the run whose signal file is sig_path; ValueError saying why not."""
    p = record_path(sig_path)
    if not os.path.exists(sig_path):
        raise ValueError(f"{sig_path}: no such signal file")
    try:
        with open(p) as f:
            rec = json.load(f)
        if not isinstance(rec, dict) or not RECORD_KEYS <= set(rec):
            raise ValueError(f"missing {', '.join(sorted(RECORD_KEYS - set(rec if isinstance(rec, dict) else ())))}")
        return rec
    except FileNotFoundError:
        raise ValueError(f"{sig_path}: no drift record beside it ({os.path.basename(p)}, written by a run with "
                         "--drift); a signal file holds only the decisions that moved a target, not the rows: give "
                         "the run's recording (--record FILE.ticks) or a tick source") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not a drift record ({e})") from None


def drift_families(mon):
    """engine_feature_psi{feature}, engine_score_psi, engine_drift_rows (none without --drift)."""
    if mon is None:
        return
    f = mon.figures()
    g = M["engine_feature_psi"].family()
    for k, v in f["features"].items():
        if np.isfinite(v):
            g.add_metric([k], v)
    yield g
    if f["score"] is not None and np.isfinite(f["score"]):
        yield M["engine_score_psi"].family(f["score"])
    yield M["engine_drift_rows"].family(f["rows"])
