"""dbn-live:// against the Databento venue (feeds/databento/venue/, a process of its own on
loopback, flat out), and Databento's official client on the same server in the same run.

- Ours: the native source (feeds/databento/live.py: socket -> numba scan + dbn.parse -> L3 book ->
  ticks), records/s from the first batch asked to the last tick, and the latency from the
  receive that completed a record's bytes (src.rx_ns, CLOCK_MONOTONIC after recv_into returns)
  to the batch holding its ticks being handed out (per tick: p50 / p99 / p99.9).
- Peer: `databento.Live` (asyncio protocol, databento-dbn decoder) with a callback per record
  that counts it: records/s from start() to the last record's callback. It builds no book and
  writes no ticks, so ours does more per record.
The day's MBO file (68,792 records) is replayed `repeat` times (an R record between passes), each
session from the start.

Run alone: `.venv/bin/python bench/_live_dbn.py [--quick]`; bench/live.py imports run().
"""
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


DATA = ROOT.parent / "shared" / "data" / "dbn" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"


def _gateway(repeat, pipe):
    """The gateway, every session from the start of the file played `repeat` times; serves until
    the pipe closes."""
    from feeds.databento.venue import DatabentoVenue
    with DatabentoVenue(DATA, repeat=repeat, resume=False) as gw:
        pipe.send((gw.port, len(gw.recs)))
        try:
            pipe.recv()
        except EOFError:
            pass


def _serve(repeat):
    """(process, pipe, port, records) of `_gateway` in a process of its own (its Python send loop
    must not share our GIL)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_gateway, args=(repeat, theirs), daemon=True)
    proc.start()
    port, nrec = mine.recv()
    return proc, mine, port, nrec


def _ours(port, key, nrec):
    from feeds.databento.live import DbnLive
    from feeds.databento.params import LIVE
    old = os.environ.get("DATABENTO_API_KEY")
    os.environ["DATABENTO_API_KEY"] = key
    try:
        u = "dbn-live://GLBX.MDP3"
        src = DbnLive(u, LIVE.parse(u, "GLBX.MDP3", {"symbols": "ESH4", "gateway": f"127.0.0.1:{port}", "idle_s": "0.5"}))
    finally:
        if old is None:
            os.environ.pop("DATABENTO_API_KEY")
        else:
            os.environ["DATABENTO_API_KEY"] = old
    lat, weight = [], []
    ticks = 0
    t0 = time.monotonic_ns()
    t_end = t0
    for b in src.batches():
        if len(b):
            now = time.monotonic_ns()
            lat.append(now - src.rx_ns)
            weight.append(len(b))
            ticks += len(b)
            t_end = now
        if src.stats_a[0] >= nrec and not len(b):
            break  # everything applied: the session would only idle from here
    src.stop()
    st = src.stats()
    assert st["records"] == nrec, (st["records"], nrec)
    lat, weight = np.array(lat, np.float64), np.array(weight, np.float64)
    order = np.argsort(lat)
    cum = np.cumsum(weight[order]) / weight.sum()

    def pct(q):
        return round(float(lat[order][min(np.searchsorted(cum, q), len(cum) - 1)]) / 1e3, 1)
    secs = (t_end - t0) / 1e9
    return {"records_per_s": round(nrec / secs), "ticks_per_s": round(ticks / secs),
            "bytes_to_tick_p50_us": pct(0.50), "bytes_to_tick_p99_us": pct(0.99),
            "bytes_to_tick_p999_us": pct(0.999)}


def _official(port, key, nrec):
    import databento as db
    count = [0, 0]

    def on_record(r):
        count[0] += 1
        count[1] = time.monotonic_ns()
    client = db.Live(key=key, gateway="127.0.0.1", port=port)
    client.subscribe(dataset="GLBX.MDP3", schema="mbo", symbols="ESH4", stype_in="raw_symbol")
    client.add_callback(on_record)
    t0 = time.monotonic_ns()
    client.start()
    deadline = time.monotonic() + 600
    while count[0] < nrec + 1 and time.monotonic() < deadline:  # + the symbol mapping
        time.sleep(0.01)
    client.stop()
    client.block_for_close(timeout=30)
    assert count[0] >= nrec + 1, (count[0], nrec)
    return {"records_per_s": round(nrec / ((count[1] - t0) / 1e9)), "version_databento": db.__version__}


def run(quick: bool) -> dict:
    from feeds.databento.venue import DEMO_KEY
    if not DATA.exists():
        return {"metrics": {}, "peers": {}, "skipped": f"{DATA} is not here"}
    proc, pipe, port, nrec = _serve(3 if quick else 15)
    try:
        ours = _ours(port, DEMO_KEY, nrec)
        peer = _official(port, DEMO_KEY, nrec)
    finally:
        pipe.send("stop")
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
    version = peer.pop("version_databento")
    metrics = {f"dbn_live_{k}": v for k, v in ours.items()}
    metrics["dbn_live_records_replayed_count"] = nrec
    return {"metrics": metrics, "peers": {"databento": {"dbn_live_records_per_s": peer["records_per_s"],
                                                        "client": f"databento {version} Live, callback per record"}}}


if __name__ == "__main__":
    import json
    print(json.dumps(run("--quick" in sys.argv), indent=2))
