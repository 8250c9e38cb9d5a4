"""The end of `engine run`, always run to its end whatever fails on the way (each step on its own,
a failure logged and raised once the rest is cleaned up): the loop told to stop and joined, the
feeds signalled, the last signals drained, the tap's readers finished, the signal file closed
(with why the run ended early, if it did), then the feeds stopped, the core given back, the rings
removed and the locks released."""
import os
import signal
import time

from engine import control as C
from engine import realtime, shm, sigring

from .feed_procs import stop_feed
from .progress import log
from .run_result import abnormal_end


def unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def stop_run(r):
    """Stop run `r` (app/live.py _Run): whatever of it was created, in order."""
    step = _stepper(r.cleanup_errors)
    proc, thread, slog, plane = r.proc, r.thread, r.slog, r.plane
    procs = r.procs if len(r.procs) > 1 else ([proc] if proc is not None else [])
    r.t_stop = time.monotonic()
    if r.ctl_blk is not None:
        r.ctl_blk.hdr[C.CTL_CMD] = C.CMD_STOP
    if r.bridge is not None:
        r.bridge.stop()
    if plane is not None:
        step(plane.feeds.note_feed_exit)  # (before we signal it: an exit of its own, not ours)
        r.source_feeds = {w.label: w.feed_status() for w in plane.feeds}  # (before we stop them)
    for p in procs:
        if p.poll() is None:
            step(p.send_signal, signal.SIGTERM)  # it exits while we drain and summarise
    if thread is not None:
        thread.join(timeout=0.2 if plane is not None and plane.abnormal else 2.0)  # (hung: it never will)
        step(count_unread, r)
    if r.sides.recorder is not None:
        step(r.sides.recorder.finish, not thread.is_alive() if thread is not None else True)
    if plane is not None:
        step(plane.finish)  # the last signals (file and zmq) and the last latency interval
    elif slog is not None:
        step(drain_rest, r)
    finish_sides(r, step)
    r.abnormal = abnormal_end(r)
    if slog is not None:
        step(slog.close, r.abnormal[0] if r.abnormal else None)
        if not r.running and not slog.count and slog.regular:
            step(unlink, r.sig_path)  # the run never started: no empty signal file left behind
    release(r, procs, step)


def _stepper(errors):
    def step(fn, *args):
        """One cleanup step: a failure is logged and reported after the rest is cleaned up."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - reported after the rest is cleaned up
            log(f"error while stopping: {e}")
            errors.append(e)
    return step


def finish_sides(r, step):
    """The tap's readers, after the last signals reached them."""
    from .paper_report import write_paper_report
    sides, slog = r.sides, r.slog
    if sides.paper is not None:
        step(lambda: setattr(sides, "paper_result", write_paper_report(r)))
    if sides.shadows is not None:
        step(sides.finish_shadows)
    if sides.drift is not None:
        step(sides.finish_drift, r.sig_path if slog is not None and slog.regular else None)  # (RUN.sig.drift.json)


def release(r, procs, step):
    """The feeds stopped, the core given back, the rings unmapped and removed, the locks released."""
    from engine import locks
    thread = r.thread
    for p in procs:
        step(stop_feed, p)
    if r.isolation is not None:
        step(r.isolation.restore)
    if thread is not None and thread.consumer is not None and not thread.is_alive():
        step(r.rings.close if r.rings is not None else thread.consumer.close)  # (a hung loop still
        # reads the rings' memory: they stay mapped until we exit)
    if not r.cfg.keep_rings:
        for p in r.created:
            step(unlink, p)
    step(realtime.munlockall)
    step(locks.release_all)


def count_unread(r):
    """Ticks the loop never read: the ring's write cursor minus the loop's read cursor, now."""
    cs = r.rings.consumers if r.rings is not None else [r.thread.consumer]
    if r.running:
        r.unread = sum(max(0, int(c.hdr[shm.H_WRITE]) - int(c.hdr[c.slot_base + shm.C_CURSOR]))
                       for c in cs if c is not None)


def drain_rest(r):
    """No control plane ran: the signals still in the ring, to the signal file."""
    s = r.sring
    while n := sigring.drain(s.hdr, s.data, s.mask, r.drain_buf):
        r.slog.write(r.drain_buf[:n])
