"""SCORE: a strategy says which score its decide reads (a probability or a regression's raw
margin), and a model whose score is the other kind is refused, naming both, wherever a model is
loaded for it (engine train, run, backtest, sweep, reload), as a model for another strategy is.

The ternary model is real: trained by `engine train --labels ternary` (a regression objective)."""
import json

import pytest

from engine.strategy_load import StrategyError, load

from tests.helpers.feedutil import cli, one_line_error
from tests.helpers.strategies import IMBALANCE, quotes_strategy

def source(score_line, params, center=0.5, decide=True):
    """Strategies with the same FEATURES: `score_line` (SCORE = ...) says which score decide reads;
    decide (when asked for) enters at params.enter and at as far below `center`."""
    return quotes_strategy(params, ("imb", "quotes"), head=score_line, row=IMBALANCE + "\nrow[1] = state[0]",
                           ready="state[0] >= params.warmup", decide=f"""
    if score >= params.enter:
        return 1
    if score <= {center!r} - (params.enter - {center!r}):
        return -1
    return position""" if decide else None)


def strategy(tmp_path, name, score, enter, center):
    f = tmp_path / f"{name}.py"
    f.write_text(source(f"SCORE = {score!r}" if score else "", {"warmup": 3.0, "enter": enter}, center))
    return f


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Strategies with the same FEATURES reading a probability (by default), a margin, or either;
    a ternary model trained for the margin one; the same model compiled for the probability one
    (`engine compile`: how a model reaches a strategy it was not trained for) and a tick file."""
    d = tmp_path_factory.mktemp("score")
    w = {"dir": d,
         "prob": strategy(d, "prob", None, 0.6, 0.5),
         "margin": strategy(d, "margin", "margin", 0.2, 0.0),
         "any": strategy(d, "anyscore", "any", 0.2, 0.0)}
    src = "synthetic://?instruments=2&count=40000&seed=4"
    r = cli("train", "--labels", "ternary", "--strategy", str(w["margin"]), src, "--trees", "5", "--backends", "flat",
            "--out", str(d / "ternary"))
    assert r.returncode == 0, r.stderr
    m = json.loads((d / "ternary" / "manifest.json").read_text())
    assert m["objective"] == "reg:squarederror" and m["training"]["labels"] == "ternary"
    r = cli("compile", str(d / "ternary" / "model.json"), "--strategy", str(w["any"]), "--backends", "flat",
            "--out", str(d / "ternary_for_any"))
    assert r.returncode == 0, r.stderr
    # `engine compile` refuses it for the probability strategy (below); a library caller can still
    # build one, as an artifact made elsewhere (or by an older engine) would be: every load refuses it
    _build_unchecked(d / "ternary" / "model.json", w["prob"], d / "ternary_for_prob")
    w["ticks"] = d / "s.ticks"
    assert cli("convert", src.replace("seed=4", "seed=5") + "&depth=0", "--out", str(w["ticks"])).returncode == 0
    return w


def _build_unchecked(model_json, strategy_file, out):
    import xgboost as xgb

    from engine.strategy_build import load_host
    from models import dataset
    from models.build import build_artifact
    from models.training import source_ticks
    host = load_host(str(strategy_file))
    b = xgb.Booster(model_file=str(model_json))
    words, k, levels, _ = source_ticks("synthetic://?instruments=4&seed=4242", 20_000, host.strategy)
    build_artifact(out, b, dataset.featurize(host, words, k, levels)[0], feature_names=b.feature_names,
                   backends=("flat",), strategy=host.strategy.identity())


def test_compiling_a_ternary_model_for_a_probability_strategy_is_refused(world, tmp_path):
    out = tmp_path / "c"
    err = one_line_error(cli("compile", str(world["dir"] / "ternary" / "model.json"), "--strategy",
                             str(world["prob"]), "--backends", "flat", "--out", str(out)))
    refusal(err, world, world["dir"] / "ternary" / "model.json")
    assert not out.exists()


def refusal(err, w, model):
    """One line naming the model, its objective, the strategy's file, and what each scores."""
    assert str(model) in err and "reg:squarederror" in err and str(w["prob"]) in err, err
    assert "scores a raw margin" in err and "expects a probability" in err and "SCORE" in err, err


def test_training_a_ternary_model_for_a_probability_strategy_is_refused_before_the_work(world, tmp_path):
    out = tmp_path / "m"
    err = one_line_error(cli("train", "--labels", "ternary", "--strategy", str(world["prob"]),
                             "synthetic://?count=20000", "--trees", "3", "--out", str(out)))
    assert str(world["prob"]) in err and "scores a raw margin" in err and "expects a probability" in err, err
    assert "--labels ternary" in err and not out.exists()


def test_a_ternary_model_is_refused_by_every_load_path(world, tmp_path, shm_name):
    model = world["dir"] / "ternary_for_prob"
    t, f = str(world["ticks"]), str(world["prob"])
    refusal(one_line_error(cli("backtest", t, "--strategy", f, "--model", str(model), "--out", str(tmp_path / "bt"))),
            world, model)
    refusal(one_line_error(cli("sweep", t, "--strategy", f, "--model", str(model), "--grid", "warmup=2|3",
                               "--out", str(tmp_path / "sw"))), world, model)
    r = cli("run", "--strategy", f, "--model", str(model), "--feed", f"tickfile:{t}", "--name", shm_name,
            "--duration", "2", "--http", "none", "--pub", "none")  # (ports other engines may hold)
    refusal(one_line_error(r), world, model)
    assert not (tmp_path / "bt").exists() and not (tmp_path / "sw").exists()
    # SIGHUP and `engine ctl reload` go through runner.load_model -> artifact.load, with the strategy
    from app.live import RunConfig, load_model
    from models.artifact import ArtifactError
    with pytest.raises(ArtifactError) as e:
        load_model(RunConfig(model=str(model)), load(f))
    refusal(str(e.value), world, model)


def test_the_same_model_drives_strategies_that_read_a_margin(world, tmp_path):
    """The refusal is about the score's kind: the ternary model backtests its own margin strategy,
    and an `any` strategy takes it too."""
    from models import artifact
    t = str(world["ticks"])
    r = cli("backtest", t, "--strategy", str(world["margin"]), "--model", str(world["dir"] / "ternary"),
            "--out", str(tmp_path / "bt"), "--json")
    assert r.returncode == 0, r.stderr
    pred = artifact.load(world["dir"] / "ternary_for_any", strategy=load(str(world["any"])))
    assert not artifact.uses_sigmoid(pred)


BAD_SCORE = {
    "unknown": ('SCORE = "odds"', "SCORE must be one of 'probability', 'margin', 'any'"),
    "any_without_decide": ('SCORE = "any"', "SCORE = 'any' needs a decide"),
    "margin_without_thresholds": ('SCORE = "margin"',
                                  "define enter_long, exit_long, enter_short, exit_short in PARAMS"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCORE))
def test_bad_score_declarations_are_one_line(tmp_path, case):
    line, what = BAD_SCORE[case]
    f = tmp_path / f"{case}.py"
    f.write_text(source(line, {"warmup": 3.0, "enter": 0.6}, decide=case == "unknown"))  # (else hysteresis decides)
    with pytest.raises(StrategyError, match="SCORE") as e:
        load(str(f))
    assert what in str(e.value) and str(f) in str(e.value)


def test_hysteresis_reads_a_margin_with_its_own_thresholds(tmp_path):
    f = tmp_path / "hyst_margin.py"
    f.write_text(source('SCORE = "margin"', {"warmup": 3.0, "enter_long": 0.3, "exit_long": 0.1, "enter_short": -0.3,
                                             "exit_short": -0.1}, decide=False))
    s = load(str(f))
    s.check_scale(False)  # a margin model: fine
    with pytest.raises(StrategyError, match="expects a raw margin"):
        s.check_scale(True)
