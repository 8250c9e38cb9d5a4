"""Read-only inspection of any engine ring file: its header, and per kind its consumers (tick
rings), its reader and drops (signal rings) or the loop's counters (the control block).

Core layer. Separate from engine/shm.py because it knows every kind of ring, including the
control block (engine/control.py), which is itself built on shm: shm stays the bottom.
"""
import os
import time

from . import control, feed_stats, shm


def inspect(path):
    """Header and counters of a ring, read-only (a plain read; never writes)."""
    hdr = shm.read_header(path).copy()
    size = os.path.getsize(path)
    shm.validate(path, hdr, size, None)
    kind = int(hdr[shm.H_KIND])
    now = time.monotonic_ns()
    pid = int(hdr[shm.H_PID])
    info = {
        "path": path,
        "kind": {shm.RING_TICKS: "ticks (broadcast)", shm.RING_SIGNALS: "signals (spsc)",
                 shm.RING_CONTROL: "engine control block"}.get(kind, str(kind)),
        "layout_version": int(hdr[shm.H_VERSION]),
        "record_size": int(hdr[shm.H_RECORD_SIZE]),
        "capacity": int(hdr[shm.H_CAPACITY]),
        "producer_pid": pid,
        "producer_alive": shm.pid_alive(pid),
        "heartbeat_age_s": round((now - int(hdr[shm.H_HEARTBEAT_NS])) / 1e9, 3),
        "state": shm.STATE_NAMES.get(int(hdr[shm.H_STATE]), str(int(hdr[shm.H_STATE]))),
        "created_unix_ns": int(hdr[shm.H_CREATED_NS]),
        "write_cursor": int(hdr[shm.H_WRITE]),
    }
    if kind == shm.RING_TICKS:
        info["depth"] = int(hdr[shm.H_DEPTH])
        info["feed_counters"] = feed_stats.read(hdr)  # the feed's own (gaps, lost messages, ...)
    if kind == shm.RING_CONTROL:
        info.update(loop_state=control.LOOP_STATE_NAMES.get(int(hdr[control.L_STATE]), "?"),
                    ticks=int(hdr[control.L_TICKS]), signals=int(hdr[control.L_SIGNALS]),
                    gaps=int(hdr[control.L_GAPS]), lost=int(hdr[control.L_LOST]),
                    model_gen=int(hdr[control.CTL_MODEL_GEN]))
        for k in ("write_cursor", "capacity", "record_size"):
            info.pop(k)
    elif kind == shm.RING_SIGNALS:
        info.update(read_cursor=int(hdr[shm.H_READ]), consumer_pid=int(hdr[shm.H_CONSUMER_PID]),
                    drops=int(hdr[shm.H_DROPS]), backlog=int(hdr[shm.H_WRITE] - hdr[shm.H_READ]))
    else:
        cons = []
        for i in range(int(hdr[shm.H_MAX_CONSUMERS])):
            b = shm.H_CONSUMERS + 8 * i
            cpid = int(hdr[b + shm.C_PID])
            if cpid:
                cons.append({"slot": i, "pid": cpid, "alive": shm.pid_alive(cpid),
                             "cursor": int(hdr[b + shm.C_CURSOR]), "lag": int(hdr[shm.H_WRITE] - hdr[b + shm.C_CURSOR]),
                             "lost": int(hdr[b + shm.C_LOST]), "gaps": int(hdr[b + shm.C_GAPS]),
                             "resyncs": int(hdr[b + shm.C_RESYNC])})
        info["consumers"] = cons
    return info
