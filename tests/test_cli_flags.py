"""Boolean options have both forms (--X and --no-X), so a flag on the command line undoes a `true`
in `engine run --config FILE`; the sample config is safe to try on any core; `make run` passes
NAME, HTTP and PUB on like CORE and DURATION."""
import argparse
import json
import shlex
import shutil
import subprocess

import pytest

from app import config
from app.cli import build_parser

from tests.conftest import ROOT, engine_cmd, engine_env, strategy_core


def _walk(p, path=("engine",)):
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, q in a.choices.items():
                yield from _walk(q, path + (name,))


def test_every_boolean_option_has_both_forms():
    """Every option that takes no value is a Flag (--X and --no-X), or the alias of a value
    (--no-conflate = --conflate off); the old inverted flags keep working."""
    from app.cli.common import Flag
    n = 0
    for path, p in _walk(build_parser()):
        takes_value = {a.dest for a in p._actions if a.option_strings and a.nargs != 0}
        for a in p._actions:
            if not a.option_strings or a.nargs != 0 or a.help == argparse.SUPPRESS or a.dest == "help":
                continue
            n += 1
            if isinstance(a, argparse._StoreConstAction) and a.dest in takes_value:
                continue
            assert isinstance(a, Flag), f"{' '.join(path)} {a.option_strings[0]}: one form only"
            pos = [o for o in a.option_strings if not o.startswith("--no-")]
            assert pos and all(f"--no-{o[2:]}" in a.option_strings for o in pos), (path, a.option_strings)
    assert n > 20, n
    run = build_parser()._run_parser
    for argv, dest, want in ((["--no-rt"], "realtime", False), (["--rt"], "realtime", True), ([], "realtime", True),
                             (["--no-doctor"], "doctor", False), ([], "doctor", True),
                             (["--no-conflate"], "conflate", "off"), (["--isolate"], "isolate", True),
                             (["--no-isolate"], "isolate", False), ([], "isolate", False)):
        assert getattr(run.parse_args(argv), dest) == want, (argv, dest)


def test_run_help_shows_both_forms():
    r = subprocess.run(engine_cmd("run", "--help-all"), cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    for both in ("--isolate, --no-isolate", "--rt, --no-rt", "--doctor, --no-doctor", "--strict, --no-strict",
                 "--max, --no-max", "--keep-rings, --no-keep-rings", "--json, --no-json"):
        assert both in r.stdout, both
    assert "--no-conflate" in r.stdout


def test_every_boolean_key_of_the_config_file_can_be_undone_on_the_command_line():
    from app.cli.common import Flag
    run = build_parser()._run_parser
    flags = {a.dest: a for a in run._actions if isinstance(a, Flag)}
    bools = [key for key, (dest, typ) in config.KEYS.items() if typ is bool]
    assert "isolate" in bools and "realtime" in bools
    for key in bools:
        assert config.KEYS[key][0] in flags, f"config key {key}: no --X/--no-X on engine run"


def _apply(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    return config.apply(args, parser._run_parser, argv)


def test_a_flag_on_the_command_line_wins_over_the_file_both_ways(tmp_path):
    """Every boolean key of the config file, set to the opposite of its default; each --X/--no-X
    on the command line (in any of the forms argparse takes: abbreviated too) wins."""
    f = tmp_path / "e.toml"
    f.write_text('isolate = true\nrealtime = false\nstrict = true\nduration = 60.0\n'
                 '[feed]\nmax = true\n[logs]\nkeep_rings = true\n')
    base = ["run", "--config", str(f)]
    a = _apply(base)  # the file's values
    assert (a.isolate, a.realtime, a.strict, a.max, a.keep_rings, a.duration) == (True, False, True, True, True, 60.0)
    a = _apply(base + ["--no-isolate", "--rt", "--no-strict", "--no-max", "--no-keep-rings", "--duration", "2"])
    assert (a.isolate, a.realtime, a.strict, a.max, a.keep_rings, a.duration) == (False, True, False, False, False, 2)
    a = _apply(base + ["--no-iso", "--dur=3"])  # argparse's abbreviations are given flags too
    assert (a.isolate, a.duration) == (False, 3)
    f.write_text("isolate = false\nrealtime = true\n")
    a = _apply(base + ["--isolate", "--no-rt"])
    assert (a.isolate, a.realtime) == (True, False)
    assert config.given_on_command_line(build_parser()._run_parser, base + ["--no-isolate"]) == {"config", "isolate"}


def test_the_sample_config_does_not_isolate():
    """ops/README tells users to try ops/engine.toml on any core: it must not move other tasks."""
    assert config.load(ROOT / "ops" / "engine.toml")["isolate"] is False


def test_no_isolate_beats_isolate_true_in_the_file(tmp_path, shm_name, default_model):
    """`engine run --config F --no-isolate` with isolate = true in F runs without isolating: the
    run reports no isolation and moved nothing."""
    f = tmp_path / "e.toml"
    f.write_text(f'name = "{shm_name}"\ncore = {strategy_core()}\nisolate = true\nduration = 1.0\n'
                 f'[control]\nhttp = "none"\npub = "none"\n'
                 f'[logs]\nhlog = "none"\nsignals_out = "{tmp_path / "s.sig"}"\n')
    r = subprocess.run(engine_cmd("run", "--config", str(f), "--no-isolate", "--json", "--no-doctor"), cwd=ROOT,
                       env=engine_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["isolation"] is None and res["ticks"] > 0, res
    assert "isolate:" not in r.stderr, r.stderr


@pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")
def test_make_run_passes_name_http_and_pub():
    """`make run NAME= HTTP= PUB=` (as CORE= and DURATION=): the command make would run, read by
    the engine's own parser; the environment's NAME (often the host's name) is not taken."""
    def planned(*assign, env=None):
        r = subprocess.run(["make", "-n", "run", *assign], cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**engine_env(), **(env or {})})
        assert r.returncode == 0, r.stderr
        line = [ln for ln in r.stdout.splitlines() if ln.startswith(".venv/bin/engine run ")][-1]
        return build_parser().parse_args(shlex.split(line.split("/engine ", 1)[1]))

    a = planned("CORE=1", "DURATION=", "NAME=mk2", "HTTP=127.0.0.1:9470", "PUB=none")
    assert (a.core, a.duration, a.name, a.http, a.pub) == (1, None, "mk2", "127.0.0.1:9470", "none")
    a = planned("CORE=1", env={"NAME": "somehost"})
    assert (a.duration, a.name, a.http, a.pub) == (10, "engine", "127.0.0.1:9464", "tcp://127.0.0.1:5556")
