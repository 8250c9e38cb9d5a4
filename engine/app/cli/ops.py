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
import json
import os
import sys

import numpy as np

from .common import Flag, existing_file, http_addr, nonneg_int, sub_endpoint, zmq_endpoint

DEFAULTS = {"http": "127.0.0.1:9464", "pub": "tcp://127.0.0.1:5556"}
FLAG = {"http": "--http", "pub": "--follow"}


class Where:
    """A running engine's endpoints and where each came from (for messages)."""

    def __init__(self, name, value, origin, token_file=None):
        self.name, self.value, self.origin, self.token_file = name, value, origin, token_file


def resolve(a, want):
    """Where engine a.name's `want` ("http" or "pub") endpoint is (see the module's docstring)."""
    from engine.app.runtime_file import RuntimeFileError, find
    conf = {}
    if getattr(a, "config", None):
        from engine.app.config import load
        conf = load(a.config)
    name = a.name or conf.get("name") or "engine"
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
    token = None
    if want == "http":
        from engine.app.daemon import runtime_dir
        same = rt is not None and rt.get("http") == f"{value[0]}:{value[1]}"
        token = (a.token_file or conf.get("token_file") or (rt.get("token_file") if same else None)
                 or os.path.join(runtime_dir(), f"{name}.token"))
    return Where(name, value, origin, token)


def _control(a, method, path):
    """Call a running engine's control plane; returns (status, JSON, name)."""
    import urllib.error
    import urllib.request

    from engine.app.daemon import read_token
    w = resolve(a, "http")
    host, port = w.value
    try:
        token = read_token(w.token_file)  # refused when others can read it (RuntimeError: chmod 600)
    except OSError as e:
        raise ValueError(f"cannot read the control token {w.token_file}: {e.strerror} (is engine '{w.name}' running "
                         "as this user? --token-file)") from None
    req = urllib.request.Request(f"http://{host}:{port}{path}", method=method, data=b"" if method == "POST" else None,
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {"error": f"HTTP {e.code}"}
    except urllib.error.URLError as e:
        raise ValueError(f"no engine control plane at http://{host}:{port} ({w.origin}): {e.reason}") from None


def status_line(body):
    """One line: who, state, readiness, counters, model and loop (ctl status/pause/resume, stats)."""
    from engine.app.report import gaps_line
    c = body["counters"]
    # the command's effect at once (the loop adopts it within microseconds; its own state may lag)
    state = "paused" if body.get("paused") else "resuming" if c["state"] == "paused" else c["state"]
    line = (f"engine {body['name']} (pid {body['pid']}): {state}, ready={body['ready']}, ticks {c['ticks']:,}, "
            f"scored {c['scored']:,}, signals {c['signals']:,}, {gaps_line(c)}, "
            f"drops {body['signal_drops']}; model {body['model']['id']} ({body['model']['backend']}, generation "
            f"{body['model']['generation']}); loop {body['loop']['policy']} core {body['loop']['core']}")
    if body.get("not_ready"):
        line += "; not ready: " + ", ".join(body["not_ready"])
    return line


def cmd_ctl(a):
    code, body = _control(a, "GET" if a.command == "status" else "POST",
                          "/control/status" if a.command == "status" else f"/control/{a.command}")
    if code != 200 and a.command != "reload":
        print(f"engine: error: ctl {a.command}: engine said {code}: {body.get('error', body)}", file=sys.stderr)
        return 1
    if a.json:  # the same one-line JSON object for status, pause and resume (reload: the swap's result)
        print(json.dumps(body, default=str))
    elif a.command == "reload":
        if body.get("ok"):
            print(f"reload: model generation {body['generation']} ({body['model']}, {body['backend']}) prepared in "
                  f"{body['prepare_ms']} ms, adopted by the loop {body['adopted_after_us']:.1f} us after publication")
        else:
            print(f"engine: error: reload refused, the running model stays: {body.get('error', body)}",
                  file=sys.stderr)
    else:
        print(status_line(body))
    return 0 if code == 200 else 1


def cmd_stats(a):
    from engine.app.report import feed_line, percentile_table
    code, body = _control(a, "GET", "/status")
    if code != 200:
        raise ValueError(f"engine said {code}: {body.get('error', body)}")
    if a.json:
        print(json.dumps(body))
        return 0
    print(status_line(body))
    cf, feed = body["losses"]["conflated"], body.get("feed_counters") or {}
    print(f"  conflated {cf['ticks']:,} ({cf['share']:.1%} of the scoreable ticks; warns above {cf['warn_above']:.0%})"
          + (f"   crossed books {body['losses']['crossed_books']:,}" if body["losses"]["crossed_books"] else ""))
    if any(feed.values()):
        print("  " + feed_line(feed))
    print(percentile_table(body["latency_ns"]))
    pre = body["loop"].get("preempted")
    if pre is not None:
        print(f"  core {body['loop']['core']}: the strategy thread waited {pre['wait_ms']:,.1f} ms in "
              f"{pre['count']:,} preemptions for its core since it started")
    return 0


def cmd_signals(a):
    if a.signals_cmd:
        return cmd_signals_show(a)
    if a.follow is None:
        raise ValueError("engine signals: give --follow [ENDPOINT] (a running engine's signals) or `show FILE`")
    return cmd_signals_follow(a)


def cmd_signals_follow(a):
    import zmq

    from engine.records import SIGNAL_DTYPE, signal_dict
    endpoint = resolve(a, "pub").value
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.SUB)
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as e:
        sock.close(0)
        raise ValueError(f"--follow {endpoint}: {e.strerror}") from None
    for t in a.topic or [""]:
        sock.setsockopt(zmq.SUBSCRIBE, t.encode())
    n = 0
    last = {}  # topic -> its last publication number: a jump is signals this subscriber lost
    try:
        while not a.count or n < a.count:
            topic, payload, *rest = sock.recv_multipart() + [b""]
            if len(payload) != SIGNAL_DTYPE.itemsize:
                print(f"engine: skipped a {len(payload)}-byte message (not a {SIGNAL_DTYPE.itemsize}-byte signal record)",
                      file=sys.stderr)
                continue
            r = np.frombuffer(payload, SIGNAL_DTYPE)[0]
            d = signal_dict(r)
            d["topic"] = topic.decode(errors="replace")
            if len(rest[0]) == 8:
                d["pub_seq"] = pub_seq = int.from_bytes(rest[0], "little")
                if topic in last and pub_seq > last[topic] + 1:
                    print(f"engine: gap: {pub_seq - last[topic] - 1} signals of {d['topic']} lost (publication "
                          f"{last[topic] + 1} to {pub_seq - 1}: this subscriber fell behind or was reconnected)",
                          file=sys.stderr, flush=True)
                last[topic] = pub_seq
            print(json.dumps(d), flush=True)
            n += 1
    finally:
        sock.close(0)
    return 0


def cmd_signals_show(a):
    from engine.records import PRICE_SCALE, signal_dict
    from engine.signal_log import read_signals, status
    s = read_signals(a.file)
    note = status(a.file)["note"]  # "incomplete: the writer stopped at record N (reason)"
    if a.json:
        for r in s[: a.limit] if a.limit else s:
            print(json.dumps(signal_dict(r)))
        if note:
            print(f"engine: warning: {a.file}: {note}", file=sys.stderr)
        return 0
    print(f"{len(s)} signals in {a.file}" + (f"\n  {note}" if note else ""))
    print(f"{'seq':>8} {'tick_seq':>10} {'inst':>5} {'position':>9} {'prev':>9} {'score':>9} {'mid':>12} {'tick->signal ns':>16}")
    for r in s[: a.limit] if a.limit else s:
        print(f"{r['seq']:>8} {r['tick_seq']:>10} {r['instrument']:>5} {r['position']:>9} {r['prev_position']:>9} "
              f"{r['score']:>9.5f} {r['mid_px'] / PRICE_SCALE:>12.4f} {int(r['ts_signal'] - r['ts_recv']):>16,}")
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
                       help="its control plane (default: --config, the runtime file, else 127.0.0.1:9464)")
        q.add_argument("--token-file", default=None,
                       help="its token (default: --config, the runtime file, else $XDG_RUNTIME_DIR/engine/NAME.token)")


def cmd_latency_plot(a):
    from engine.app.latency_plot import plot
    out = plot(a.file, a.out, stages=a.stage)
    print(out)
    return 0


def cmd_doctor(a):
    from engine.app.doctor import run_checks, format_table
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
    s = sub.add_parser("signals", help="signal tools: show a signal file, or --follow a running engine",
                       description="engine signals --follow [ENDPOINT] prints a running engine's signals as JSON "
                                   "lines (from its zmq PUB socket: ENDPOINT, else --config's [control] pub, else "
                                   "the runtime file of --name); engine signals show FILE prints a signal file.")
    s.add_argument("--follow", nargs="?", const=True, default=None, metavar="ENDPOINT", type=sub_endpoint,
                   help="subscribe to ENDPOINT (default: where engine --name publishes)")
    _where_args(s, http=False)
    s.add_argument("--topic", action="append", help="only these instruments (repeatable; default all)")
    s.add_argument("--count", type=nonneg_int, default=0, help="stop after N signals (default 0: never)")
    s.set_defaults(fn=cmd_signals)
    ss = s.add_subparsers(dest="signals_cmd", required=False, metavar="SUBCOMMAND")
    sh = ss.add_parser("show", help="print the signals in a signal file")
    sh.add_argument("file", type=existing_file)
    sh.add_argument("--limit", type=nonneg_int, default=0, help="only the first N (default 0: all)")
    sh.add_argument("--json", action=Flag, help="one JSON object per line")
    sh.set_defaults(fn=cmd_signals)


def _add_ctl(sub):
    """`engine ctl status|pause|resume|reload`."""
    ct = sub.add_parser("ctl", help="control a running engine: status, pause, resume, reload",
                        description="pause: the loop keeps reading ticks and features stay current, but nothing is "
                                    "scored or signalled; resume; reload: verify and swap the model (as SIGHUP). "
                                    "status, pause and resume print the engine's status line after the command "
                                    "(--json: the same JSON object each time). Authenticated with the engine's token.")
    ct.add_argument("command", choices=("status", "pause", "resume", "reload"))
    _where_args(ct)
    ct.add_argument("--json", action=Flag, help="one JSON object on one line")
    ct.set_defaults(fn=cmd_ctl)


def _add_stats(sub):
    """`engine stats`."""
    st = sub.add_parser("stats", help="a running engine's counters and latency percentiles")
    _where_args(st)
    st.add_argument("--json", action=Flag)
    st.set_defaults(fn=cmd_stats)


def _add_latency_plot(sub):
    """`engine latency-plot FILE.hlog --out PNG`."""
    lp = sub.add_parser("latency-plot", help="plot an .hlog's percentile distribution per stage")
    lp.add_argument("file", type=existing_file, help="HdrHistogram interval log (.hlog)")
    lp.add_argument("--out", required=True, help="PNG to write")
    lp.add_argument("--stage", action="append", help="only these stages (repeatable; default all)")
    lp.set_defaults(fn=cmd_latency_plot)


def _add_doctor(sub):
    """`engine doctor [--core N]`."""
    dr = sub.add_parser("doctor", help="check how well this machine is tuned for a strategy core",
                        description="Reads the kernel command line, isolated/nohz_full/rcu_nocbs CPUs, governor, "
                                    "C-states and PM QoS, THP, IRQ affinity, RT throttling, swap, memlock and RT "
                                    "limits, clock source and the SMT sibling, and prints pass/warn/fail/n/a with "
                                    "what it read. Exit status 1 if any check fails.")
    dr.add_argument("--core", type=int, default=None, help="the strategy core (default: the last one)")
    dr.add_argument("--json", action=Flag)
    dr.set_defaults(fn=cmd_doctor)
