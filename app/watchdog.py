"""The control plane's watchdog on the strategy loop's heartbeat: a loop silent LOOP_STALL_NS is
stalled (/ready false, logged once); silent --stall-exit, it is not coming back (its strategy never
returns: the thread cannot be interrupted) and the run ends, abnormally."""
import time

from engine import control as C

from .progress import log

LOOP_STALL_NS = 1_000_000_000     # no loop heartbeat for this long: the loop is stalled (/ready false, logged)
WATCH_GAP_MAX_NS = 200_000_000    # a longer gap between two looks of the watchdog counts as this: it was stopped too


class Watchdog:
    def __init__(self, ctl, stall_exit):
        self.ctl = ctl
        self.stall_logged = False
        self.stalled = False
        self.silent_ns, self._beat, self._watch_at = 0, None, time.monotonic_ns()
        self.hung_ns = int(stall_exit * 1e9)  # (--stall-exit) 0: a stalled loop never ends the run

    def look(self):
        """How long the loop has been silent (no heartbeat), counted only while we ran ourselves: a
        whole-process stop (SIGSTOP, a debugger, a VM pause) stops the loop and us alike, and a
        gap between two of our looks counts at most WATCH_GAP_MAX_NS, so it never reads as a
        stalled loop. Returns why the loop is hung (silent hung_ns), else None."""
        now = time.monotonic_ns()
        gap, self._watch_at = min(now - self._watch_at, WATCH_GAP_MAX_NS), now
        beat = int(self.ctl[C.L_HEARTBEAT])
        watched = int(self.ctl[C.L_STATE]) in (C.LOOP_RUNNING, C.LOOP_PAUSED) and \
            int(self.ctl[C.CTL_CMD]) != C.CMD_REATTACH
        if not watched or beat != self._beat:
            self._beat, self.silent_ns = beat, 0
        else:
            self.silent_ns += gap
        self.stalled = self.silent_ns > LOOP_STALL_NS
        if self.stalled and not self.stall_logged:
            log(f"watchdog: the strategy loop has not beaten for {self.silent_ns / 1e9:.1f} s (stalled?)")
            self.stall_logged = True
        elif not self.stalled and self.stall_logged:
            log("watchdog: the strategy loop is beating again")
            self.stall_logged = False
        if self.hung_ns and self.silent_ns >= self.hung_ns:
            return (f"the strategy loop hung: no heartbeat for {self.silent_ns / 1e9:.1f} s (--stall-exit); its "
                    "strategy does not return (an endless loop in on_tick or decide?)")
        return None
