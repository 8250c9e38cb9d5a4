"""`engine venue binance CAPTURE` and `engine venue databento FILE`: a recorded capture served on
loopback the way the venue serves it (feeds/binance/venue/, feeds/databento/venue/), with faults
on demand. It prints the URI to give `engine run --feed` on one line, then serves until
SIGINT/SIGTERM (exit 0) or, with --exit-at-end, until the capture has been played."""
import os
import signal
import sys
import threading

from .common import (Flag, command, existing_file, help_from, int_range, nonneg_float, nonneg_int, positive_float,
                     positive_int, subcommands)

BINANCE_PORT, DATABENTO_PORT = 9300, 13000


def cmd_venue_binance(a):
    from feeds.binance.venue import BinanceVenue
    faults = dict(drop_after=a.drop_after, silence_after=a.silence_after, silence_s=a.silence_s,
                  half_open_after=a.half_open_after, skip_diffs=a.lose_diff, stale_snapshot=a.stale_snapshot,
                  rest_status=a.http_error, retry_after=a.retry_after, max_conn_s=a.close_after,
                  fault_every_connection=a.every_connection)
    v = BinanceVenue(a.capture, market="auto", speed=a.speed, host=a.host, port=a.port, **faults)
    if a.market not in ("auto", v.market):  # (another market's client would not sync on it)
        raise ValueError(f"--market {a.market}: {a.capture} was recorded on {v.market}")
    _listen(v.start, a)
    print(v.uri, flush=True)
    _say(f"{a.capture}: Binance {v.market} {', '.join(v.cap.symbols)}, {len(v.cap.ns)} lines {_pace(a.speed)}")
    try:
        _serve(v.done.is_set if a.exit_at_end else None)
    finally:
        v.stop()
    return 0


def cmd_venue_databento(a):
    from feeds.databento.venue import DEMO_KEY, DatabentoVenue
    key = a.key or os.environ.get("DATABENTO_API_KEY", "").strip() or DEMO_KEY
    faults = dict(drop_after={0: a.drop_after} if a.drop_after is not None else None,
                  silent_after={0: a.silence_after} if a.silence_after is not None else None,
                  error_after={0: a.error_after} if a.error_after is not None else None)
    gw = _listen(lambda: DatabentoVenue(a.file, key=None if a.bad_key else key, speed=a.speed, host=a.host,
                                        port=a.port, at_end="close" if a.exit_at_end else "hold", **faults), a)
    print(gw.uri(), flush=True)
    _say(f"{a.file}: {gw.dataset} {', '.join(sorted(gw.symbols))}, {len(gw.recs)} records {_pace(a.speed)}")
    if a.bad_key:
        _say("--bad-key: every key is refused (Authentication failed)")
    elif key == DEMO_KEY:
        _say(f"key: the demo key; give it to engine run as DATABENTO_API_KEY={DEMO_KEY} (or key_file=FILE)")
    else:
        _say("key: the one given (--key or $DATABENTO_API_KEY); give engine run the same, as "
             "DATABENTO_API_KEY or key_file=FILE")
    try:
        _serve((lambda: any(s["closed_by"] == "end" for s in gw.sessions)) if a.exit_at_end else None)
    finally:
        gw.close()
    return 0


def _listen(start, a):
    """start() (which binds --host:--port); a port in use or a host we cannot bind is one line."""
    try:
        return start()
    except OSError as e:
        why = os.strerror(e.errno) if e.errno else str(e)
        raise ValueError(f"--host {a.host} --port {a.port}: cannot listen there ({why})") from None


def _serve(ended):
    """Until SIGINT/SIGTERM, or ended() (None: never)."""
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    while not stop.wait(0.2):
        if ended is not None and ended():
            return


def _say(line):
    print(f"engine venue: {line}", file=sys.stderr, flush=True)


def _pace(speed):
    return "flat out" if speed == 0 else "at the recorded pace" if speed == 1 else f"at {speed:g}x the recorded pace"


def _demo_key():
    from feeds.databento.venue import DEMO_KEY
    return DEMO_KEY


def _common(p, port):
    p.add_argument("--speed", type=nonneg_float, default=1.0,
                   help="pace: 1 recorded (default), 10 ten times faster, 0 flat out")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int_range(0, 65535), default=port,
                   help=f"port to listen on (default {port}; 0: any free port, the URI names it)")
    p.add_argument("--exit-at-end", action=Flag,
                   help="exit once the capture has been played (default: keep the connections open, quiet)")


def add_parsers(sub):
    v = command(sub, "venue", None, help="serve a recorded capture as the venue does, with faults on demand",
                description="Serve a capture on loopback as the venue does; prints the URI for engine run --feed.")
    vs = subcommands(v, "venue_cmd")
    b = command(vs, "binance", cmd_venue_binance, help="Binance websocket streams and REST from a capture",
                description="Serve a Binance capture (binance:FILE's format) as Binance's websocket streams "
                            "and REST (depth snapshots from the book at the market's position, exchangeInfo, "
                            "request weights, pings). Connections share one market clock. Faults apply to "
                            "the first connection unless --every-connection.")
    b.add_argument("capture", type=existing_file, help="the capture (gzip ok)")
    b.add_argument("--market", default="auto", choices=("auto", "spot", "usdm", "coinm"),
                   help="the market (default auto: the capture's)")
    _common(b, BINANCE_PORT)
    f = b.add_argument_group("faults")
    f.add_argument("--drop-after", type=positive_int, metavar="K", help="abort the TCP connection after K frames")
    f.add_argument("--silence-after", type=positive_int, metavar="K",
                   help="after K frames send no data for --silence-s (pings go on)")
    f.add_argument("--silence-s", type=positive_float, default=5.0, metavar="S", help="(default 5)")
    f.add_argument("--half-open-after", type=positive_int, metavar="K",
                   help="after K frames send and answer nothing, never close")
    f.add_argument("--lose-diff", type=positive_int, action="append", default=[], metavar="N",
                   help="never send the N-th depth diff (repeatable)")
    f.add_argument("--stale-snapshot", action=Flag, help="the first depth snapshot is older than the diffs")
    f.add_argument("--http-error", type=int, choices=(429, 418, 403, 500, 503), action="append", default=[],
                   metavar="STATUS", help="the next REST call answers STATUS (429, 418, 403, 500, 503; repeatable: "
                                          "in order)")
    f.add_argument("--retry-after", type=nonneg_int, default=1, metavar="S", help="its Retry-After (default 1)")
    f.add_argument("--close-after", type=positive_float, metavar="S",
                   help="the 24-hour close, compressed: close every connection S seconds after it opened")
    f.add_argument("--every-connection", action=Flag, help="the per-connection faults on every connection")
    d = command(vs, "databento", cmd_venue_databento, help="Databento's live gateway from a DBN MBO file",
                description="Serve a DBN MBO file as Databento's live gateway (CRAM authentication, "
                            "subscriptions, the MBO snapshot, heartbeats). A new session continues where the "
                            "last one stopped. Faults apply to the first session.")
    d.add_argument("file", type=existing_file, help="the DBN MBO file (.dbn or .dbn.zst)")
    help_from(d.add_argument("--key", default=None, help="the key clients must give (default $DATABENTO_API_KEY, "
                                                        "else the demo key %(demo)s)"), demo=_demo_key)
    _common(d, DATABENTO_PORT)
    f = d.add_argument_group("faults")
    f.add_argument("--drop-after", type=positive_int, metavar="N", help="close the connection after N records")
    f.add_argument("--silence-after", type=positive_int, metavar="N",
                   help="after N records send nothing, never close (a half-open connection)")
    f.add_argument("--error-after", type=positive_int, metavar="N", help="send a gateway error after N records")
    f.add_argument("--bad-key", action=Flag, help="refuse every key, as for a revoked one")
