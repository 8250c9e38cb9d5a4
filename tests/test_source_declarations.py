"""Each source kind is declared once (feeds/core/params.py): the typed value a URI parses to, the
URI written back, the commands' help and the reference page are all made from the declaration."""
import dataclasses
import inspect
import pathlib
import subprocess
import sys

import pytest

from feeds.core import params as P
from feeds.core.sources import SCHEMES, declaration, kinds, parse, source_class, unless_given
from feeds.core.uri import FeedError

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENGINE = [sys.executable, "-c", "from app.cli import main; main()"]


def test_every_scheme_has_a_declaration_and_a_reader_taking_its_value():
    for scheme in SCHEMES:
        kind = declaration(scheme)
        assert kind.scheme == scheme
        cls = source_class(f"{scheme}:x")
        assert list(inspect.signature(cls.__init__).parameters)[1:] == ["u", "v"], cls


def test_one_name_means_one_thing_in_every_source():
    """A parameter several kinds take is one declaration: same help, unit and type; a kind may
    take some of its choices only, or another default."""
    seen = {}
    for kind in kinds():
        for p in kind.params:
            first = seen.setdefault(p.name, (kind.scheme, p))[1]
            assert (p.help, p.unit, p.cast) == (first.help, first.unit, first.cast), (kind.scheme, p.name)
            assert set(p.choices) <= set(first.choices) or set(first.choices) <= set(p.choices), p.name


def test_the_rule_fails_when_one_name_means_two_things():
    a = P.Kind("a", "", "t", "s", (P.Param("depth", int, 1, "n", "levels"),), "a:")
    b = P.Kind("b", "", "t", "s", (P.Param("depth", int, 1, "n", "messages a batch"),), "b:")
    helps = {k.scheme: k.param("depth").help for k in (a, b)}
    assert len(set(helps.values())) == 2  # (what the rule above compares)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_uri_written_back_parses_to_the_same_value(scheme):
    kind = declaration(scheme)
    u, v, _ = parse(kind.example)
    for full in (False, True):
        again = kind.uri(v, full=full)
        assert parse(again)[1] == v, again
    changed = {p.name: o for p in kind.params if (o := _other(p)) is not None}  # every one off its default
    w = dataclasses.replace(v, **changed)
    assert parse(kind.uri(w))[1] == w, kind.uri(w)


def _other(p):
    """A value of p other than its default, where one is at hand."""
    for c in p.choices:
        if c != p.default:
            return c
    if isinstance(p.default, (int, float)):
        for text in (p.default + 1, p.default * 2, p.default / 2, 1):
            try:
                v = p.cast(str(text))
            except ValueError:
                continue
            if v != p.default:
                return v
    return None


@pytest.mark.parametrize("uri, said", [
    ("dbn:x.dbn?deepth=3", "dbn:x.dbn?deepth=3: unknown parameter 'deepth' (known: symbols, on_error, depth)"),
    ("binance-live://usdm?symbols=BTCUSDT&silence_s=nan", "silence_s='nan': must be a finite number > 0"),
    ("itch:x?depth=33", "depth='33': must be 0..32"),
    ("dbn-live://GLBX.MDP3?symbols=ESH4&schema=ohlcv", "schema must be one of mbo, mbp-10, mbp-1, tbbo, trades"),
    ("binance:x?book_ticker=off", "(off is binance-live's"),
    ("synthetic://?instruments=0", "instruments='0': must be an integer 1..65535"),
    ("moldudp64://h:1?on_error=skip", "unknown parameter 'on_error'"),
    ("dbn:", "dbn:: no file named (e.g. dbn:PATH)"),
])
def test_a_refused_uri_is_one_line_naming_it(uri, said):
    with pytest.raises(FeedError) as e:
        parse(uri)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_default_is_added_only_where_the_kind_declares_it_and_the_uri_is_silent():
    assert unless_given("dbn:x.dbn", depth=0) == "dbn:x.dbn?depth=0"
    assert unless_given("dbn:x.dbn?depth=5", depth=0) == "dbn:x.dbn?depth=5"
    assert unless_given("tickfile:x.ticks", depth=0, count=9) == "tickfile:x.ticks"
    assert unless_given("binance:x.gz", count=9) == "binance:x.gz"
    assert unless_given("synthetic://?seed=2", count=9, depth=3) == "synthetic://?seed=2&count=9&depth=3"


def test_the_reference_page_is_the_declarations():
    out = subprocess.run(ENGINE + ["sources", "--markdown"], capture_output=True, text=True, cwd=ROOT, check=True)
    page = (ROOT / "docs/reference/sources.md").read_text()
    assert page == out.stdout, "docs/reference/sources.md is stale: engine sources --markdown > docs/reference/sources.md"
    for kind in kinds():
        for p in kind.params:
            assert f"| `{p.name}` |" in page


def test_help_names_every_source_and_parameter():
    from app.cli.common import sources_help
    text = sources_help()
    for kind in kinds():
        assert kind.usage() in text
        for p in kind.params:
            assert p.name in text


def test_engine_sources_shows_one_kind_and_refuses_an_unknown_one():
    one = subprocess.run(ENGINE + ["sources", "dbn-live"], capture_output=True, text=True, cwd=ROOT)
    assert one.returncode == 0 and "connect_timeout_s" in one.stdout and "size_unit" not in one.stdout
    bad = subprocess.run(ENGINE + ["sources", "bybit"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and "'bybit'" in bad.stderr


def test_a_feed_tables_params_are_checked_by_the_declaration_and_written_into_its_uri(tmp_path):
    from app.config import ConfigError, load
    good = tmp_path / "good.toml"
    good.write_text('[[feed]]\nuri = "synthetic://?seed=3"\nparams = { instruments = 2, count = 5000 }\n'
                    '[[feed]]\nuri = "binance-live://usdm"\nparams = { symbols = ["BTCUSDT", "ETHUSDT"], depth = 4 }\n')
    uris = load(good)["feed"]
    assert uris == ["synthetic://?instruments=2&seed=3&count=5000", "binance-live://usdm?symbols=BTCUSDT,ETHUSDT&depth=4"]
    assert parse(uris[1])[1].symbols == ("BTCUSDT", "ETHUSDT")
    for body, said in [('uri = "dbn:x.dbn?depth=3"\nparams = { depth = 4 }', "depth is given both in the uri and in params"),
                       ('uri = "dbn:x.dbn"\nparams = { deepth = 4 }', "unknown parameter 'deepth'"),
                       ('uri = "dbn:x.dbn"\nparams = { symbols = [1, 2] }', "params.symbols must be a string")]:
        bad = tmp_path / "bad.toml"
        bad.write_text(f"[[feed]]\n{body}\n")
        with pytest.raises(ConfigError, match=said) as e:
            load(bad)
        assert str(bad) in str(e.value)


def test_engine_run_refuses_a_bad_feed_table_in_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[feed]\nuri = "synthetic://"\nparams = { rate = "fast" }\n')
    r = subprocess.run(ENGINE + ["run", "--config", str(bad), "--duration", "1"], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "rate='fast'" in r.stderr and str(bad) in r.stderr
