"""What `engine run` checks before it creates anything: its options, the paths it will write, the
machine (engine doctor), that no live engine owns its names and that its ports are free. A bad
request is refused here, and nothing is left behind."""
import math
import os
import time

from engine import realtime, shm, waits

from .progress import log

# --name: the longest name whose files fit a file name (NAME_MAX 255) with the longest suffix the engine
# gives one (NAME.ticks.instruments, NAME-YYYYmmddTHHMMSS.hlog, a table's .NAME-....parquet.tmp-PID)
MAX_NAME_BYTES = 200


def check_name(name):
    """An instance name names files in /dev/shm and beside the outputs: it must be one."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else b""
    why = ("is empty" if not raw else "has a '/'" if b"/" in raw else "has a NUL byte" if b"\0" in raw else
           f"is {len(raw)} bytes long (at most {MAX_NAME_BYTES})" if len(raw) > MAX_NAME_BYTES else
           "is '.' or '..'" if name in (".", "..") else None)
    if why:
        raise ValueError(f"--name {name!r} {why}: it names the run's files in /dev/shm (NAME.ctl, NAME.signals, "
                         "NAME.ticks)")


def trust_ring_owner(user):
    """--ring-owner: rings this user owns are trusted too (a feed handler running as another user)."""
    import pwd
    try:
        uid = int(user) if str(user).isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"--ring-owner {user}: no such user") from None
    shm.trust_uid(uid)


def check_options(cfg):
    """The run's options, each against its own rule; returns the loop's policy and wait
    (engine/waits.py choose)."""
    from engine import isolation
    for line in isolation.recover():  # what killed --isolate runs moved (this shell, perhaps): back first
        log(line)
    if cfg.ring_owner:
        trust_ring_owner(cfg.ring_owner)
    if cfg.core is not None:
        realtime.check_core(cfg.core)
    elif cfg.isolate:
        raise ValueError("--isolate needs --core N: the core to keep for the strategy thread")
    choice = waits.choose("other" if not cfg.realtime else cfg.policy, cfg.wait, cfg.core, cfg.priority)
    if cfg.conflate not in ("auto", "on", "off"):
        raise ValueError(f"--conflate must be auto, on or off, got {cfg.conflate!r}")
    if cfg.conflate_max < 1:
        raise ValueError(f"conflate_max must be >= 1, got {cfg.conflate_max}")
    if not 0 <= cfg.conflate_warn <= 1:
        raise ValueError(f"--conflate-warn must be a share between 0 and 1, got {cfg.conflate_warn:g}")
    if not cfg.crossed_after >= 0:
        raise ValueError(f"--crossed-after must be >= 0 seconds, got {cfg.crossed_after:g}")
    if not 1 <= cfg.priority <= 99:
        raise ValueError(f"--priority must be 1..99 for SCHED_FIFO, got {cfg.priority}")
    if cfg.warm_every < 0:
        raise ValueError(f"--warm-every must be >= 0, got {cfg.warm_every}")
    check_name(cfg.name)
    if cfg.kill_file is not None:
        from . import kill_file
        kill_file.check(cfg.kill_file)
    if cfg.duration is not None and not (math.isfinite(cfg.duration) and cfg.duration > 0):
        raise ValueError(f"--duration must be a finite number of seconds > 0, got {cfg.duration!r}")
    if not (math.isfinite(cfg.stall_exit) and cfg.stall_exit >= 0):
        raise ValueError(f"--stall-exit must be a finite number of seconds >= 0, got {cfg.stall_exit!r}")
    return choice


def default_signals_path(name):
    from engine import dirs
    return dirs.state_path("signals", f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.sig")


def output_paths(cfg):
    """(signal file, signal table or None, paper report or None): each one writable, checked before
    anything is created or started."""
    sig_path = cfg.signals_out or default_signals_path(cfg.name)
    parquet_out = None
    if sig_path.endswith(".parquet"):  # the raw log goes next to it; the table is written at the end
        parquet_out, sig_path = sig_path, sig_path[:-len(".parquet")] + ".sig"
    check_outputs(cfg, sig_path, parquet_out)
    from engine.outputs import check_writable
    if cfg.record:
        check_writable(cfg.record, "the recording (--record)")
    paper_out = None
    if cfg.paper:  # (its report is written at the end: a path that cannot take it is refused now)
        paper_out = cfg.paper_out or (sig_path.rsplit(".", 1)[0] + ".paper")
        check_writable(paper_out, "the paper trading report (--paper-out)", directory=True)
    return sig_path, parquet_out, paper_out


def check_outputs(cfg, sig_path, parquet_out):
    """Every file the run will write can be written: checked before anything is created or
    started, so a bad path leaves nothing behind (an OutputError naming it)."""
    from engine.outputs import OutputError, check_writable
    check_writable(sig_path, "signals")
    if parquet_out:
        check_writable(parquet_out, "the signal table")
    if cfg.hlog:
        check_writable(cfg.hlog, "the latency log")
    if cfg.http and cfg.token_file:
        if os.path.isdir(cfg.token_file):
            raise OutputError(cfg.token_file, "the control token", "Is a directory")
        if not os.path.exists(cfg.token_file):  # created on first use
            check_writable(cfg.token_file, "the control token")
        else:  # one that others can read (or a link) is refused now, not after the model loaded
            from .ctl_token import open_token
            fd = open_token(cfg.token_file)
            if fd is not None:
                os.close(fd)


def check_machine(cfg):
    """engine doctor for the strategy core: warnings logged; with --strict a fail stops the run."""
    if not cfg.doctor:
        return
    from .doctor import run_checks
    res = run_checks(cfg.core, cfg.priority)
    bad = [x for x in res if x["status"] in ("warn", "fail")]
    fails = [x for x in bad if x["status"] == "fail"]
    if bad:
        log(f"doctor: {len(fails)} fail, {len(bad) - len(fails)} warn: " +
            "; ".join(f"{x['check']} ({x['status']})" for x in bad) +
            f" - `engine doctor{'' if cfg.core is None else f' --core {cfg.core}'}` says why")
    if fails and cfg.strict:
        raise RuntimeError("--strict: engine doctor fails: " + "; ".join(f"{x['check']}: {x['evidence']}" for x in fails))


def check_free(cfg, inp):
    """No live engine owns our rings' names, and the control plane's ports are free."""
    own = [f"{cfg.name}.{x}" for x in ("ctl", "signals")] + ([] if cfg.ring else inp.ring_names)
    if cfg.tapped:
        own.append(f"{cfg.name}.tap")
    for name in own:  # refuse a live owner (engine first) before creating anything
        shm.check_owner(shm.ring_path(name))
    if not cfg.ring:  # the feed processes make the tick rings: what memory cannot hold is refused now
        need = len(inp.ring_names) * shm.ring_bytes(64, cfg.ring_capacity)
        need += shm.ring_bytes(64, inp.tap_capacity(cfg)) if cfg.tapped else 0
        shm.check_room(shm.ring_path(inp.ring_name), need, "--ring-capacity (feed.ring_capacity)")
    check_ports(cfg)


def check_ports(cfg):
    """The control plane's ports must be free before anything is created."""
    import socket
    wanted = []
    if cfg.http:
        wanted.append(("--http", cfg.http[0], cfg.http[1]))
    if cfg.pub and cfg.pub.startswith("tcp://"):
        host, _, port = cfg.pub[6:].rpartition(":")
        if port.isdigit():
            host = host.strip("[]")
            wanted.append(("--pub", "0.0.0.0" if host in ("", "*") else host, int(port)))
    for flag, host, port in wanted:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"{flag} {host}:{port}: {e.strerror} (another engine? pick another port)") from None
        finally:
            s.close()
