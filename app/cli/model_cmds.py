"""Model commands: `engine train`, `engine compile`, `engine predict`, `engine model
default|inspect|keygen|sign` and the registry's `engine model register|list|show|promote|rollback`."""
import argparse
import json
import os
import sys
import time

from models.artifact import BACKEND_CHOICES

from .common import (SIGN_KEY_HELP, Flag, command, int_range, nonneg_float, npy_file, positive_float,
                     merge_arg, positive_int, strategy_args, strategy_host, subcommands, verify_key_arg)
from app.arg_types import finite_float


def cmd_model_keygen(a):
    from models.signing import keygen
    key_id, paths = keygen(a.out, a.name, use_hmac=a.hmac)
    if a.hmac:
        print(f"{paths[0]}: HMAC-SHA256 secret, key {key_id} (mode 0600). It both signs and verifies: give it as "
              f"--sign-key where models are built and as --verify-key / [model] verify_key where they run")
    else:
        print(f"{paths[0]}: ed25519 private key {key_id} (mode 0600): keep it on the build host; sign with "
              f"`engine train/compile --sign-key {paths[0]}` or `engine model sign DIR --key {paths[0]}`")
        print(f"{paths[1]}: its public key: configure it where models run (--verify-key, [model] verify_key, "
              "ENGINE_MODEL_VERIFY_KEY)")
    return 0


def cmd_model_sign(a):
    from models import signing
    key = signing.load_key(a.key, private=True)
    path, sha = signing.sign_directory(a.dir, key)
    print(f"{a.dir}: signed (sha256 {sha[:16]}...) with {key.describe()} -> {path}")
    return 0


def cmd_model_default(a):
    from models.default import default_model_dir
    print(default_model_dir())
    return 0


def _strategy_now(ident):
    """Does the strategy file the model was trained for still hold that strategy?"""
    if not isinstance(ident, dict):
        return "no strategy (generic)"
    from engine.strategy_load import StrategyError, load
    try:
        s = load(ident.get("file"))
    except StrategyError as e:
        return f"cannot load it now: {e}"
    return "unchanged" if s.sha256 == ident.get("sha256") else f"changed since (now sha256 {s.sha256[:12]}): refused"


def cmd_model_inspect(a):
    from models import artifact, signing
    m = artifact.read_manifest(a.dir, check_signature=a.verify)  # --verify: refused here, before any dlopen
    m["signature"] = artifact.signature_status(a.dir)
    if signing.signer(a.dir, artifact.MANIFEST):
        m["signed_by"] = signing.signer(a.dir, artifact.MANIFEST)
    if a.verify:
        artifact.load(a.dir)
        m["verified"] = True
        m["strategy_now"] = _strategy_now(m.get("strategy"))
    print(json.dumps(m, indent=2))
    return 0


def cmd_model_drift(a):
    """The drift of a tick source (or of a run, from the record its --drift left beside RUN.sig) from a
    model's training data."""
    from models import artifact, drift
    from models.registry import resolve_model
    if a.source.endswith(".sig"):
        return _run_drift(a)
    uri = _drift_source(a.source)
    if a.model:
        model_dir = resolve_model(a.model)
    else:
        from models.default import default_model_dir
        from engine.strategy_load import load
        model_dir = str(default_model_dir(load(a.strategy, {}, {})))
    man = artifact.read_manifest(model_dir)
    sk = drift.check(man, str(model_dir))
    t = drift.Tracker(sk, man["feature_names"])
    from models import dataset
    from models.training import input_streams
    host = strategy_host(a)
    pred = artifact.load(model_dir, backend=a.backend, strategy=host.strategy)
    # the rows engine train puts in the sketch: every row the strategy scores (models/drift.py)
    for where, words, k, levels, names, specs in input_streams([uri], a.ticks, host.strategy):
        X = dataset.featurize(host, words, k, levels, names, specs, where)[0]
        t.add(X, pred.predict_margin(X))
    feats, score = t.psi()
    out = {"source": a.source, "model": str(model_dir), "model_id": pred.model_id, "rows": t.rows,
           "features": feats, "score": score, "reference_rows": t.reference_rows}
    if drift.narrow(sk):
        print(f"engine: warning: {model_dir}: {drift.narrow(sk)}", file=sys.stderr)
    return _print_drift(a, out, f"{t.rows:,} rows the strategy scores")


def _drift_source(s):
    """SOURCE of `engine model drift`: a source URI, or a plain path naming a tick file."""
    from feeds.core.sources import as_uri
    from feeds.core.uri import FeedError
    try:
        return as_uri(s)
    except FeedError as e:
        raise ValueError(f"{e} (or a run's RUN.sig)") from None


def _run_drift(a):
    """A run's signal file: the record its --drift monitor left beside it (every row its live model
    scored; the signal file alone holds only the decisions that moved a target: a biased sample)."""
    from app.drift_monitor import read_record
    rec = read_record(a.source)
    model = f"model {rec['model_id']}"
    if a.model:  # (its counts were binned against that model's training bins: only that one compares)
        from models import artifact
        from models.registry import resolve_model
        model = resolve_model(a.model)
        mid = artifact.read_manifest(model)["files"].get("model.json", "")[:12]
        if mid != rec["model_id"]:
            raise ValueError(f"{a.source}: its run's drift was measured against model {rec['model_id']}, not {a.model} "
                             f"({mid}): give that model, or the run's recording (--record FILE.ticks) to compare "
                             "with this one")
    out = {"source": a.source, "model": str(model), "model_id": rec["model_id"], "rows": rec["rows"],
           "features": rec["features"], "score": rec["score"], "reference_rows": rec["reference_rows"],
           "gaps": rec.get("gaps", 0), "lost": rec.get("lost", 0)}
    lost = (f"; it fell a tap ring behind the loop {out['gaps']:,} times: {out['lost']:,} ticks never binned"
            if out["lost"] else "")
    return _print_drift(a, out, f"the {rec['rows']:,} rows the strategy scored under its live model (engine run "
                                f"--drift){lost}")


def _print_drift(a, out, what):
    from app.run_summary import drift_line
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{a.source} against the training data of {out['model']} ({out['reference_rows']:,} rows): {what}")
    print(drift_line({**out, "error": None}))
    for name, v in sorted(out["features"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<28} {v:8.4f}  {'shifted' if v > 0.25 else 'moved' if v > 0.1 else 'stable'}")
    return 0


def _backends(s):
    names = tuple(x.strip() for x in s.split(",") if x.strip())
    if not names or not set(names) <= {"treelite", "flat"}:
        raise argparse.ArgumentTypeError(f"a comma-separated list of treelite, flat; got {s!r}")
    return names


def cmd_train(a):
    for flag, v, ok in (("--trees", a.trees, a.trees >= 1), ("--depth", a.depth, 1 <= a.depth <= 16),
                        ("--eta", a.eta, a.eta > 0), ("--horizon", a.horizon, a.horizon > 0),
                        ("--ticks", a.ticks, a.ticks >= 1), ("--early-stopping", a.early_stopping, a.early_stopping >= 1)):
        if not ok:
            raise ValueError(f"{flag} {v}: must be {'1..16' if flag == '--depth' else '> 0'}")
    if a.recordings:
        return _retrain(a)
    for flag in ("since", "register", "promote", "incumbent"):
        if getattr(a, flag):
            raise ValueError(f"--{flag} goes with --recordings DIR (retraining on the recorder's daily files)")
    if not a.sources:
        raise ValueError("give SOURCE(s) to train on, or --recordings DIR --since 7d")
    from models.build import set_quiet
    set_quiet(a.quiet)
    m = _trainer(a)(a.sources, a.out, host=strategy_host(a), **_train_kw(a))
    print(json.dumps({"artifact": str(a.out), "trees": m["num_trees"], **m["training"]["test_metrics"]}))
    return 0


def _trainer(a):
    """run_train, or with --workers N / --scheduler ADDR its Dask twin (models/dask_train.py)."""
    if a.workers == 1 and not a.scheduler:
        from models.training import run_train
        return run_train
    if a.merge:
        raise ValueError("--merge reads the sources as one stream, which one process builds: not on a Dask cluster")
    from models.dask_train import run_train_dask
    from .common import overrides, universe

    def run(sources, out, merge=False, **kw):
        return run_train_dask(sources, out, strategy=a.strategy, params=overrides(a), universe=universe(a),
                              workers=a.workers, scheduler=a.scheduler, **kw)
    return run


def _train_kw(a):
    return dict(trees=a.trees, depth=a.depth, eta=a.eta, horizon=a.horizon, unit=a.horizon_unit, labels=a.labels,
                dead_band_bps=a.dead_band, objective=a.objective, early_stopping=a.early_stopping, ticks=a.ticks,
                backends=a.backends, seed=a.seed, merge=a.merge)


def _retrain(a):
    """engine train --recordings DIR --since 7d [--register NAME [--promote]]: replay/retrain.py."""
    import dataclasses

    from replay import retrain
    from .common import overrides, universe
    from app.exec_options import paper_exec
    if a.sources:
        raise ValueError("give SOURCE(s) or --recordings DIR, not both")
    days = retrain.day_files(a.recordings, retrain.parse_since(a.since or "7d"))
    train_days, held = retrain.split_days(list(days), a.holdout_days)
    train_files = [f for d in train_days for f in days[d]]
    held_files = [f for d in held for f in days[d]]
    reg = incumbent = None
    if a.register:
        from models.registry import Registry, RegistryError, check_name
        check_name(a.register)
        reg = Registry(a.registry, create=True)
        try:
            incumbent = str(reg.object_dir(reg.version(a.register)[1]["id"]))  # (the promoted one, else the latest)
        except RegistryError:
            incumbent = None  # (a new name: its first version)
    if a.incumbent:
        from models.registry import resolve_model
        incumbent = resolve_model(a.incumbent)
    print(f"[train] {len(train_files)} file(s) of {len(train_days)} day(s) to train on ({train_days[0]} .. "
          f"{train_days[-1]}), {len(held_files)} of {len(held)} held out for the gate ({', '.join(held)})",
          file=sys.stderr, flush=True)
    host = strategy_host(a)
    m = _trainer(a)([f"tickfile:{f}" for f in train_files], a.out, host=host, **_train_kw(a),
                  info_extra={"recordings": os.path.abspath(a.recordings), "days": train_days, "held_out_days": held,
                              "data": retrain.identity(train_files)})
    p = dataclasses.replace(paper_exec(a.gate_exec, "--gate-exec"), strategy=a.strategy, params=overrides(a), universe=universe(a))
    g = retrain.gate(a.out, incumbent, held_files, p, a.gate_metric, a.gate_margin)
    print(f"[train] gate: {g['why']}", file=sys.stderr, flush=True)
    out = {"artifact": str(a.out), "trees": m["num_trees"], **m["training"]["test_metrics"], "gate": g,
           "registered": None, "promoted": False}
    if g["passed"] and reg is not None:
        rec, _ = reg.register(a.out, a.register, note=f"retrained on {train_days[0]}..{train_days[-1]}", gate=g)
        out["registered"] = f"{a.register}@{rec['version']}"
        if a.promote:
            reg.promote(out["registered"])
            out["promoted"] = True
    print(json.dumps(out))
    if not g["passed"]:
        print(f"engine: gate refused the candidate ({g['why']}): not registered; it stays in {a.out}", file=sys.stderr)
        return 3
    return 0


def cmd_compile(a):
    from models.training import run_compile
    m = run_compile(a.model, a.out, host=None if a.generic else strategy_host(a), generic=a.generic, backends=a.backends)
    print(json.dumps({"artifact": str(a.out), "trees": m["num_trees"], "generic": m["generic"],
                      "backends": m["validation"]["checked_backends"]}))
    return 0


def cmd_predict(a):
    from models.training import predict_file
    if a.backend == "fpga-sim":
        import fpga.backend  # noqa: F401  (registers backend="fpga-sim" with models.artifact)
    used, n = predict_file(a.dir, a.backend, a.input, a.output, a.margin)
    print(f"{n} rows through {used} -> {a.output} ({'margins' if a.margin else 'scores'})", file=sys.stderr)
    return 0


def add_parsers(sub):
    _add_model(sub)
    _add_train(sub)
    _add_compile(sub)
    _add_predict(sub)


def _add_model(sub):
    """`engine model default|inspect|keygen|sign|register|list|show|promote|rollback`."""
    m = command(sub, "model", None, help="model tools")
    ms = subcommands(m, "model_cmd")
    command(ms, "default", cmd_model_default, help="build (if needed) the default model and print its directory")
    mi = command(ms, "inspect", cmd_model_inspect, help="print an artifact's manifest")
    mi.add_argument("dir")
    mi.add_argument("--verify", action=Flag, help="also verify the signature (with a verify key), "
                    "hashes and bit-exactness")
    verify_key_arg(mi)
    dr = command(ms, "drift", cmd_model_drift,
                 help="how far a tick source's features and scores are from a model's training data",
                 description="Population stability (PSI; below 0.1 stable, 0.1-0.25 moved, above 0.25 shifted) of "
                             "each feature and of the model's score (margin) over SOURCE against the deciles "
                             "kept in the model's manifest of every row the strategy scores in its training "
                             "data: SOURCE a tick file (a path, or tickfile:FILE) or feed URI (as engine train "
                             "reads), or a run's signal file (RUN.sig: the whole run's figures its engine run "
                             "--drift wrote beside it, RUN.sig.drift.json). Every row the strategy scores is "
                             "binned, as engine run --drift does live, so the training data gives 0.")
    dr.add_argument("source", metavar="SOURCE", help="a tick file, a source URI, or a run's signal file (.sig)")
    dr.add_argument("--model", default=None, help="model artifact directory, or registry:NAME[@VERSION] (default: "
                                                  "the strategy's default model; for RUN.sig, the run's own, which "
                                                  "--model can only confirm)")
    dr.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help="model back end")
    dr.add_argument("--ticks", type=positive_int, default=400_000, help="ticks from a synthetic source (default "
                                                                       "%(default)s)")
    strategy_args(dr)
    dr.add_argument("--json", action=Flag, help="one JSON object")
    verify_key_arg(dr)
    mk = command(ms, "keygen", cmd_model_keygen,
                 help="make a signing key: ed25519 NAME.key (0600) + NAME.pub, or --hmac",
                 description="Write a new ed25519 key pair into DIR: NAME.key (private, mode 0600; signs on "
                             "the build host) and NAME.pub (public; engine hosts verify with it). --hmac: one "
                             "HMAC-SHA256 secret NAME.hmac (0600) that both signs and verifies. Never "
                             "overwrites a key.")
    mk.add_argument("--out", required=True, metavar="DIR", help="directory to write the key files into")
    mk.add_argument("--name", default="model", help="file name stem (default model)")
    mk.add_argument("--hmac", action=Flag, help="an HMAC-SHA256 secret instead of an ed25519 pair")
    msg = command(ms, "sign", cmd_model_sign, help="sign an artifact's manifest (or an FPGA directory's fpga.json)",
                  description="Check every file of DIR against its manifest, then sign the manifest's exact "
                              "bytes (which hold every file's sha256) with --key, writing DIR/manifest.sig "
                              "(fpga.sig for an FPGA directory). Engines with a verify key refuse anything "
                              "not signed by it.")
    msg.add_argument("dir", help="model artifact directory, or an FPGA directory")
    msg.add_argument("--key", required=True, metavar="PRIVATE_KEY", help="ed25519 private key or HMAC secret (0600)")
    _add_registry(ms)


def _registry(a, create=False):
    from models.registry import Registry
    return Registry(a.registry, create=create)


def _version_line(name, rec, live=None):
    m = rec.get("metrics") or {}
    return (f"{name}@{rec['version']}{'  (live)' if live == rec['version'] else ''}  {rec['id'][:12]}  model "
            f"{rec.get('model_id')}  {rec.get('num_trees')} trees  {rec.get('objective')}  "
            + (f"test auc {m['test_auc']:.4f}  " if isinstance(m.get("test_auc"), float) else "")
            + time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(rec["registered_unix"])) + " UTC")


def cmd_model_register(a):
    reg = _registry(a, create=True)
    rec, new = reg.register(a.dir, a.name, note=a.note)
    print(("registered " if new else "already registered as ") + _version_line(a.name, rec))
    if a.promote:
        cmd_model_promote(argparse.Namespace(ref=f"{a.name}@{rec['version']}", registry=a.registry))
    return 0


def cmd_model_list(a):
    from models.registry import promoted
    reg = _registry(a)
    names = [a.name] if a.name else reg.names()
    if a.json:
        print(json.dumps({n: reg.entry(n) for n in names}, indent=1))
        return 0
    if not names:
        print(f"no models registered in {reg.root}")
    for n in names:
        e = reg.entry(n)
        live = (promoted(e) or [None])[-1]
        if a.name:
            for rec in e["versions"]:
                print(_version_line(n, rec, live))
        else:
            print(f"{n}: {len(e['versions'])} version(s), live: {live or 'none'}")
    return 0


def cmd_model_show(a):
    from models.registry import promoted
    reg = _registry(a)
    name, rec = reg.version(a.ref)
    e = reg.entry(name)
    out = dict(rec, name=name, path=str(reg.object_dir(rec["id"])), live=(promoted(e) or [None])[-1] == rec["version"],
               promotions=[p for p in e.get("promotions", []) if p["version"] == rec["version"]])
    print(json.dumps(out, indent=1))
    return 0


def cmd_model_promote(a):
    reg = _registry(a)
    name, rec = reg.promote(a.ref)
    print(f"promoted {_version_line(name, rec)}: {reg.live(name)} -> it (an engine run with --model "
          f"registry:{name} reloads it between two ticks)")
    return 0


def cmd_model_rollback(a):
    reg = _registry(a)
    name, rec = reg.rollback(a.ref)
    print(f"rolled back: {_version_line(name, rec)} is live again")
    return 0


def _add_registry(ms):
    """`engine model register|list|show|promote|rollback` (models/registry.py)."""
    def where(p):
        p.add_argument("--registry", metavar="DIR", default=None,
                       help="the registry (default: ENGINE_REGISTRY, else the state directory's registry)")
    r = command(ms, "register", cmd_model_register,
                help="copy a verified artifact into the registry as NAME's next version",
                description="Verify DIR (hashes, signature with a verify key, bit-exactness with XGBoost), then "
                            "copy it read-only into the registry, content-addressed (the sha256 of its manifest, "
                            "which lists every file's sha256), as NAME's next version, with its training data "
                            "and test metrics from the manifest. The same bytes again are the version they are.")
    r.add_argument("dir", help="model artifact directory (engine train --out)")
    r.add_argument("--name", required=True, help="the model's name in the registry")
    r.add_argument("--note", default=None, help="a line kept with the version (why it was trained)")
    r.add_argument("--promote", action=Flag, help="and make it the live version")
    verify_key_arg(r)  # (with a key: only what it signed is registered)
    where(r)
    ls = command(ms, "list", cmd_model_list, help="the registry's models, or one model's versions")
    ls.add_argument("name", nargs="?", default=None)
    ls.add_argument("--json", action=Flag, help="the registry entries as JSON")
    where(ls)
    sh = command(ms, "show", cmd_model_show, help="one version's record: NAME (the live one) or NAME@VERSION")
    sh.add_argument("ref", metavar="NAME[@VERSION]")
    where(sh)
    pr = command(ms, "promote", cmd_model_promote,
                 help="make NAME@VERSION live: what engine run --model registry:NAME loads",
                 description="Flip NAME's live link to VERSION atomically and record the promotion. An engine "
                             "running --model registry:NAME sees the link move and reloads: the verified hot "
                             "swap, adopted between two ticks.")
    pr.add_argument("ref", metavar="NAME@VERSION")
    where(pr)
    rb = command(ms, "rollback", cmd_model_rollback,
                 help="make live again the version live before the last promotion (or NAME@VERSION: "
                                  "that earlier live version)")
    rb.add_argument("ref", metavar="NAME[@VERSION]")
    where(rb)


def _add_train(sub):
    """`engine train SOURCE... --out DIR`."""
    t = command(sub, "train", cmd_train, help="train and compile a model for a strategy from tick sources",
                description="Build a data set from SOURCE(s) with the strategy's own code (the rows `engine "
                            "features` writes), label it from future mid moves, split by time (train/validation/"
                            "test with an embargo), train XGBoost with early stopping, print test metrics, and "
                            "write a verified artifact that records the strategy it was trained for. ", sources=True)
    t.headings("what to train on", "the model", "what it writes", "where it runs")
    t.add_argument("sources", nargs="*", metavar="SOURCE", help="e.g. synthetic://?instruments=4&seed=7 (or "
                                                                "--recordings)")
    strategy_args(t, group="what to train on")
    merge_arg(t)
    t.add_argument("--out", required=True, metavar="DIR", help="artifact directory to write", group="what it writes")
    t.add_argument("--trees", type=positive_int, default=200, help="maximum trees (default 200)", group="the model")
    t.add_argument("--quiet", action=Flag, help="no progress lines (warnings, errors and the result still print)")
    t.add_argument("--depth", type=int_range(1, 16), default=6, help="tree depth (default 6)")
    t.add_argument("--eta", type=positive_float, default=0.1, help="learning rate (default 0.1)")
    t.add_argument("--horizon", type=positive_float, default=20, help="label horizon (default 20)", group="the model")
    t.add_argument("--horizon-unit", choices=("ticks", "ms"), default="ticks", group="the model",
                   brief="the horizon's unit: scored ticks or exchange ms",
                   help="horizon in the instrument's scored ticks or in exchange-time milliseconds")
    t.add_argument("--labels", choices=("binary", "ternary"), default="binary", group="the model",
                   help="binary: up/down (flat dropped); ternary: +1/0/-1 with --dead-band")
    t.add_argument("--dead-band", type=nonneg_float, default=0.5,
                   help="ternary: |move| in bps counted as flat (default 0.5)")
    t.add_argument("--objective", choices=("binary:logistic", "reg:squarederror"), default=None,
                   help="default: binary:logistic for binary labels, reg:squarederror for ternary")
    t.add_argument("--early-stopping", type=positive_int, default=20,
                   help="rounds without improvement before stopping")
    t.add_argument("--ticks", type=positive_int, default=400_000,
                   help="ticks per synthetic source without count= (default 400000)")
    t.add_argument("--backends", type=_backends, default=("treelite", "flat"), help="back ends to build (default treelite,flat)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--sign-key", default=None, metavar="PRIVATE_KEY", help=SIGN_KEY_HELP)
    t.add_argument("--workers", type=positive_int, default=1, metavar="N", group="where it runs",
                   brief="build and train on a Dask LocalCluster of N",
                   help="build the data set (a source per task) and train on a Dask LocalCluster of N processes "
                        "(XGBoost's Dask interface; default 1: this process)")
    t.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="the same on an existing Dask cluster (tcp://HOST:PORT): its workers need this engine installed")
    r = t.add_argument_group("retraining on recordings (engine record's daily files; README \"Retraining\")")
    r.add_argument("--recordings", default=None, metavar="DIR",
                   help="train on the daily tick files under DIR (DIR/<label>/DAY.ticks) instead of SOURCEs")
    r.add_argument("--since", default=None, metavar="AGE", help="the complete UTC days within AGE of now, today's "
                   "(still being recorded) left out: 7d, 36h, 2w (default 7d: the 7 days before today)")
    r.add_argument("--holdout-days", type=positive_int, default=1,
                   help="the last N days are held out for the gate (default 1)")
    r.add_argument("--register", default=None, metavar="NAME",
                   help="register the candidate as NAME's next version if it passes the gate; NAME's live version "
                        "(else its latest) is the incumbent it must beat")
    r.add_argument("--registry", default=None, help="the registry (default $ENGINE_REGISTRY, else the state "
                                                    "directory's)")
    r.add_argument("--promote", action=Flag, help="with --register: promote it too (a running engine on "
                                                  "registry:NAME swaps to it)")
    r.add_argument("--incumbent", default=None, metavar="MODEL", help="the model to beat (default: NAME's in the "
                                                                     "registry; none: the gate passes)")
    r.add_argument("--gate-metric", default="pnl", choices=("pnl", "pnl_gross", "sharpe"),
                   help="what the candidate must beat the incumbent on, in the backtest of the held-out days "
                        "(default pnl: net)")
    r.add_argument("--gate-margin", type=finite_float, default=0.0, metavar="X",
                   help="by more than this (the metric's unit; default 0)")
    r.add_argument("--gate-exec", default="", metavar="'FLAGS'",
                   help="the gate's backtest execution, in engine backtest's flags (e.g. '--latency-us 200 --fee-bps "
                        "4'; default its defaults)")
    t.show("what to train on", {"--recordings": "engine record's daily files under DIR, not SOURCEs"})
    t.show("what it writes", {"--register": "register it as NAME's next version if it beats NAME's"})


def _add_compile(sub):
    """`engine compile MODEL --out DIR`."""
    c = command(sub, "compile", cmd_compile, help="compile an XGBoost model trained elsewhere into an artifact")
    c.add_argument("model", help="XGBoost model (.json or .ubj)")
    c.add_argument("--out", required=True, help="artifact directory to write")
    c.add_argument("--generic", action=Flag,
                   help="no strategy: usable for predict and benchmarks, refused by `engine run`")
    c.add_argument("--backends", type=_backends, default=("treelite", "flat"), help="back ends to build")
    strategy_args(c)
    c.add_argument("--sign-key", default=None, metavar="PRIVATE_KEY", help=SIGN_KEY_HELP)


def _add_predict(sub):
    """`engine predict DIR --input X.npy --output Y.npy`."""
    pr = command(sub, "predict", cmd_predict, help="score float32 rows from a .npy file through one back end")
    pr.add_argument("dir", help="model artifact directory")
    pr.add_argument("--backend", default="auto", choices=BACKEND_CHOICES,
                    help="auto = the fastest bit-exact back end here; xgboost = the reference")
    pr.add_argument("--input", required=True, type=npy_file, help="float32 rows [n, features], NaN = missing (.npy)")
    pr.add_argument("--output", required=True, help="float32 results (.npy), written atomically")
    pr.add_argument("--margin", action=Flag, help="raw margins instead of probabilities")
    verify_key_arg(pr)
