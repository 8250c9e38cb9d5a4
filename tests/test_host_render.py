"""The host loop's generated header is rendered by the same checked templates as the C/HLS/RTL
(engine/render.py, engine/templates/host_*.tpl), byte for byte what it is pinned to.

The digests below are of the header for a fixed strategy description in each of its shapes (check
mode or not, the strategy's own decide or the default hysteresis; no, one or several parameters;
a UNIVERSE or not). They were first the string-built header's (before the templates); the
UNIVERSE's constants and call_on_tick changed them once, deliberately: a change here is a change
of every strategy's compiled host, to be made on purpose."""
import hashlib
import shutil
from types import SimpleNamespace

import pytest

from engine import strategy_build
from engine.strategy_build import _header, build_key

PINNED = {
    "check": "f98869bb5a994ced5e442b47731b87c7aa9a3757fdfd5021f6515ae725707d07",
    "check_decide": "e391ba3fd3a17978f518e87e0f906cc65b6dedb11a3f4cb0a9e888c8bb04c8dc",
    "check_targets": "76a865dba955e2a9b15317ea53a851deac617a0b9ae00b357840491c49f26e9e",
    "check_universe": "37589ee804bd4138b3a12141454f972665f547f8bba79520fdc50a542750ff48",
    "decide": "1ad5ff59a5a6a6bebd8c83454df006b084c25e38df3b7936ad8c6cb466d55e75",
    "plain": "e0ad094fde66f3b6f1bf9aaa1894da24023eef74e8a20193743d2eacda26dbe5",
    "targets": "0ffffa1d3ee56a77ee64b06e033cdd3a141652ec0e97e13bd5b0630df85bc2ae",
    "universe": "a6e7d33da6c780699c08dbc853603547e65cac0a5935cdec128565e5325c5e8a",
}
THRESHOLDS = ("enter_long", "exit_long", "enter_short", "exit_short")
CASES = {"plain": (False, False, THRESHOLDS), "decide": (False, True, ()),
         "check": (True, False, THRESHOLDS + ("cap",)), "check_decide": (True, True, ("cap",)),
         "universe": (False, True, ("cap",)), "check_universe": (True, False, THRESHOLDS),
         "targets": (False, True, ("cap",)), "check_targets": (True, True, ())}


def _strategy(decide, params, universe=(), targets=False):
    return SimpleNamespace(name="pin me", path="/srv/strategies/pin me.py", sha256="ab" * 32,
                           module_name="_engine_strategy_pin_me_abab", depth=3, state=5, features=("a", "b"),
                           param_names=params, has_decide=decide, universe=universe, shared=2 if universe else 0,
                           decide_targets=targets)


def _case(case):
    check, decide, params = CASES[case]
    universe = ("X:A", "Y:B") if "universe" in case or "targets" in case else ()
    return _header(_strategy(decide, params, universe, "targets" in case), check)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rendered_header_is_byte_identical(case):
    text = _case(case)
    assert hashlib.sha256(text.encode()).hexdigest() == PINNED[case], text


def test_the_header_compiles_and_binds_the_strategy():
    """What the templates fill in is Python that names the strategy's constants."""
    text = _header(_strategy(False, THRESHOLDS + ("cap",)), True)
    compile(text, "header", "exec")
    assert "DEPTH = 3\nSTATE = 5\nNFEAT = 2\n" in text and "return Params(p[0], p[1], p[2], p[3], p[4])" in text


def test_an_edited_header_template_gives_a_new_host_file(tmp_path, monkeypatch):
    """The host file's key covers its header's templates (numba's cache is keyed by file: an
    edited template must never load code compiled from the old one)."""
    from engine.strategy_load import load
    s = load("microstructure")
    before = build_key(s)
    d = tmp_path / "templates"
    shutil.copytree(strategy_build.TEMPLATES, d)
    monkeypatch.setattr(strategy_build, "TEMPLATES", d)
    assert build_key(s) == before
    t = d / "host_hysteresis.py.tpl"
    t.write_text(t.read_text().replace("inline='always'", "inline='never'"))
    assert build_key(s) != before
