"""A live gateway session kept alive: the connection (feeds/databento/gateway_link.py) and its
handshake (feeds/databento/gateway_protocol.py) opened again whenever it is lost.

Faults: a closed or reset connection, a gateway silent for timeout_s (a half-open TCP looks the
same; TCP keepalive is on too), a broken record framing (the source finds it): the connection is
dropped, and if the session had streamed, that is ONE gap (however many attempts follow: the
source publishes the gap tick and clears every book); then we reconnect with backoff and
subscribe again, without `start` (a replay is not repeated) and, with snapshot, asking for the
snapshot again: it rebuilds the books. A failed attempt (refused, no greeting) waits and tries
again; a failed authentication stops the feed (FeedError).

Backoff: backoff_s * 2^attempt capped at backoff_max_s, times a random 0.5-1 (jitter: clients
dropped together do not come back together), reset once a session delivers (data or a
heartbeat).
"""
import random
import time

from feeds.core import uri as U
from feeds.databento.gateway_link import Dropped, GatewayLink
from feeds.databento.gateway_protocol import Refused, handshake

YIELD_EVERY_S = 0.02  # a wait yields at least this often
MIN_BACKOFF_S = 0.001


class Backoff:
    """The wait before the next attempt (the module's doc). `uniform(a, b)`: the jitter's draw."""

    def __init__(self, base_s, max_s, uniform=random.uniform):
        self.base_s, self.max_s, self.uniform = max(base_s, MIN_BACKOFF_S), max_s, uniform
        self.attempt = 0

    def next(self):
        """The wait before the next attempt, s; counts the attempt."""
        d = min(self.max_s, self.base_s * 2 ** min(self.attempt, 30)) * self.uniform(0.5, 1.0)
        self.attempt += 1
        return d

    def reset(self):
        self.attempt = 0


class GatewaySession:
    """One subscription (gateway_protocol.Subscription) to `gateway` (host, port), kept alive.
    `counts`: the source's counters (sessions, reconnects, gaps, timeouts, connect_failures,
    bytes); `say`: one log line; `stopped()`: the source was asked to stop."""

    def __init__(self, uri, gateway, key, sub, backoff, counts, say, stopped,
                 connect_timeout_s=10.0, timeout_s=40.0, idle_s=0.0):
        self.uri, self.gateway, self.key, self.sub = uri, gateway, key, sub
        self.backoff, self.counts, self.say, self.stopped = backoff, counts, say, stopped
        self.connect_timeout_s, self.timeout_s, self.idle_s = connect_timeout_s, timeout_s, idle_s
        self.where = f"{gateway[0]}:{gateway[1]}"
        self.link = None        # the connection, while there is one
        self.streamed = False   # this session's stream began (its metadata came): losing it is a gap
        self.retry_at = None    # when the next attempt may start
        self.last_rx = self.last_data = 0.0

    def open(self, first=False):
        """Connect and subscribe (a generator: it yields while it waits; `start` in the first
        session only). Returns the bytes that came after the handshake: the stream's start.
        Dropped when there is no session; FeedError when the gateway refuses the key."""
        link = GatewayLink(*self.gateway, self.connect_timeout_s, self.stopped)
        try:
            yield from link.open()
            yield from handshake(link, self.key, self.sub, replay=first)
        except Refused as e:
            link.close()
            raise U.FeedError(f"{self.uri}: authentication failed at {self.where}: {e}") from None
        except BaseException:
            link.close()
            raise
        self.link = link
        self.streamed = False
        self.counts["sessions"] += 1
        self.last_rx = self.last_data = time.monotonic()
        return link.take_buffered()

    def reconnect(self):
        """One attempt after the backoff's wait (a generator: it yields while it waits). Returns
        the stream's start, or None: stopped, or the attempt failed (the next call waits again)."""
        if self.retry_at is None:
            self.retry_at = time.monotonic() + self.backoff.next()
        while time.monotonic() < self.retry_at and not self.stopped():
            time.sleep(min(YIELD_EVERY_S, max(0.0, self.retry_at - time.monotonic())))
            yield
        if self.stopped():
            return None
        try:
            head = yield from self.open()
        except Dropped as e:
            self.counts["connect_failures"] += 1
            self.retry_at = time.monotonic() + self.backoff.next()
            self.say(f"{self.uri}: reconnect failed: {e}; next try in {self.retry_at - time.monotonic():.1f} s")
            return None
        self.counts["reconnects"] += 1  # (attempts that failed: connect_failures)
        self.retry_at = None
        return head

    def heard(self, now, nbytes):
        """Bytes came (nbytes of them counted)."""
        self.last_rx = now
        self.counts["bytes"] += nbytes

    def delivered(self, now):
        """Data records came: the session works (the next drop starts the backoff again)."""
        self.last_data = now
        self.backoff.reset()

    def silence(self, now):
        """Why the connection is dead when nothing came for timeout_s (counted), else None."""
        if now - self.last_rx <= self.timeout_s:
            return None
        self.counts["timeouts"] += 1
        return f"{self.where} silent for {now - self.last_rx:.1f} s (timeout_s={self.timeout_s:g})"

    def idle(self, now):
        """No data record for idle_s (0: never idle)?"""
        return bool(self.idle_s) and now - self.last_data > self.idle_s

    def lost(self, why):
        """The connection is gone: close it. True when that is a gap (the session had streamed:
        one gap per lost session, however many attempts follow)."""
        self.close()
        gap = self.streamed
        if gap:
            self.counts["gaps"] += 1
            self.streamed = False
        self.say(f"{self.uri}: {why}; reconnecting")
        return gap

    def close(self):
        if self.link is not None:
            self.link.close()
            self.link = None
