"""The control plane's drain: a thread of its own, never the one that answers HTTP, renews the loop's
lease, beats the heartbeats and moves the loop's signals to the signal file, to zmq (engine/zpub.py:
slow subscribers are cut off) and to the paper trader every drain_period, however busy the HTTP
side is. At the end a drain thread that does not stop (blocked writing the signal file: a reader
that stopped reading a FIFO, a hung file system) is left alone: nothing more is drained (`stuck`)."""
import threading

from engine import dirs, sigring
from engine.records import SIGNAL_FLAG_MARK, signal_flags, signal_instruments

from .lease import renew_lease
from .progress import log

DRAIN_JOIN_S = 1.0                # at the end, a drain thread that does not stop within this is stuck (a write),
DRAIN_SLOW_S = 2.0                # or, writing a regular file (a loaded disk slows it, never blocks it), this
                                  # more (within ops/engine.service's TimeoutStopSec=5 with the rest of the stop)
PUB_RENEW_EVERY = 256             # zmq: the lease is renewed after this many records sent
PUB_HWM = 1000                    # zmq: records queued per subscriber before it is found slow and cut off


class Drain:
    """x: the plane's inputs (app/daemon.py PlaneInputs); table: the run's instruments
    (app/plane_instruments.py: the zmq topics)."""

    def __init__(self, x, table):
        self.x, self.table = x, table
        self.ctl = x.ctl_blk.hdr
        self.pub = self.pub_key = self.pub_key_file = self.pub_client_key_file = None
        self.thread, self.stop_flag, self.stuck = None, threading.Event(), False

    def start_pub(self, cfg):
        """--pub: the zmq publisher. CURVE: subscribers that check the key talk to this engine only,
        never to a port squatter; and only the client keys the owner allows (app/zauth.py) complete
        a handshake."""
        from .zpub import Publisher, allowed_clients, key_paths, own_key_paths, server_keys
        try:
            sd = dirs.state_dir()
            self.pub_key, secret = server_keys(cfg.name, sd)
            clients = allowed_clients(cfg.pub_clients, sd)
        except OSError as e:
            raise RuntimeError(f"--pub: cannot keep the zmq keypairs in $XDG_STATE_HOME/engine "
                               f"({e.filename or ''}): {e.strerror}") from None
        self.pub_key_file, self.pub_client_key_file = key_paths(cfg.name, sd)[1], own_key_paths(sd)[0]
        # bounded per subscriber: one that stops reading holds at most PUB_HWM records plus its
        # socket buffer; then it is counted and disconnected; it never grows our memory or blocks us
        self.pub = Publisher(cfg.pub, hwm=PUB_HWM, secret_key=secret, clients=clients)
        who = f"and those listed in {cfg.pub_clients}" if cfg.pub_clients else "only"
        log(f"signals published on {cfg.pub} (CURVE, server key {self.pub_key.decode()} in {self.pub_key_file}; "
            f"subscribers: this user's own ({self.pub_client_key_file}) {who}; "
            "topic = instrument, payload = the 128-byte signal record, then the topic's publication number)")

    def zmq_counters(self):
        p = self.pub
        return {"published": p.published if p else 0, "dropped": p.dropped if p else 0,
                "slow_disconnects": p.disconnected if p else 0, "refused": p.refused if p else 0}

    def start(self):
        self.thread = threading.Thread(target=self._run, name="engine-drain", daemon=True)
        self.thread.start()

    def _run(self):
        x = self.x
        if x.bridge is not None:
            x.bridge.stop()  # (ours from now on: renewed at once below)
        while not self.stop_flag.is_set():
            self.renew()
            self.drain()
            if self.pub is not None:
                self.pub.poll()
            if not x.thread.is_alive():
                return
            self.stop_flag.wait(x.drain_period)

    def renew(self):
        renew_lease(self.ctl, self.x.sring.hdr, self.x.lease_ns)

    def drain(self):
        buf = self.x.drain_buf
        total = 0
        paper = self.x.paper
        # (read before draining. The loop taps a tick before it decides on it, so the last tick
        # taken may still be deciding: the decisions on the ticks before it are all drained below)
        taken = max(paper.tap_written() - 1, 0) if paper is not None else 0
        while True:
            n = sigring.drain(self.x.sring.hdr, self.x.sring.data, self.x.sring.mask, buf)
            if not n:
                if paper is not None:
                    paper.decided(taken)
                return total
            self.renew()  # (alive: a long drain is progress)
            self.x.slog.write(buf[:n])  # signals and conflation marks (the file keeps both)
            if self.x.paper is not None:
                self.x.paper.signals(buf[:n])
            if self.pub is not None:
                self.publish(buf[:n])
            total += n

    def publish(self, chunk):
        """The chunk's decisions on zmq, renewing the lease every PUB_RENEW_EVERY: sending to 50
        subscribers on a loaded machine took 1 ms a record, 3.5 s for one chunk."""
        recs = chunk[(signal_flags(chunk) & SIGNAL_FLAG_MARK) == 0]  # decisions only
        insts = signal_instruments(recs).tolist()
        if insts and max(insts) >= len(self.table.names):
            self.table.refresh()  # a feed names instruments as it finds them
        for i, (rec, inst) in enumerate(zip(recs, insts)):  # never blocks: a subscriber found full
            if i % PUB_RENEW_EVERY == PUB_RENEW_EVERY - 1:  # is cut off (engine/zpub.py)
                self.renew()
            self.pub.send(self.table.topic(inst), rec.tobytes())

    def stop(self):
        self.stop_flag.set()

    def finish(self):
        """After the loop stopped: the drain thread stopped (waited for while slow, left alone when
        stuck), and the last signals drained."""
        self.stop_flag.set()
        slog = self.x.slog
        if self.thread is not None:
            self.thread.join(DRAIN_JOIN_S)
            if self.thread.is_alive() and slog.regular:  # (slow, not stuck: the last signals, the
                log(f"the drain thread is slow writing {slog.path}: waiting up to {DRAIN_SLOW_S:.0f} s")
                self.thread.join(DRAIN_SLOW_S)  # paper trader's and the file's, are worth the wait)
            self.stuck = self.thread.is_alive()
        if self.stuck:
            log(f"error: the drain thread is stuck writing {slog.path}: the last signals are not written")
        else:
            self.drain()

    def close(self):
        if self.pub is not None and not self.stuck:  # (a zmq socket is one thread's: never closed under it)
            self.pub.close()
