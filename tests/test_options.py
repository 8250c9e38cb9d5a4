"""Every `engine run` option is declared once (a RunConfig field: app/run_options.py): the command
line, the config file's keys and a programmatic RunConfig() agree on every default, and a value
from the file reaches the run. The cache, state and runtime directories come from one module
(engine/dirs.py): the token lives in the runtime directory, beside the locks and the runtime file,
as README says."""
import json
import os
import subprocess
import sys

import pytest

from app import config, run_options
from app.cli import build_parser
from app.cli.run_cmds import from_args
from app.run_options import RunConfig
from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.as_user import as_user, can_make_users, throwaway_users


def _cfg(argv, conf=None, tmp_path=None):
    """The RunConfig `engine run ARGV` builds (with --config conf, a TOML text, if given)."""
    argv = ["run", *argv]
    if conf is not None:
        f = tmp_path / "e.toml"
        f.write_text(conf)
        argv += ["--config", str(f)]
    p = build_parser()
    a = p.parse_args(argv)
    config.apply(a, p._run_parser, argv)
    return from_args(a)


def test_a_programmatic_runconfig_is_the_command_line_without_flags():
    """RunConfig() and `engine run` with no flag are one configuration, field by field (warm_every
    was 0 in RunConfig and 2048 on the command line; http, pub and hlog were off in RunConfig)."""
    assert _cfg([]) == RunConfig()
    run = build_parser()._run_parser
    fields = {o.dest or name: name for name, o in run_options.opts()}  # argparse dest -> field
    for a in run._actions:
        if a.dest in fields and a.option_strings and a.default is not None:
            f = fields[a.dest]
            assert getattr(RunConfig, f) == a.default, (a.dest, getattr(RunConfig, f), a.default)
    assert RunConfig().warm_every == 2048 and RunConfig().http == "127.0.0.1:9464"


# a value other than the default for every key of the config file (a new key must be added here)
FILE_VALUES = {
    "name": "h2cfg", "core": 0, "priority": 50, "realtime": False, "isolate": True, "strict": True, "duration": 3.0,
    "loop.policy": "other", "loop.wait": "backoff", "loop.conflate": "off", "loop.conflate_warn": 0.25,
    "loop.stall_exit": 4.0, "loop.merge_window_us": 150.0, "model.dir": "/m", "model.backend": "xgboost", "model.verify_key": None,
    "feed.uri": "synthetic://?rate=10", "feed.ring": "r.ticks", "feed.ring_owner": "root", "feed.speed": 2.0,
    "feed.max": True, "feed.rate": 100.0, "feed.sim_instruments": 5, "feed.sim_seed": 2, "feed.ring_capacity": 1024,
    "feed.crossed_after": 2.0, "strategy.name": "touch_imbalance", "strategy.warm_every": 7,
    "control.http": "127.0.0.1:1", "control.pub": "none", "control.token_file": "/t.token",
    "control.metrics_token_file": "/m.token", "control.pub_clients": "/c.keys",
    "logs.signals_out": "/s.sig", "logs.hlog": "none", "logs.hlog_interval": 5.0, "logs.keep_rings": True, "logs.quiet": True,
    "risk.mode": "refuse", "risk.max_position": 3.0, "risk.max_notional": 1000.0, "risk.max_gross": 5000.0,
    "risk.max_rate": 10.0, "risk.max_rate_total": 40.0, "risk.min_flip_ms": 5.0, "risk.kill_file": "/kill",
    "risk.kill_feed_down": 2.0, "risk.instrument": ["SYN0000:max_position=1", "SYN0001:max_rate=2"],
    "risk.kill_loss": 100.0, "risk.kill_drawdown": 50.0, "paper.on": True, "paper.out": "/p",
    "paper.exec": "--latency-us 20 --orders maker", "shadow.models": ["/a", "registry:b@2"], "drift.on": True,
    "drift.half_life": 5000,
}


def _toml(key, v):
    section, _, k = key.rpartition(".")
    return (f"[{section}]\n" if section else "") + f"{k} = {json.dumps(v)}\n"


NEEDS_PAPER = ("risk.kill_loss", "risk.kill_drawdown", "paper.exec", "paper.out")  # (about the paper PnL)


@pytest.mark.parametrize("key", NEEDS_PAPER)
def test_options_about_the_paper_pnl_need_paper(tmp_path, key):
    with pytest.raises(ValueError, match=r"needs --paper"):
        _cfg([], _toml(key, FILE_VALUES[key]), tmp_path)


def test_paper_exec_takes_the_backtests_flags_and_names_a_bad_one(tmp_path):
    from app.exec_options import paper_exec
    p = paper_exec("--latency-us lognormal:50,0.3 --fee-bps 4 --orders maker --seed 7")
    assert (p.latency, p.fee_bps, p.orders, p.seed) == ("lognormal:50,0.3", 4.0, "maker", 7)
    for bad, said in (("--latency-us -3", "--latency-us"), ("--bogus 1", "--bogus"), ("--l3 " + __file__, "--l3"),
                      ("'open", "No closing quotation")):
        with pytest.raises(ValueError, match=said):
            _cfg(["--paper"], _toml("paper.exec", bad), tmp_path)


@pytest.mark.parametrize("flags", ["--fee-bps nan", "--fee-bps inf", "--maker-bps -inf", "--per-lot nan",
                                   "--latency-us lognormal:inf,0.3", "--latency-us uniform:0,inf",
                                   "--latency-us lognormal:50,nan"])
def test_paper_exec_refuses_a_number_that_is_not_finite(tmp_path, flags):
    """A NaN fee made every paper PnL NaN, and --kill-loss never fired on it: refused, as a flag
    of engine backtest, inside --paper-exec, and in the file's paper.exec."""
    from app.exec_options import paper_exec
    with pytest.raises(ValueError, match=flags.split()[0]):
        paper_exec(flags)
    with pytest.raises(SystemExit):
        _cfg(["--paper", "--paper-exec", flags])
    with pytest.raises(ValueError, match=r"paper\.exec.*" + flags.split()[0]):
        _cfg(["--paper"], _toml("paper.exec", flags), tmp_path)
    r = subprocess.run(engine_cmd("backtest", *flags.split(), __file__, "--out", str(tmp_path / "bt")), cwd=ROOT,
                       env=engine_env(), capture_output=True, text=True)
    assert r.returncode == 2 and f"argument {flags.split()[0]}: " in r.stderr, r.stderr
    assert not (tmp_path / "bt").exists()


# a value the flag refuses, for every number key with a validator: the file refuses it too, by the same check
BAD_NUMBERS = [
    ("drift.half_life", "--drift-half-life", "-9223372036854775808"), ("drift.half_life", "--drift-half-life", "0"),
    ("feed.speed", "--speed", "inf"), ("feed.rate", "--rate", "nan"), ("feed.sim_instruments", "--sim-instruments", "0"),
    ("strategy.warm_every", "--warm-every", "-1"), ("feed.ring_capacity", "--ring-capacity", "1000"),
    ("logs.hlog_interval", "--hlog-interval", "inf"), ("loop.conflate_warn", "--conflate-warn", "nan"),
    ("loop.stall_exit", "--stall-exit", "inf"), ("loop.merge_window_us", "--merge-window-us", "-1.0"),
    ("feed.crossed_after", "--crossed-after", "nan"), ("risk.max_position", "--risk-max-position", "inf"),
    ("risk.kill_loss", "--kill-loss", "nan"), ("risk.kill_feed_down", "--kill-feed-down", "-inf"),
    ("duration", "--duration", "0.0"),
]


@pytest.mark.parametrize("key,flag,bad", BAD_NUMBERS)
def test_a_number_the_flag_refuses_the_file_refuses(tmp_path, key, flag, bad, capsys):
    """TOML drift.half_life = -2^63 was taken (the flag refuses < 1): each key is checked by its flag's own
    validator, so the file says no to what the command line says no to."""
    paper = ["--paper"] if key in NEEDS_PAPER else []
    with pytest.raises(SystemExit):
        _cfg([*paper, f"{flag}={bad}"])
    said = capsys.readouterr().err.strip().splitlines()[-1]
    section, _, k = key.rpartition(".")
    toml = (f"[{section}]\n" if section else "") + f"{k} = {bad}\n"
    with pytest.raises(config.ConfigError) as e:
        _cfg(paper, toml, tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'e.toml'}: {key}: ") and str(e.value).split(": ")[-1] in said, said


def test_a_risk_instrument_given_twice_is_refused(tmp_path):
    """Two --risk-instrument entries for one instrument (the same symbol, or the symbol with and
    without its venue): the later one won, unsaid. One line now, from the flags and from the file."""
    from app.run_options import risk_limits
    ok = _cfg(["--risk-instrument", "SYN0000:max_position=1", "--risk-instrument", "BINANCE:SYN0001:max_rate=2",
               "--risk-instrument", "CME:SYN0001:max_rate=3"])
    assert len(risk_limits(ok).instruments) == 3  # (two venues' SYN0001 are two instruments)
    for pair in (["SYN0000:max_position=1", "SYN0000:max_rate=2"], ["SYN0001:max_rate=1", "BINANCE:SYN0001:max_rate=2"],
                 ["CME:ES:max_position=1", "CME:ES:max_position=1"]):
        cfg = _cfg([x for p in pair for x in ("--risk-instrument", p)])
        with pytest.raises(ValueError, match=r"--risk-instrument .*: given twice .*: give an instrument's limits in one"):
            risk_limits(cfg)
        with pytest.raises(ValueError, match="given twice"):
            risk_limits(_cfg([], _toml("risk.instrument", pair), tmp_path))


def test_a_paper_out_that_cannot_take_the_report_is_refused_at_start(tmp_path, shm_name):
    """--paper-out was first tried at the end of the run, and the report was lost: now it is checked
    with the other outputs, before anything starts or is written."""
    from tests.helpers.feedutil import cli, one_line_error
    (tmp_path / "afile").write_text("x")
    sig = tmp_path / "s.sig"
    for out in (tmp_path / "afile", tmp_path / "afile" / "rep", "/proc/engine-paper"):
        r = cli("run", "--paper", "--paper-out", str(out), "--no-rt", "--no-doctor", "--http", "none", "--pub", "none",
                "--name", shm_name, "--feed", "synthetic://?count=500&rate=0", "--max", "--signals-out", str(sig))
        line = one_line_error(r)
        assert f"cannot write the paper trading report (--paper-out) to {out}" in line, line
        assert not sig.exists() and (tmp_path / "afile").read_text() == "x"


def test_every_key_of_the_file_reaches_the_run(tmp_path):
    assert set(FILE_VALUES) == set(config.KEYS)
    fields = {o.dest or name: name for name, o in run_options.opts()}  # argparse dest -> field
    for key, v in FILE_VALUES.items():
        if v is None:  # model.verify_key: a key file, checked when read (tests/test_signing.py)
            continue
        cfg = _cfg(["--paper"] if key in NEEDS_PAPER else [], _toml(key, v), tmp_path)
        dest = config.KEYS[key][0]
        if dest == "max":
            assert cfg.speed == 0.0, key
        else:
            f = fields[dest]
            assert getattr(cfg, f) == v, (key, getattr(cfg, f), v)
            assert getattr(RunConfig(), f) != v, key  # (else the test proves nothing)


def test_the_sample_config_shows_the_defaults():
    """ops/engine.toml: "Values shown are the defaults unless noted" (core is noted; the strategy's
    name is the default strategy's)."""
    from engine.strategy_load import DEFAULT_STRATEGY
    shown = config.load(ROOT / "ops" / "engine.toml")
    fields = {o.dest or name: name for name, o in run_options.opts()}  # argparse dest -> field
    assert shown["warm_every"] == RunConfig.warm_every and shown["ring_capacity"] == RunConfig.ring_capacity
    for dest, v in shown.items():
        if dest == "core" or dest == "param_table":
            continue
        if dest == "strategy":
            assert v == DEFAULT_STRATEGY
        elif dest == "max":
            assert v is False
        else:
            assert dest in fields and v == getattr(RunConfig, fields[dest]), (dest, v, getattr(RunConfig, fields[dest]))


def test_a_programmatic_run_warms_the_model_as_the_command_line_does(default_model):
    """The loop configuration words a RunConfig() run compiles with (its first steps: nothing is
    created) say warm every 2048 empty polls, as `engine run` does; --warm-every 0 turns it off."""
    from app.live import _Run
    import threading
    words = []
    for cfg in (RunConfig(http=None, pub=None, hlog="none"), _cfg(["--http", "none", "--pub", "none"]),
                _cfg(["--http", "none", "--pub", "none", "--warm-every", "0"])):
        r = _Run(cfg.resolved(), threading.Event(), threading.Event())
        r.check_request()
        r.open_input()
        r.load_model()
        r.compile()
        words.append(int(r.cfg_arr[r.host.mod.CFG_WARM_EVERY]))
    assert words == [2048, 2048, 0]


# -- the directories --

_WHERE = ("import json, os\n"
          "from engine import dirs, locks\n"
          "from app.run_options import RunConfig\n"
          "print(json.dumps({'token': RunConfig(name='h2dirs').resolved().token_file, 'locks': locks.lock_dir(),\n"
          "                  'runtime_dirs': dirs.runtime_dirs(), 'state': dirs.state_path('x'),\n"
          "                  'cache': dirs.cache_dir('x')}))\n")


def _where(env, user=None):
    cmd = as_user(user, "python", _WHERE) if user else [sys.executable, "-c", _WHERE]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _env(tmp_path, **xdg):
    env = engine_env(HOME=str(tmp_path / "home"))
    for k in ("XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in xdg.items()})  # (HOME too, if given)
    return env


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/run", os.W_OK), reason="root's runtime directory is "
                    "/run/engine: needs root and a writable /run")
def test_as_root_the_token_the_locks_and_the_runtime_file_share_run_engine(tmp_path):
    for xdg in ({}, {"XDG_RUNTIME_DIR": tmp_path / "rt", "XDG_STATE_HOME": tmp_path / "st",
                     "XDG_CACHE_HOME": tmp_path / "ca"}):
        (tmp_path / "rt").mkdir(exist_ok=True)
        w = _where(_env(tmp_path, **xdg))
        assert w["locks"] == "/run/engine" and w["token"] == "/run/engine/h2dirs.token", w
        assert w["runtime_dirs"][0] == "/run/engine", w
        home = tmp_path / "home"
        assert w["state"] == str((tmp_path / "st") if xdg else home / ".local" / "state") + "/engine/x", w
        assert w["cache"] == str((tmp_path / "ca") if xdg else home / ".cache") + "/engine/x", w


@pytest.mark.skipif(bool(can_make_users()), reason=str(can_make_users()))
def test_as_another_user_the_token_lives_where_the_locks_are(request):
    """README: the runtime directory is $XDG_RUNTIME_DIR/engine, else /tmp/engine-UID, and the token
    is there (it was ~/.local/state/engine when XDG_RUNTIME_DIR was unset, away from the locks)."""
    import shutil
    import tempfile
    from pathlib import Path
    with throwaway_users(1) as (user,):
        home = Path(tempfile.mkdtemp(prefix="engine-h2dirs-"))  # (pytest's tmp_path is root's 0700)
        request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
        rt = home / "rt"
        rt.mkdir()
        for d in (home, rt):
            os.chown(d, user.pw_uid, user.pw_gid)
        w = _where(_env(home.parent, HOME=home, XDG_RUNTIME_DIR=rt), user)
        assert w["locks"] == str(rt / "engine") and w["token"] == str(rt / "engine" / "h2dirs.token"), w
        assert w["state"] == str(home / ".local" / "state" / "engine" / "x"), w
        mine = f"/tmp/engine-{user.pw_uid}"
        request.addfinalizer(lambda: shutil.rmtree(mine, ignore_errors=True))
        w = _where(_env(home.parent, HOME=home), user)
        assert w["locks"] == mine and w["token"] == f"{mine}/h2dirs.token" and mine in w["runtime_dirs"], w


def test_a_run_writes_its_token_in_the_runtime_directory(tmp_path, shm_name, default_model):
    """A real run (no --token-file): the token is in the runtime directory, where the runtime file
    says it is and where `engine ctl` looks by default, 0600 while it runs; it goes at a clean exit
    (a token left behind is worth nothing, but nobody should find one lying around)."""
    from engine import dirs
    from tests.helpers.daemon import free_tcp_port
    port = free_tcp_port()
    r = subprocess.run(engine_cmd("run", "--name", shm_name, "--duration", "1", "--no-doctor", "--http",
                                  f"127.0.0.1:{port}", "--pub", "none", "--hlog", "none", "--signals-out",
                                  str(tmp_path / "s.sig")), cwd=ROOT, env=engine_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    token = os.path.join(dirs.runtime_dir(), f"{shm_name}.token")
    try:
        assert f"need the token in {token} " in r.stderr, r.stderr
        assert not os.path.exists(token)  # (removed at exit; its mode while it ran: test_daemon)
    finally:
        if os.path.exists(token):
            os.unlink(token)
