"""The strategy thread of `engine run`: pinned, memory pre-faulted, the model warmed, SCHED_FIFO,
then attached to its tick ring(s) (which releases a spawned feed) and in the compiled loop until
it stops. A restarted feed's new ring is re-attached without recompiling."""
import threading
import time

from engine import control as C
from engine import defaults, realtime, shm, warmup
from engine.loop_args import TickView, run_args, run_multi_args
from engine.tickring import TickConsumer

from .progress import log

LEASE_NS = defaults.LEASE_NS  # the loop stops by itself if the main thread goes quiet this long
STRATEGY_THREAD_NAME = "engine-strategy"


class StrategyThread(threading.Thread):
    def __init__(self, cfg, ring_name, start, args_fn, predictor, host, choice, backpressure=False):
        super().__init__(name="strategy", daemon=True)
        self.choice, self.backpressure = choice, backpressure
        self.conflate = False
        self.cfg, self.ring_name, self.start_at, self.args_fn, self.predictor = cfg, ring_name, start, args_fn, predictor
        self.host = host
        self.ready = threading.Event()
        self.error = None
        self.looping = False  # set with ready once the loop is entered: an error after it is the run's
        self.tid = None       # end (the summary's abnormal), not a failure to start
        self.core = None
        self.policy = "SCHED_OTHER"
        self.notes = []
        self.consumer = None
        self.exit_state = None
        self.reattached = 0
        self.preempt_start = self.preempt_end = None

    def _want(self, ok, msg, what):
        self.notes.append(msg)
        if not ok:
            if self.cfg.strict:
                raise RuntimeError(f"--strict: {msg}")
            log(f"warning: {msg}; running without {what}")

    def run(self):
        try:
            self.tid = threading.get_native_id()
            realtime.name_current_thread(STRATEGY_THREAD_NAME)
            if self.cfg.core is not None:
                ok, msg = realtime.pin_current_thread(self.cfg.core)
                self._want(ok, msg, "pinning")
                self.core = self.cfg.core if ok else None
            live = self.args_fn()
            for a in live.arrays():
                if a.dtype.kind in "if":
                    warmup.prefault(a)
            row, out = live.row, live.out
            warmup.warm_model(self.predictor.addr, row, out, 20_000)
            row[:] = 0
            if self.choice.wait.name != "spin":
                realtime.set_timer_slack(1000)  # parks as short as asked (the default slack is 50 us)
            if self.choice.policy == "fifo":
                ok, msg = realtime.set_fifo(self.cfg.priority)
                self._want(ok, msg, "SCHED_FIFO")
            self.policy = realtime.policy_name()
            self._attach()  # claiming a consumer line is what releases a spawned feed: ticks start once we are ready
            ctl = live.ctl
            ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + LEASE_NS  # armed only now: warm-up may be slow
            self.preempt_start = realtime.preemption(self.tid)
            self.looping = True
            self.ready.set()
            self._loop(live)
        except BaseException as e:  # reported by the main thread
            self.error = e
            self.ready.set()
        finally:
            if self.preempt_start is not None:
                self.preempt_end = realtime.preemption(self.tid)
            realtime.set_other()

    def _attach(self):
        c = self.consumer = TickConsumer(self.ring_name)
        warmup.prefault(c.data)
        c.claim(start=self.start_at, backpressure=self.backpressure)

    def _loop(self, live):
        c = self.consumer
        while True:
            self.exit_state = self.host.mod.run_loop(*run_args(self.host.mod, TickView.of(c), live))
            if self.exit_state != C.LOOP_REATTACH:
                break
            c = self._reattach(c, live)

    def preempted(self):
        """Since the loop started: how often, and how long, other work held the strategy core
        (realtime.preemption; for a spinning loop every wait on the run queue is that); None where the
        kernel does not say."""
        a = self.preempt_start
        b = self.preempt_end or (realtime.preemption(self.tid) if a is not None and self.is_alive() else None)
        if a is None or b is None:
            return None
        return {"count": b[1] - a[1], "wait_ms": round((b[0] - a[0]) / 1e6, 3)}


    def _reattach(self, old, live):
        """The control plane saw a new ring under our ring's name (the feed was restarted): map
        it, claim a line (which releases a feed that waits for us) and go on. The data is
        discontinuous, so features start again, as after a gap. No recompilation."""
        ctl = live.ctl
        old.close()
        while True:
            if int(ctl[C.CTL_CMD]) == C.CMD_STOP:
                return old
            try:
                c = TickConsumer(self.ring_name)
                break
            except shm.RingError:
                time.sleep(0.01)  # (blocking, not spinning: this thread may be SCHED_FIFO)
        warmup.prefault(c.data)
        c.claim(start="oldest", backpressure=self.backpressure)
        self.host.mod.host_reset(*live.state.ss, live.state.uni.shared)
        ctl[C.L_GAPS] += 1
        self.consumer = c
        self.reattached += 1
        if int(ctl[C.CTL_CMD]) == C.CMD_REATTACH:
            ctl[C.CTL_CMD] = C.CMD_RUN
        return c


class MultiStrategyThread(StrategyThread):
    """The strategy thread of a run with several sources (or --record): run_loop_multi over every
    ring (app/multi_rings.py). `consumer` is the first ring's (what single-ring code looks at);
    `rings.consumers` are all of them."""

    def __init__(self, *a, rings, **kw):
        super().__init__(*a, **kw)
        self.rings = rings

    def _attach(self):
        self.rings.attach(self.start_at, self.backpressure)
        self.consumer = self.rings.consumers[0]

    def _loop(self, live):
        mod = self.host.mod
        while True:
            self.exit_state = mod.run_loop_multi(*run_multi_args(mod, self.rings.view(), live))
            if self.exit_state != C.LOOP_REATTACH:
                break
            self._reattach_changed(live)

    def _reattach_changed(self, live):
        """The control plane saw a new ring under a source's name (its feed was restarted): map the
        rings that changed, void the books as after a gap, go on. No recompilation."""
        ctl = live.ctl
        for k in self.rings.replaced():
            while True:
                if int(ctl[C.CTL_CMD]) == C.CMD_STOP:
                    return
                try:
                    self.rings.reattach(k, self.backpressure)
                    break
                except shm.RingError:
                    time.sleep(0.01)  # (blocking, not spinning: this thread may be SCHED_FIFO)
            self.reattached += 1
            ctl[C.L_GAPS] += 1
        self.consumer = self.rings.consumers[0]
        mod = self.host.mod
        mod.host_reset(*live.state.ss, live.state.uni.shared)
        if self.cfg.tapped:  # a gap tick into the recording too: its backtest voids the books here
            from engine.tickring import publish_gap
            tap, cst = self.rings.tap, live.state.stash.cst
            publish_gap(tap.hdr, tap.data, tap.mask, cst[mod.CS_READ])
            cst[mod.CS_READ] += 1
        if int(ctl[C.CTL_CMD]) == C.CMD_REATTACH:
            ctl[C.CTL_CMD] = C.CMD_RUN

