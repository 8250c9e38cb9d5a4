"""`engine doctor --core N`: how well this machine is set up for a strategy core.

Every check reads what the kernel exposes (procfs, sysfs, rlimits) and reports pass, warn, fail
or n/a with the evidence it read and, when not pass, what to do (ops/tuning.md has the commands).
Nothing is changed. `engine run` runs it at start: warnings are logged; with --strict a fail
stops the run.
"""
import glob
import os
import resource

from engine.realtime import available_cpus, parse_cpulist

CPU = "/sys/devices/system/cpu"


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _cmdline_list(cmdline, key):
    for tok in (cmdline or "").split():
        if tok.startswith(key + "="):
            v = tok.split("=", 1)[1]
            return parse_cpulist(",".join(x for x in v.split(",") if x and x[0].isdigit()))
    return None


HOUSEKEEPING_CORE = 0  # the boot CPU: the kernel keeps time there (nohz_full never includes it)


def _cpus(cores):
    return ",".join(map(str, sorted(cores)))


def housekeeping(core, cpus):
    """(the cores left for housekeeping, why `core` cannot be isolated or ""). Core 0 is the kernel's
    housekeeping core; with the strategy core taken, the rest of this process's cores run the
    control plane and the feed."""
    hk = sorted(set(cpus) - {core})
    if not hk:
        return hk, f"core {core} is the only core this process may use: nothing would be left for housekeeping"
    if core == HOUSEKEEPING_CORE:
        return hk, (f"core {core} is the housekeeping core (the kernel keeps time and runs unbound work there; "
                    "nohz_full never includes it)")
    return hk, ""


def r(check, status, evidence, advice=""):
    return {"check": check, "status": status, "evidence": evidence, "advice": advice}


def run_checks(core=None, priority=80):
    """Every check for strategy core `core` (default: the last one this process may use), in the
    order `engine doctor` prints them."""
    cpus = available_cpus()
    if core is None:
        core = max(cpus)
    if core not in set(range(os.cpu_count() or 1)):
        return [r("core", "fail", f"core {core} does not exist (cores 0-{(os.cpu_count() or 1) - 1})")]
    hk, why_not = housekeeping(core, cpus)
    isolate = _isolation_check(why_not)
    cmdline = _read("/proc/cmdline") or ""
    out = [_core_check(core, cpus, hk, why_not)]
    out += _isolation_checks(core, hk, cmdline, isolate)
    out.append(_tasks_check(core, isolate))
    out += _power_checks(core)
    out.append(_irq_check(core, hk, isolate))
    out += _limit_checks(priority)
    out.append(_clock_check())
    out.append(_smt_check(core))
    from engine.waits import choose
    c = choose("auto", "auto", core=core, priority=priority)
    out.append(r("policy auto picks", "pass", c.describe()))
    return out


def _core_check(core, cpus, hk, why_not):
    core_ok = core in cpus and not why_not
    return r("core", "pass" if core_ok else "fail" if core not in cpus else "warn",
             f"core {core}; this process may run on {','.join(map(str, sorted(cpus)))}; housekeeping (kernel "
             f"timekeeping and unbound work, the engine's control plane and feed): "
             f"{_cpus(hk) if hk else 'no core left'}",
             "" if core_ok else "the core is outside this process's affinity (cgroup cpuset, taskset)"
             if core not in cpus else why_not + (f": run the strategy on another core (--core {max(hk)})"
                                                 if hk else ""))


def _isolation_check(why_not):
    """An isolation check's result: never advises isolating a housekeeping core (n/a when the
    strategy core cannot be isolated)."""
    def isolate(check, ok, evidence, advice):
        if why_not:
            return r(check, "n/a", evidence, "" if ok else f"not isolated: {why_not}")
        return r(check, "pass" if ok else "warn", evidence, "" if ok else advice)
    return isolate


def _tasks_check(core, isolate):
    """Other tasks the scheduler may put on the core (a SCHED_OTHER loop waits while they run)."""
    from engine.isolation import movable_tasks
    m = movable_tasks(core)
    n = sum(m.values())
    top = sorted(m.items(), key=lambda kv: (-kv[1], kv[0]))
    names = ", ".join(k + (f" x{v}" if v > 1 else "") for k, v in top[:6]) + (", ..." if len(top) > 6 else "")
    return isolate("tasks that may run on the core", n == 0,
                   f"{n} tasks besides the engine's may run on core {core}" + (f": {names}" if n else ""),
                   f"`engine run --core {core} --isolate` moves them, the IRQs and unbound kernel work off it while "
                   f"the engine runs (undone at exit); isolcpus={core} at boot keeps them off for good")


def _isolation_checks(core, hk, cmdline, isolate):
    """The kernel command line, isolated and nohz_full CPUs, rcu_nocbs."""
    out = [isolate("kernel command line", any(k in cmdline for k in ("isolcpus", "nohz_full")),
                   cmdline or "unreadable",
                   f"add isolcpus=managed_irq,domain,{core} nohz_full={core} rcu_nocbs={core} "
                   f"irqaffinity={_cpus(hk)} (ops/tuning.md)")]
    for name, path, key in (("isolated CPUs", f"{CPU}/isolated", "isolcpus"),
                            ("nohz_full CPUs", f"{CPU}/nohz_full", "nohz_full")):
        v = _read(path)
        s = parse_cpulist(v) if v not in (None, "(null)") else set()
        out.append(isolate(name, core in s, f"{path}: {v or '(none)'}",
                           f"boot with {key}={core} so the scheduler and timer tick leave it alone"))
    rcu = _cmdline_list(cmdline, "rcu_nocbs")
    out.append(isolate("rcu_nocbs", bool(rcu and core in rcu),
                       f"rcu_nocbs={','.join(map(str, sorted(rcu)))}" if rcu else "not on the command line",
                       f"boot with rcu_nocbs={core}: RCU callbacks run on {_cpus(hk)}"))
    return out


def _power_checks(core):
    """Frequency governor, C-states, PM QoS, transparent huge pages."""
    out = []
    gov = _read(f"{CPU}/cpu{core}/cpufreq/scaling_governor")
    out.append(r("cpu frequency governor", "n/a" if gov is None else "pass" if gov == "performance" else "warn",
                 f"cpu{core}: {gov}" if gov else "no cpufreq (a VM, or fixed frequency)",
                 "" if gov in (None, "performance") else f"cpupower -c {core} frequency-set -g performance"))
    states = sorted(glob.glob(f"{CPU}/cpu{core}/cpuidle/state*"))
    if not states:
        out.append(r("C-states", "n/a", f"no cpuidle states for cpu{core} (a VM, or idle=poll)"))
    else:
        deep = []
        for st in states:
            lat = int(_read(f"{st}/latency") or 0)
            if lat > 10 and _read(f"{st}/disable") == "0":
                deep.append(f"{_read(f'{st}/name')} ({lat} us)")
        out.append(r("C-states", "warn" if deep else "pass",
                     f"enabled deep states on cpu{core}: {', '.join(deep)}" if deep else "no deep state enabled",
                     "tuned-adm profile latency-performance, or hold /dev/cpu_dma_latency at 0" if deep else ""))
    qos = None
    try:
        with open("/dev/cpu_dma_latency", "rb") as f:
            qos = int.from_bytes(f.read(4), "little")
    except OSError:
        pass
    out.append(r("PM QoS (cpu_dma_latency)", "n/a" if qos is None else "pass" if qos <= 10 else "warn",
                 "unreadable" if qos is None else f"{qos} us",
                 "" if qos is None or qos <= 10 else "a process holding /dev/cpu_dma_latency at 0 keeps cores out of deep C-states"))
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    out.append(r("transparent huge pages", "n/a" if thp is None else "warn" if "[always]" in thp else "pass",
                 thp or "unreadable", "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (compaction stalls)"
                 if thp and "[always]" in thp else ""))
    return out


def _irq_check(core, hk, isolate):
    hits = []
    for d in glob.glob("/proc/irq/[0-9]*"):
        aff = parse_cpulist(_read(f"{d}/smp_affinity_list"))
        if core in aff and len(aff) < (os.cpu_count() or 1) + 1:
            hits.append(os.path.basename(d))
    return isolate("IRQ affinity", not hits,
                   f"{len(hits)} IRQs may run on core {core}" + (f" (e.g. {', '.join(sorted(hits, key=int)[:8])})"
                                                                 if hits else ""),
                   f"steer IRQs to {_cpus(hk)}, off core {core}: /proc/irq/*/smp_affinity_list, "
                   f"IRQBALANCE_BANNED_CPULIST={core} (engine run --isolate does it while it runs)")


def _limit_checks(priority):
    """RT throttling, swap, the memlock and RT priority limits."""
    out = []
    rt_rt = _read("/proc/sys/kernel/sched_rt_runtime_us")
    rt_p = _read("/proc/sys/kernel/sched_rt_period_us")
    out.append(r("RT throttling", "n/a" if rt_rt is None else "pass" if rt_rt == "-1" else "warn",
                 f"sched_rt_runtime_us={rt_rt}, period {rt_p}",
                 "" if rt_rt in (None, "-1") else "a spinning SCHED_FIFO thread is parked "
                 f"{(int(rt_p) - int(rt_rt)) / 1000:.0f} ms of every {int(rt_p) / 1000:.0f} ms: "
                 "sysctl kernel.sched_rt_runtime_us=-1 on an isolated core (--policy auto then picks SCHED_FIFO)"))
    swaps = (_read("/proc/swaps") or "").splitlines()[1:]
    out.append(r("swap", "warn" if swaps else "pass", f"{len(swaps)} swap areas; swappiness "
                 f"{_read('/proc/sys/vm/swappiness')}", "swapoff -a, or rely on mlockall (engine run locks its memory)"
                 if swaps else ""))
    root = os.geteuid() == 0
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    ml_ok = soft == resource.RLIM_INFINITY or root
    out.append(r("memlock limit", "pass" if ml_ok else "fail",
                 f"RLIMIT_MEMLOCK {'unlimited' if soft == resource.RLIM_INFINITY else soft}" + (" (root)" if root else ""),
                 "" if ml_ok else "LimitMEMLOCK=infinity in the unit, or memlock unlimited in limits.conf"))
    soft, hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
    rt_ok = root or soft >= priority
    out.append(r("RT priority limit", "pass" if rt_ok else "fail", f"RLIMIT_RTPRIO {soft}" + (" (root)" if root else ""),
                 "" if rt_ok else f"LimitRTPRIO={priority} in the unit, or rtprio {priority} in limits.conf"))
    return out


def _clock_check():
    cs = _read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    status = "n/a" if cs is None else "pass" if cs == "tsc" else "warn" if cs in ("kvm-clock", "hyperv_clocksource_tsc_page") else "fail"
    return r("clock source", status, f"{cs} (available: "
             f"{_read('/sys/devices/system/clocksource/clocksource0/available_clocksource')})",
             "" if status in ("pass", "n/a") else "tsc is best (clocksource=tsc tsc=reliable); "
             "hpet/acpi_pm cost a system call per clock read" if status == "fail" else
             "a paravirtual clock: vDSO reads work, tsc would be cheaper")


def _smt_check(core):
    sib = parse_cpulist(_read(f"{CPU}/cpu{core}/topology/thread_siblings_list")) - {core}
    if not sib:
        return r("SMT sibling", "pass", f"cpu{core} has no hyperthread sibling")
    iso = parse_cpulist(_read(f"{CPU}/isolated"))
    shared = sorted(sib & {HOUSEKEEPING_CORE})
    advice = (f"cpu{shared[0]} is the housekeeping core and stays busy: pick a strategy core whose sibling it is "
              "not, or disable SMT (nosmt)" if shared else
              "isolate the sibling too (and keep it idle), or disable SMT")
    return r("SMT sibling", "pass" if sib <= iso else "warn", f"cpu{core} shares its core with "
             f"cpu{','.join(map(str, sorted(sib)))}", "" if sib <= iso else advice)


def format_table(res):
    w = max(len(x["check"]) for x in res)
    lines = []
    for x in res:
        lines.append(f"{x['status'].upper():<5} {x['check']:<{w}}  {x['evidence']}")
        if x["advice"]:
            lines.append(f"{'':<5} {'':<{w}}  -> {x['advice']}")
    return "\n".join(lines)
