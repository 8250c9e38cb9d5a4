"""The readers of the tap ring beside the strategy loop (what the loop read, in its order:
host_template run_loop_multi, CFG_TAP): --record's recorder (app/run_record.py), --paper's trader
(app/paper.py), --shadow's candidates (app/shadow.py) and --drift's monitor (app/drift_monitor.py).
Each one claims its consumer line before the loop starts, so the loop's first tick is theirs too,
and is finished after the loop stopped."""
from dataclasses import dataclass
from typing import Callable

from .progress import log


@dataclass(frozen=True)
class TapRun:
    """What a reader of the tap ring is given of the run."""
    tap: object                     # engine.tickring.TickRing
    host: object                    # the run's compiled strategy host (engine/strategy_build.py)
    n_inst: int                     # the run's instrument ids
    depth: int                      # book levels a side
    bound: object                   # a UNIVERSE strategy's binding to the run's ids (None without one)
    table: Callable                 # () -> (names, specs): the run's instrument table as it knows it now


class TapSides:
    """A run's tap readers (each None unless asked for) and, once finished, their figures."""

    def __init__(self):
        self.recorder = self.paper = self.shadows = self.drift = None
        self.paper_result = self.shadow_results = self.drift_result = None

    def start(self, r, tap_run):
        """Every reader run `r` (app/live.py _Run) asked for, started on its tap."""
        cfg = r.cfg
        if cfg.record:
            from .run_record import TapRecorder
            self.recorder = TapRecorder(tap_run.tap, cfg.record, tap_run.table,
                                        source=" + ".join(u or f"ring:{n}" for u, n in
                                                          zip(r.inp.feed_uris, r.inp.ring_names)),
                                        depth=tap_run.depth)
            self.recorder.start()  # its consumer line first: the loop's first tick is recorded
        if cfg.paper:
            from .exec_options import paper_exec
            from .kill_switch import kill_switch
            from .paper import PaperTrader
            self.paper = PaperTrader(tap_run, paper_exec(cfg.paper_exec), r.strat.values,
                                     kill=lambda code: kill_switch(r.ctl_blk.hdr, code, cfg.name),
                                     loss=cfg.kill_loss, drawdown=cfg.kill_drawdown)
            self.paper.start()
        self.start_shadows(r, tap_run)
        if cfg.drift:
            from .drift_monitor import DriftMonitor
            self.drift = DriftMonitor(tap_run, lambda: r.loaded[-1], cfg.drift_half_life)
            self.drift.start()

    def start_shadows(self, r, tap_run):
        """--shadow: each candidate's thread on the tap, its signal file beside the live one; and
        the run's Shadows, which `engine ctl shadow add|remove` change while it runs."""
        from .run_model import load_shadow
        from .shadow import Shadow, Shadows, shadow_path
        if r.shadow_models and not r.slog.regular:
            raise ValueError(f"--shadow writes its signals beside the run's signal file, and {r.sig_path} is not "
                             "a regular file: give --signals-out FILE")
        if not r.slog.regular:
            return

        def make(name, model_dir, pred, start):
            names, specs = r.inp.start_table() if start == "oldest" else tap_run.table()
            sh = Shadow(tap_run, name, model_dir, pred, names=names, specs=specs, limits=r.limits,
                        path=shadow_path(r.sig_path, name), start=start)
            log(f"shadow {name}: model {pred.model_id} from {model_dir} -> {sh.path}"
                + (" (from the next tick on)" if start == "now" else ""))
            return sh
        self.shadows = Shadows(make, lambda spec: load_shadow(r.cfg, r.strat, spec))
        for name, model_dir, pred in r.shadow_models:
            self.shadows.start(name, model_dir, pred)

    def finish_shadows(self):
        self.shadow_results = self.shadows.finish() or None

    def finish_drift(self, sig_path):
        """The last figures; the whole run's counts beside a regular signal file (RUN.sig.drift.json)."""
        self.drift_result = self.drift.finish(sig_path)
