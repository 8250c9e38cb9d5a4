"""Model artifacts: a directory with the XGBoost model, compiled library and manifest.

A compiled model is native code. Loading verifies the sha256 of every file the
manifest lists, the feature schema and the C ABI, then dlopens the *verified bytes*
(copied into a memfd, so the file cannot change between check and load), and finally
re-runs the stored validation rows, which must match XGBoost's margins bit for bit.

With a verify key configured (models/signing.py), read_manifest, which every load goes through,
first checks manifest.sig over the manifest's exact bytes (and so over every file's sha256):
an unsigned or wrongly signed artifact is refused before any of its code is opened.

Layers: models/ imports the engine core and nothing from fpga/. A back end that lives above it
(fpga/backend.py's `fpga-sim`) registers its loader here when it is imported
(register_backend); loading with such a back end before then is an ArtifactError that says
what to import.
"""
import ctypes
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import signing
# the manifest's names and errors live in manifest.py (below signing.py); importable from here too
from .manifest import (FORMAT, MANIFEST, MAX_MANIFEST_BYTES, MIN_VALIDATION_ROWS, ArtifactError,  # noqa: F401
                       SignatureError, check_manifest, describe_model, read_regular, score_kind, sha256_file,
                       verify_files)


def cpu_flag_set():
    """Every flag this CPU reports (/proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_flags():
    """The SIMD flags worth recording in a manifest."""
    return sorted(cpu_flag_set() & {"sse4_2", "avx", "avx2", "bmi1", "bmi2", "fma", "avx512f", "avx512bw",
                                    "avx512vbmi"})


def versions():
    """The versions a model depends on, from the installed packages' metadata (importing xgboost
    just to ask would cost every command 1.4 s: it imports scikit-learn)."""
    from importlib.metadata import PackageNotFoundError, version

    import numba

    import engine

    def v(*dists):
        for d in dists:
            try:
                return version(d)
            except PackageNotFoundError:
                pass
        return "unknown"
    return {"engine": engine.__version__, "xgboost": v("xgboost-cpu", "xgboost"), "treelite": v("treelite"),
            "tl2cgen": v("tl2cgen"), "numpy": np.__version__, "numba": numba.__version__,
            "python": platform.python_version()}


def write_manifest(art_dir, fields):
    """Hash every file in the artifact and write the manifest last; with a signing key configured
    (--sign-key, ENGINE_MODEL_SIGN_KEY) sign it (manifest.sig)."""
    art_dir = Path(art_dir)
    key = signing.sign_key()  # a bad key fails here, before the manifest exists
    vkey = signing.verify_key() if key is None else None
    if vkey is not None:
        raise SignatureError(f"{art_dir}: a verify key is configured ({vkey.describe()}) but no "
                             f"signing key, so this artifact would be unsigned and refused; give --sign-key "
                             f"PRIVATE_KEY (or {signing.ENV_SIGN})")
    sig_names = set(signing.SIGNATURE_FILES.values())
    files = {}
    for p in sorted(art_dir.rglob("*")):
        if p.is_file() and p.name != MANIFEST and p.name not in sig_names:
            files[str(p.relative_to(art_dir))] = sha256_file(p)
    manifest = {"format": FORMAT, **fields, "files": files,
                "target": {"machine": platform.machine(), "cpu_flags": cpu_flags()}}
    raw = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    (art_dir / MANIFEST).write_bytes(raw)
    if key is not None:
        signing.write_signature(art_dir, MANIFEST, raw, key)
    return manifest


def manifest_bytes(art_dir):
    path = Path(art_dir) / MANIFEST
    try:
        return read_regular(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise ArtifactError(f"{art_dir}: not a model artifact (no {MANIFEST})") from None


def signature_status(art_dir):
    """unsigned | signed (not verified: no key configured) | verified (KEY) | refused: WHY."""
    return signing.status(art_dir, MANIFEST, manifest_bytes(art_dir))


def read_manifest(art_dir, check_signature=True):
    """The manifest. Every load goes through here: with a verify key configured, the manifest's
    bytes must carry a valid signature by that key (check_signature=False only for `model
    inspect` without --verify, signing, and the default model's cache check, none of which
    open native code)."""
    path = Path(art_dir) / MANIFEST
    raw = manifest_bytes(art_dir)
    if check_signature:
        signing.check(art_dir, MANIFEST, raw)  # the bytes parsed below are the bytes verified
    try:
        m = json.loads(raw)
    except (ValueError, RecursionError) as e:  # (RecursionError: JSON nested thousands deep)
        raise ArtifactError(f"{path}: unreadable manifest: {str(e) or type(e).__name__}") from None
    return check_manifest(path, m)


@dataclass
class Predictor:
    """A loaded back end: `addr` is engine_predict's address for the numba loop."""
    lib: ctypes.CDLL
    addr: int
    num_feature: int
    manifest: dict
    path: str
    backend: str
    _fd: int
    notes: list = None
    generation: int = 1  # the engine publishes its first model as generation 1; reloads number the next
    rows_addr: int = 0  # engine_predict_rows (several rows in one call; flat kernels only), or 0

    def release(self):
        """Unload this back end: dlclose its library, then close its memfd. Only for one no code
        runs any more (never one the loop may still call: app/live.py reload_model). The fd
        stays open while the library is loaded because dlopen finds a loaded library by its path
        name: a reused /proc/self/fd/N would hand back this one."""
        if self.lib is not None:
            import _ctypes
            _ctypes.dlclose(self.lib._handle)
            self.lib, self.addr = None, 0
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def predict_margin(self, X):
        return self._score(self.lib.engine_predict_batch, X)

    def predict_rows(self, X):
        """predict_margin's bits, the rows scored together where the back end can (engine_predict_rows)."""
        return self._score(self.lib.engine_predict_rows if self.rows_addr else self.lib.engine_predict_batch, X)

    def _score(self, fn, X):
        """fn(rows, n, out) on X checked as float32 [n, num_feature]: the margins."""
        X = np.ascontiguousarray(X, np.float32)
        if X.ndim != 2 or X.shape[1] != self.num_feature:
            raise ValueError(f"rows must be float32 [n, {self.num_feature}], got {X.shape}")
        out = np.empty(X.shape[0], np.float32)
        fn(X.ctypes.data, X.shape[0], out.ctypes.data)
        return out

    @property
    def model_id(self):
        return self.manifest["files"].get("model.json", "")[:12]


def uses_sigmoid(pred):
    """Does this model score on the probability scale (binary:logistic: the loop applies the
    sigmoid to its margin) rather than as a raw margin (regression)? (manifest.score_kind)"""
    return score_kind(pred.manifest) == "probability"


def dlopen_bytes(data, label):
    """A shared library from verified bytes (never a path another process could swap): loaded from
    a memfd; (the ctypes library, the memfd to close when it is unloaded)."""
    fd = os.memfd_create(f"engine-model-{label}", os.MFD_CLOEXEC)
    os.write(fd, data)
    try:
        return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL), fd
    except OSError as e:
        os.close(fd)
        raise ArtifactError(f"cannot load {label}: {e}") from None


BACKEND_CHOICES = ("auto", "flat", "treelite", "flat-avx512", "flat-avx2", "flat-portable", "xgboost", "fpga-sim")
REFERENCE_ONLY = {"xgboost"}  # validation back ends `auto` never picks
# back ends provided by a package above models/: name -> the module that registers it on import
PROVIDED_BY = {"fpga-sim": "fpga.backend"}
_provided = {}  # name -> load(art_dir, manifest, verified blobs) -> Predictor


def register_backend(name, loader):
    """A package above models/ provides back end `name` (one of PROVIDED_BY): `loader(art_dir,
    manifest, blobs)` gets the verified manifest and the verified bytes of every file it lists and
    returns a Predictor. fpga/backend.py calls this when it is imported."""
    if name not in PROVIDED_BY:
        raise ValueError(f"{name!r} is not a provided back end (those are {', '.join(PROVIDED_BY)})")
    _provided[name] = loader


def _load_provided(art_dir, m, backend):
    loader = _provided.get(backend)
    if loader is None:
        raise ArtifactError(f"{art_dir}: the {backend} back end is not registered in this process: import "
                            f"{PROVIDED_BY[backend]} before loading a model with backend={backend!r}")
    return loader(art_dir, m, verify_files(art_dir, m))


def _requires(name, b):
    """CPU features back end `name` needs: what the manifest says and, for a flat variant, what the
    engine compiles it with (models/flat.py BUILDS). A manifest is data and may be edited: trusting
    its list alone would let an edited one run AVX-512 code on a CPU without it (SIGILL)."""
    from .flat import BUILDS
    own = BUILDS.get(name[len("flat-"):], (None, []))[1] if name.startswith("flat-") else []
    return set(b.get("requires", [])) | set(own)


def _candidates(m, backend, art_dir):
    """Back ends to try, best first, among those the artifact has and this CPU runs."""
    have = m.get("backends", {})
    cpu = cpu_flag_set()
    runnable = [n for n, b in have.items() if isinstance(b, dict) and _requires(n, b) <= cpu]
    if backend == "auto":
        return [n for n in runnable if n not in REFERENCE_ONLY]
    if backend == "flat":
        flat = [n for n in runnable if n.startswith("flat-")]
        if not flat:
            raise ArtifactError(f"{art_dir}: no flat back end this CPU can run (artifact has {sorted(have)})")
        return flat[:1]  # flat variants are listed fastest first
    if backend not in have:
        raise ArtifactError(f"{art_dir}: no {backend!r} back end in this artifact (it has {sorted(have)})")
    if backend not in runnable:
        missing = sorted(_requires(backend, have[backend]) - cpu)
        raise ArtifactError(f"{art_dir}: back end {backend} needs CPU features {', '.join(missing)} that this "
                            f"CPU lacks; use --backend flat-portable or treelite")
    return [backend]


def _open_backend(art_dir, m, blobs, name):
    rel = m["backends"][name]["lib"]
    if rel not in blobs:
        raise ArtifactError(f"{art_dir}: {name} library {rel} is not covered by the manifest")
    lib, fd = dlopen_bytes(blobs[rel], f"{art_dir.name}-{name}")
    pred = Predictor(lib, 0, 0, m, str(art_dir), name, fd, [])
    try:
        return _check_backend(art_dir, m, blobs, name, pred)
    except BaseException:
        pred.release()  # a refused back end leaves nothing mapped or open
        raise


def _check_backend(art_dir, m, blobs, name, pred):
    lib = pred.lib
    if name == "xgboost":
        from . import xgb_backend
        model_rel = m["backends"][name].get("model", "model.json")
        if model_rel not in blobs:
            raise ArtifactError(f"{art_dir}: {model_rel} is not covered by the manifest")
        try:
            xgb_backend.init(lib, blobs[model_rel], len(m.get("feature_names", [])))
        except RuntimeError as e:
            raise ArtifactError(f"{art_dir}: {e}") from None
    lib.engine_predict_batch.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    lib.engine_predict_batch.restype = None
    rows_fn = getattr(lib, "engine_predict_rows", None)
    if rows_fn is not None:
        rows_fn.argtypes, rows_fn.restype = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p], None
        pred.rows_addr = ctypes.cast(rows_fn, ctypes.c_void_p).value
    if lib.engine_abi_version() != 1:
        raise ArtifactError(f"{art_dir}: {name} library C ABI {lib.engine_abi_version()}, engine needs 1")
    nf = lib.engine_num_feature()
    if nf != len(m.get("feature_names", [])):
        raise ArtifactError(f"{art_dir}: {name} library takes {nf} features, manifest names "
                            f"{len(m.get('feature_names', []))}")
    pred.addr, pred.num_feature = ctypes.cast(lib.engine_predict, ctypes.c_void_p).value, nf
    _check_validation(art_dir, m, blobs, pred)
    return pred


def _time_rows(pred, X, reps=3):
    import time
    best = float("inf")
    out = np.empty(len(X), np.float32)
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        pred.lib.engine_predict_batch(X.ctypes.data, len(X), out.ctypes.data)
        best = min(best, (time.perf_counter_ns() - t0) / len(X))
    return best


def describe_strategy(ident):
    """'name' (sha256 abcd..., 9 features, depth 0), as Strategy.describe() says it."""
    if not isinstance(ident, dict):
        return "no strategy (a generic or older artifact)"
    feats = ident.get("features")
    return (f"'{str(ident.get('name'))[:80]}' (sha256 {str(ident.get('sha256'))[:12]}, "
            f"{len(feats) if isinstance(feats, list) else '?'} features, depth {str(ident.get('depth'))[:20]})")


def check_strategy(art_dir, m, strategy):
    """A model drives only the strategy it was trained for (same source, FEATURES and DEPTH), and
    only if its score is the kind that strategy's decide expects (SCORE)."""
    if m.get("generic"):
        raise ArtifactError(f"{art_dir}: a generic artifact (no strategy's features) cannot drive the engine")
    got = m.get("strategy")
    want = strategy.identity()
    same = isinstance(got, dict) and all(got.get(k) == want[k] for k in ("sha256", "features", "depth"))
    if same and got.get("universe") != want.get("universe"):
        raise ArtifactError(f"{art_dir}: trained for strategy {describe_strategy(got)} on the universe "
                            f"{', '.join(map(str, got.get('universe') or [])) or '(none)'}; this run binds it to "
                            f"{', '.join(want.get('universe') or []) or '(none)'}. Train a model on these "
                            "instruments, or bind the roles as it was trained (--universe ROLE=NAME)")
    if not same:
        raise ArtifactError(f"{art_dir}: trained for strategy {describe_strategy(got)}; this run uses strategy "
                            f"{strategy.describe()} from {strategy.path}. Train a model for it: engine train "
                            f"--strategy {strategy.path} SOURCE... --out DIR")
    why = strategy.score_mismatch(score_kind(m), describe_model(m))
    if why:
        raise ArtifactError(f"{art_dir}: {why}")


def load(art_dir, backend="auto", strategy=None):
    """Verify an artifact and load a back end: `auto` validates every back end this CPU runs and
    keeps the fastest; a name picks one. With `strategy` (engine/strategy_load.Strategy) the
    artifact must have been trained for it. Raises ArtifactError on any mismatch."""
    art_dir = Path(art_dir).resolve()  # once: a symlink flipped mid-load cannot mix two artifacts
    if backend not in BACKEND_CHOICES:
        raise ArtifactError(f"unknown back end {backend!r} (choose from {', '.join(BACKEND_CHOICES)})")
    m = read_manifest(art_dir)
    if strategy is not None:
        check_strategy(art_dir, m, strategy)
    if platform.machine() != m.get("target", {}).get("machine"):
        raise ArtifactError(f"{art_dir}: built for {m.get('target', {}).get('machine')}, this is {platform.machine()}")
    if backend in PROVIDED_BY:  # fpga-sim: the HLS kernel's emulation, generated from this artifact on first use
        return _load_provided(art_dir, m, backend)
    names = _candidates(m, backend, art_dir)
    if not names:
        raise ArtifactError(f"{art_dir}: no back end this CPU can run")
    blobs = verify_files(art_dir, m)  # every byte checked before any dlopen
    preds = []
    try:
        for n in names:
            preds.append(_open_backend(art_dir, m, blobs, n))
        if len(preds) == 1:
            return preds.pop()
        X, _ = _validation_rows(art_dir, m, blobs)
        timed = sorted((_time_rows(p, X), i) for i, p in enumerate(preds))
        notes = [f"{preds[i].backend} {ns:.0f} ns/row" for ns, i in timed]
        best = preds.pop(timed[0][1])
        best.notes = notes
        return best
    finally:
        for p in preds:  # the back ends not chosen: nothing will ever call them
            p.release()


def _validation_rows(art_dir, m, blobs):
    """The stored validation rows (X float32 [n, features], XGBoost's margins float32 [n]), at least
    MIN_VALIDATION_ROWS of them and as many as the manifest says."""
    import io
    import zipfile
    v = m.get("validation") or {}
    rel = v.get("rows_file")
    if rel not in blobs:
        raise ArtifactError(f"{art_dir}: manifest has no verified validation rows")
    nf = len(m.get("feature_names") or [])
    try:
        with np.load(io.BytesIO(blobs[rel]), allow_pickle=False) as z:
            X, want = np.ascontiguousarray(z["X"], np.float32), np.ascontiguousarray(z["margin"], np.float32)
    except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise ArtifactError(f"{art_dir}: {rel}: unreadable validation rows ({e})") from None
    if X.ndim != 2 or X.shape[1] != nf or want.shape != (X.shape[0],):
        raise ArtifactError(f"{art_dir}: {rel}: validation rows of shape {X.shape} and margins {want.shape}, "
                            f"expected [n, {nf}] and [n]")
    if len(X) < MIN_VALIDATION_ROWS or len(X) != v.get("rows"):
        raise ArtifactError(f"{art_dir}: {rel}: {len(X)} validation rows (manifest says {v.get('rows')}); at least "
                            f"{MIN_VALIDATION_ROWS} are needed for the bit-exact check to mean something")
    return X, want


def _check_validation(art_dir, m, blobs, pred):
    """Re-run the stored validation rows: the loaded code must reproduce XGBoost exactly."""
    X, want = _validation_rows(art_dir, m, blobs)
    # one row a call, then (where the library has it) the rows scored together: the same bits
    for what, score in (("loaded library", pred.predict_margin),
                        ("loaded library's engine_predict_rows", pred.predict_rows if pred.rows_addr else None)):
        if score is None:
            continue
        got = score(X)
        bad = np.flatnonzero(got.view(np.int32) != want.view(np.int32))
        if len(bad):
            i = bad[0]
            raise ArtifactError(f"{art_dir}: {what} disagrees with XGBoost on {len(bad)} of {len(X)} "
                                f"validation rows (row {i}: {got[i]!r} vs {want[i]!r})")
