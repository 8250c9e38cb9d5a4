"""The model registry (models/registry.py) against MLflow's model registry, on the same artifacts:
copies of the default model (every file of it), each with one manifest key changed so that each is
a new version, signed with an ed25519 key made for the run (its public key configured: verified).

Each operation N times (20; --quick 5), p50 and max in ms, both sides in the same run:
  register  ours: Registry.register, as `engine model register` calls it (the manifest's signature
            checked, every file's sha256, a load bit-exact with XGBoost's margins on the validation
            rows, then the files copied read-only under the manifest's sha256 and the name's record
            written); also with verify=False (the same without the bit-exact load; other copies,
            another name). MLflow: a run with the directory logged as its artifact (create_run +
            log_artifacts + set_terminated) and create_model_version from it (what register_model
            does; the registered model made once before)
  promote   ours: Registry.promote (the live symlink flipped, the promotion recorded). MLflow:
            set_registered_model_alias(NAME, "live", VERSION)
  rollback  ours: Registry.rollback(NAME) (the version live before, from the recorded promotions).
            MLflow: set_registered_model_alias back to the version the caller read before promoting
            (MLflow keeps no history of an alias)
  resolve   a path to load, what `engine run --model registry:NAME` needs: ours resolve_model (the
            live link). MLflow: download_artifacts("models:/NAME@live") into a new directory (every
            file copied), and, without the copy, the alias looked up + the version's run's artifact
            directory (get_run: a directory inside MLflow's artifact root, its layout)
  watch     what a running engine does every watch to follow a promotion: ours os.path.realpath of
            the live link (app/daemon.py); MLflow get_model_version_by_alias (a query)
Once: the import in a new process (5 of each: `import models.registry` in this interpreter, `import
mlflow` in MLflow's); a new process's first resolve (import, open the store, resolve); MLflow's first
use of a new store (its tables made); the load the engine does after resolving, on either side
(artifact.load: hashes, signature, every back end bit-exact), on our object and on MLflow's copy;
one digit of the live version's model.json changed inside each store: whether resolving and loading
serves it. And MLflow's install: packages and bytes of the dependency closures of mlflow,
mlflow-skinny, and mlflow-skinny + SQLAlchemy + alembic (the least that runs its registry on
sqlite; mlflow-skinny alone refuses a sqlite:// registry), from the files its interpreter has.
MLflow runs in its own interpreter (--mlflow-python, else /tmp/mlf/bin/python, else this one if it
imports mlflow) with a sqlite store (tracking and registry) and a local artifact root, no server;
without one its side is skipped, with the reason.
"""
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NAME = "bench"
FRESH = 5  # new processes for the import and first-resolve figures


def _pc():
    return time.perf_counter()


def _stats(xs):
    """seconds -> {p50_ms, max_ms, n}"""
    return {"p50_ms": round(statistics.median(xs) * 1e3, 4), "max_ms": round(max(xs) * 1e3, 4), "n": len(xs)}


def _sha(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def _change_a_digit(path):
    """One digit in the second half of the file, changed: still valid JSON, other bytes."""
    p = Path(path)
    data = bytearray(p.read_bytes())
    i = next(i for i in range(len(data) // 2, len(data)) if 48 <= data[i] <= 57)
    data[i] = 48 + (data[i] - 48 + 1) % 10
    p.write_bytes(bytes(data))


def _fresh(python, code, env=None, cwd=None):
    """Seconds a new process reports for `code` (it prints them), FRESH times."""
    out = []
    for _ in range(FRESH):
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
        if r.returncode:
            raise RuntimeError(f"{python} -c ...: {r.stderr.strip()[-800:]}")
        out.append(float(r.stdout.strip().splitlines()[-1]))
    return out


# ---- MLflow's side: runs in MLflow's interpreter (this file with --mlflow-peer CFG) -----------------

def _closure(roots):
    """Installed distributions reachable from roots by their requirements (no extras)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    seen, todo = {}, list(roots)
    while todo:
        n = canonicalize_name(todo.pop())
        if n in seen:
            continue
        try:
            d = metadata.distribution(n)
        except metadata.PackageNotFoundError:
            seen[n] = None
            continue
        seen[n] = d
        for r in d.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    size = 0
    for d in filter(None, seen.values()):
        for f in d.files or []:
            p = Path(d.locate_file(f))
            if p.is_file():
                size += p.stat().st_size
    return {"packages": sum(1 for d in seen.values() if d), "mb": round(size / 1e6, 1),
            "missing": sorted(n for n, d in seen.items() if d is None)}


def mlflow_peer(cfg_path):
    """MLflow's side (in MLflow's interpreter): its install, its store, every operation timed, a
    changed digit in its artifact root, new processes' import and first resolve; one JSON line."""
    cfg = json.loads(Path(cfg_path).read_text())
    out = {"install": {k: _closure(v) for k, v in (("mlflow", ["mlflow"]), ("mlflow-skinny", ["mlflow-skinny"]),
                                                   ("skinny+sqlalchemy+alembic",
                                                    ["mlflow-skinny", "sqlalchemy", "alembic"]))}}
    t0 = _pc()
    import mlflow
    from mlflow import MlflowClient
    out["import_in_run_s"] = _pc() - t0
    out["version"] = mlflow.__version__
    work = Path(cfg["dir"])
    uri = f"sqlite:///{work / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)  # (download_artifacts("models:/...") reads the registry set here)
    mlflow.set_registry_uri(uri)
    t0 = _pc()
    c = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = c.create_experiment("engine-bench", artifact_location=(work / "artifacts").as_uri())
    c.create_registered_model(NAME)
    out["store_init_s"] = _pc() - t0
    ref = f"models:/{NAME}@live"
    out.update(_mlflow_operations(mlflow, c, exp, uri, ref, work, cfg["copies"]))
    out["changed"] = _mlflow_changed(mlflow, c, uri, ref, work)
    # a new process's first resolve: import, open the store, download the live version
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri, MLFLOW_REGISTRY_URI=uri)
    out["fresh_import_s"] = _fresh(sys.executable, "import time; t = time.perf_counter(); import mlflow; "
                                   "print(time.perf_counter() - t)", env)
    code = ("import time, tempfile; t = time.perf_counter(); import mlflow.artifacts; "
            f"mlflow.artifacts.download_artifacts({ref!r}, dst_path=tempfile.mkdtemp(dir={str(work)!r})); "
            "print(time.perf_counter() - t)")
    out["fresh_resolve_s"] = _fresh(sys.executable, code, env)
    print(json.dumps(out))


def _log_register(c, exp, d):
    """A run with directory d logged as its artifact and a model version from it: (version, the
    time the version's creation started)."""
    run = c.create_run(exp)
    c.log_artifacts(run.info.run_id, d, "model")
    c.set_terminated(run.info.run_id)
    t1 = _pc()
    mv = c.create_model_version(NAME, f"runs:/{run.info.run_id}/model", run.info.run_id)
    return mv, t1


def _stored_dir(c, mv):
    """A version's files inside MLflow's artifact root (its source is runs:/ID/model: the run's
    artifact directory, file:// here)."""
    from urllib.parse import urlparse
    return urlparse(c.get_run(mv.run_id).info.artifact_uri).path + "/model"


def _mlflow_operations(mlflow, c, exp, uri, ref, work, copies):
    """Register, promote, resolve (with and without the copy), watch and roll back each copy but
    the first (live before the clock: the first rollback's target): their times, the last
    download and an artifact directory resolved without the copy."""
    mv, _ = _log_register(c, exp, copies[0])
    c.set_registered_model_alias(NAME, "live", mv.version)
    t = {k: [] for k in ("log", "version", "register", "promote", "rollback", "resolve", "resolve_nocopy", "watch")}
    last = None
    for i, d in enumerate(copies[1:]):
        t0 = _pc()
        mv, t1 = _log_register(c, exp, d)
        t2 = _pc()
        t["log"].append(t1 - t0)
        t["version"].append(t2 - t1)
        t["register"].append(t2 - t0)
        prev = c.get_model_version_by_alias(NAME, "live").version  # (the caller's memory, for its rollback)
        t0 = _pc()
        c.set_registered_model_alias(NAME, "live", mv.version)
        t["promote"].append(_pc() - t0)
        dst = work / f"download-{i}"
        t0 = _pc()
        p = mlflow.artifacts.download_artifacts(ref, dst_path=str(dst), tracking_uri=uri, registry_uri=uri)
        t["resolve"].append(_pc() - t0)
        assert _sha(Path(p) / "manifest.json") == _sha(Path(d) / "manifest.json"), "download: not the promoted version"
        t0 = _pc()
        local = _stored_dir(c, c.get_model_version_by_alias(NAME, "live"))
        t["resolve_nocopy"].append(_pc() - t0)
        t0 = _pc()
        c.get_model_version_by_alias(NAME, "live").version
        t["watch"].append(_pc() - t0)
        t0 = _pc()
        c.set_registered_model_alias(NAME, "live", prev)
        t["rollback"].append(_pc() - t0)
        if last:
            shutil.rmtree(last, ignore_errors=True)
        last = p
    return {"times": {k: _stats(v) for k, v in t.items()}, "clean_download": last, "download_uri_example": local}


def _mlflow_changed(mlflow, c, uri, ref, work):
    """One digit of the live version's model.json changed inside MLflow's artifact root: whether a
    download serves it, where, or what MLflow said."""
    stored = Path(_stored_dir(c, c.get_model_version_by_alias(NAME, "live")))
    want = _sha(stored / "model.json")
    _change_a_digit(stored / "model.json")
    try:
        p = mlflow.artifacts.download_artifacts(ref, dst_path=str(work / "download-changed"), tracking_uri=uri,
                                                registry_uri=uri)
        return {"served": _sha(Path(p) / "model.json") != want, "path": p, "error": None}
    except Exception as e:  # (what MLflow says, if it says anything)
        return {"served": False, "path": None, "error": f"{type(e).__name__}: {e}"[:300]}


# ---- ours, and the comparison ----------------------------------------------------------------------

def _mlflow_python(a):
    if a.mlflow_python:
        cands = [a.mlflow_python]
    else:
        cands = ["/tmp/mlf/bin/python", sys.executable]
    for py in cands:
        if not os.access(py, os.X_OK):
            continue
        r = subprocess.run([py, "-c", "import mlflow"], capture_output=True, text=True)
        if r.returncode == 0:
            return py, None
    why = (f"{a.mlflow_python}: cannot import mlflow" if a.mlflow_python else
           "no interpreter with mlflow (/tmp/mlf/bin/python absent or without it, and not in this one); "
           "python3 -m venv /tmp/mlf && /tmp/mlf/bin/pip install mlflow")
    return None, why


def _rmtree(p):
    for root, _dirs, _files in os.walk(p):  # (registry objects are read-only)
        os.chmod(root, 0o700)
    shutil.rmtree(p, ignore_errors=True)


def _fmt(ms):
    if ms is None:
        return "-"
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 1 else f"{ms:.3f}"


def _x(r):
    return "-" if r is None else f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def main():
    import _common

    def extra(p):
        p.add_argument("--mlflow-python", metavar="PYTHON", help="an interpreter with mlflow (default: "
                       "/tmp/mlf/bin/python, else this one)")
        p.add_argument("--reps", type=int, help="versions registered on each side (default 20; --quick 5)")
    a = _common.args(__doc__.split("\n")[0], extra)
    reps = a.reps or (5 if a.quick else 20)

    from models.default import default_model_dir

    src = Path(default_model_dir())
    work = Path(tempfile.mkdtemp(prefix="registry-peer-"))
    try:
        copies = _signed_copies(src, work, reps)
        size_mb = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 1e6
        nfiles = sum(1 for p in src.rglob("*") if p.is_file())
        load0 = os.getloadavg()[0]
        print(f"artifact: {src} ({nfiles} files, {size_mb:.1f} MB), {reps} versions a side; load average "
              f"{load0:.1f}", file=sys.stderr, flush=True)
        ours, live, ours_fresh_import, ours_fresh_resolve = _ours(work, copies, reps)
        peer, why = _mlflow(a, work, copies, reps)
        ours_changed = _changed_ours(live)  # (after MLflow read the copies)
        ratios = _print_operations(ours, peer, reps, nfiles, size_mb)
        print(f"  load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} now (the machine is shared)")
        print(f"  the load after resolving (artifact.load, either side: signature, sha256 of every file, every back "
              f"end bit-exact): {_fmt(ours['load']['p50_ms'])} ms p50 of 3")

        fi, fr = _stats(ours_fresh_import), _stats(ours_fresh_resolve)
        print(f"\na new process ({FRESH} each, ms p50 / max):")
        print(f"  import models.registry {_fmt(fi['p50_ms'])} / {_fmt(fi['max_ms'])}; first resolve (import + "
              f"resolve_model) {_fmt(fr['p50_ms'])} / {_fmt(fr['max_ms'])}")
        notes = {"ours_verifies": "register: manifest signature (verify key), sha256 of every file, bit-exact load; "
                                  "every load (run, reload): the same again",
                 "ours_changed_digit": ours_changed}
        metrics = {"reps": reps, "load_average_start": round(load0, 2),
                   "load_average_end": round(os.getloadavg()[0], 2), "artifact_files": nfiles,
                   "artifact_mb": round(size_mb, 2), "ours": ours, "ours_fresh_import": fi, "ours_fresh_resolve": fr}
        peers = {}
        if peer:
            peers = _print_peer(peer, fi, fr, ratios, notes, ours_changed)
        else:
            print(f"\nMLflow: skipped: {why}")
            notes["mlflow"] = f"skipped: {why}"
        _common.save("registry_peer", metrics, peers, ratios, notes)
    finally:
        _rmtree(work)


def _signed_copies(src, work, reps):
    """2 * reps + 1 copies of the artifact src under work, each with one manifest key changed (a new
    version) and signed with a key made for the run, whose public key this process (and its
    children) verifies with; the registry under work. 0: the version live before the clock
    starts; 1..reps: a version each; reps+1..: registered without the bit-exact load, under
    another name."""
    from models import signing
    from models.manifest import MANIFEST
    _, (priv, pub) = signing.keygen(work / "keys", "bench")
    key = signing.load_key(str(priv), private=True)
    os.environ.pop(signing.ENV_SIGN, None)
    os.environ[signing.ENV_VERIFY] = str(pub)
    os.environ["ENGINE_REGISTRY"] = str(work / "registry")
    copies = []
    for k in range(2 * reps + 1):
        d = work / "copies" / f"v{k}"
        shutil.copytree(src, d)
        (d / "manifest.sig").unlink(missing_ok=True)
        m = json.loads((d / MANIFEST).read_bytes())
        m["bench_copy"] = k
        raw = (json.dumps(m, indent=2, sort_keys=True) + "\n").encode()
        (d / MANIFEST).write_bytes(raw)
        signing.write_signature(d, MANIFEST, raw, key)
        copies.append(str(d))
    return copies


def _ours(work, copies, reps):
    """Our registry's operations on the copies, timed: (their stats, the live version's path, a new
    process's import and first resolve, seconds each)."""
    import _common

    from models import artifact
    from models.registry import Registry, resolve_model
    reg = Registry(work / "registry", create=True)
    rec, _ = reg.register(copies[0], NAME)
    reg.promote(f"{NAME}@{rec['version']}")
    t = {k: [] for k in ("register", "register_noverify", "promote", "rollback", "resolve", "watch")}
    for d in copies[1:reps + 1]:
        t0 = _pc()
        rec, new = reg.register(d, NAME)
        t["register"].append(_pc() - t0)
        assert new
        t0 = _pc()
        reg.promote(f"{NAME}@{rec['version']}")
        t["promote"].append(_pc() - t0)
        t0 = _pc()
        p = resolve_model(f"registry:{NAME}")
        t["resolve"].append(_pc() - t0)
        assert Path(os.path.realpath(p)).name == rec["id"], "resolve: not the promoted version"
        t0 = _pc()
        os.path.realpath(p)
        t["watch"].append(_pc() - t0)
        t0 = _pc()
        reg.rollback(NAME)
        t["rollback"].append(_pc() - t0)
    for d in copies[reps + 1:]:
        t0 = _pc()
        assert reg.register(d, NAME + "-noverify", verify=False)[1]
        t["register_noverify"].append(_pc() - t0)
    ours = {k: _stats(v) for k, v in t.items() if v}
    live = resolve_model(f"registry:{NAME}")
    loads = []
    for _ in range(3):
        t0 = _pc()
        artifact.load(live).release()
        loads.append(_pc() - t0)
    ours["load"] = _stats(loads)
    env = dict(os.environ)
    fresh_import = _fresh(sys.executable, "import time; t = time.perf_counter(); import models.registry; "
                          "print(time.perf_counter() - t)", env, str(_common.ROOT))
    fresh_resolve = _fresh(sys.executable, "import time; t = time.perf_counter(); "
                           "from models.registry import resolve_model; "
                           f"resolve_model('registry:{NAME}'); print(time.perf_counter() - t)",
                           env, str(_common.ROOT))
    return ours, live, fresh_import, fresh_resolve


def _mlflow(a, work, copies, reps):
    """MLflow's side run in its interpreter on the first reps + 1 copies: (its JSON, None), or
    (None, why it did not run)."""
    py, why = _mlflow_python(a)
    if not py:
        return None, why
    print(f"MLflow: {py} ...", file=sys.stderr, flush=True)
    (work / "mlflow").mkdir()
    cfg = work / "mlflow.json"
    cfg.write_text(json.dumps({"dir": str(work / "mlflow"), "copies": copies[:reps + 1]}))
    penv = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    penv.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", PYTHONPATH="")
    r = subprocess.run([py, os.path.abspath(__file__), "--mlflow-peer", str(cfg)], capture_output=True, text=True,
                       env=penv, cwd=work / "mlflow", timeout=3600)  # (any default ./mlflow.db: there)
    if r.returncode:
        return None, f"MLflow's side failed: {r.stderr.strip()[-1500:]}"
    return json.loads(r.stdout.strip().splitlines()[-1]), None


def _changed_ours(live):
    """Our tamper check: one digit of the live object's model.json changed; what the load says."""
    from models import artifact
    from models.manifest import ArtifactError
    from models.registry import resolve_model
    obj = Path(os.path.realpath(live))
    os.chmod(obj, 0o700)
    os.chmod(obj / "model.json", 0o600)
    _change_a_digit(obj / "model.json")
    try:
        artifact.load(resolve_model(f"registry:{NAME}")).release()
        return "loaded (not caught)"
    except ArtifactError as e:
        return f"refused: {str(e).split(': ', 1)[-1][:140]}"


def _print_operations(ours, peer, reps, nfiles, size_mb):
    """The table of operations, ours and MLflow's; the ratios (MLflow over ours at p50)."""
    import _common
    rows = [("register", "register", "register"), ("register, no bit-exact load", "register_noverify", "register"),
            ("promote", "promote", "promote"), ("rollback", "rollback", "rollback"),
            ("resolve", "resolve", "resolve"), ("resolve, no copy (MLflow)", None, "resolve_nocopy"),
            ("watch (follow a promotion)", "watch", "watch")]
    pt = (peer or {}).get("times", {})
    cols = ["ours p50 ms", "ours max ms", "MLflow p50 ms", "MLflow max ms", "MLflow/ours p50"]
    table, ratios = [], {}
    for label, o, m in rows:
        op, mp = ours.get(o) if o else None, pt.get(m) if m else None
        r_ = _common.ratio(op["p50_ms"], mp["p50_ms"], False) if op and mp else None
        if r_ is not None:
            ratios[o] = r_
        table.append((label, {"ours p50 ms": _fmt(op and op["p50_ms"]), "ours max ms": _fmt(op and op["max_ms"]),
                              "MLflow p50 ms": _fmt(mp and mp["p50_ms"]), "MLflow max ms": _fmt(mp and mp["max_ms"]),
                              "MLflow/ours p50": _x(r_)}))
    _common.table(f"{reps} versions a side of the default model ({nfiles} files, {size_mb:.1f} MB), signed; "
                  f"MLflow {peer['version'] if peer else '(skipped)'} on sqlite + a local artifact root", cols, table)
    if peer:
        print(f"  MLflow register = log {_fmt(pt['log']['p50_ms'])} + version {_fmt(pt['version']['p50_ms'])} ms "
              f"p50; its rollback is an alias set back to a version the caller kept (no history in MLflow)")
    return ratios


def _print_peer(peer, fi, fr, ratios, notes, ours_changed):
    """MLflow's new-process figures, what each side checks (our load of MLflow's downloads) and its
    install, printed; the fresh ratios and notes added; the results' peers."""
    import _common

    from models import artifact
    from models.manifest import ArtifactError
    mi, mr = _stats(peer["fresh_import_s"]), _stats(peer["fresh_resolve_s"])
    print(f"  import mlflow {_fmt(mi['p50_ms'])} / {_fmt(mi['max_ms'])}; first resolve (import + open the "
          f"store + download_artifacts) {_fmt(mr['p50_ms'])} / {_fmt(mr['max_ms'])}")
    ratios["fresh_import"] = _common.ratio(fi["p50_ms"], mi["p50_ms"], False)
    ratios["fresh_resolve"] = _common.ratio(fr["p50_ms"], mr["p50_ms"], False)
    print(f"  MLflow/ours: import {_x(ratios['fresh_import'])}, first resolve {_x(ratios['fresh_resolve'])}")
    print(f"  MLflow's first use of a new store (tables made, experiment, registered model): "
          f"{peer['store_init_s']:.2f} s")
    try:
        t0 = _pc()
        artifact.load(peer["clean_download"]).release()
        bridge = f"loads, verified ({(_pc() - t0) * 1e3:.0f} ms)"
    except ArtifactError as e:
        bridge = f"refused: {e}"
    ch = peer["changed"]
    if ch["path"]:
        try:
            artifact.load(ch["path"]).release()
            changed_load = "loaded (not caught)"
        except ArtifactError as e:
            changed_load = f"refused: {str(e).split(': ', 1)[-1][:140]}"
    else:
        changed_load = "-"
    print("\nwhat each side checks:")
    print("  ours: at register the manifest's signature (verify key), sha256 of every file, a bit-exact load; "
          "resolve is a path; every load checks all of it again")
    print(f"  a digit of the live version's model.json changed in our store: {ours_changed}")
    print(f"  MLflow: records no hash of the files; download_artifacts copies what its artifact root holds. The "
          f"same change there: {'served without error' if ch['served'] else ch['error'] or 'not served'}; "
          f"our load of that download: {changed_load}")
    print(f"  our load of an unchanged MLflow download (its bytes, our manifest and signature): {bridge}")
    print("\ninstall (MLflow's interpreter, the files of each dependency closure):")
    for k, v in peer["install"].items():
        print(f"  {k}: {v['packages']} packages, {v['mb']} MB"
              + (f" (not installed: {', '.join(v['missing'])})" if v["missing"] else ""))
    notes.update(mlflow_changed_digit=ch, ours_load_of_mlflow_download=bridge,
                 ours_load_of_changed_mlflow_download=changed_load)
    return {"mlflow": {"version": peer["version"], "times": peer.get("times", {}),
                       "store_init_s": round(peer["store_init_s"], 3), "fresh_import": mi, "fresh_resolve": mr,
                       "install": peer["install"]}}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--mlflow-peer":
        mlflow_peer(sys.argv[2])
    else:
        main()
