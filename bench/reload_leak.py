"""Reload leak: descriptors and RSS of a real `engine run` after 0, 100 and 1,000 hot reloads.

Each reload is a SIGHUP that reloads --model (the default model: every back end this CPU runs is
verified, validated and timed, the fastest published); the next is sent once the loop adopted the
last. Issue 27 measured ~4 descriptors and 0.8 MB kept per reload; both must stay flat.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

import _common

from _common import ROOT


def wait_line(proc, needle, buf, timeout=120):
    deadline = time.monotonic() + timeout
    while needle not in buf[0]:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise SystemExit(f"engine: never said {needle!r}:\n{buf[0][-2000:]}")
        if select.select([proc.stderr], [], [], min(1.0, left))[0]:
            buf[0] += os.read(proc.stderr.fileno(), 65536).decode(errors="replace")
    buf[0] = buf[0].split(needle, 1)[1]


def sample(pid):
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    maps = {line.split()[4] for line in open(f"/proc/{pid}/maps") if "memfd:engine-model" in line}
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "rss_mb": round(int(status["VmRSS"].split()[0]) / 1024, 1),
            "model_libraries_mapped": len(maps)}


def main():
    def extra(p):
        p.add_argument("--reloads", type=int, default=1000)
        p.add_argument("--core", type=int, default=sorted(os.sched_getaffinity(0))[-1])
    a = _common.args(__doc__, extra)
    marks = [0, 100, a.reloads] if not a.quick else [0, 20, 100]
    from models.default import default_model_dir
    model = default_model_dir()
    core = a.core
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", "--core", str(core), "--rate", "20000", "--model",
                             str(model), "--name", f"reloadleak{os.getpid()}", "--signals-out", "/dev/null", "--json",
                             "--http", "none", "--pub", "none", "--hlog", "none", "--no-doctor"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    buf, rows, done = [""], [], 0
    t0 = time.monotonic()
    try:
        wait_line(proc, "running:", buf)
        for mark in marks:
            while done < mark:
                proc.send_signal(signal.SIGHUP)
                wait_line(proc, "adopted by the loop", buf)
                done += 1
            rows.append({"reloads": done, **sample(proc.pid)})
            print(f"after {done:5d} reloads: {rows[-1]['fds']:4d} fds, RSS {rows[-1]['rss_mb']:7.1f} MB, "
                  f"{rows[-1]['model_libraries_mapped']} model libraries mapped", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    swaps = json.loads(out)["model_swaps"]
    ok = sum(s["ok"] for s in swaps)
    print(f"{ok} of {len(swaps)} reloads adopted in {time.monotonic() - t0:.0f} s")
    first, last = rows[1], rows[-1]  # (from the first mark on: the first reloads warm caches up)
    per = (last["rss_mb"] - first["rss_mb"]) / max(1, last["reloads"] - first["reloads"])
    print(f"from {first['reloads']} to {last['reloads']} reloads: {last['fds'] - first['fds']:+d} fds, "
          f"{per * 1024:+.1f} kB RSS per reload")
    _common.save("reload_leak", {"samples": rows, "adopted": ok, "reloads": len(swaps),
                                 "fds_growth": last["fds"] - first["fds"], "rss_kb_per_reload": round(per * 1024, 1)},
                 {}, {}, notes=f"model {model}")


if __name__ == "__main__":
    main()
