"""The ops files are what the engine accepts."""
import json
import re
from pathlib import Path

from engine import config

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
    from engine import daemon  # noqa: F401 (the metric names below are the ones it exports)
    dash = json.loads((OPS / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    src = Path(daemon.__file__).read_text()
    for name in set(re.findall(r"engine_[a-z_]+", exprs)):
        assert name.removesuffix("_total") in src, name
    assert "9464" in (OPS / "prometheus.yml").read_text()
