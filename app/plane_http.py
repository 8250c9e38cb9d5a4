"""The control plane's HTTP side (aiohttp, on the plane's asyncio loop): /metrics (a snapshot at
most every METRICS_EVERY_S), /metrics/private, /health, /ready (?source=LABEL: one source's), and
behind the owner's token or unix socket /status and /control/*. Bounded: MAX_REQUESTS at once,
timeouts, connections capped per peer (app/httpconns.py); served on host:port and on a unix
socket in the private runtime directory."""
import asyncio
import json
import os
import secrets
import threading
import time

from engine import control as C
from engine import dirs, risk

from . import ctlauth
from .plane_metrics import metrics_text
from .progress import log

METRICS_EVERY_S = 0.25            # /metrics renders at most this often, however many scrape it
MAX_REQUESTS = 64                 # HTTP requests in progress at once; more get 503
REQUEST_TIMEOUT_S = 5.0
# commands that load a model (a reload, a shadow: verification, and on a cold numba cache the
# shadow's loop compiled, tens of seconds) get longer before their reply says they are still going
SLOW_COMMANDS = ("reload", "shadow-add", "shadow-remove")
SLOW_REQUEST_TIMEOUT_S = 120.0
KEEPALIVE_S = 5.0
HTTP_STOP_S = 1.0                 # at stop, requests in progress get this long; then their connections close


def _json(body, status=200, **kw):
    from aiohttp import web
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, default=str), **kw)


class PlaneHttp:
    """plane: app/daemon.py ControlPlane (its state, status, readiness, token, commands)."""

    def __init__(self, plane):
        from .httpconns import Connections
        self.p = plane
        self.challenges, self.unix = ctlauth.Challenges(), None
        self.conns = Connections(say=lambda m: plane.http_log.line("conns", m))
        self.busy = 0
        self.snapshots = {False: (b"", 0.0), True: (b"", 0.0)}  # (public, private: each a snapshot and when)

    async def serve(self, host, port):
        """Serve on host:port and on the unix socket `unix_path()`; we accept the connections
        ourselves, capped (httpconns.py). Returns what to cleanup() at the end."""
        from aiohttp import web

        from .httpconns import serve
        app = web.Application(middlewares=[self.limiter()], client_max_size=4096)
        app.router.add_get("/metrics", self.metrics_of(False))
        app.router.add_get("/metrics/private", self.owner_or_its_prometheus(self.metrics_of(True)))
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/auth/challenge", self.challenge)
        app.router.add_get("/status", self.guarded(self.status))
        app.router.add_post("/control/{cmd}", self.guarded(self.control))
        app.router.add_get("/control/status", self.guarded(self.status))
        # (aiohttp's default waits 60 s for requests in progress at stop: keep-alive scrapers that
        # never pause held a stopping engine that long)
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_S, logger=self.p.http_log,
                               shutdown_timeout=HTTP_STOP_S)
        await runner.setup()
        try:
            served, self.unix = await serve(runner, self.conns, host, port, self.unix_path(),
                                            lambda m: self.p.http_log.line("accept", m))
        except BaseException:
            await runner.cleanup()
            raise
        return served

    def unix_path(self):
        """The control plane's unix socket, in the private runtime directory the runtime file is in
        (None if the path would be too long for a unix socket)."""
        path = os.path.join(dirs.runtime_dir(), f"engine-http.{str(self.p.cfg.name).replace('/', '%')}.sock")
        if len(os.fsencode(path)) > 107:
            log(f"warning: no unix control socket: {path} is too long for one (clients need --http)")
            return None
        return path

    # -- who may ask ---------------------------------------------------------------------

    def authorized(self, request):
        """The unix socket (in the 0700 runtime directory): a peer of our uid (or root), by
        SO_PEERCRED, no token. TCP: an Engine-HMAC answer to one of our challenges (ctlauth.py:
        the token never crosses the wire), or `Authorization: Bearer <token>` for curl (whoever
        listens on the port gets that token: README)."""
        entry = self.conns.open.get(request.transport)
        if entry is not None and isinstance(entry[0], tuple):  # ("uid", N): the unix socket
            return entry[0][1] in (os.geteuid(), 0)
        got = request.headers.get("Authorization", "")  # any bytes (undecodable ones come as surrogates)
        token = self.p.token
        if got.startswith(ctlauth.SCHEME + " "):
            return self.challenges.check(token, got, request.method, request.raw_path)
        return secrets.compare_digest(got.encode("utf-8", "surrogateescape"), f"Bearer {token}".encode())

    def guarded(self, fn):
        from aiohttp import web

        async def handler(request):
            if not self.authorized(request):
                return web.json_response({"error": "unauthorized: use `engine ctl`/`engine stats` (the "
                                                   "engine's unix socket, or a challenge-response over TCP), "
                                                   "or send 'Authorization: Bearer <token>' (the token is in "
                                                   f"{self.p.x.token_file}, new at each start)"}, status=401)
            return await fn(request)
        return handler

    def owner_or_its_prometheus(self, fn):
        from aiohttp import web

        async def handler(request):
            got = request.headers.get("Authorization", "")
            mt = self.p.metrics_token
            ok = self.authorized(request) or (mt is not None and secrets.compare_digest(
                got.encode("utf-8", "surrogateescape"), f"Bearer {mt}".encode()))
            if not ok:
                return web.Response(status=401, text="unauthorized: /metrics/private (money, positions) is the "
                                    "owner's: its token, its unix socket, or --metrics-token-file's token\n")
            return await fn(request)
        return handler

    async def challenge(self, request):
        from aiohttp import web
        c = request.query.get("c", "")
        if not ctlauth.valid_nonce(c):
            return web.json_response({"error": "give c=CLIENT_NONCE (32 to 128 lowercase hex digits)"}, status=400)
        return web.json_response(self.challenges.issue(self.p.token, c))

    # -- what anyone may see -------------------------------------------------------------

    def metrics_of(self, private):
        from aiohttp import web

        async def metrics(request):
            now = time.monotonic()
            body, at = self.snapshots[private]
            if now - at >= METRICS_EVERY_S:  # a snapshot: scrapers cannot make us render more
                body = metrics_text(self.p, private)
                self.snapshots[private] = (body, now)
            return web.Response(body=body, content_type="text/plain", charset="utf-8",
                                headers={"X-Content-Type-Options": "nosniff"})
        return metrics

    async def health(self, request):
        from aiohttp import web
        alive = self.p.x.thread.is_alive()
        return web.Response(status=200 if alive else 503, text="alive\n" if alive else "strategy loop not running\n")

    async def ready(self, request):
        from aiohttp import web
        ok, why = self.p.ready()
        sources = self.p.source_status()
        want = request.query.get("source")
        if want is not None:  # one source's readiness: a probe per venue
            if not sources or want not in sources:
                return web.json_response({"error": f"no source {want!r} (sources: "
                                                   f"{', '.join(sources or {}) or 'none'})"}, status=404)
            s = sources[want]
            return web.json_response({"source": want, "ready": s["ready"], "feed": s["feed"]},
                                     status=200 if s["ready"] else 503)
        body = {"ready": ok, "not_ready": why}
        if sources is not None:
            body["sources"] = {k: {"ready": v["ready"], "feed": v["feed"]} for k, v in sources.items()}
        return web.json_response(body, status=200 if ok else 503)

    # -- the owner's ---------------------------------------------------------------------

    async def status(self, request):
        return _json(self.p.status())

    async def control(self, request):
        p, cmd = self.p, request.match_info["cmd"]
        if cmd == "pause":
            p.paused = True
            p.ctl[C.CTL_CMD] = C.CMD_PAUSE
        elif cmd == "resume":
            p.paused = False
            p.ctl[C.CTL_CMD] = C.CMD_RUN
        elif cmd == "kill":
            p.kill(risk.KILL_REASONS.index("command"))
            await adopted(lambda: int(p.ctl[C.L_KILLED]) != 0)
        elif cmd == "resume-after-kill":
            p.unkill()
            await adopted(lambda: int(p.ctl[C.L_KILLED]) == 0)
        elif cmd in ("shadow-add", "shadow-remove"):  # (loading a model is slow: off the event loop)
            return await self.shadow_command(cmd, request)
        elif cmd == "reload":  # this call's own result (run_model.reload_model), not the latest swap's
            res = await off_loop(p.x.reload) or {}
            return _json({"ok": bool(res.get("ok")), **res}, status=200 if res.get("ok") else 409)
        elif cmd != "status":
            return _json({"error": f"unknown command {cmd!r} (status, pause, resume, reload, kill, "
                                   "resume-after-kill, shadow-add, shadow-remove)"}, status=404)
        return _json(p.status())

    async def shadow_command(self, cmd, request):
        from aiohttp import web
        shadows = self.p.x.shadows
        arg = request.query.get("model" if cmd == "shadow-add" else "name", "")
        if shadows is None:
            return web.json_response({"ok": False, "error": "this run reads no tap ring, where shadows read "
                                      "the loop's ticks: start it with --shadow, --record or --paper (and a "
                                      "signal file: --signals-out FILE)"}, status=409)
        if not arg:
            return web.json_response({"ok": False, "error": "give ?model=DIR (add) or ?name=NAME (remove)"},
                                     status=400)
        fn = shadows.add if cmd == "shadow-add" else shadows.remove
        res = await off_loop(lambda: fn(arg)) or {}
        return _json(res, status=200 if res.get("ok") else 409)

    # -- bounds --------------------------------------------------------------------------

    def limiter(self):
        """The middleware that bounds every request: in progress at once, and in time."""
        from aiohttp import web

        @web.middleware
        async def limit(request, handler):  # a flood gets 503s, not our time
            if self.busy >= MAX_REQUESTS:
                return web.Response(status=503, text="busy\n", headers={"Retry-After": "1"})
            self.busy += 1
            self.conns.begin(request.transport)  # (not idle: never closed to make room)
            slow = request.path.startswith("/control/") and request.path.rsplit("/", 1)[-1] in SLOW_COMMANDS
            within = SLOW_REQUEST_TIMEOUT_S if slow else REQUEST_TIMEOUT_S
            try:
                return await asyncio.wait_for(handler(request), within)
            except asyncio.TimeoutError:
                return web.json_response({"ok": False, "error": f"no answer within {within:g} s" + (
                    "; the command goes on in the engine (engine ctl status / shadow list show when it is done)"
                    if slow else "")}, status=503, headers={"Retry-After": "1"})
            finally:
                self.busy -= 1
                self.conns.end(request.transport)
        return limit


async def adopted(done, within=0.5):
    """Until the loop adopted the kill switch's move (it says so in the control block), or
    `within` seconds (a loop that has stopped): the reply then shows the state it is in."""
    until = time.monotonic() + within
    while not done() and time.monotonic() < until:
        await asyncio.sleep(0.002)


def off_loop(fn):
    """fn() in a daemon thread of its own, as an asyncio future of its result. Not the loop's
    executor: its threads are joined at exit, and a reload blocked on a stalled file system must
    not hold up a stop (nor its reply a request: the request times out, the reload goes on)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(res, err):
        if not fut.done():
            fut.set_exception(err) if err is not None else fut.set_result(res)

    def run():
        res = err = None
        try:
            res = fn()
        except BaseException as e:  # noqa: BLE001 - handed to whoever awaits
            err = e
        try:
            loop.call_soon_threadsafe(settle, res, err)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass
    threading.Thread(target=run, name="engine-reload", daemon=True).start()
    return fut
