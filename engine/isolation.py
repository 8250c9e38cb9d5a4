"""`engine run --isolate`: the strategy core to the strategy thread alone while the engine runs,
without a reboot, and every change undone at exit.

Without isolcpus the scheduler runs anything anywhere. On the untuned VM these notes were
measured on, a kernel thread (DAMON's kdamond) took the strategy core for 2.9 ms twice a second,
and the strategy thread waited ~9 ms a second for its core in all (ring p99.9 of milliseconds);
with the tasks moved off, 0.1 ms a second. `Isolation.sweep` does at run time what tuned's
cpu-partitioning profile or `tuna --isolate` do: every task whose CPU mask holds the core and
another CPU gets its mask without the core, and so do the IRQs and the unbound workqueues
(kworker/u*). What cannot move stays and is counted: per-CPU kernel threads (the kernel
refuses: EINVAL), a task pinned to that core alone, another user's tasks without the rights.
The runner sweeps again every few seconds for tasks born since.

`restore` puts each one back to the mask it had, but only if it is still the same task (its
start time) and still has the mask we gave it: a mask someone changed meanwhile is theirs. The
record of what was moved is also kept in a private file (0600 in the lock directory, flock'ed
while the engine runs), so what a killed engine moved is put back by the next `engine run`
(`recover`). Tasks born while the core was isolated inherit a mask without it from the parent
that was moved (a shell): those still holding exactly that mask get the core back too.
"""
import fcntl
import json
import os
import stat

from . import locks
from .realtime import parse_cpulist

WORKQUEUE_MASK = "/sys/devices/virtual/workqueue/cpumask"
IRQ_DIR = "/proc/irq"


def _record_path(name):
    return os.path.join(locks.lock_dir(), f"engine-isolation.{str(name).replace('/', '%')}.json")


def _stat(tid):
    """/proc/TID/stat's fields after the command name (which may hold spaces): [0] is the state."""
    with open(f"/proc/{tid}/stat") as f:
        s = f.read()
    return s[s.rindex(")") + 2:].split()


def _start_time(tid):
    """The task's start time (clock ticks since boot): with the tid, who it is (tids are reused)."""
    return int(_stat(tid)[19])


def _now_ticks():
    """Now, in the clock ticks since boot that /proc/TID/stat gives start times in."""
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _comm(tid):
    try:
        with open(f"/proc/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _tids(skip_pid):
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != skip_pid:
            try:
                yield from (int(t) for t in os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass


def _hexmask(cpus):
    """A cpumask as the kernel writes it: hex, 32-bit groups separated by commas."""
    v = sum(1 << c for c in cpus)
    h = f"{v:x}"
    h = h.rjust(-(-len(h) // 8) * 8, "0")
    return ",".join(h[i:i + 8] for i in range(0, len(h), 8)).lstrip("0") or "0"


def _parse_hexmask(s):
    v = int(s.replace(",", "").strip() or "0", 16)
    return {i for i in range(v.bit_length()) if v >> i & 1}


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


class Isolation:
    """What was moved off `core`, to put back. sweep() moves, restore() undoes."""

    def __init__(self, core, name):
        self.core, self.name = core, name
        self.since = _now_ticks()  # tasks born after this with a mask we handed out inherited it
        self.tasks = {}     # tid -> [start time, old cpus, new cpus, name]
        self.irqs = {}      # irq -> [old cpus, new cpus]
        self.workqueue = None  # [old cpus, new cpus]
        self.stay = {}      # name -> count: the kernel's own per-CPU threads, tasks pinned to the core
        self.refused = 0    # tasks and IRQs we may not change (another user's, managed IRQs)
        self._fd = None

    def sweep(self):
        """Move every movable task and IRQ (and the unbound workqueues) off the core; returns how
        many moved now."""
        moved = self._sweep_tasks() + self._sweep_irqs() + self._sweep_workqueue()
        if moved:
            self._save()
        return moved

    def _sweep_tasks(self):
        moved, core, stay = 0, self.core, {}
        for tid in _tids(os.getpid()):  # (our own threads: keep_off_core; the strategy thread stays)
            try:
                cpus = os.sched_getaffinity(tid)
                if core not in cpus:
                    continue
                if cpus == {core}:
                    stay[_comm(tid)] = stay.get(_comm(tid), 0) + 1
                    continue
                start = _start_time(tid)
                os.sched_setaffinity(tid, cpus - {core})
            except (ProcessLookupError, FileNotFoundError):  # ended meanwhile
                continue
            except PermissionError:
                self.refused += 1
                continue
            except OSError:  # EINVAL: a per-CPU kernel thread (PF_NO_SETAFFINITY)
                stay[_comm(tid)] = stay.get(_comm(tid), 0) + 1
                continue
            old = self.tasks.get(tid)
            self.tasks[tid] = [start, sorted(cpus) if old is None or old[0] != start else old[1],
                               sorted(cpus - {core}), _comm(tid)]
            moved += 1
        self.stay = stay
        return moved

    def _sweep_irqs(self):
        moved = 0
        try:
            irqs = [d for d in os.listdir(IRQ_DIR) if d.isdigit()]
        except OSError:
            return 0
        for irq in irqs:
            path = f"{IRQ_DIR}/{irq}/smp_affinity_list"
            try:
                cpus = parse_cpulist(_read(path))
                if self.core not in cpus or cpus == {self.core}:
                    continue
                _write(path, ",".join(map(str, sorted(cpus - {self.core}))))
            except OSError:  # not root, or an IRQ the kernel manages itself (EIO)
                self.refused += 1
                continue
            self.irqs.setdefault(irq, [sorted(cpus), None])[1] = sorted(cpus - {self.core})
            moved += 1
        return moved

    def _sweep_workqueue(self):
        try:
            cpus = _parse_hexmask(_read(WORKQUEUE_MASK))
            if self.core not in cpus or cpus == {self.core}:
                return 0
            _write(WORKQUEUE_MASK, _hexmask(cpus - {self.core}))
        except OSError:
            return 0
        self.workqueue = [sorted(cpus) if self.workqueue is None else self.workqueue[0], sorted(cpus - {self.core})]
        return 1

    def describe(self):
        moved = [f"{len(self.tasks)} tasks", f"{len(self.irqs)} IRQs"] + (["the unbound workqueues"]
                                                                          if self.workqueue else [])
        out = f"moved {', '.join(moved[:-1])} and {moved[-1]} off core {self.core}"
        stay = sum(self.stay.values())
        if stay:
            names = sorted(self.stay)
            out += f"; {stay} stay, bound to it ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"
        if self.refused:
            out += f"; {self.refused} not ours to move"
        return out + "; undone at exit"

    def _record(self):
        return {"pid": os.getpid(), "core": self.core, "since": self.since, "tasks": self.tasks, "irqs": self.irqs,
                "workqueue": self.workqueue}

    def restore(self):
        """Put everything back that still has the mask we gave it, and give the core back to tasks
        born since that inherited such a mask; returns (restored, left as changed)."""
        done, kept = _restore(self._record())
        self.tasks, self.irqs, self.workqueue = {}, {}, None
        self._remove_record()
        return done, kept

    # -- the record, for a killed engine's successor --

    def _save(self):
        path = _record_path(self.name)
        body = json.dumps(self._record()).encode()
        tmp = f"{path}.tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while we run: a successor that can take it knows we are gone
            if os.write(fd, body) != len(body):
                raise OSError(28, "short write")
            os.replace(tmp, path)
        except OSError as e:
            os.close(fd)
            _unlink_quietly(tmp)
            raise OSError(e.errno, e.strerror, path) from None
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd

    def _remove_record(self):
        if self._fd is None:
            return
        try:
            a, b = os.fstat(self._fd), os.lstat(_record_path(self.name))
            if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
                os.unlink(_record_path(self.name))
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


PF_NO_SETAFFINITY = 0x04000000  # a task the kernel keeps on its CPU (per-CPU kernel threads)


def movable_tasks(core):
    """{name: count} of the tasks (not ours) that may run on `core` and could be moved off it:
    what `engine doctor` reports and `--isolate` moves."""
    out = {}
    for tid in _tids(os.getpid()):
        try:
            cpus = os.sched_getaffinity(tid)
            if core not in cpus or cpus == {core}:
                continue
            if int(_stat(tid)[6]) & PF_NO_SETAFFINITY:
                continue
        except OSError:
            continue
        name = _comm(tid)
        out[name] = out.get(name, 0) + 1
    return out


def _restore(rec):
    """Undo a record (Isolation._record); returns (restored, left as changed)."""
    done, kept = 0, 0
    for tid, (start, old, new, _) in rec["tasks"].items():
        try:
            if _start_time(tid) != start:
                continue  # gone, and the tid reused
            if os.sched_getaffinity(int(tid)) != set(new):
                kept += 1  # changed by someone since: theirs
                continue
            os.sched_setaffinity(int(tid), set(old))
            done += 1
        except OSError:
            pass
    done += _widen_born_since(rec)
    for irq, (old, new) in rec["irqs"].items():
        path = f"{IRQ_DIR}/{irq}/smp_affinity_list"
        try:
            if parse_cpulist(_read(path)) != set(new):
                kept += 1
                continue
            _write(path, ",".join(map(str, old)))
            done += 1
        except OSError:
            pass
    wq = rec.get("workqueue")
    if wq:
        try:
            if _parse_hexmask(_read(WORKQUEUE_MASK)) == set(wq[1]):
                _write(WORKQUEUE_MASK, _hexmask(wq[0]))
                done += 1
            else:
                kept += 1
        except OSError:
            pass
    return done, kept


def _widen_born_since(rec):
    """Tasks started while the core was isolated inherited a mask without it from a moved parent
    (a shell, a service manager): those whose mask is still exactly one we handed out get the core
    back, as their parent does. Not ours: our own threads are kept off the core on purpose."""
    core, since = rec["core"], rec.get("since", 1 << 62)
    handed = {frozenset(new) for _, _, new, _ in rec["tasks"].values()}
    n = 0
    for tid in _tids(os.getpid()):
        try:
            if _start_time(tid) > since and frozenset(os.sched_getaffinity(tid)) in handed:
                os.sched_setaffinity(tid, os.sched_getaffinity(tid) | {core})
                n += 1
        except OSError:
            pass
    return n


def recover():
    """Undo what killed engines moved: every record in the lock directory whose lock is free (its
    engine is gone). Then, if this process itself inherited a mask one of them handed out (started
    from a shell it had moved), the core is given back to it too. Returns lines to log."""
    out = []
    d = locks.lock_dir()
    for f in sorted(os.listdir(d)):
        if f.startswith("engine-isolation.") and f.endswith(".json"):
            line = _recover(os.path.join(d, f))
            if line:
                out.append(line)
    return out


def _recover(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return f"isolation record {path} refused (not a private file of this user): left alone"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return ""  # its engine still runs
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            return ""  # its engine ended and removed it meanwhile
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return ""  # replaced by its running engine's next save since we opened it: not stale
        rec = json.loads(os.read(fd, 64 << 20))
        rec["tasks"] = {int(k): v for k, v in rec["tasks"].items()}
        done, kept = _restore(rec)
        mine = os.sched_getaffinity(0)
        if rec["core"] not in mine and frozenset(mine) in {frozenset(v[2]) for v in rec["tasks"].values()}:
            os.sched_setaffinity(0, mine | {rec["core"]})
        os.unlink(path)
        return (f"put back what a killed engine (pid {rec['pid']}) moved off core {rec['core']}: {done} tasks and "
                f"IRQs" + (f" ({kept} changed since, left as they are)" if kept else ""))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"isolation record {path} unreadable ({e}): left alone"
    finally:
        os.close(fd)
