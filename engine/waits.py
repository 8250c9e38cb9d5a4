"""How the strategy thread waits for ticks, and under which scheduling policy: names, defaults and
the `--policy auto` decision.

Wait strategies (what the live loop does while its ring is empty; host_template run_loop):
  spin     busy-spin with PAUSE: the lowest latency, a whole core at 100%.
  backoff  spin for spin_ns of idleness, then sched_yield until yield_ns, then park with sleeps
           doubling from 20 us to park_max_ns: an idle loop costs a few % of a core, a tick that
           arrives during a park waits for it (a wake-up costs ~30 us on this VM).
  duty     spin, but sleep 20 us slices whenever the owed sleep (duty x elapsed time - slept)
           reaches one: the thread never runs more than (1 - duty) of any RT period, so kernel RT
           throttling never parks a SCHED_FIFO thread for 50 ms; ticks arriving in a slice wait.

Policies: `fifo` (SCHED_FIFO at --priority), `other` (SCHED_OTHER, pinned when --core is given),
`auto` (the default): SCHED_FIFO only where it cannot be throttled into a tail: RT throttling off,
or a wait that sleeps. Otherwise pinned SCHED_OTHER with spin: with RT throttling on, a spinning
FIFO thread is parked 50 ms every second (p99 ~40 ms here) and a duty-cycled one puts every tick
that arrives during a slice behind a ~30-50 us wake-up, while a pinned SCHED_OTHER spinner on a
core the control plane and feed have left is preempted only by what the kernel runs there
(bench/tick_to_signal.py measures all three in one run). Reading /proc and /sys only; `root`
lets tests hand in a fake tree.
"""
import os
import resource
from dataclasses import dataclass

WAITS = ("spin", "backoff", "duty")
POLICIES = ("auto", "fifo", "other")
WAIT_HELP = ("spin: busy-spin (a whole core); backoff: spin 50 us, yield to 200 us, then sleeps "
             "growing to 1 ms (a few %% of a core when idle); duty: spin, sleeping just enough "
             "never to be RT-throttled")


@dataclass(frozen=True)
class Wait:
    name: str = "spin"
    spin_ns: int = 50_000
    yield_ns: int = 200_000
    park_max_ns: int = 1_000_000
    duty: float = 0.0          # duty: fraction of time asleep (set from the RT budget)


@dataclass(frozen=True)
class Choice:
    policy: str      # "fifo" | "other"
    wait: Wait
    reason: str

    def describe(self):
        return f"{'SCHED_FIFO' if self.policy == 'fifo' else 'SCHED_OTHER'} + {self.wait.name} wait ({self.reason})"


def _read(root, path):
    try:
        with open(os.path.join(root, path.lstrip("/"))) as f:
            return f.read().strip()
    except OSError:
        return None


def rt_budget(root="/"):
    """(runtime_us, period_us) of kernel RT throttling, or None when it is off or unreadable."""
    try:
        runtime = int(_read(root, "/proc/sys/kernel/sched_rt_runtime_us"))
        period = int(_read(root, "/proc/sys/kernel/sched_rt_period_us"))
    except (TypeError, ValueError):
        return None
    if runtime < 0 or runtime >= period:
        return None
    return runtime, period


def isolated(core, root="/"):
    from .realtime import parse_cpulist
    cpus = set()
    for p in ("/sys/devices/system/cpu/isolated", "/sys/devices/system/cpu/nohz_full"):
        v = _read(root, p)
        if v and v != "(null)":
            cpus |= parse_cpulist(v)
    return core is not None and core in cpus


CAP_SYS_NICE = 23


def may_fifo(priority, root="/"):
    """Could this process take SCHED_FIFO at `priority`? CAP_SYS_NICE in its effective set (root
    normally has it; root in a container or under setpriv may not), or an RLIMIT_RTPRIO grant."""
    for line in (_read(root, "/proc/self/status") or "").splitlines():
        if line.startswith("CapEff:"):
            if int(line.split()[1], 16) >> CAP_SYS_NICE & 1:
                return True
            break
    else:
        if os.geteuid() == 0:
            return True
    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    return soft == resource.RLIM_INFINITY or soft >= priority


def make_wait(name, root="/"):
    if name not in WAITS:
        raise ValueError(f"--wait {name!r}: choose one of {', '.join(WAITS)}")
    if name != "duty":
        return Wait(name)
    b = rt_budget(root)
    # sleep half as much again as the kernel would take by force: margin for the syscalls' own time
    return Wait("duty", duty=1.5 * (1 - b[0] / b[1]) if b else 0.0)


def choose(policy="auto", wait="auto", core=None, priority=80, root="/", can_fifo=None):
    """The scheduling policy and wait strategy for the strategy thread, with the reason in words."""
    if policy not in POLICIES:
        raise ValueError(f"--policy {policy!r}: choose one of {', '.join(POLICIES)}")
    if wait != "auto" and wait not in WAITS:
        raise ValueError(f"--wait {wait!r}: choose auto or one of {', '.join(WAITS)}")
    budget = rt_budget(root)
    throttle = (f"RT throttling is on ({budget[0]} of every {budget[1]} us): a spinning SCHED_FIFO thread is "
                f"parked {(budget[1] - budget[0]) / 1000:.0f} ms every {budget[1] / 1e6:g} s") if budget else ""
    if policy == "fifo":
        w = make_wait("spin" if wait == "auto" else wait, root)
        return Choice("fifo", w, "forced by --policy fifo" + (f"; warning: {throttle}" if budget and w.name == "spin"
                                                              else ""))
    if policy == "other":
        return Choice("other", make_wait("spin" if wait == "auto" else wait, root), "forced by --policy other")
    if can_fifo is None:
        can_fifo = may_fifo(priority)
    if not can_fifo:
        return Choice("other", make_wait("spin" if wait == "auto" else wait, root),
                      "auto: no permission for SCHED_FIFO (root, CAP_SYS_NICE or RLIMIT_RTPRIO)")
    if budget is None:
        return Choice("fifo", make_wait("spin" if wait == "auto" else wait, root),
                      "auto: RT throttling is off, so SCHED_FIFO preempts everything else on the core and is never parked")
    if wait in ("backoff", "duty"):
        return Choice("fifo", make_wait(wait, root), f"auto: the {wait} wait sleeps, so it stays within the RT budget")
    where = (f"core {core} is isolated: nothing else runs there" if isolated(core, root) else
             "pinned, it shares its core only with what the kernel runs there" if core is not None else
             "not pinned (give --core)")
    return Choice("other", make_wait("spin", root), f"auto: {throttle}; SCHED_OTHER + spin instead ({where})")
