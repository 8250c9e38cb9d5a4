"""Data commands: `engine convert`, `engine record`, `engine features`, `engine ring inspect`,
`engine moldudp64 serve` (test traffic for the MoldUDP64 receiver)."""
import argparse
import json
import signal
import threading

from .common import (Flag, command, help_from, merge_arg, nonneg_float, nonneg_int, positive_float, positive_int,
                     print_warnings, refused, strategy_args, strategy_host, subcommands)


def cmd_convert(a):
    from feeds.convert import convert

    def wire(src):  # a live source (MoldUDP64) ends on SIGINT/SIGTERM with its file complete
        if src.live:
            for s in (signal.SIGINT, signal.SIGTERM):
                signal.signal(s, lambda *_: src.stop())
    res = convert(a.source, a.out, progress=not a.quiet, on_source=wire)
    if a.json:
        print(json.dumps(res))
    else:
        st = " ".join(f"{k}={v}" for k, v in res["stats"].items() if v)
        print(f"{res['out']}: {res['ticks']:,} ticks, {len(res['instruments'])} instruments, "
              f"{res['seconds']:.2f} s" + (f"\n  {st}" if st else "") + (f"\n  {res['note']}" if "note" in res else ""))
    print_warnings(res.get("warnings", []), a.json)
    return 0


def cmd_mold_serve(a):
    from feeds.nasdaq.mold_server import Server
    from feeds.core.uri import hostport
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    srv = Server(a.source, hostport(a.dest), session=a.session.encode(),
                 rerequest=hostport(a.rerequest) if a.rerequest else None, rate=a.rate,
                 drop=a.drop, drop_every=a.drop_every, linger=a.linger, iface=a.iface, quiet=a.quiet)
    res = srv.run(stop.is_set)
    if a.json:
        print(json.dumps(res))
    return 0


def _session(s):
    """A MoldUDP64 session: up to 10 printable ASCII characters (padded with spaces on the wire)."""
    if not 1 <= len(s) <= 10 or not s.isascii() or not s.isprintable():
        raise argparse.ArgumentTypeError(f"a MoldUDP64 session is 1-10 printable ASCII characters, got {s!r} "
                                         f"({len(s)} characters)")
    return s


def _int_list(s):
    try:
        return tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated packet numbers, got {s!r}") from None


def cmd_record(a):
    if a.ring and a.sources:
        raise ValueError("record: give --ring NAME or SOURCE URIs, not both")
    if not a.ring and not a.sources:
        raise ValueError("record: give SOURCE URIs to record (or --ring NAME)")
    if a.ring:
        if a.rotate is not None or a.raw:
            raise ValueError("record: --rotate and --raw are for SOURCE URIs recorded into a directory, "
                             "not --ring")
        from app.recorder import record
        res = record(a.ring, a.out, start="oldest" if a.from_oldest else "now", core=a.core, duration=a.duration,
                     wait=a.wait, quiet=a.quiet)
        if a.json:
            print(json.dumps(res))
        return 0
    if a.from_oldest or a.wait:
        raise ValueError("record: --from-oldest and --wait are for --ring")
    from app.recorder import record_sources
    child = [*(["--rotate", str(a.rotate)] if a.rotate is not None else []), *(["--raw"] if a.raw else []),
             *(["--duration", repr(a.duration)] if a.duration else []),
             *(["--core", str(a.core)] if a.core is not None else []), "--progress", repr(a.progress),
             *(["--quiet"] if a.quiet else []), *(["--json"] if a.json else [])]  # (each child: one SOURCE)
    res = record_sources(a.sources, a.out, child, rotate=a.rotate, raw=a.raw, duration=a.duration, quiet=a.quiet,
                         core=a.core, progress=a.progress)
    if isinstance(res, int):  # several sources: each child printed its own summary
        return res
    if a.json:
        print(json.dumps(res))
    return 0


def _rotate(s):
    from app.daily_files import parse_rotate
    return refused(parse_rotate, s)


def cmd_ring_inspect(a):
    from engine import shm
    from engine.ring_info import inspect

    info = inspect(shm.ring_path(a.name))
    if a.json:
        print(json.dumps(info))
        return 0
    for k, v in info.items():
        if k == "feed_counters":
            v = " ".join(f"{n}={x:,}" for n, x in v.items()) or "none published"
        if k != "consumers":
            print(f"{k:>18}: {v}")
    for c in info.get("consumers", []):
        print(f"{'consumer':>18}: slot {c['slot']} pid {c['pid']} ({'alive' if c['alive'] else 'dead'}) "
              f"cursor {c['cursor']} lag {c['lag']} lost {c['lost']} gaps {c['gaps']}")
    return 0


def cmd_features(a):
    from models.features_out import write_features
    res = write_features(strategy_host(a), a.sources, a.out, ticks=a.ticks, progress=not a.quiet, merge=a.merge)
    print(json.dumps(res) if a.json else f"{res['out']}: {res['rows']:,} rows x {res['features']} features from "
          f"{res['ticks']:,} ticks ({res['sources']} source(s)), strategy {res['strategy']}")
    return 0


def _formats():
    from feeds.convert import FORMATS
    return ", ".join(FORMATS)


def add_parsers(sub):
    _add_convert(sub)
    _add_moldudp64(sub)
    _add_record(sub)
    _add_ring(sub)
    _add_features(sub)


def _add_convert(sub):
    """`engine convert SOURCE --out FILE`."""
    cv = command(sub, "convert", cmd_convert,
                 help="write a source's normalised ticks to a tick file, .parquet, .csv or ITCH 5.0",
                 description="Read SOURCE to its end and write its ticks, in the format --out's extension "
                             "names: .ticks (an engine tick file: what backtest, replay and tickfile: read), "
                             ".parquet or .csv (one column per tick field, prices int64 at 1e-9, sizes as in "
                             "the record, seq from 0), .itch / .itch.gz (ITCH 5.0 messages through the ITCH "
                             "writer). The output appears only when complete; a live source (moldudp64://) "
                             "runs until its session ends or SIGINT, then its file is completed. ", sources=True)
    cv.add_argument("source")
    help_from(cv.add_argument("--out", required=True, help="output file, its format by extension: %(formats)s"),
              formats=_formats)
    cv.add_argument("--quiet", action=Flag, help="no progress lines")
    cv.add_argument("--json", action=Flag, help="print the summary as one JSON object")


def _add_moldudp64(sub):
    """`engine moldudp64 serve`."""
    mo = command(sub, "moldudp64", None, help="MoldUDP64 tools")
    mos = subcommands(mo, "mold_cmd")
    ms_ = command(mos, "serve", cmd_mold_serve, help="send an ITCH stream as MoldUDP64 packets and answer re-requests",
                  description="Send SOURCE (itch:FILE, or synthetic://?...&count=N through the ITCH writer) "
                              "to --dest as MoldUDP64 (unicast or multicast), then end the session and "
                              "linger, answering re-requests on --rerequest. --drop loses chosen packets "
                              "on purpose, to test gap handling.")
    ms_.add_argument("source")
    ms_.add_argument("--dest", required=True, help="HOST:PORT to send to (a 224-239.x.x.x group for multicast)")
    ms_.add_argument("--rerequest", default=None, help="HOST:PORT to serve re-requests on (default: none)")
    ms_.add_argument("--rate", type=nonneg_float, default=100_000.0,
                     help="messages per second (0 = flat out; default 100000)")
    ms_.add_argument("--session", type=_session, default="ENGINE0001",
                     help="session name (up to 10 ASCII characters, space-padded)")
    ms_.add_argument("--drop", type=_int_list, default=(), help="data packets to drop, by number from 0 (e.g. 3,17)")
    ms_.add_argument("--drop-every", type=nonneg_int, default=0, help="drop every Nth data packet")
    ms_.add_argument("--linger", type=nonneg_float, default=1.0,
                     help="seconds to keep answering re-requests after the end (default 1)")
    ms_.add_argument("--iface", default=None, help="local interface address to send multicast from (e.g. 127.0.0.1)")
    ms_.add_argument("--quiet", action=Flag, help="no progress lines (errors and the result still print)")
    ms_.add_argument("--json", action=Flag, help="print a summary object")


def _add_record(sub):
    """`engine record SOURCE... --out DIR` and `engine record --ring NAME --out FILE.ticks`."""
    rc = command(sub, "record", cmd_record,
                 help="record live sources into daily tick files (or a tick ring into a file)",
                 description="engine record SOURCE [SOURCE...] --out DIR [--rotate daily|SIZE] [--raw]\n"
                             "Record each SOURCE (its own process when several) into DIR/LABEL/ as tick "
                             "files named by the recorder's UTC date (2026-11-26.ticks), cut at UTC midnight "
                             "and, with --rotate SIZE, when a file reaches SIZE; each cut completes the file "
                             "(fsync) and the next opens, nothing lost. A restart never overwrites: the next "
                             "piece of a day is DATE.1.ticks, DATE.2.ticks, ... LABEL is the URI's scheme, "
                             "its target (a file's base name, HOST:PORT, a market or dataset) and its "
                             "symbols= value, joined by '-', other characters than A-Z a-z 0-9 . _ - made '_' "
                             "(moldudp64://127.0.0.1:26400 -> moldudp64-127.0.0.1_26400). --raw keeps the "
                             "venue's own messages beside each tick file (DATE.itch.zst, .dbn.zst, "
                             ".binance.zst: what itch:, dbn:, binance: read). Runs until SIGINT/SIGTERM, "
                             "--duration, or the sources end; a full disk stops it with the file marked "
                             "incomplete, its whole records kept, and one error line naming it.\n\n"
                             "engine record --ring NAME --out FILE.ticks\n"
                             "Consume ring NAME like any other reader (never slowing its producer; gaps are "
                             "recorded with their exact counts) and write FILE.ticks until SIGINT/SIGTERM, "
                             "--duration, or the producer's end of stream, then completes the file; a write "
                             "that fails (a full disk) stops it with the file marked incomplete, its whole "
                             "records kept. "
                             "Run it off the strategy core (--core pins it).\n", sources=True)
    rc.add_argument("sources", nargs="*", metavar="SOURCE", help="source URIs to record into --out DIR")
    rc.add_argument("--ring", default=None, help="record this tick ring instead (name in /dev/shm or a path)")
    rc.add_argument("--out", required=True, help="with SOURCEs: the directory (made if missing); with --ring: "
                                                 "the tick file to write (.ticks)")
    rc.add_argument("--rotate", type=_rotate, default=None, metavar="daily|SIZE",
                    help="daily (default): a file per UTC day; SIZE (e.g. 512M, 2G; at least 2M): also cut when a "
                         "tick file reaches it")
    rc.add_argument("--raw", action=Flag, help="also keep each source's raw messages, zstd, cut with the tick files "
                                              "(sources that can give them: moldudp64, binance-live, dbn-live)")
    rc.add_argument("--from-oldest", action=Flag, help="--ring: start at the oldest tick still in the ring "
                                                      "(default: now)")
    rc.add_argument("--core", type=int, default=None, help="pin the recorder to this core (a housekeeping core)")
    rc.add_argument("--duration", type=positive_float, default=None, help="stop after this many seconds")
    rc.add_argument("--wait", type=nonneg_float, default=0.0,
                    help="--ring: wait up to this many seconds for the ring to appear")
    rc.add_argument("--progress", type=nonneg_float, default=10.0,
                    help="seconds between progress lines per source (ticks, rate, file; 0 = none; default 10)")
    rc.add_argument("--quiet", action=Flag, help="no progress lines (errors, warnings and the result still print)")
    rc.add_argument("--json", action=Flag, help="print a summary object at the end (one line per source)")


def _add_ring(sub):
    """`engine ring inspect NAME`."""
    g = command(sub, "ring", None, help="ring tools")
    gs = subcommands(g, "ring_cmd")
    gi = command(gs, "inspect", cmd_ring_inspect, help="print a ring's header and counters (read-only)")
    gi.add_argument("name", help="ring name in /dev/shm (e.g. engine.ticks) or a path")
    gi.add_argument("--json", action=Flag)


def _add_features(sub):
    """`engine features SOURCE... --out FILE`."""
    fe = command(sub, "features", cmd_features,
                 help="write a strategy's feature rows (the data set `engine train` uses)",
                 description="Run the strategy over SOURCE(s) exactly as training does and write one row per "
                             "tick it scores: seq, ts_event, ts_recv, instrument, symbol (and source, with "
                             "several), then every feature by name. The output appears only when complete. ",
                 sources=True)
    fe.add_argument("sources", nargs="+", metavar="SOURCE")
    fe.add_argument("--out", required=True, help="output file: .parquet or .csv")
    strategy_args(fe)
    merge_arg(fe)
    fe.add_argument("--ticks", type=positive_int, default=400_000,
                    help="ticks per synthetic source without count= (default 400000)")
    fe.add_argument("--quiet", action=Flag, help="no progress lines")
    fe.add_argument("--json", action=Flag, help="print the summary as one JSON object")
