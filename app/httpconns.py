"""The control plane's HTTP connections, capped below the descriptor budget.

The engine accepts connections itself (not aiohttp's site) so that idle ones cannot hold it at
its descriptor limit: at most `limit` connections in all and `per_peer` per peer (a remote
address; on the unix socket, a uid from SO_PEERCRED), where limit is RLIMIT_NOFILE minus a
reserve for the rings, the feed, the outputs and zmq. A new connection over a cap makes room by
closing the longest-idle connection (of that peer for the per-peer cap, of anyone for the total;
idle = no request in progress), so an attacker's idle connections go before a scraper's fresh
one (on loopback every local user is the same address); if every connection has a request in
progress (at most MAX_REQUESTS, each with a timeout) the new one is refused: closed at once
(RST). Both are counted; a log line at most every LOG_EVERY_S.
"""
import resource
import socket
import struct
import time

RESERVE_FDS = 256          # descriptors kept for everything else the engine opens
MAX_CONNECTIONS = 1024     # however high the limit
PER_PEER_SHARE = 4         # one peer gets at most limit / this
_LINGER0 = struct.pack("ii", 1, 0)


def budget():
    """(limit, per_peer) from RLIMIT_NOFILE."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    limit = max(8, min(MAX_CONNECTIONS, soft - RESERVE_FDS))
    return limit, max(2, limit // PER_PEER_SHARE)


def peer_uid(sock):
    try:
        return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    except OSError:
        return None


class Connections:
    def __init__(self, limit=None, per_peer=None, say=print):
        lim, pp = budget()
        self.limit, self.per_peer = limit or lim, per_peer or pp
        self.open = {}              # transport -> [peer, last activity (monotonic), requests in progress]
        self.count = {}             # peer -> open connections
        self.refused = 0            # closed at once: every slot busy with a request
        self.evicted = 0            # idle ones closed to make room
        self.say = say

    def prune(self):
        for tr in [t for t in self.open if t.is_closing()]:
            self._drop(tr)

    def _drop(self, tr):
        peer = self.open.pop(tr)[0]
        n = self.count[peer] - 1
        if n:
            self.count[peer] = n
        else:
            del self.count[peer]

    def _idlest(self, peer=None):
        best = None
        for tr, (p, last, busy) in self.open.items():
            if busy or (peer is not None and p != peer) or tr.is_closing():
                continue
            if best is None or last < best[1]:
                best = (tr, last)
        return best and best[0]

    def admit(self, peer):
        """True if a connection from peer may be served (after closing an idle one if need be)."""
        if self.count.get(peer, 0) < self.per_peer and len(self.open) < self.limit:
            return True
        self.prune()
        if self.count.get(peer, 0) >= self.per_peer and not self._make_room(peer, peer):
            return False
        if len(self.open) >= self.limit and not self._make_room(peer, None):
            return False
        return True

    def _make_room(self, peer, of):
        victim = self._idlest(of)
        if victim is None:
            self.refused += 1
            self.say(f"http: connection from {peer} refused: {len(self.open)} open, {self.count.get(peer, 0)} of "
                     f"them from it, all busy (limit {self.limit}, {self.per_peer} per peer; "
                     "engine_http_refused_connections_total)")
            return False
        self.evicted += 1
        self.say(f"http: {len(self.open)} connections open ({self.count.get(peer, 0)} from {peer}; limit "
                 f"{self.limit}, {self.per_peer} per peer): closing the longest idle "
                 "(engine_http_evicted_connections_total)")
        self._abort(victim)
        self._drop(victim)
        return True

    def add(self, tr, peer):
        self.open[tr] = [peer, time.monotonic(), 0]
        self.count[peer] = self.count.get(peer, 0) + 1

    def begin(self, tr):
        e = self.open.get(tr)
        if e is not None:
            e[2] += 1

    def end(self, tr):
        e = self.open.get(tr)
        if e is not None:
            e[2] -= 1
            e[1] = time.monotonic()

    @staticmethod
    def _abort(tr):
        try:
            s = tr.get_extra_info("socket")
            if s is not None and s.family != socket.AF_UNIX:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER0)  # RST: the descriptor goes now
        except OSError:
            pass
        tr.abort()

    @staticmethod
    def refuse(sock):
        try:
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER0)
        except OSError:
            pass
        sock.close()


def _listeners(host, port, unix_path):
    """[(listening socket, is unix)] on every address of host:port and on unix_path (0600), and
    (unix_path, inode) or None: the socket file is removed at the end only if it is still ours."""
    import os
    listeners, unix = [], None
    try:
        for fam, kind, proto, _, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                            flags=socket.AI_PASSIVE):
            ls = socket.socket(fam, kind, proto)
            listeners.append((ls, False))
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                ls.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            ls.bind(addr)
        if unix_path is not None:
            try:
                os.unlink(unix_path)  # a socket left by an engine of this name that was killed
            except FileNotFoundError:
                pass
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listeners.append((ls, True))
            old = os.umask(0o177)  # 0600: this user's (the directory is 0700 too)
            try:
                ls.bind(unix_path)
            finally:
                os.umask(old)
            unix = (unix_path, os.stat(unix_path).st_ino)
        for ls, _ in listeners:
            ls.listen(128)
            ls.setblocking(False)
    except BaseException:
        for ls, _ in listeners:
            ls.close()
        raise
    return listeners, unix


class Served:
    """What serve() started: cleanup() stops accepting, removes our unix socket, stops aiohttp."""

    def __init__(self, runner, tasks, listeners, unix):
        self.runner, self.tasks, self.listeners, self.unix = runner, tasks, listeners, unix

    async def cleanup(self):
        import os
        for t in self.tasks:
            t.cancel()
        for ls, _ in self.listeners:
            ls.close()
        if self.unix is not None:
            try:
                if os.stat(self.unix[0]).st_ino == self.unix[1]:  # (not a newer engine's)
                    os.unlink(self.unix[0])
            except OSError:
                pass
        await self.runner.cleanup()


async def serve(runner, conns, host, port, unix_path, say):
    """Accept connections for aiohttp's `runner` (set up) on host:port and unix_path ourselves,
    each admitted by `conns` first; returns (Served, (unix_path, inode) or None)."""
    import asyncio
    loop = asyncio.get_running_loop()
    listeners, unix = _listeners(host, port, unix_path)

    async def accept(lsock, is_unix):
        while True:
            try:
                conn, addr = await loop.sock_accept(lsock)
            except OSError as e:  # out of descriptors (EMFILE/ENFILE): the caps keep a reserve, but say so
                say(f"http: cannot accept a connection: {e.strerror}")
                await asyncio.sleep(0.05)
                continue
            peer = ("uid", peer_uid(conn)) if is_unix else addr[0]
            if not conns.admit(peer):
                conns.refuse(conn)
                continue
            try:
                tr, _ = await loop.connect_accepted_socket(runner.server, conn)
            except OSError:
                conn.close()
                continue
            conns.add(tr, peer)

    tasks = [loop.create_task(accept(ls, is_unix)) for ls, is_unix in listeners]
    return Served(runner, tasks, listeners, unix), unix
