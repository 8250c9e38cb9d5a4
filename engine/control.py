"""The engine's control block in /dev/shm: control words, live counters, latency histograms.

The strategy loop never sees signals or sockets: it polls CTL_CMD and reads the model
address from here, and publishes its counters and HdrHistogram counts here, so a
control plane (or `engine stats`) reads them without touching the hot thread.
"""
import numpy as np

from . import latency, risk, shm, signal_counts

# control plane -> loop (own cache line)
CTL_CMD, CTL_MODEL_ADDR, CTL_MODEL_GEN, CTL_LEASE_NS = 40, 41, 42, 43
CMD_RUN, CMD_STOP, CMD_PAUSE, CMD_REATTACH = 0, 1, 2, 3  # pause: features stay warm, no scoring
# control plane -> loop: the kill switch (0, or engine.risk.KILL_* reason): the loop flattens every
# instrument at its next tick (or housekeeping step) and the gate refuses new exposure until it is 0 again
CTL_KILL = 44
# control plane -> loop: the model's rows function (engine_predict_rows; 0: its back end has none),
# stored with CTL_MODEL_ADDR, before CTL_MODEL_GEN: a conflation flush of several rows scores them in one call
CTL_MODEL_ROWS = 45
# loop -> everyone (own cache line)
L_STATE, L_TICKS, L_SIGNALS, L_GAPS, L_LOST, L_HEARTBEAT, L_SCORED, L_TID = 48, 49, 50, 51, 52, 53, 54, 55
# loop -> everyone: the model generation in use and when the loop adopted it (CLOCK_MONOTONIC ns)
L_MODEL_GEN, L_SWAP_NS = 56, 57
# loop -> everyone: scoreable ticks conflated (superseded before scoring), conflation marks written,
# parks (sleeps) of the wait strategy
L_CONFLATED, L_MARKS, L_PARKS = 58, 59, 60
# loop -> everyone: gap ticks read from the stream (losses before the ring: the feed's, or a recording's)
# and the counts they carry (L_GAPS and L_LOST are the loop's own: lapped by the ring)
L_FEED_GAPS, L_FEED_LOST = 61, 62
# loop -> everyone: when the loop last found it had not run itself for LOOP_RESUMED_NS between two
# housekeeping steps: the whole process was stopped (SIGSTOP, a debugger, a freezer, a VM pause), so an
# expired lease says nothing of the control thread, which was stopped too; it gets LEASE_GRACE_NS to renew.
# (An idle loop parking with the backoff wait beats every ~1.1 s: the gap must be longer than that.)
L_RESUMED_NS = 63
# loop -> everyone: the risk gate (engine/risk.py): killed (0, or the KILL_* reason), then how many
# decisions each rule cut (risk.RULES order)
L_KILLED, L_RISK_RULES = 64, 65
# control plane -> everyone: how many times the run was killed, by reason (engine.risk.KILL_REASONS order)
L_KILLS = 72
# loop -> everyone: the signal records made, clipped, refused and killed (engine/signal_counts.py)
L_RECORDS = 78
LOOP_RESUMED_NS, LEASE_GRACE_NS = 2_000_000_000, 1_000_000_000
LOOP_INIT, LOOP_RUNNING, LOOP_STOPPED, LOOP_EOF, LOOP_LEASE_EXPIRED, LOOP_PAUSED, LOOP_REATTACH = 0, 1, 2, 3, 4, 5, 6
LOOP_STATE_NAMES = {0: "init", 1: "running", 2: "stopped", 3: "end of stream", 4: "lease expired", 5: "paused",
                    6: "reattaching"}

HIST_BYTES = len(latency.STAGES) * latency.COUNTS_LEN * 8
_LINES = 1 << (max(1, (HIST_BYTES + 63) // 64) - 1).bit_length()


class ControlBlock:
    def __init__(self, name):
        self.path = shm.ring_path(name)
        self.mm, self.hdr, self.note = shm.create(self.path, shm.RING_CONTROL, 64, _LINES)
        self.hist = np.frombuffer(self.mm, np.int64, len(latency.STAGES) * latency.COUNTS_LEN,
                                  shm.HEADER_BYTES).reshape(len(latency.STAGES), latency.COUNTS_LEN)

    def counters(self):
        h = self.hdr
        sc = signal_counts.of_counters(int(h[L_SIGNALS]), *(int(h[L_RECORDS + k]) for k in range(3)))
        return {"ticks": int(h[L_TICKS]), "signals": sc["published"], "signal_counts": sc, "gaps": int(h[L_GAPS]),
                "lost": int(h[L_LOST]), "scored": int(h[L_SCORED]),
                "conflated": int(h[L_CONFLATED]), "marks": int(h[L_MARKS]), "parks": int(h[L_PARKS]),
                "feed_gaps": int(h[L_FEED_GAPS]), "feed_lost": int(h[L_FEED_LOST]),
                "state": LOOP_STATE_NAMES.get(int(h[L_STATE]), "?"), "killed": int(h[L_KILLED]),
                "risk_blocked": risk.blocked(h[L_RISK_RULES - risk.RG_RULES:]),
                "kills": {r: int(h[L_KILLS + k]) for k, r in enumerate(risk.KILL_REASONS) if r}}
