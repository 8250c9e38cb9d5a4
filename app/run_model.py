"""The model of `engine run`: loaded and verified at start (the live one and --shadow's candidates),
and reloaded off the hot path while it runs (SIGHUP, /control/reload, a registry link that moved):
published to the loop through the control block, the old generation unloaded once the loop left it."""
import threading
import time

from models import artifact
from models.artifact import uses_sigmoid

from engine import control as C

from .progress import log


def load_shadow(cfg, strategy, spec):
    """A shadow's model (a directory or registry:NAME[@VERSION]), verified as the live model is:
    (directory, predictor); ValueError naming it."""
    from models.registry import resolve_model
    try:
        model_dir = resolve_model(spec)
        pred = artifact.load(model_dir, backend=cfg.backend, strategy=strategy)
        strategy.check_scale(uses_sigmoid(pred))
    except (ValueError, OSError, artifact.ArtifactError) as e:  # (ArtifactError: missing, changed, unsigned)
        raise ValueError(f"--shadow {spec}: {e}") from None
    return model_dir, pred


def load_shadows(cfg, strategy):
    """--shadow's candidates: [(name, directory, predictor)]; ValueError naming the one that
    fails (the run does not start)."""
    from .shadow import shadow_names
    return [(name, *load_shadow(cfg, strategy, spec)) for name, spec in zip(shadow_names(cfg.shadows), cfg.shadows)]


def load_model(cfg, strategy):
    """The verified model for this strategy: --model, or the strategy's default model (trained
    on the synthetic market and cached on first use)."""
    if cfg.model:
        from models.registry import resolve_model
        model_dir = resolve_model(cfg.model)  # (registry:NAME: the live link of NAME; a move reloads it)
    else:
        from models.default import default_model_dir
        model_dir = str(default_model_dir(strategy))
    if cfg.backend == "fpga-sim":
        import fpga.backend  # noqa: F401  (registers backend="fpga-sim" with models.artifact)
    pred = artifact.load(model_dir, backend=cfg.backend, strategy=strategy)
    timing = f" (measured: {', '.join(pred.notes)})" if pred.notes else ""
    exact = ("the fixed-point emulation, bit-exact with its golden model and within its proven bound of XGBoost"
             if pred.backend == "fpga-sim" else f"bit-exact with XGBoost on {pred.manifest['validation']['rows']} rows")
    log(f"model {pred.model_id} ({pred.manifest['num_trees']} trees) from {model_dir}: verified, {exact}; "
        f"back end {pred.backend}{timing}")
    return pred, model_dir


RELOAD_WAIT_S = 30.0  # a reload waits this long for one in progress (a stalled file system), then is refused
_reload_lock = threading.Lock()  # one reload at a time: each numbers, publishes and reports its own generation


def reload_model(cfg, strategy, ctl, loaded, swaps):
    """SIGHUP or /control/reload: load, verify and validate the model off the hot path, then publish
    its address and a new generation; the loop adopts it between two ticks. A bad artifact (or one
    trained for another strategy) changes nothing. Returns this reload's own record (also appended
    to `swaps`): concurrent reloads each report theirs."""
    if not _reload_lock.acquire(timeout=RELOAD_WAIT_S):
        res = {"ok": False, "error": f"another reload is still in progress after {RELOAD_WAIT_S:g} s; try again"}
        log(f"reload refused: {res['error']}")
        swaps.append(res)
        return res
    try:
        res = _reload(cfg, strategy, ctl, loaded)
        swaps.append(res)
        return res
    finally:
        _reload_lock.release()


def _reload(cfg, strategy, ctl, loaded):
    t0 = time.monotonic()
    release_left(ctl, loaded)
    try:
        pred, model_dir = load_model(cfg, strategy)
        if uses_sigmoid(pred) != uses_sigmoid(loaded[0]):
            pred.release()
            raise ValueError(f"{model_dir}: objective {pred.manifest.get('objective')} scores on another scale "
                             f"than the running {loaded[0].manifest.get('objective')}; restart the engine to "
                             "change it")
    except Exception as e:  # noqa: BLE001 - any failure keeps the running model
        log(f"reload refused, still running generation {int(ctl[C.CTL_MODEL_GEN])}: {e}")
        return {"ok": False, "error": str(e)}
    gen = pred.generation = int(ctl[C.CTL_MODEL_GEN]) + 1
    loaded.append(pred)  # the old library stays mapped until the loop has provably left it (release_left)
    ctl[C.CTL_MODEL_ADDR] = pred.addr
    ctl[C.CTL_MODEL_ROWS] = pred.rows_addr
    t_pub = time.monotonic_ns()
    ctl[C.CTL_MODEL_GEN] = gen  # after the addresses: the loop reads generation, then addresses
    while int(ctl[C.L_MODEL_GEN]) != gen and time.monotonic_ns() - t_pub < 1_000_000_000:
        time.sleep(0.0001)
    adopted = int(ctl[C.L_MODEL_GEN]) == gen
    lag_us = (int(ctl[C.L_SWAP_NS]) - t_pub) / 1e3 if adopted else None
    release_left(ctl, loaded)
    log(f"model generation {gen} ({pred.model_id}, {pred.backend}) prepared off the hot path in "
        f"{(t_pub / 1e9 - t0) * 1e3:.0f} ms; " + (f"adopted by the loop {lag_us:.1f} us after publication"
                                                   if adopted else "NOT adopted within 1 s"))
    return {"ok": adopted, "generation": gen, "model": pred.model_id, "backend": pred.backend,
            "prepare_ms": round((t_pub / 1e9 - t0) * 1e3, 1), "adopted_after_us": lag_us}


def release_left(ctl, loaded):
    """Unload every model generation older than the one the loop reports it adopted (L_MODEL_GEN).
    The loop stores that word only after it took the new address, and addresses only move forward
    (a re-entered loop reads the newest), so it never calls an older one again; the newest one
    published always stays. Until the loop reports (it has not started), nothing is released."""
    adopted = int(ctl[C.L_MODEL_GEN])
    for p in [p for p in loaded[:-1] if p.generation < adopted]:
        loaded.remove(p)
        p.release()


