"""Every `engine run` option, declared once: a field of RunConfig holding its default, with its
flag, its key in the TOML file `engine run --config FILE` reads (ops/engine.toml is the sample),
its help and how a value from the file is checked. Generated from these fields: the argparse
options (app/cli/run_cmds.py), the config keys (app/config.py KEYS) and the Namespace ->
RunConfig mapping (app/cli/run_cmds.py from_args). A programmatic RunConfig() therefore runs as
`engine run` does. (Nothing here imports the command line: validators and shared option sets are
named, and app/cli/run_cmds.py finds them in app/cli/common.py and in itself.)

The fields are in the order `engine run --help` lists them. Options of the command line only
(--config, --json, --check, ...) and those shared with other commands (--strategy/--param,
--verify-key, --crossed-after: app/cli/common.py) are declared where they are added (`cli`)."""
import math
from dataclasses import dataclass, field, fields

from engine import defaults
from engine.risk_limits import LIMITS, PER_INSTRUMENT

# the headings of `engine run --help`, in its order (Opt.group: the common options under each)
HEADINGS = ("what to run", "where it runs", "what it writes and serves", "safety")
# The default endpoints of a run's control plane (engine stats/ctl/signals look there too)
HTTP_DEFAULT = "127.0.0.1:9464"
PUB_DEFAULT = "tcp://127.0.0.1:5556"
OFF = ("", "none")  # --http none, --pub none, --hlog none: off


@dataclass(frozen=True)
class Opt:
    flag: str | None = None         # --core (None: no flag of its own: `cli` adds it, or none)
    key: str | None = None          # "section.key" in the TOML file (None: not in the file)
    help: str | None = None         # argparse help; %(default)s / %(default)g print the field's default
    parse: object = None            # argparse type=: int, or the name of a validator in app/cli/common.py
    kind: type | None = None        # the TOML value's type (int, float, str, bool); bool = a Flag
    choices: tuple | None = None
    metavar: str | None = None
    dest: str | None = None         # the argparse dest, if not the field's name
    cli: str | None = None          # a function of app/cli/run_cmds.py adding the flags that follow (fn(parser))
    arg: object = None              # fn(namespace) -> the field's value, or the name of one in app/cli/common.py
    #                                 (default: the dest's value)
    check: object = None            # (ok(value), "message") for a value that may come from the file (a
    #                                 flag's own validator, parse, checks it there too: app/config.py apply)
    many: bool = False              # the flag may be given several times (argparse "append"); the field holds
    #                                 the one value given once, or the list (the file: [[section]] tables)
    group: str | None = None        # the heading `engine run --help` lists it under: a common option (none:
    #                                 --help-all only; app/cli/parser.py); given to `cli` too
    brief: str | None = None        # its one line there (default: help)


def option(default=None, flag=None, *, factory=None, **kw):
    meta = {"opt": Opt(flag=flag, **kw)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _limit(key):
    """check= of a risk limit: none, or a finite number >= 0."""
    return (lambda v: v is None or (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0),
            f"{key} must be a finite number >= 0")


def with_risk_limits(cls):
    """A field risk_NAME for each limit of engine/risk_limits.py (its flag --risk-NAME, its key
    risk.NAME, its unit and help from there), after risk_mode: --help's order."""
    ann = {}
    for k, v in cls.__annotations__.items():
        ann[k] = v
        if k == "risk_mode":
            for name, lim in LIMITS:
                ann[f"risk_{name}"] = float | None
                setattr(cls, f"risk_{name}", option(None, f"--risk-{name.replace('_', '-')}", key=f"risk.{name}",
                                                    parse="nonneg_float", kind=float, metavar=lim.unit,
                                                    check=_limit(f"risk.{name}"), help=f"{lim.help} (default: none)"))
    cls.__annotations__ = ann
    return cls


def one_or_list(v):
    """A repeatable option's value: None, the one value given, or the list of them."""
    if v is None or isinstance(v, str):
        return v
    v = list(v)
    return None if not v else v[0] if len(v) == 1 else v


def http_addr(v):
    """--http HOST:PORT as (host, port); None for none."""
    if v in (None, *OFF):
        return None
    from feeds.core.uri import hostport
    return hostport(v, "HOST:PORT for --http")


def backends():
    from models.artifact import BACKEND_CHOICES
    return BACKEND_CHOICES


def _finite_pos(v):
    return v is None or (math.isfinite(v) and v > 0)


@dataclass
@with_risk_limits
class RunConfig:
    """One `engine run`: every option (option(): its default, flag, TOML key, help, check)."""
    core: int | None = option(None, "--core", key="core", parse=int, kind=int, group="where it runs",
                              brief="CPU core of the strategy loop (default: unpinned)",
                              help="CPU core for the strategy thread (default: unpinned)")
    priority: int = option(80, "--priority", key="priority", parse=int, kind=int,
                           help="SCHED_FIFO priority 1-99 (default %(default)s)",
                           check=(lambda v: isinstance(v, int), "--priority must be an integer"))
    isolate: bool = option(  # other tasks and IRQs off the core while running (engine/isolation.py)
        False, "--isolate", key="isolate", kind=bool, group="where it runs",
        brief="move other tasks and IRQs off --core while it runs",
        help="while the engine runs, move every other task, IRQ and unbound kernel work that may run "
             "on --core off it (what isolcpus does at boot; per-CPU kernel threads stay), sweeping "
             "again every 2 s; every change is undone at exit, and what a killed engine moved is put "
             "back by the next run of the same --name. Needs root (or CAP_SYS_NICE) for others' tasks. "
             "--no-isolate (the default) leaves the core as it is")
    policy: str = option(  # engine/waits.py
        "auto", "--policy", key="loop.policy", choices=("auto", "fifo", "other"),
        help="scheduling of the strategy thread: auto (default) = SCHED_FIFO only where RT throttling "
             "cannot park it (throttling off, or a wait that sleeps), else pinned SCHED_OTHER with "
             "spin; one line at start says what was chosen and why. fifo|other force it")
    wait: str = option("auto", "--wait", key="loop.wait", choices=("auto", "spin", "backoff", "duty"),
                       help="what the loop does while the ring is empty: auto (default: spin); %(wait_help)s")
    realtime: bool = option(True, "--rt", key="realtime", kind=bool, dest="realtime",  # False: policy "other"
                            help="--no-rt: never SCHED_FIFO, the same as --policy other; --rt (the default): "
                                 "as --policy says")
    conflate: str = option(
        "auto", "--conflate", key="loop.conflate", choices=("auto", "on", "off"), cli="no_conflate_arg",
        help="when the loop falls behind, fold every waiting tick and score each instrument once, on its "
             "latest state (counted: conflated). auto (default): on for live sources, off for file "
             "replays (the file waits for the loop instead: nothing lost, every tick scored)")
    strict: bool = option(False, "--strict", key="strict", kind=bool, group="safety",
                          brief="fail when lacking rights; exit 1 on lost ticks",
                          help="fail instead of running unpinned/non-RT/unlocked when the process lacks the "
                               "rights, and exit 1 after the summary when ticks were lost or signals dropped")
    duration: float | None = option(None, "--duration", key="duration", parse="positive_float", kind=float,
                                    group="what to run", metavar="SECONDS",
                                    help="seconds to run (default: until stopped)",
                                    check=(_finite_pos, "duration must be a finite number of seconds > 0"))
    model: str | None = option(None, "--model", key="model.dir", group="what to run", metavar="MODEL",
                               brief="a model directory or registry:NAME",
                               help="model artifact directory, trained for --strategy, or registry:NAME (the "
                                    "registry's live version of NAME: a promotion or rollback reloads it while the "
                                    "engine runs; registry:NAME@VERSION pins one) (default: the strategy's default "
                                    "model, trained on the synthetic market and cached on first use)")
    backend: str = option(
        "auto", "--backend", key="model.backend", choices=backends,
        help="model back end: auto = the fastest one that is bit-exact on this machine (default); "
             "flat = the branch-free kernel (best variant this CPU runs); treelite = TL2cgen code; "
             "xgboost = XGBoost's own predictor (reference, ~200 us a tick)")
    # (instruments and seed keep their field names for app/live.py; on the command line and in the file they
    # are sim_*: --instruments is a file of instrument records and --seed the execution simulator's in engine
    # backtest and --paper-exec)
    instruments: int = option(4, "--sim-instruments", key="feed.sim_instruments", parse="positive_int", kind=int,
                              metavar="N", dest="sim_instruments", cli="backtest_names_arg",
                              help="the built-in synthetic feed's instruments (default %(default)s)")
    rate: float = option(50_000.0, "--rate", key="feed.rate", parse="nonneg_float", kind=float,
                         help="the built-in synthetic feed's ticks per second (and a synthetic --feed's without "
                              "rate=), 0 = as fast as possible (default %(default)g)",
                         check=(lambda v: v >= 0, "rate must be >= 0"))
    seed: int = option(1, "--sim-seed", key="feed.sim_seed", parse=int, kind=int, metavar="N", dest="sim_seed",
                       help="the built-in synthetic feed's seed (default %(default)s)")
    feed: str | list | None = option(
        None, "--feed", key="feed.uri", many=True, arg=lambda a: one_or_list(a.feed), group="what to run",
        metavar="URI", brief="a source URI (repeatable; default: synthetic)",
        help="source URI instead of the built-in synthetic feed, e.g. synthetic://?instruments=8&rate=20000; "
             "give it again for several sources in one run (each its own feed process and ring, one loop "
             "reading them all by receive time; instruments named VENUE:SYMBOL; in the file: one [[feed]] "
             "table with uri = ... per source)")
    ring: str | None = option(  # attach to this existing tick ring instead of spawning a feed
        None, "--ring", key="feed.ring",
        help="attach to an existing tick ring (e.g. one `engine feed` writes) instead of spawning a feed; "
             "reading starts at its newest tick; the run ends when the ring's producer marks it "
             "finished (the end of its source, or stopped) and every tick is read")
    ring_owner: str | None = option(
        None, "--ring-owner", key="feed.ring_owner", metavar="USER",
        help="also trust rings owned by this user (name or uid): a feed handler running as another "
             "user (default: only the engine's own; a ring anyone else owns, a link, or one others "
             "can write is refused)")
    name: str = option("engine", "--name", key="name", group="where it runs",
                       brief="instance name: its rings are /dev/shm/NAME.*",
                       help="instance name: rings are /dev/shm/NAME.{ticks,signals,ctl}")
    speed: float = option(  # file feeds: recorded pace times this; 0 (--max) = as fast as possible
        1.0, "--speed", key="feed.speed", parse="positive_float", kind=float, cli="max_arg",
        arg=lambda a: 0.0 if a.max else a.speed,
        help="file feeds: replay at the recorded pace times X (default %(default)g); the run ends when the file "
             "is played",
        check=(lambda v: v > 0, "speed must be > 0"))
    record: str | None = option(
        None, "--record", metavar="FILE.ticks",  # (a run's own file: a flag, not a key of the service's config)
        group="what it writes and serves", brief="record the ticks read: engine backtest replays them",
        help="record the ticks in the order the strategy loop read them (every source merged, the run's "
             "instrument ids and names) into a tick file: `engine backtest FILE.ticks` gives this run's "
             "signals bit for bit. The loop publishes what it reads into a tap ring a recorder thread "
             "drains off its core (one 64-byte store a tick)")
    signals_out: str | None = option(
        None, "--signals-out", key="logs.signals_out", group="what it writes and serves", metavar="FILE",
        brief="signal file (default: in $XDG_STATE_HOME/engine)",
        help="signal file (default $XDG_STATE_HOME/engine/signals/NAME-TIME.sig); a .parquet name also gets "
             "a table, one row per signal, written at the end")
    # a shipped name or a .py file (--strategy, --param and --universe: strategy_args)
    strategy: str | None = option(None, key="strategy.name", cli="strategy_args", group="what to run")
    params: dict = option(factory=dict, arg="overrides")  # --param, over [strategy.params] (app/config.py)
    universe: dict = option(factory=dict, arg="universe")  # --universe ROLE=INSTRUMENT (strategy_args)
    warm_every: int = option(defaults.WARM_EVERY, "--warm-every", key="strategy.warm_every", parse="nonneg_int", kind=int,
                             help="while idle, run the model on the last row every N empty polls to keep it hot "
                                  "(halves p50 at low tick rates); 0 = never (default %(default)s)")
    ring_capacity: int = option(defaults.RING_CAPACITY, "--ring-capacity", key="feed.ring_capacity", parse="pow2", kind=int,
                                help="tick ring slots (power of two)",
                                check=(lambda v: v >= 2 and not v & (v - 1),
                                       "ring_capacity must be a power of two >= 2"))
    keep_rings: bool = option(False, "--keep-rings", key="logs.keep_rings", kind=bool, cli="json_arg",
                              help="leave the ring files in /dev/shm on exit")
    quiet: bool = option(False, "--quiet", key="logs.quiet", kind=bool,
                         help="no progress lines on stderr (the run's and its feeds'); warnings, errors and the "
                              "summary still print")
    http: str | tuple | None = option(  # HOST:PORT (or "none"); resolved() makes it (host, port) or None
        HTTP_DEFAULT, "--http", key="control.http", group="what it writes and serves", metavar="HOST:PORT",
        brief="/metrics /health /status (none: off)",
        help="control plane HTTP: /metrics /health /ready, and /status /control/* with the token "
             "(default %(default)s; none = off)")
    pub: str | None = option(  # the zmq PUB endpoint for signals (or "none")
        PUB_DEFAULT, "--pub", key="control.pub", parse="pub_endpoint", group="what it writes and serves",
        metavar="ENDPOINT", brief="where signals are published (zmq; none: off)",
        help="zmq endpoint signals are published on (XPUB: SUB sockets connect): topic = instrument, "
             "then the 128-byte signal record, then the topic's publication number (uint64 LE: a jump "
             "is a gap) (default %(default)s; none = off)")
    pub_clients: str | None = option(
        None, "--pub-clients", key="control.pub_clients", metavar="FILE",
        help="who may subscribe besides this user's own subscribers (engine signals --follow): a file of "
             "client CURVE public keys, one a line (# comments), this user's or root's, not a link, writable by "
             "no one else; read at start. A subscriber whose key is in neither gets no signal, even with the "
             "server's public key (default: only this user's own subscribers)")
    token_file: str | None = option(  # None: NAME.token in the runtime directory (engine/dirs.py)
        None, "--token-file", key="control.token_file",
        help="bearer token for /status and /control/* (default NAME.token in the runtime directory: "
             "/run/engine for root, else $XDG_RUNTIME_DIR/engine, else /tmp/engine-UID; created 0600 if missing)")
    metrics_token_file: str | None = option(
        None, "--metrics-token-file", key="control.metrics_token_file", metavar="FILE",
        help="a token file (yours or root's, no access for others: e.g. 0640 with Prometheus's group) whose "
             "token a scraper sends as 'Authorization: Bearer' to read /metrics/private: paper trading's money "
             "and positions and the kill switch, which /metrics leaves out (default: only this engine's own "
             "token and unix socket)")
    hlog: str | None = option(  # None: the default path; "none": off
        None, "--hlog", key="logs.hlog",
        help="HdrHistogram interval log (default $XDG_STATE_HOME/engine/latency/NAME-TIME.hlog; none = off)")
    hlog_interval: float = option(10.0, "--hlog-interval", key="logs.hlog_interval", parse="positive_float",
                                  kind=float, help="seconds per .hlog interval (default %(default)g)",
                                  check=(lambda v: v > 0, "hlog_interval must be > 0"))
    doctor: bool = option(True, "--doctor", kind=bool, cli="verify_key_arg",
                          help="check the machine for --core at start (the default; warnings, fatal with "
                               "--strict); --no-doctor skips it")
    conflate_warn: float = option(
        0.5, "--conflate-warn", key="loop.conflate_warn", parse="nonneg_float", kind=float, metavar="SHARE",
        help="warn at the end when conflation folded more than this share of the scoreable ticks "
             "unscored (conflated / (conflated + scored); also exported as "
             "engine_conflation_warn_ratio for the alert) (default %(default)g; 1 = never)")
    # the feed counts a book crossed for longer than this (s, exchange time; 0 = never): `engine feed` takes it too
    crossed_after: float = option(defaults.CROSSED_AFTER_S, key="feed.crossed_after", kind=float, cli="crossed_after_and_check_args")
    stall_exit: float = option(  # a loop with no heartbeat this long (s) never comes back: the run ends
        5.0, "--stall-exit", key="loop.stall_exit", parse="nonneg_float", kind=float, metavar="SECONDS",
        help="a strategy loop that has not beaten its heartbeat for this long (while the engine itself "
             "ran: a stop of the whole process does not count) is not coming back (an endless loop in "
             "on_tick or decide): the run ends with the summary, the reason in the signal file and exit 1 "
             "(default %(default)g; 0 = never; /ready says stalled after 1 s either way)",
        check=(lambda v: math.isfinite(v) and v >= 0, "stall_exit must be a finite number of seconds >= 0"))
    merge_window_us: float = option(
        0.0, "--merge-window-us", key="loop.merge_window_us", parse="nonneg_float", kind=float, metavar="US",
        help="several sources: the loop takes the ready tick with the smallest receive time; while a "
             "source's ring is empty, that tick waits up to US microseconds for it (a live feed publishes "
             "a frame's ticks after parsing them, so a tick it received earlier can reach its ring "
             "later). Every tick waits that long whenever one source is quiet: order for latency "
             "(default %(default)g: never wait; --record keeps the order read either way)",
        check=(lambda v: math.isfinite(v) and v >= 0, "merge_window_us must be a finite number of microseconds >= 0"))
    conflate_max: int = option(defaults.CONFLATE_MAX)  # ticks folded before a conflation window is scored regardless (no flag)
    # the risk gate between decide and the signal (engine/risk.py); `engine backtest` takes the same flags
    risk_mode: str = option("clip", "--risk-mode", key="risk.mode", kind=str, choices=("clip", "refuse", "off"),
                            help="what the risk gate does to a decision over a limit: clip it to what fits (default), "
                                 "refuse it whole, or off (limits not applied; a kill still stops new exposure). "
                                 "Either way it is counted per rule and recorded in the signal file (flags)")
    # (then a field risk_NAME for each of engine/risk_limits.py's limits: with_risk_limits)
    kill_file: str | None = option(None, "--kill-file", key="risk.kill_file", metavar="PATH", group="safety",
                                   brief="go flat and stay flat when this file appears",
                                   help="kill the run when this file appears (checked every 50 ms): every "
                                        "instrument's target goes flat, no new exposure until `engine ctl resume "
                                        "--after-kill` (default: none)")
    kill_feed_down: float = option(0.0, "--kill-feed-down", key="risk.kill_feed_down", parse="nonneg_float", kind=float,
                                   metavar="SECONDS", check=_limit("risk.kill_feed_down"),
                                   help="kill the run when a feed has been down (stalled, exited, not attached) "
                                        "this long (default %(default)g: never)")
    kill_loss: float | None = option(None, "--kill-loss", key="risk.kill_loss", parse="nonneg_float", kind=float,
                                     metavar="MONEY", check=_limit("risk.kill_loss"), group="safety",
                                     brief="with --paper: kill at a paper loss of MONEY",
                                     help="with --paper: kill the run when its paper PnL (net, marked to the mid) "
                                          "falls below -MONEY (default: none)")
    kill_drawdown: float | None = option(None, "--kill-drawdown", key="risk.kill_drawdown", parse="nonneg_float",
                                         kind=float, metavar="MONEY", check=_limit("risk.kill_drawdown"),
                                         help="with --paper: kill the run when its paper PnL falls MONEY below its "
                                              "peak (default: none)")
    paper: bool = option(False, "--paper", key="paper.on", kind=bool, group="safety",
                         brief="paper trading: positions, fills and PnL live",
                         help="paper trading: the backtest's execution simulator runs online on the ticks the loop "
                              "reads and the signals it emits (off the strategy core): positions, fills, PnL and "
                              "drawdown live (engine_paper_*, engine stats), and at the end the report a backtest of "
                              "the run's recording writes (--paper-out)")
    paper_exec: str = option("", "--paper-exec", key="paper.exec", kind=str, parse="paper_exec_arg",
                             metavar="'FLAGS'",
                             help="with --paper: how the paper orders execute, in the execution flags of engine "
                                  "backtest as one string, e.g. '--latency-us 200 --orders maker --fee-bps 4'; "
                                  "give the backtest of the recording the same flags for the same fills (default: "
                                  "the backtest's defaults)")
    paper_out: str | None = option(None, "--paper-out", key="paper.out", metavar="DIR",
                                   help="where --paper writes its report at the end: what `engine backtest --out DIR` "
                                        "writes (report.md, report.json, plots, signals.parquet) (default: beside the "
                                        "signal file: RUN.paper/ for RUN.sig)")
    risk_instrument: object = option(None, "--risk-instrument", key="risk.instrument", many=True, kind=str,
                                     parse="risk_instrument", metavar="SYMBOL:NAME=VALUE,...",
                                     help="one instrument's own limits over the above (repeatable; the config: a list "
                                          f"of strings), NAME one of {', '.join(PER_INSTRUMENT)}")

    shadow: object = option(None, "--shadow", key="shadow.models", many=True, kind=str, metavar="MODEL",
                            help="a candidate model scored beside the live one on the same ticks, off the strategy "
                                 "core, never published (repeatable; a directory or registry:NAME[@VERSION]): its "
                                 "decisions go to SIGNALS.shadow-NAME.sig beside the signal file, what engine "
                                 "backtest of the run's recording gives with that model; engine shadow report "
                                 "compares them with the live model's")

    drift: bool = option(False, "--drift", key="drift.on", kind=bool,
                         help="keep the live model's drift: each feature's and the score's population stability "
                              "against the model's training rows (engine_feature_psi, engine_score_psi, engine "
                              "stats), computed off the strategy core from the ticks the loop read")
    drift_half_life: int = option(100_000, "--drift-half-life", key="drift.half_life", parse="positive_int", kind=int,
                                  metavar="ROWS", help="with --drift: the live distributions forget at this pace (rows "
                                                       "a count takes to halve; default %(default)s)")

    @property
    def tapped(self):
        """--record, --paper, --shadow or --drift: the loop publishes every tick it takes into the
        tap ring (their reader)."""
        return bool(self.record or self.paper or self.shadows or self.drift)

    @property
    def shadows(self):
        """--shadow's models, a list."""
        v = self.shadow
        return [] if v is None else [v] if isinstance(v, str) else list(v)

    def resolved(self):
        """This configuration with what "default" and "none" mean filled in: http (host, port) or
        None, pub None when off, hlog the default path or None when off, the token file's path (run()
        calls it once, on what it is given)."""
        from dataclasses import replace
        http = self.http
        if not isinstance(http, tuple):
            http = http_addr(http)
        hlog = None if self.hlog in OFF else (self.hlog or default_hlog(self.name))
        token = self.token_file
        if token is None and http:
            token = token_path(self.name)
        return replace(self, http=http, pub=None if self.pub in (None, *OFF) else self.pub, hlog=hlog,
                       token_file=token)


# the keys of [model] and feed.max: options that are no field (the environment holds the key; --max is speed 0)
EXTRA_KEYS = {"model.verify_key": ("verify_key", str), "feed.max": ("max", bool)}


RISK_FIELDS = ("risk_mode", *(f"risk_{name}" for name, _ in LIMITS), "risk_instrument")


def risk_limits(obj):
    """engine.risk.Limits from the risk_* values of a RunConfig or a parsed command line
    (`engine backtest` adds the same flags); ValueError naming a bad --risk-instrument."""
    from engine.risk_limits import Limits, parse_instrument
    v = {k: getattr(obj, k, None) for k in RISK_FIELDS}
    items = v.pop("risk_instrument")
    items = [] if items is None else [items] if isinstance(items, str) else list(items)
    try:
        inst = tuple(x if isinstance(x, tuple) else parse_instrument(x) for x in items)
    except ValueError as e:
        raise ValueError(f"--risk-instrument {e}") from None
    for i, (sym, _) in enumerate(inst):  # (one entry an instrument: the later one would win, unsaid)
        for other, _ in inst[:i]:
            if _same_instrument(sym, other):
                raise ValueError(f"--risk-instrument {sym}: given twice ({other} too): give an instrument's limits "
                                 f"in one entry ({sym}:max_position=1,max_rate=5)")
    return Limits(mode=v.pop("risk_mode") or "clip", instruments=inst, **{k.removeprefix("risk_"): x for k, x in v.items()})


def _same_instrument(a, b):
    """Can two --risk-instrument symbols name one instrument? The same, or the same symbol where
    one names no venue (SYMBOL matches it on any venue: engine/risk.py configure)."""
    (va, _, sa), (vb, _, sb) = a.rpartition(":"), b.rpartition(":")
    return sa == sb and (va == vb or not va or not vb)


def opts():
    """(field name, Opt) of every RunConfig field, in --help order."""
    return [(f.name, f.metadata["opt"]) for f in fields(RunConfig)]


def many_keys():
    """The config file's keys whose value may be a list (a repeatable flag's)."""
    return {o.key for _, o in opts() if o.key and o.many}


def keys():
    """The config file's keys: "section.key" -> (argparse dest, type)."""
    out = {}
    for name, o in opts():
        if o.key:
            out[o.key] = (o.dest or name, o.kind or str)
    return {**out, **EXTRA_KEYS}


def token_path(name):
    """Where engine `name` keeps its control token by default (--token-file): in the runtime
    directory, beside its locks, runtime file and control socket (engine/dirs.py)."""
    from engine import dirs
    return dirs.runtime_path(f"{name}.token")


def default_hlog(name):
    import time

    from engine import dirs
    return dirs.state_path("latency", f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.hlog")
