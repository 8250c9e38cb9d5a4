"""The host loop's generated header is rendered by the same checked templates as the C/HLS/RTL
(engine/render.py, engine/templates/host_*.tpl), byte for byte what the string-built header was.

The digests below are of the header the generator wrote before it moved into template files, for
a fixed strategy description in each of its four shapes (check mode or not, the strategy's own
decide or the default hysteresis; no, one or several parameters)."""
import hashlib
import shutil
from types import SimpleNamespace

import pytest

from engine import strategy_build
from engine.strategy_build import _header, build_key

PINNED = {
    "plain": "5e192a64243d13d2b29999a0eeec2f1e41b6bb87601dbd415c083f48b869037e",
    "decide": "61942eb087b79eba376af9b460a6891d98e843576350a3dd26d1fd5799e2ead7",
    "check": "7f4ceb27e722e3c3baeb94cc5867f836de37a6bf5463a1c4347bf4d233f440c4",
    "check_decide": "507b762e7b047cb4ff9e513f84e976381f9727f58933e335b7ab954b16eb7d7f",
}
THRESHOLDS = ("enter_long", "exit_long", "enter_short", "exit_short")
CASES = {"plain": (False, False, THRESHOLDS), "decide": (False, True, ()),
         "check": (True, False, THRESHOLDS + ("cap",)), "check_decide": (True, True, ("cap",))}


def _strategy(decide, params):
    return SimpleNamespace(name="pin me", path="/srv/strategies/pin me.py", sha256="ab" * 32,
                           module_name="_engine_strategy_pin_me_abab", depth=3, state=5, features=("a", "b"),
                           param_names=params, has_decide=decide)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rendered_header_is_byte_identical(case):
    check, decide, params = CASES[case]
    text = _header(_strategy(decide, params), check)
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
