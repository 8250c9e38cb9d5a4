"""The ops files are what the engine accepts."""
import json
import re
from pathlib import Path

from app import config

from tests.conftest import ROOT

OPS = ROOT / "ops"


def test_sample_config_holds_every_option_and_parses():
    text = (OPS / "engine.toml").read_text()
    config.load(OPS / "engine.toml")  # every uncommented key is known and well typed
    # every option appears (commented ones as "# key = ...") under its section
    section = ""
    seen = set()
    for line in text.splitlines():
        m = re.match(r"^\[(\w+)\]", line)
        if m:
            section = m.group(1) + "."
            continue
        m = re.match(r"^#?\s*(\w+)\s*=", line)
        if m:
            seen.add(section + m.group(1))
    assert set(config.KEYS) <= seen, set(config.KEYS) - seen


def test_systemd_unit_has_what_the_engine_needs():
    unit = (OPS / "engine.service").read_text()
    for d in ("CPUAffinity=", "LimitMEMLOCK=infinity", "LimitRTPRIO=", "Restart=on-failure",
              "ExecReload=/bin/kill -HUP $MAINPID", "--config /etc/engine/engine.toml"):
        assert d in unit, d


def test_dashboard_and_scrape_config_refer_to_real_metrics():
    from app import metrics  # the metric names below are the ones the engine exports (each declared there)
    dash = json.loads((OPS / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    exprs += (OPS / "engine-alerts.yml").read_text()
    src = Path(metrics.__file__).read_text()
    for name in set(re.findall(r"engine_[a-z_]+", exprs)):
        base = re.sub(r"_(total|bucket|count|sum)$", "", name)
        assert f'"{base}"' in src, name  # (tests/test_operators.py checks them against a real scrape)
    assert "9464" in (OPS / "prometheus.yml").read_text()


def test_ops_readme_commands_are_ones_this_engine_takes():
    """Every `engine ...` line of ops/README.md parses with the real command line; every file it
    installs from /opt/engine is in the tree; its paths are the unit's."""
    import contextlib
    import io
    import shlex

    from app.cli import build_parser
    text = (OPS / "README.md").read_text()
    unit = (OPS / "engine.service").read_text()
    parser = build_parser()
    cmds = [ln.split("bin/engine", 1)[1].split("#")[0] for ln in text.splitlines()
            if ln.startswith("    ") and "/.venv/bin/engine" in ln]
    assert len(cmds) >= 10
    for c in cmds:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                parser.parse_args(shlex.split(c))
        except SystemExit as e:
            assert e.code == 0, f"ops/README.md: `engine{c}` does not parse"  # (--help)
    for path in set(re.findall(r"/opt/engine/(ops/[\w.\-]+)", text)):
        assert (ROOT / path).is_file(), path
    for must in ("/opt/engine/.venv/bin/engine", "User=engine", "XDG_RUNTIME_DIR=/run", "CPUAffinity=0-2 3"):
        assert must in unit, must
    assert "ExecStart=/opt/engine/.venv/bin/engine run --config /etc/engine/engine.toml" in unit
    assert "/run/engine/engine.token" in text and "engine-run.engine.json" in text
    from app.runtime_file import _file_name
    assert _file_name("engine") == "engine-run.engine.json"


def test_every_unit_runs_a_command_this_engine_takes_and_the_timer_starts_its_service():
    """ops/*.service: each ExecStart's `engine ...` (continuation lines joined, a `sh -c` unwrapped,
    systemd's %% and %d specifiers made literal) parses with the real command line;
    engine-retrain.timer names a schedule and its service exists."""
    import contextlib
    import io
    import shlex

    from app.cli import build_parser
    parser = build_parser()
    units = sorted(OPS.glob("*.service"))
    assert {u.name for u in units} >= {"engine.service", "engine-recorder.service", "engine-retrain.service"}
    for u in units:
        text = u.read_text().replace("\\\n", " ")
        (line,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
        cmd = line[len("ExecStart="):].replace("%%", "\0").replace("%d", "/run/credentials/x").replace("\0", "%")
        argv = shlex.split(cmd)
        if argv[:2] == ["/bin/sh", "-c"]:  # (the shell's $(...) is one word of the command it runs)
            argv = shlex.split(re.sub(r"\$\([^)]*\)", "X", argv[2]).removeprefix("exec "))
        assert argv[0] == "/opt/engine/.venv/bin/engine", (u.name, argv)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                parser.parse_args(argv[1:])
        except SystemExit as e:
            raise AssertionError(f"ops/{u.name}: `{' '.join(argv)}` does not parse") from e
    timer = (OPS / "engine-retrain.timer").read_text()
    assert re.search(r"^OnCalendar=\S", timer, re.M) and "WantedBy=timers.target" in timer
    assert "SuccessExitStatus=3" in (OPS / "engine-retrain.service").read_text()  # (the gate's refusal)
