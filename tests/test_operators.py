"""Operator tooling against real engines: finding a running engine (--name, --config, its runtime
file), latency histograms scraped over HTTP on loopback, `run --ring` ending with its producer,
ctl's output, doctor's advice, and the ops files naming only what the engine exports."""
import json
import os
import re
import shutil
import signal
import subprocess

import numpy as np
import pytest

from tests.conftest import ROOT, engine_cmd, engine_env, strategy_core
from tests.helpers.daemon import Daemon, free_tcp_port, scrape as daemon_scrape, wait_until
from tests.helpers.feedutil import cli, one_line_error

OPS = ROOT / "ops"
RATE = 20000


# -- one real engine for the module: every check below reads it, none changes what another sees

@pytest.fixture(scope="module")
def eng(tmp_path_factory, default_model):
    tmp = tmp_path_factory.mktemp("ops")
    name = f"enginetest-ops-{os.getpid()}"
    # --conflate off: every tick is scored, so a backlog shows in tick_to_signal too
    d = Daemon(tmp, name, "--feed", f"synthetic://?instruments=4&seed=3&rate={RATE}", "--conflate", "off",
               core=strategy_core())
    d.name, d.tmp = name, tmp
    try:
        d.wait_for("endpoints in ")
        yield d
    finally:
        d.stop()
        for suffix in ("ticks", "ticks.instruments", "signals", "ctl"):
            try:
                os.unlink(f"/dev/shm/{name}.{suffix}")
            except FileNotFoundError:
                pass


def scrape(d):
    """{sample name: {frozen labels: value}} from a real GET /metrics."""
    return daemon_scrape(d)[0]


def hist(m, name, **labels):
    """[(le, cumulative count)] sorted by le (+Inf last), _count, _sum of one histogram series."""
    want = set(labels.items())
    b = sorted(((float(dict(k)["le"]), v) for k, v in m[name + "_bucket"].items() if want <= set(k)))
    key = tuple(sorted(labels.items()))
    return b, m[name + "_count"][key], m[name + "_sum"][key]


def quantile(q, b0, b1):
    """Prometheus' histogram_quantile over the window between two scrapes (bucket increases)."""
    inc = [(le, v1 - v0) for (le, v0), (_, v1) in zip(b0, b1)]
    total = inc[-1][1]
    assert total > 0
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in inc:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12)
        prev_le, prev_c = le, c
    return prev_le


# -- item 4: finding a running engine

def test_runtime_file_is_private_and_names_the_endpoints(eng):
    from engine.locks import lock_dir
    path = os.path.join(lock_dir(), f"engine-run.{eng.name}.json")
    assert f"endpoints in {path}" in eng.log()
    st = os.lstat(path)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600
    info = json.loads(open(path).read())
    assert info["pid"] == eng.proc.pid and info["name"] == eng.name
    assert info["http"] == eng.http and info["pub"] == eng.pub and info["token_file"] == str(eng.token_file)
    assert not [f for f in os.listdir(lock_dir()) if f.startswith(f".engine-run.{eng.name}")]  # no temp left


def test_stats_ctl_and_follow_find_the_engine_by_name_alone(eng):
    r = cli("stats", "--name", eng.name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"engine {eng.name} (pid {eng.proc.pid}): ") and "p99.99" in r.stdout
    assert f"core {strategy_core()}: the strategy thread waited " in r.stdout, r.stdout
    r = cli("signals", "--follow", "--name", eng.name, "--count", "2")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["topic"][:3] for x in r.stdout.splitlines()] == ["SYN", "SYN"]


def test_ctl_status_and_pause_print_the_same_format(eng):
    lines = {}
    for cmd in ("status", "pause", "resume"):
        r = cli("ctl", cmd, "--name", eng.name)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert len(r.stdout.splitlines()) == 1 and r.stdout.startswith(f"engine {eng.name} (pid {eng.proc.pid}): ")
        lines[cmd] = r.stdout
    assert ": paused, ready=" in lines["pause"] and ": paused, " not in lines["resume"]
    objs = []
    for cmd in ("status", "pause", "resume"):
        r = cli("ctl", cmd, "--name", eng.name, "--json")
        assert r.returncode == 0 and len(r.stdout.splitlines()) == 1
        objs.append(json.loads(r.stdout))
    assert objs[0].keys() == objs[1].keys() == objs[2].keys()
    assert objs[1]["paused"] and not objs[2]["paused"]


def test_config_gives_the_endpoints(eng, tmp_path):
    conf = tmp_path / "engine.toml"
    conf.write_text(f'name = "{eng.name}"\n[control]\nhttp = "{eng.http}"\npub = "{eng.pub}"\n'
                    f'token_file = "{eng.token_file}"\n')
    r = cli("stats", "--config", str(conf), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pid"] == eng.proc.pid
    r = cli("signals", "--follow", "--config", str(conf), "--count", "1")
    assert r.returncode == 0 and json.loads(r.stdout)["topic"].startswith("SYN"), r.stderr
    # the name alone in the file: the rest from the engine's runtime file
    conf.write_text(f'name = "{eng.name}"\n')
    r = cli("ctl", "status", "--config", str(conf))
    assert r.returncode == 0 and r.stdout.startswith(f"engine {eng.name} "), r.stderr


def _runtime_file(name, body, mode=0o600):
    from engine.locks import lock_dir
    path = os.path.join(lock_dir(), f"engine-run.{name}.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, body.encode())
    os.fchmod(fd, mode)
    os.close(fd)
    return path


def test_nothing_found_stale_refused_and_bad_configs_are_one_line_errors(tmp_path):
    name = f"enginetest-none-{os.getpid()}"
    for cmd in (("stats",), ("ctl", "status"), ("ctl", "pause"), ("signals", "--follow")):
        line = one_line_error(cli(*cmd, "--name", name))
        assert f"no engine named '{name}' is running as this user" in line, line
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = _runtime_file(name, json.dumps({"pid": dead.pid, "http": "127.0.0.1:9", "pub": None}))
    try:
        line = one_line_error(cli("ctl", "status", "--name", name))
        assert f"runtime file {path} is stale (pid {dead.pid} " in line, line
        os.chmod(path, 0o644)
        line = one_line_error(cli("stats", "--name", name))
        assert f"runtime file {path} is refused: mode 0644" in line, line
        os.unlink(path)
        os.symlink("/etc/hostname", path)
        line = one_line_error(cli("stats", "--name", name))
        assert f"runtime file {path}" in line and "a link is never followed" in line, line
    finally:
        os.unlink(path)
    conf = tmp_path / "e.toml"
    for text, needle in (('[control]\nhttp = "none"\n', "has no control plane (HTTP): " + f"{conf}: control.http says none"),
                         ('[control]\nhttp = "nowhere"\n', f"{conf}: control.http"),
                         ('[control]\nhtp = "x"\n', "unknown key 'control.htp'")):
        conf.write_text(text)
        line = one_line_error(cli("stats", "--config", str(conf)))
        assert needle in line, line
    conf.write_text('[control]\npub = "none"\n')
    assert "has no signal publication (zmq)" in one_line_error(cli("signals", "--follow", "--config", str(conf)))
    assert f"{tmp_path / 'nope.toml'}: No such file" in one_line_error(cli("ctl", "status", "--config",
                                                                           str(tmp_path / "nope.toml")))


# -- item 5: latency histograms, scraped over HTTP

def test_histograms_are_cumulative_and_count_what_the_loop_recorded(eng):
    from engine import latency
    from app.prom import BUCKETS_S
    from hdrh.histogram import HdrHistogram
    m = scrape(eng)
    stages = {"tick_to_signal": ("engine_tick_to_signal_seconds", {})}
    stages.update({s: ("engine_stage_seconds", {"stage": s}) for s in ("ring", "features", "model", "emit")})
    for stage, (name, labels) in stages.items():
        b, count, total = hist(m, name, **labels)
        assert [le for le, _ in b] == sorted(BUCKETS_S) + [float("inf")]
        counts = [v for _, v in b]
        assert counts == sorted(counts) and counts[-1] == count > 0 and total > 0, (stage, counts)
    # paused, the scored stages stop: the scrape then equals the control block's own counts,
    # bucketed here with hdrh's API (not the engine's code)
    r = cli("ctl", "pause", "--name", eng.name)
    assert r.returncode == 0, r.stderr
    try:
        wait_until(lambda: eng.status()["loop"]["state"] == "paused", "the loop paused")
        st = eng.status()["latency_ns"]
        m = wait_until(lambda: (lambda s: s if hist(s, "engine_tick_to_signal_seconds")[1] ==
                                st["tick_to_signal"]["count"] else None)(scrape(eng)), "a scrape after the pause")
        from engine.shm import HEADER_BYTES, ring_path
        counts = np.fromfile(ring_path(f"{eng.name}.ctl"), np.int64, len(latency.STAGES) * latency.COUNTS_LEN,
                             offset=HEADER_BYTES).reshape(len(latency.STAGES), latency.COUNTS_LEN)
        ref = HdrHistogram(latency.LOWEST_NS, latency.HIGHEST_NS, latency.SIG_FIGS)
        highest = np.array([ref.get_highest_equivalent_value(ref.get_value_from_index(i))
                            for i in range(latency.COUNTS_LEN)])
        for stage in ("tick_to_signal", "features", "model", "emit"):
            name, labels = stages[stage]
            b, count, _ = hist(m, name, **labels)
            row = counts[latency.STAGES.index(stage)]
            want = [int(row[highest <= round(le * 1e9)].sum()) for le, _ in b[:-1]] + [int(row.sum())]
            assert [int(v) for _, v in b] == want and count == st[stage]["count"] == want[-1], stage
    finally:
        cli("ctl", "resume", "--name", eng.name)


def test_a_latency_spike_leaves_the_windowed_quantile(eng):
    """Stop the engine (SIGSTOP) while its feed runs on: the backlog it finds is a real spike. The
    p99 over the window holding it is high; over the next window it is back to normal, while
    the since-start maximum (/status) keeps the spike."""
    from engine import shm
    from engine.ring_info import inspect
    ring = shm.ring_path(f"{eng.name}.ticks")
    name = "engine_tick_to_signal_seconds"
    m0 = scrape(eng)
    backlog = RATE // 4
    os.kill(eng.proc.pid, signal.SIGSTOP)
    try:
        w0 = inspect(ring)["write_cursor"]
        wait_until(lambda: inspect(ring)["write_cursor"] >= w0 + backlog, "the feed ran on")
    finally:
        os.kill(eng.proc.pid, signal.SIGCONT)
    w1 = inspect(ring)["write_cursor"]
    b0 = hist(m0, name)[0]
    # the window ends once the engine has read the whole backlog and a scrape shows it
    cursor = lambda: next(c["cursor"] for c in inspect(ring)["consumers"] if c["pid"] == eng.proc.pid)  # noqa
    wait_until(lambda: cursor() >= w1, "the backlog read")
    read = inspect(shm.ring_path(f"{eng.name}.ctl"))["ticks"]
    m1 = wait_until(lambda: (lambda m: m if m["engine_ticks_total"][()] >= read else None)(scrape(eng)),
                    "a scrape after the backlog")
    b1 = hist(m1, name)[0]
    spike = quantile(0.99, b0, b1)
    assert spike >= 0.01, spike  # the backlog waited for a stopped engine
    m2 = wait_until(lambda: (lambda m: m if hist(m, name)[1] - hist(m1, name)[1] >= 4 * backlog else None)(scrape(eng)),
                    "a window of normal ticks")
    after = quantile(0.99, b1, hist(m2, name)[0])
    assert after <= spike / 10, (spike, after)  # recovered: the spike left the window
    since_start = eng.status()["latency_ns"]["tick_to_signal"]["max"] / 1e9
    assert since_start >= 0.01  # the since-start maximum keeps the spike for ever


# -- item 5: alerts and dashboard name only what the engine exports

def _names(text):
    return set(re.findall(r"\b(engine_[a-z0-9_]+|up)\b", text))


def test_alerts_and_dashboard_use_only_exported_metrics(eng):
    import yaml
    rules = yaml.safe_load((OPS / "engine-alerts.yml").read_text())
    exprs = []
    for g in rules["groups"]:
        assert g["name"] and g["rules"]
        for rule in g["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["alert"] and rule["expr"] and rule["annotations"]["summary"], rule
            assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule
            exprs.append(rule["expr"])
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"EngineDown", "EngineAbsent", "EngineLosingTicks", "EngineDroppingSignals", "EngineLoopStalled"} <= alerts
    dash = json.loads((OPS / "grafana-dashboard.json").read_text())
    panels = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert any("histogram_quantile" in e and "engine_tick_to_signal_seconds_bucket" in e for e in panels)
    assert any("histogram_quantile" in e and "engine_tick_to_signal_seconds_bucket" in e for e in exprs)
    from app.daemon import PAPER_METRICS
    from app.drift_monitor import DRIFT_METRICS
    # (a --paper run's and a --drift run's: tests/test_paper.py and tests/test_drift.py scrape them)
    private = set(daemon_scrape(eng, private=True)[0])  # (the money and the kill switch: the private job's)
    exported = set(scrape(eng)) | private | set(PAPER_METRICS) | set(DRIFT_METRICS)
    job = yaml.safe_load((OPS / "prometheus.yml").read_text())["scrape_configs"][0]["job_name"]
    for e in exprs + panels:
        for n in _names(e):
            if n == "up":  # Prometheus' own, per target of the job
                assert f'job="{job}"' in e, e
            else:
                assert n in exported, (n, e)
    assert "engine_latency_ns" not in " ".join(exprs + panels)  # since start: never recovers from a spike


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian package prometheus) not installed")
def test_promtool_accepts_the_rules_and_their_unit_tests(tmp_path):
    # promtool checks that the private job's credentials file exists: the shipped config, pointed at
    # a token file here (the path is the only change)
    token = tmp_path / "metrics.token"
    token.write_text("x" * 32 + "\n")
    shipped = (OPS / "prometheus.yml").read_text()
    assert "/etc/engine/metrics.token" in shipped
    conf = tmp_path / "prometheus.yml"
    conf.write_text(shipped.replace("/etc/engine/metrics.token", str(token)))
    shutil.copy(OPS / "engine-alerts.yml", tmp_path)  # (its rule_files are beside it)
    for args in (("check", "rules", "engine-alerts.yml"), ("check", "config", str(conf)),
                 ("test", "rules", "engine-alerts.test.yml")):
        r = subprocess.run(["promtool", *args], cwd=OPS, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (args, r.stdout, r.stderr)


# -- item 8: run --ring ends with its producer; doctor never isolates the housekeeping core

def test_run_on_a_ring_ends_when_its_producer_finishes(tmp_path, shm_name, default_model):
    from engine.locks import lock_dir
    ring = f"{shm_name}.ext"
    n = 3000
    # a real producer process that holds its ticks until a consumer attaches, publishes n, marks the
    # ring finished and exits
    feed = subprocess.Popen(engine_cmd("feed", f"synthetic://?instruments=4&seed=5&rate={RATE}&count={n}", "--ring",
                                       ring, "--wait-consumers", "1"), cwd=ROOT, env=engine_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from engine.shm import ring_path
        wait_until(lambda: os.path.exists(ring_path(ring)) or feed.poll() is not None, "the feed's ring")
        assert feed.poll() is None
        err = tmp_path / "run.err"
        with open(err, "w") as ef:
            r = subprocess.run(engine_cmd(
                "run", "--no-rt", "--ring", ring, "--name", shm_name, "--http", f"127.0.0.1:{free_tcp_port()}",
                "--pub", "none", "--hlog", "none", "--signals-out", str(tmp_path / "s.sig"), "--json"),
                cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=ef, text=True, timeout=300)
        log = err.read_text()
        assert r.returncode == 0, log
        res = json.loads(r.stdout)
        assert "its producer finished and every tick was read; stopping" in log
        assert res["ticks"] == n and res["lost"] == 0, res
        assert feed.wait(30) == 0
    finally:
        if feed.poll() is None:
            feed.kill()
            feed.wait()
    assert not os.path.exists(os.path.join(lock_dir(), f"engine-run.{shm_name}.json"))  # removed at exit


def _isolation_lists(advice):
    return [c for key in ("isolcpus", "nohz_full", "rcu_nocbs")
            for m in re.finditer(rf"{key}=([\w,\-]+)", advice)
            for c in m.group(1).split(",") if c[:1].isdigit()]


def test_doctor_never_advises_isolating_the_housekeeping_core():
    from app.doctor import run_checks
    from engine.realtime import available_cpus, parse_cpulist
    for core in available_cpus():
        res = run_checks(core)
        for x in res:
            isolated = parse_cpulist(",".join(_isolation_lists(x["advice"])))
            assert 0 not in isolated, (core, x)
            if "irqaffinity=" in x["advice"]:
                assert core not in parse_cpulist(x["advice"].split("irqaffinity=")[1].split()[0]), x
        if core == 0:
            c = next(x for x in res if x["check"] == "core")
            assert c["status"] == "warn" and "housekeeping core" in c["advice"], c
            assert all(x["status"] == "n/a" for x in res if x["check"] in
                       ("isolated CPUs", "nohz_full CPUs", "rcu_nocbs", "kernel command line"))
    # a process with one core: that core does the housekeeping, nothing is to be isolated
    only = max(available_cpus())
    r = subprocess.run(engine_cmd("doctor", "--json"),
                       cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: os.sched_setaffinity(0, {only}))
    res = json.loads(r.stdout)
    assert not any(_isolation_lists(x["advice"]) for x in res), res
    assert next(x for x in res if x["check"] == "core")["status"] == "warn"
