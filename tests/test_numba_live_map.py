"""engine/numba_live_map.py: numba's liveness over bitsets gives numba's own live map, set for set,
on every call of a real compile; the machine code that comes out is compared in
tests/test_numba_ssa.py (its "ours" child compiles as the engine's functions do)."""
import subprocess
import sys

from tests.conftest import ROOT, engine_env


def test_every_live_map_of_a_compile_equals_numbas_own():
    r = subprocess.run([sys.executable, "-m", "tests.helpers.ssa_target", "live-map"], cwd=ROOT, env=engine_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    calls, differ = map(int, r.stdout.split())
    assert calls >= 10 and differ == 0, (calls, differ)


def test_random_flow_graphs_give_numbas_own_live_map():
    """Self-loops, blocks no path reaches, blocks that define or use nothing, no names at all."""
    import random

    from numba.core import analysis
    from numba.core.controlflow import CFGraph

    from engine import numba_live_map
    assert not numba_live_map.patched()  # (numba's own, outside the engine's compiles)
    stock = analysis.compute_live_map
    rng = random.Random(55)
    for _ in range(2000):
        labels = rng.sample(range(200), rng.randint(1, 14))
        g = CFGraph()
        for k in labels:
            g.add_node(k)
        for k in labels:
            for _ in range(rng.randint(0, 3)):
                g.add_edge(k, rng.choice(labels))
        g.set_entry_point(labels[0])
        g.process()
        names = [f"v{i}" for i in range(rng.randint(0, 24))]
        use = {k: set(rng.sample(names, rng.randint(0, min(5, len(names))))) for k in labels}
        defs = {k: set(rng.sample(names, rng.randint(0, min(5, len(names))))) for k in labels}
        blocks = dict.fromkeys(labels)
        want = stock(g, blocks, use, defs)
        got = numba_live_map.compute_live_map(g, blocks, use, defs)
        assert got == want and list(got) == list(want)
