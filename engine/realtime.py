"""Real-time setup: CPU pinning, SCHED_FIFO, mlockall. Each returns (ok, message).

On Linux, sched_setaffinity and sched_setscheduler with pid 0 act on the calling
*thread*, which is what lets the strategy thread alone be pinned and real time.
"""
import ctypes
import ctypes.util
import os
from pathlib import Path

MCL_CURRENT, MCL_FUTURE = 1, 2
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_TIMERSLACK = 29
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def available_cpus():
    return sorted(os.sched_getaffinity(0))


def parse_cpulist(s):
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}"""
    out = set()
    for part in (s or "").replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            step = 1
            if ":" in b:
                b, step = b.split(":", 1)[0], 1
            out.update(range(int(a), int(b) + 1, step))
        elif part.isdigit():
            out.add(int(part))
    return out


def check_core(core):
    cpus = available_cpus()
    if core not in cpus:
        raise ValueError(f"--core {core} is not available to this process (cores available: "
                         f"{','.join(map(str, cpus))}; this machine has {os.cpu_count()})")


def pin_current_thread(core):
    try:
        os.sched_setaffinity(0, {core})
        return True, f"pinned to core {core}"
    except OSError as e:
        return False, f"cannot pin to core {core}: {e.strerror}"


def keep_off_core(core):
    """Move every thread of this process (and what they spawn later) off the strategy core: the
    calling thread, and those libraries started before it (OpenBLAS starts one per core at import),
    which would otherwise keep the strategy core in their mask. Call it before the strategy
    thread starts; that thread pins itself."""
    rest = set(available_cpus()) - {core}
    if not rest:
        return False, "only one core: the control plane and feed share the strategy core"
    os.sched_setaffinity(0, rest)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), rest)
        except OSError:  # (ended meanwhile)
            pass
    return True, f"control plane and feed on cores {','.join(map(str, sorted(rest)))}"


def set_fifo(priority):
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return True, f"SCHED_FIFO priority {priority}"
    except PermissionError:
        return False, "no permission for SCHED_FIFO (needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO grant)"
    except OSError as e:
        return False, f"cannot set SCHED_FIFO priority {priority}: {e.strerror}"


def set_other():
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError:
        pass


def set_idle():
    """SCHED_IDLE for the calling thread: it runs on what the other threads leave (work that
    decides for no one: shadow models, drift). False if refused."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return True
    except OSError:
        return False


def policy_name():
    pol = os.sched_getscheduler(0)
    return {os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR"}.get(pol, "SCHED_OTHER")


def mlockall():
    if _libc.mlockall(MCL_CURRENT | MCL_FUTURE) == 0:
        return True, "memory locked (mlockall)"
    err = ctypes.get_errno()
    return False, f"mlockall failed: {os.strerror(err)} (raise RLIMIT_MEMLOCK or run with CAP_IPC_LOCK)"


def munlockall():
    _libc.munlockall()


def die_with_parent(sig):
    """Ask the kernel to send `sig` to this process when its parent dies."""
    _libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def set_timer_slack(ns):
    """Timer slack for this thread's sleeps (default 50 us): 1 us makes short sleeps accurate,
    so a pacing producer can sleep between ticks instead of spinning a core."""
    _libc.prctl(PR_SET_TIMERSLACK, int(ns), 0, 0, 0)


def name_current_thread(name):
    """Set the OS-level thread name (top -H, /proc/PID/task/TID/comm); 15 bytes at most."""
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def preemption(tid):
    """(ns the thread has waited on a run queue while runnable, its involuntary context switches)
    since it started, from /proc (schedstat, status); None where the kernel does not say. For a
    spinning thread that never sleeps, all of that wait is time other work held its core."""
    try:
        wait_ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[1])
        for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
            if line.startswith("nonvoluntary_ctxt_switches:"):
                return wait_ns, int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return None


def thread_sched(pid, tid):
    """(policy name, last cpu) of a thread, read from /proc: an outside check."""
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); processor is field 39, policy field 41
    cpu, policy = int(fields[36]), int(fields[38])
    return {1: "SCHED_FIFO", 2: "SCHED_RR"}.get(policy, "SCHED_OTHER"), cpu


def rt_throttle_note():
    """A warning when kernel RT throttling will park a spinning SCHED_FIFO thread, else None."""
    try:
        runtime = int(Path("/proc/sys/kernel/sched_rt_runtime_us").read_text())
        period = int(Path("/proc/sys/kernel/sched_rt_period_us").read_text())
    except (OSError, ValueError):
        return None
    if runtime < 0 or runtime >= period:
        return None
    return (f"kernel RT throttling is on (sched_rt_runtime_us={runtime} of {period}): a spinning SCHED_FIFO "
            f"thread is parked {(period - runtime) / 1000:.0f} ms every {period / 1e6:g} s, which shows up in "
            f"the tail; on an isolated core set kernel.sched_rt_runtime_us=-1 (ops/tuning.md) or use --no-rt")
