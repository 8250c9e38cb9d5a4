"""The gateway's server: its options, the market's position, and a thread per connection
(session.py)."""
import select
import socket
import threading

from feeds.databento.params import LIVE

from .session import serve
from .records import load

# a key of Databento's shape, valid for this venue only (what `engine venue databento` takes when
# given none; its --help names it)
DEMO_KEY = "db-FAKEfakeFAKEfakeFAKEfake0Ab1C"


class DatabentoVenue:
    """See the package's docstring for the options (faults) and what `sessions` records."""

    def __init__(self, path, key=DEMO_KEY, limit=None, repeat=1, speed=0.0, at_end="hold", drop_after=None,
                 silent_after=None, error_after=None, error_text="gateway error: something went wrong",
                 skip_on_reconnect=0, resume=True, refuse=(), inject=None, auth_error="Authentication failed.",
                 host="127.0.0.1", port=0):
        if speed < 0:
            raise ValueError(f"speed {speed}: must be >= 0")
        self.dataset, self.symbols, self.recs = load(path, limit, repeat)
        self.body = self.recs.tobytes()
        self.key, self.speed, self.at_end = key, speed, at_end
        self.drop_after, self.silent_after, self.error_after = drop_after or {}, silent_after or {}, error_after or {}
        self.inject, self.auth_error = inject or {}, auth_error
        self.error_text, self.skip, self.resume, self.refuse = error_text, skip_on_reconnect, resume, set(refuse)
        self.cursor = 0            # the market's position: the next record a session sends
        self.sessions = []         # per connection: what the client asked and what it was sent
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.srv = socket.create_server((host, port))
        self.host, self.port = host, self.srv.getsockname()[1]
        self.threads = []
        t = threading.Thread(target=self._accept, daemon=True, name="databento-venue")
        t.start()
        self.threads.append(t)

    def uri(self):
        """The dbn-live:// URI that reads this gateway (with the snapshot, as a client that joins
        a running market asks)."""
        return LIVE.write(self.dataset, symbols=",".join(sorted(self.symbols)), snapshot=1,
                          gateway=f"{self.host}:{self.port}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.closed.set()
        try:
            self.srv.close()
        except OSError:
            pass
        for t in self.threads:
            t.join(timeout=5)

    def _accept(self):
        while not self.closed.is_set():
            try:
                r, _, _ = select.select([self.srv], [], [], 0.05)
                if not r:
                    continue
                conn, _ = self.srv.accept()
            except (OSError, ValueError):  # closed meanwhile
                return
            with self.lock:
                k = len(self.sessions)
                self.sessions.append({"auth": None, "subscriptions": [], "records": 0, "snapshot_records": 0,
                                      "heartbeats": 0, "closed_by": None})
            t = threading.Thread(target=serve, args=(self, conn, k), daemon=True, name=f"databento-venue-{k}")
            t.start()
            self.threads.append(t)
