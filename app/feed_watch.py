"""The feeds of `engine run`, watched by its control plane: one FeedWatch per source (a run with one
has one, on the run's own feed and ring): its ring's heartbeat and state, its process (a live feed
started again with backoff, whether it died or ended; a file feed that dies ends the run), a ring
that reappears under its name (re-attached), and its own counters (engine/feed_stats.py) added up
over its restarts."""
import os
import time
from dataclasses import dataclass
from typing import Callable

from engine import control as C
from engine import feed_stats, shm

from .progress import log

FEED_STALE_NS = 500_000_000       # no feed heartbeat for this long: the feed is dead (feeds beat every <= 50 ms)
RESPAWN_AFTER_S = 0.5             # a feed that died or ended is started again after this, doubled for each
RESPAWN_MAX_S = 30.0              # restart in a row up to this; a feed that ran well RESPAWN_RESET_S
RESPAWN_RESET_S = 30.0            # starts the count again


@dataclass
class FeedSource:
    """One source of a run with several (or with --record): app/live.py _Run._sources makes them."""
    label: str                      # its short name (app/multi_rings.py labels): the metrics' `source` label
    uri: str | None                 # what its feed process reads (None: a ring we attached to)
    ring_name: str
    proc: object                    # its feed's subprocess.Popen (None: attached to a ring); respawn replaces it
    respawn: Callable | None        # start its feed again (a live one); None: a feed that dies ends the run
    index: int                      # its ring's place in the loop's rings (thread.rings.consumers[index])


class FeedWatch:
    """One feed, watched: its ring's heartbeat and state, its process (restarted with backoff when
    live), a ring that reappears under its name (re-attached), its counters over its restarts.
    A run with one source has one, on the run's own proc and ring (`source` None: its words are
    as they always were); a run with several has one per source, each said by its label."""

    def __init__(self, plane, source=None):
        self.p, self.x, self.source = plane, plane.x, source
        self.label = source.label if source is not None else None
        self.who = f"source {source.label}: " if source is not None else ""
        self.feed_dead_since = None
        self.feed_dead_logged = False
        self.respawns = 0
        self.lost_at_attach = None
        self.refused, self.refused_ino = 0, None
        self.backoff, self.respawn_at, self.ok_since, self.exit_seen = 0, None, None, None
        self._feed_consumer, self._feed_last, self._feed_carried = None, {}, {}

    # (the run's own proc and ring with one source; the source's with several)
    @property
    def proc(self):
        return self.source.proc if self.source is not None else self.x.proc

    @proc.setter
    def proc(self, p):
        if self.source is not None:
            self.source.proc = p
        else:
            self.x.proc = p

    @property
    def respawn(self):
        return self.source.respawn if self.source is not None else self.x.respawn

    @property
    def ring_name(self):
        return self.source.ring_name if self.source is not None else self.x.ring_name

    @property
    def consumer(self):
        t = self.x.thread
        rings = getattr(t, "rings", None)
        return rings.consumers[self.source.index] if self.source is not None and rings is not None else t.consumer

    @property
    def reattached(self):
        t = self.x.thread
        rings = getattr(t, "rings", None)
        return rings.reattached[self.source.index] if self.source is not None and rings is not None else t.reattached

    def _ring_state(self):
        """(inode, heartbeat age ns, state) of the ring file now under our ring's name, or None.
        A file there that must not be trusted (shm.open_checked) is refused, counted and logged
        once: its contents are never read."""
        path = shm.ring_path(self.ring_name)
        try:
            fd, st = shm.open_checked(path)
        except shm.RingRefused as e:
            try:
                ino = os.lstat(path).st_ino
            except OSError:
                ino = None
            if ino != self.refused_ino:
                self.refused_ino = ino
                self.refused += 1
                log(f"warning: {e} (not attaching; counted in engine_rings_refused_total)")
            return None
        except shm.RingError:
            return None
        try:
            hdr = shm.read_header_fd(fd, path)
        except shm.RingError:
            return None
        finally:
            os.close(fd)
        return st.st_ino, time.monotonic_ns() - int(hdr[shm.H_HEARTBEAT_NS]), int(hdr[shm.H_STATE])

    def feed_status(self):
        """'ok', 'finished' (a finite source played to its end), or why the feed is not alive."""
        c = self.consumer
        if c is None:
            return "not attached"
        state = int(c.hdr[shm.H_STATE])
        proc = self.proc
        if state == shm.STATE_FINISHED:
            if self.respawn is None:
                return "finished"
            # a live source that ends (MoldUDP64 idle_s, end of session) is a feed that is down
            return "the live feed ended" + (f" (exit status {proc.returncode})" if proc.poll() is not None else "")
        if proc is not None and proc.poll() is not None:
            return f"feed process exited with status {proc.returncode}"
        if self.lost_at_attach is not None and self.reattached == self.lost_at_attach:
            rs = self._ring_state()  # the same ring beating again (a paused feed) is back, not replaced
            if rs is None or rs[0] != c.ino:
                return "waiting for the feed's new ring"
        age = time.monotonic_ns() - int(c.hdr[shm.H_HEARTBEAT_NS])
        if age > FEED_STALE_NS:
            return f"no heartbeat for {age / 1e9:.1f} s"
        return "ok"

    def _feed_exited(self, proc):
        """Once per feed process that exits: a live one is started again after a backoff; a file
        feed that failed is said in the summary, and one that died before the end of its source
        ends the run (its end will never come)."""
        now = time.monotonic()
        code = proc.returncode
        if self.respawn is not None:
            delay = min(RESPAWN_AFTER_S * 2 ** self.backoff, RESPAWN_MAX_S)
            self.backoff += 1
            self.respawn_at = now + delay
            log(f"{self.who}feed process {proc.pid} exited with status {code}: starting it again in {delay:g} s")
            return
        c = self.consumer
        finished = c is not None and int(c.hdr[shm.H_STATE]) == shm.STATE_FINISHED
        if code != 0:
            self.p.warnings.append(f"{self.who}the feed process exited with status {code}"
                                 + (" (its log says why): its source was not read to the end" if finished else
                                    " before the end of its source: the run stopped there"))
        if not finished:
            log(f"{self.who}feed process {proc.pid} exited with status {code} before the end of its source: stopping")
            self.p.abnormal = self.p.abnormal or (f"feed exited {code}", f"{self.who}the feed process exited with "
                                                  f"status {code} before the end of its source")
            self.p.x.stop_event.set()

    def note_feed_exit(self):
        """At the end of the run, before the runner stops the feed: a file feed's exit that the
        watch had no time to see (its loop read to the end first) still makes its warning."""
        proc = self.proc
        if self.respawn is None and proc is not None and proc.poll() is not None and self.exit_seen is not proc:
            self.exit_seen = proc
            self._feed_exited(proc)

    def watch(self):
        self.feed_counters()  # (read while the feed is there: a restarted feed counts from 0 again)
        status = self.feed_status()
        proc = self.proc
        now = time.monotonic()
        if proc is not None and proc.poll() is not None and self.exit_seen is not proc:
            self.exit_seen = proc
            self._feed_exited(proc)
        if status in ("ok", "finished"):
            if self.feed_dead_logged:
                log(f"{self.who}feed is back")
            self.feed_dead_since, self.feed_dead_logged, self.lost_at_attach = None, False, None
            self.ok_since = self.ok_since or now
            if now - self.ok_since >= RESPAWN_RESET_S:
                self.backoff = 0
        else:
            self.ok_since = None
            if self.feed_dead_since is None:
                self.feed_dead_since = now
                self.lost_at_attach = self.reattached  # up again only on a new ring
            if not self.feed_dead_logged:
                log(f"{self.who}feed is down ({status}); /ready is false until it is back")
                self.feed_dead_logged = True
            if (proc is not None and proc.poll() is not None and self.respawn is not None
                    and self.respawn_at is not None and now >= self.respawn_at):
                self.respawns += 1
                self.respawn_at = None
                self.proc = self.respawn()
                log(f"{self.who}feed restarted (pid {self.proc.pid})")
        # a ring that reappeared under our name, alive: attach to it
        rs = self._ring_state()
        c = self.consumer
        if rs is not None and c is not None and status != "ok":
            ino, age, _ = rs
            if ino != c.ino and age < FEED_STALE_NS and int(self.p.ctl[C.CTL_CMD]) != C.CMD_REATTACH:
                log(f"{self.who}a new feed ring appeared at {shm.ring_path(self.ring_name)}: re-attaching")
                self.p.ctl[C.CTL_CMD] = C.CMD_REATTACH

    def feed_counters(self):
        """The feed's own counters (engine/feed_stats.py), added up over its restarts."""
        c = self.consumer
        if c is not None and c is not self._feed_consumer:  # a new ring: the last one's counts are final
            self._feed_carried = feed_stats.total(self._feed_carried, self._feed_last)
            self._feed_consumer, self._feed_last = c, {}
        if c is not None:
            self._feed_last = feed_stats.read(c.hdr) or self._feed_last
        return feed_stats.total(self._feed_carried, self._feed_last)



class Feeds(list):
    """The run's FeedWatches, one per source, and what they say together."""

    def feed_status(self):
        """'ok', 'finished', or why a feed is not alive (with several sources: each one that is not
        ok, by its label)."""
        if len(self) == 1:
            return self[0].feed_status()
        bad = [f"{w.label}: {st}" for w in self for st in [w.feed_status()] if st not in ("ok", "finished")]
        if bad:
            return "; ".join(bad)
        return "finished" if all(w.feed_status() == "finished" for w in self) else "ok"

    def note_feed_exit(self):
        for w in self:
            w.note_feed_exit()

    def watch(self):
        for w in self:
            w.watch()

    def feed_counters(self):
        """The feeds' own counters (engine/feed_stats.py), added up over their restarts (and sources)."""
        out = {}
        for w in self:
            out = feed_stats.total(out, w.feed_counters())
        return out

    @property
    def respawns(self):
        return sum(w.respawns for w in self)

    @property
    def refused(self):
        return sum(w.refused for w in self)
