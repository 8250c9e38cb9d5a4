"""Operator commands. Those that talk to a running engine: `engine ctl`, `engine stats`,
`engine signals` (--follow a running engine, or show a signal file); and those about the
machine and its measurements: `engine doctor`, `engine latency-plot`.

Where the engine is comes from, in this order: the flags (--http, --token-file, --follow
ENDPOINT); --config FILE (the TOML `engine run --config` reads: name, [control] http, pub,
token_file); the runtime file the engine NAME wrote at start (engine/runtime_file.py); the
defaults. With neither endpoint flags nor --config, the runtime file of --name (default
"engine") must be there and live: if not, one line says so (exit 2).
"""
import argparse
import http.client
import json
import os
import sys

import numpy as np

from app.run_options import HTTP_DEFAULT, PUB_DEFAULT, RunConfig, token_path

from .common import Flag, command, existing_file, http_addr, nonneg_int, sub_endpoint, subcommands, zmq_endpoint

DEFAULTS = {"http": HTTP_DEFAULT, "pub": PUB_DEFAULT}  # engine run's own defaults
FLAG = {"http": "--http", "pub": "--follow"}


class Where:
    """A running engine's endpoints and where each came from (for messages). unix: the control
    plane's unix socket (the runtime file of a live engine at that address names it); pub_key:
    the publisher's CURVE key and where it came from."""

    def __init__(self, name, value, origin, token_file=None, unix=None, pub_key=None):
        self.name, self.value, self.origin, self.token_file = name, value, origin, token_file
        self.unix, self.pub_key = unix, pub_key


def resolve(a, want):
    """Where engine a.name's `want` ("http" or "pub") endpoint is (see the module's docstring)."""
    from app.runtime_file import RuntimeFileError, find
    conf = {}
    if getattr(a, "config", None):
        from app.config import load
        conf = load(a.config)
    name = a.name or conf.get("name") or RunConfig.name
    flag = a.http if want == "http" else (a.follow if isinstance(a.follow, str) else None)  # (True: --follow alone)
    rt = None
    try:
        rt = find(name)
    except RuntimeFileError:
        if flag is None and not conf:
            raise  # nothing else says where it is: the one-line reason
    if flag is not None:
        value, origin = flag, FLAG[want]
    elif want in conf:
        value, origin = conf[want], f"{a.config}: control.{want}"
    elif rt is not None:
        value, origin = rt.get(want), f"runtime file {rt['runtime_file']}"
    else:
        value, origin = DEFAULTS[want], "the default"
    if value in (None, "", "none"):
        what = "control plane (HTTP)" if want == "http" else "signal publication (zmq)"
        raise ValueError(f"engine {name!r} has no {what}: {origin} says none")
    try:
        if want == "http":
            value = http_addr(value)
        else:
            value = zmq_endpoint(value, bind=False)
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise ValueError(f"{origin}: {e}") from None
    token = unix = key = None
    if want == "http":
        same = rt is not None and rt.get("http") == f"{value[0]}:{value[1]}"
        token = (a.token_file or conf.get("token_file") or (rt.get("token_file") if same else None)
                 or token_path(name))
        unix = rt.get("http_unix") if same and isinstance(rt.get("http_unix"), str) else None
    else:
        key = _pub_key(a, name, rt, value)
    return Where(name, value, origin, token, unix, key)


def _pub_key(a, name, rt, endpoint):
    """(the publisher's CURVE public key, where it came from): --server-key (a key or a key file),
    the live engine's runtime file if it publishes there, else its key file in our state directory."""
    from app.zpub import check_public_key, key_paths, read_public_key
    given = getattr(a, "server_key", None)
    if given:
        if len(given) == 40 and not os.path.exists(given):
            return check_public_key(given, "--server-key"), "--server-key", name
        return read_public_key(given), given, name
    if rt is None or rt.get("pub") != endpoint:
        from app.runtime_file import find_publisher
        rt = find_publisher(endpoint) or rt  # (an endpoint alone: the engine of ours publishing there)
    if rt is not None and rt.get("pub") == endpoint and rt.get("pub_key"):
        where = f"runtime file {rt['runtime_file']}"
        return check_public_key(rt["pub_key"], where), where, rt.get("name") or name
    from engine.dirs import state_dir
    path = key_paths(name, state_dir())[1]
    if not os.path.exists(path):
        raise ValueError(f"no public key for engine {name!r}'s signals: it is not running as this user and {path} "
                         "is not there: give --server-key KEY|FILE (the engine's NAME.zmq-key.pub)")
    return read_public_key(path), path, name


def _client_keys(a, name, endpoint):
    """(this subscriber's CURVE keypair, where it came from): the keypair engine NAME admits as its
    owner's, which its runtime file names (a service keeps it in its own state directory), else
    this user's own (app/zauth.py: made on first use; another user's engine admits it once its
    owner lists the public key in --pub-clients)."""
    from app.runtime_file import RuntimeFileError, find, find_publisher
    from app.zauth import own_client_keys, own_key_paths
    if not getattr(a, "server_key", None):
        try:
            rt = find(name)
        except RuntimeFileError:
            rt = None
        if rt is None or rt.get("pub") != endpoint:
            rt = find_publisher(endpoint) or rt
        path = rt.get("pub_client_key_file") if rt is not None and rt.get("pub") == endpoint else None
        if isinstance(path, str) and path:
            return own_client_keys(path=path), path + ".pub"
    return own_client_keys(), own_key_paths()[1]


class _UnixHTTP(http.client.HTTPConnection):
    """HTTP on the engine's unix socket; the server must be this user (or root): SO_PEERCRED."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        import socket
        import struct
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
            uid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        except OSError:
            s.close()
            raise
        if uid not in (os.geteuid(), 0):
            s.close()
            raise OSError(f"the process on it is uid {uid}, not this user")
        self.sock = s


MAX_REPLY = 1 << 20


def _request(conn, method, path, where, headers=None):
    """(status, JSON object) of one request; a reply that is not one is one line (ValueError)."""
    conn.request(method, path, body=b"" if method == "POST" else None, headers=headers or {})
    r = conn.getresponse()
    raw = r.read(MAX_REPLY + 1)
    try:
        body = json.loads(raw) if len(raw) <= MAX_REPLY else None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        kind = r.getheader("Content-Type") or "no content type"
        raise ValueError(f"{where} answered {method} {path.split('?')[0]} with HTTP {r.status} and {len(raw)} bytes of "
                         f"{kind}, not the engine's JSON object: is that engine {where.name!r}?")
    return r.status, body


class _Endpoint(str):
    """An endpoint's description for messages, with the engine's name."""

    def __new__(cls, text, name):
        o = super().__new__(cls, text)
        o.name = name
        return o


def _control(a, method, path):
    """Call a running engine's control plane; returns (status, JSON). The token never leaves this
    process: on the unix socket the engine knows us by uid; over TCP the engine first proves it
    knows the token (app/ctlauth.py), then we send an HMAC bound to the request."""
    import secrets

    from app import ctlauth
    from app.daemon import SLOW_COMMANDS, SLOW_REQUEST_TIMEOUT_S, read_token
    w = resolve(a, "http")
    host, port = w.value
    cmd = path.split("?")[0].rsplit("/", 1)[-1]
    timeout = SLOW_REQUEST_TIMEOUT_S + 10 if path.startswith("/control/") and cmd in SLOW_COMMANDS else 10
    if w.unix:
        where = _Endpoint(f"the control socket {w.unix} of engine {w.name!r}", w.name)
        conn = _UnixHTTP(w.unix, timeout=timeout)
    else:
        where = _Endpoint(f"http://{host}:{port} ({w.origin})", w.name)
        try:
            token = read_token(w.token_file)  # refused when others can read it (RuntimeError: chmod 600)
        except OSError as e:
            raise ValueError(f"cannot read the control token {w.token_file}: {e.strerror} (is engine '{w.name}' "
                             "running as this user? --token-file)") from None
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {}
        if not w.unix:
            cn = secrets.token_hex(32)
            refused = (f"{where} is not engine {w.name!r}: it did not prove it knows the token (a process squatting "
                       "the port, or an engine with another token file); the token was not sent")
            try:
                code, ch = _request(conn, "GET", f"/auth/challenge?c={cn}", where)
            except (ValueError, http.client.HTTPException) as e:  # (not HTTP, not JSON: not the engine)
                what = str(e).replace(f"{where} ", "it ", 1) if isinstance(e, ValueError) else \
                    f"{type(e).__name__} {e}".strip()
                raise ValueError(f"{refused} ({what[:200]})") from None
            sn, proof = ch.get("nonce"), ch.get("proof")
            if code != 200 or not ctlauth.valid_nonce(sn) or not isinstance(proof, str) or \
                    not secrets.compare_digest(proof.encode("utf-8", "surrogateescape"),
                                               ctlauth.server_proof(token, cn, sn).encode()):
                raise ValueError(refused)
            headers["Authorization"] = f"{ctlauth.SCHEME} {sn} {ctlauth.client_mac(token, cn, sn, method, path)}"
        return _request(conn, method, path, where, headers)
    except (OSError, http.client.HTTPException) as e:
        why = e.strerror or str(e) if isinstance(e, OSError) else f"{type(e).__name__} {e}".strip()
        raise ValueError(f"no engine control plane at {where}: {why}") from None
    finally:
        conn.close()


def _shaped(fn, body, what):
    """fn(body); a reply without the fields the engine sends is one line, not a traceback."""
    try:
        return fn(body)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise ValueError(f"{what}: the reply is not an engine status (missing or odd field: {e}); is it the "
                         "engine?") from None


def _signals(c):
    """The signal counts as the run's summary says them (an engine from before: its one count)."""
    from engine import signal_counts
    return signal_counts.line(c["signal_counts"]) if "signal_counts" in c else f"signals {c['signals']:,}"


def status_line(body):
    """One line: who, state, readiness, counters, model and loop (ctl status/pause/resume, stats)."""
    from app.run_summary import gaps_line
    c = body["counters"]
    # the command's effect at once (the loop adopts it within microseconds; its own state may lag)
    state = "paused" if body.get("paused") else "resuming" if c["state"] == "paused" else c["state"]
    line = (f"engine {body['name']} (pid {body['pid']}): {state}, ready={body['ready']}, ticks {c['ticks']:,}, "
            f"scored {c['scored']:,}, {_signals(c)}, {gaps_line(c)}, "
            f"drops {body['signal_drops']}; model {body['model']['id']} ({body['model']['backend']}, generation "
            f"{body['model']['generation']}); loop {body['loop']['policy']} core {body['loop']['core']}")
    if body.get("not_ready"):
        line += "; not ready: " + ", ".join(body["not_ready"])
    return line


def risk_lines(body):
    """`engine ctl risk`: the limits, what each rule cut, the kill switch."""
    r = body["risk"]
    cut = ", ".join(f"{k} {v:,}" for k, v in r["blocked"].items() if v) or "nothing"
    return "\n".join([f"engine {body['name']}: {r['limits']}", f"  cut: {cut}",
                      f"  killed: {r['killed']} (resume: engine ctl resume --after-kill)" if r["killed"]
                      else "  killed: no"])


def _shadow_ctl(a):
    """`engine ctl shadow [list] | add MODEL | remove NAME`."""
    from urllib.parse import quote
    words = a.args or ["list"]
    what = words[0]
    if {"list": 1, "add": 2, "remove": 2}.get(what) != len(words):
        raise ValueError("ctl shadow: expected `shadow list`, `shadow add MODEL` or `shadow remove NAME`")
    if what == "list":
        code, body = _control(a, "GET", "/control/status")
        rows = body.get("shadows", []) if code == 200 else None
    else:
        arg = words[1]
        if what == "add" and not arg.startswith("registry:"):
            arg = os.path.abspath(arg)  # (the engine's working directory is not ours)
        key = "model" if what == "add" else "name"
        code, body = _control(a, "POST", f"/control/shadow-{what}?{key}={quote(arg, safe='')}")
        rows = [body] if code == 200 else None
    if rows is None:
        print(f"engine: error: ctl shadow {what}: engine said {code}: {body.get('error', body)}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(body if what != "list" else rows, default=str))
        return 0
    verb = {"add": "added", "remove": "removed", "list": "running"}[what]
    for r in rows:
        print(f"shadow {r['name']} {verb}: model {r['model_id']} ({r['model']}), {r['signals']:,} signals on "
              f"{r['ticks']:,} ticks -> {r['signals_out']}" + (f"; error: {r['error']}" if r.get("error") else ""))
    if not rows:
        print("no shadows running")
    return 0


def cmd_ctl(a):
    if a.command == "shadow":
        return _shadow_ctl(a)
    if a.args:
        raise ValueError(f"ctl {a.command} takes no arguments (got {' '.join(a.args)})")
    if a.after_kill and a.command != "resume":
        raise ValueError("--after-kill goes with resume (engine ctl resume --after-kill)")
    read = a.command in ("status", "risk")
    path = "/control/status" if read else "/control/resume-after-kill" if a.after_kill else f"/control/{a.command}"
    code, body = _control(a, "GET" if read else "POST", path)
    if code != 200 and a.command != "reload":
        print(f"engine: error: ctl {a.command}: engine said {code}: {body.get('error', body)}", file=sys.stderr)
        return 1
    if a.json:  # the same one-line JSON object for status, pause and resume (reload: the swap's result)
        print(json.dumps(body, default=str))
    elif a.command == "reload":
        if body.get("ok"):
            print(_shaped(lambda b: f"reload: model generation {b['generation']} ({b['model']}, {b['backend']}) "
                                    f"prepared in {b['prepare_ms']} ms, adopted by the loop "
                                    f"{b['adopted_after_us']:.1f} us after publication", body, "ctl reload"))
        else:
            print(f"engine: error: reload refused, the running model stays: {body.get('error', body)}",
                  file=sys.stderr)
    elif a.command in ("risk", "kill") or a.after_kill:
        print(_shaped(risk_lines, body, f"ctl {a.command}"))
    else:
        print(_shaped(status_line, body, f"ctl {a.command}"))
    return 0 if code == 200 else 1


def cmd_stats(a):
    code, body = _control(a, "GET", "/status")
    if code != 200:
        raise ValueError(f"engine said {code}: {body.get('error', body)}")
    if a.json:
        print(json.dumps(body))
        return 0
    _shaped(_print_stats, body, "stats")
    return 0


def _print_stats(body):
    from app.run_summary import feed_line, percentile_table
    out = [status_line(body)]
    cf, feed = body["losses"]["conflated"], body.get("feed_counters") or {}
    out.append(f"  conflated {cf['ticks']:,} ({cf['share']:.1%} of the scoreable ticks; warns above "
               f"{cf['warn_above']:.0%})" + (f"   crossed books {body['losses']['crossed_books']:,}"
                                             if body["losses"]["crossed_books"] else ""))
    if any(feed.values()):
        out.append("  " + feed_line(feed))
    risk = body.get("risk")
    if risk and (risk["killed"] or any(risk["blocked"].values())):
        out.append("  risk: " + (f"KILLED ({risk['killed']})   " if risk["killed"] else "") + "cut "
                   + (", ".join(f"{k} {v:,}" for k, v in risk["blocked"].items() if v) or "nothing"))
    if body.get("drift"):
        from app.run_summary import drift_line
        out.append("  " + drift_line(body["drift"]))
    for sh in body.get("shadows") or []:
        out.append(f"  shadow {sh['name']}: {sh['signals']:,} signals on {sh['ticks']:,} ticks (model {sh['model_id']})"
                   + (f", {sh['gaps']:,} gaps" if sh["gaps"] else "") + (f"; stopped: {sh['error']}" if sh["error"]
                                                                        else ""))
    pp = body.get("paper")
    if pp:
        from app.paper_status import stats_lines  # (money per currency, never one sum)
        out += stats_lines(pp)
    out.append(percentile_table(body["latency_ns"]))
    pre = body["loop"].get("preempted")
    if pre is not None:
        out.append(f"  core {body['loop']['core']}: the strategy thread waited {pre['wait_ms']:,.1f} ms in "
                   f"{pre['count']:,} preemptions for its core since it started")
    print("\n".join(out))


def cmd_signals(a):
    if a.signals_cmd:
        return cmd_signals_show(a)
    if a.follow is None:
        raise ValueError("engine signals: give --follow [ENDPOINT] (a running engine's signals) or `show FILE`")
    return cmd_signals_follow(a)


def cmd_signals_follow(a):
    """Print a running engine's signals, from a zpub.Subscriber: it checks the publisher's CURVE
    key, so a process on the port that is not the engine (a squatter while the engine is down)
    gets none of its records printed, and it says so on stderr, and says when the engine's
    publisher comes back (or comes back with a new key: from its runtime file)."""
    from app.runtime_file import RuntimeFileError, find
    from app.zpub import Subscriber
    from engine.records import SIGNAL_DTYPE, signal_dict
    from engine.risk import describe
    w = resolve(a, "pub")
    endpoint, (key, key_from, name) = w.value, w.pub_key

    def say(msg):
        print(f"engine: {msg}", file=sys.stderr, flush=True)

    def current_key():
        """The engine's key now (its runtime file or key file), for an engine restarted with a new one."""
        if getattr(a, "server_key", None):
            return sub.key
        try:
            rt = find(name)
        except RuntimeFileError:
            rt = None
        try:
            return _pub_key(a, name, rt, endpoint)[0]
        except ValueError:
            return sub.key

    client, client_from = _client_keys(a, name, endpoint)
    sub = Subscriber(endpoint, key, name, [t.encode() for t in a.topic or [""]], key_from, current_key, say,
                     client=client, client_source=client_from)
    n = 0
    last = {}  # topic -> its last publication number: a jump is signals this subscriber lost
    try:
        while not a.count or n < a.count:
            topic, payload, seq = sub.recv()
            if len(payload) != SIGNAL_DTYPE.itemsize:
                say(f"skipped a {len(payload)}-byte message (not a {SIGNAL_DTYPE.itemsize}-byte signal record)")
                continue
            r = np.frombuffer(payload, SIGNAL_DTYPE)[0]
            d = signal_dict(r)
            d["topic"] = topic.decode(errors="replace")
            d["risk"] = describe(d["flags"])  # (normal, clipped, refused, killed: the gate's flags in words)
            if len(seq) == 8:
                d["pub_seq"] = pub_seq = int.from_bytes(seq, "little")
                if topic in last and pub_seq > last[topic] + 1:
                    say(f"gap: {pub_seq - last[topic] - 1} signals of {d['topic']} lost (publication "
                        f"{last[topic] + 1} to {pub_seq - 1}: this subscriber fell behind or was reconnected)")
                last[topic] = pub_seq
            print(json.dumps(d), flush=True)
            n += 1
    finally:
        sub.close()
    return 0


def cmd_signals_show(a):
    from engine.records import PRICE_SCALE, signal_dict
    from engine.risk import describe
    from engine.signal_log import read_signals, status
    s = read_signals(a.file)
    note = status(a.file)["note"]  # "incomplete: the writer stopped at record N (reason)"
    if a.json:
        for r in s[: a.limit] if a.limit else s:
            print(json.dumps({**signal_dict(r), "risk": describe(r["flags"])}))
        if note:
            print(f"engine: warning: {a.file}: {note}", file=sys.stderr)
        return 0
    print(f"{len(s)} signals in {a.file}" + (f"\n  {note}" if note else ""))
    print(f"{'seq':>8} {'tick_seq':>10} {'inst':>5} {'position':>9} {'prev':>9} {'score':>9} {'mid':>12} "
          f"{'tick->signal ns':>16}  risk")
    for r in s[: a.limit] if a.limit else s:
        print(f"{r['seq']:>8} {r['tick_seq']:>10} {r['instrument']:>5} {r['position']:>9} {r['prev_position']:>9} "
              f"{r['score']:>9.5f} {r['mid_px'] / PRICE_SCALE:>12.4f} {int(r['ts_signal'] - r['ts_recv']):>16,}  "
              + (describe(r["flags"]) if r["flags"] else ""))
    return 0


def _where_args(q, http=True):
    q.add_argument("--config", default=None, metavar="FILE.toml",
                   help="the engine's config (the file `engine run --config` reads): its name and [control] "
                        "endpoints and token file")
    q.add_argument("--name", default=None,
                   help="engine name (default: from --config, else engine); alone, its endpoints are read from "
                        "the runtime file the engine wrote at start")
    if http:
        q.add_argument("--http", default=None, metavar="HOST:PORT",
                       help=f"its control plane (default: --config, the runtime file, else {HTTP_DEFAULT})")
        q.add_argument("--token-file", default=None,
                       help="its token (default: --config, the runtime file, else NAME.token in the runtime "
                            "directory: /run/engine for root, else $XDG_RUNTIME_DIR/engine, else /tmp/engine-UID)")


def cmd_latency_plot(a):
    from app.latency_plot import plot
    out = plot(a.file, a.out, stages=a.stage)
    print(out)
    return 0


def cmd_doctor(a):
    from app.doctor import run_checks, format_table
    res = run_checks(a.core)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(format_table(res))
    return 1 if any(r["status"] == "fail" for r in res) else 0


def add_parsers(sub):
    """`engine signals`, `engine ctl`, `engine stats`, `engine latency-plot`, `engine doctor`."""
    _add_signals(sub)
    _add_ctl(sub)
    _add_stats(sub)
    _add_latency_plot(sub)
    _add_doctor(sub)


def _add_signals(sub):
    """`engine signals --follow [ENDPOINT]` and `engine signals show FILE`."""
    s = command(sub, "signals", cmd_signals, help="signal tools: show a signal file, or --follow a running engine",
                description="engine signals --follow [ENDPOINT] prints a running engine's signals as JSON "
                            "lines (from its zmq PUB socket: ENDPOINT, else --config's [control] pub, else "
                            "the runtime file of --name); engine signals show FILE prints a signal file. "
                            "The engine admits its own user's subscribers; another user's client key "
                            "($XDG_STATE_HOME/engine/zmq-client.key.pub, made on first use) must be in "
                            "the file of client keys its run names (engine run's pub-clients option).")
    s.add_argument("--follow", nargs="?", const=True, default=None, metavar="ENDPOINT", type=sub_endpoint,
                   help="subscribe to ENDPOINT (default: where engine --name publishes)")
    _where_args(s, http=False)
    s.add_argument("--server-key", default=None, metavar="KEY|FILE",
                   help="the publisher's CURVE public key (40 z85 characters) or a file holding it (the engine's "
                        "NAME.zmq-key.pub); default: the runtime file of --name, else "
                        "$XDG_STATE_HOME/engine/NAME.zmq-key.pub. Records from a publisher without the matching "
                        "secret key are refused")
    s.add_argument("--topic", action="append", help="only these instruments (repeatable; default all)")
    s.add_argument("--count", type=nonneg_int, default=0, help="stop after N signals (default 0: never)")
    ss = subcommands(s, "signals_cmd", required=False)
    sh = command(ss, "show", cmd_signals, help="print the signals in a signal file")
    sh.add_argument("file", type=existing_file)
    sh.add_argument("--limit", type=nonneg_int, default=0, help="only the first N (default 0: all)")
    sh.add_argument("--json", action=Flag, help="one JSON object per line")


def _add_ctl(sub):
    """`engine ctl status|pause|resume|reload|kill|risk|shadow`."""
    ct = command(sub, "ctl", cmd_ctl,
                 help="control a running engine: status, pause, resume, reload, kill, risk, shadow",
                 description="pause: the loop keeps reading ticks and features stay current, but nothing is "
                             "scored or signalled; resume; reload: verify and swap the model (as SIGHUP); "
                             "kill: every instrument's target goes flat at the loop's next tick and the risk "
                             "gate refuses new exposure until `resume --after-kill`; risk: the limits, what "
                             "each rule cut, the kill switch; shadow list | add MODEL | remove NAME: the "
                             "candidate models scored beside the live one (engine run --shadow), a new one "
                             "from the next tick on (verified first: one that fails changes nothing), a "
                             "removed one's signal file closed. "
                             "status, pause and resume print the engine's status line after the command "
                             "(--json: the same JSON object each time). Authenticated: by --name over the engine's "
                             "unix socket (this user's uid), else over TCP by a challenge-response in which "
                             "the engine first proves it knows the token; the token is never sent.")
    ct.add_argument("command", choices=("status", "pause", "resume", "reload", "kill", "risk", "shadow"))
    ct.add_argument("args", nargs="*", metavar="ARG", help="shadow: list (default), add MODEL, remove NAME")
    ct.add_argument("--after-kill", action=Flag, help="with resume: reset the kill switch (entries allowed again)")
    _where_args(ct)
    ct.add_argument("--json", action=Flag, help="one JSON object on one line")


def _add_stats(sub):
    """`engine stats`."""
    st = command(sub, "stats", cmd_stats, help="a running engine's counters and latency percentiles")
    _where_args(st)
    st.add_argument("--json", action=Flag)


def _add_latency_plot(sub):
    """`engine latency-plot FILE.hlog --out PNG`."""
    lp = command(sub, "latency-plot", cmd_latency_plot, help="plot an .hlog's percentile distribution per stage")
    lp.add_argument("file", type=existing_file, help="HdrHistogram interval log (.hlog)")
    lp.add_argument("--out", required=True, help="PNG to write")
    lp.add_argument("--stage", action="append", help="only these stages (repeatable; default all)")


def _add_doctor(sub):
    """`engine doctor [--core N]`."""
    dr = command(sub, "doctor", cmd_doctor, help="check how well this machine is tuned for a strategy core",
                 description="Reads the kernel command line, isolated/nohz_full/rcu_nocbs CPUs, governor, "
                             "C-states and PM QoS, THP, IRQ affinity, RT throttling, swap, memlock and RT "
                             "limits, clock source and the SMT sibling, and prints pass/warn/fail/n/a with "
                             "what it read. Exit status 1 if any check fails.")
    dr.add_argument("--core", type=int, default=None, help="the strategy core (default: the last one)")
    dr.add_argument("--json", action=Flag)
