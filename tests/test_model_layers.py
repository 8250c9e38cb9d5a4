"""models/ sits below fpga/: nothing in models imports fpga (function-level imports included),
and the fpga-sim back end reaches models/artifact.py by registering itself."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imported(path):
    """Every module a file imports, at any depth (absolute names; relative ones resolved)."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)] if n.level else []
            out.add(".".join(base + ([n.module] if n.module else [])))
    return out


def test_models_imports_nothing_from_fpga():
    bad = {str(p.relative_to(ROOT)): sorted(m for m in _imported(p) if m.split(".")[0] == "fpga")
           for p in sorted((ROOT / "models").rglob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}


def test_fpga_sim_is_refused_clearly_until_registered(monkeypatch, tmp_path):
    from models import artifact
    monkeypatch.setattr(artifact, "_provided", {})
    with pytest.raises(artifact.ArtifactError, match=r"fpga-sim back end is not registered .* import fpga\.backend"):
        artifact._load_provided(tmp_path, {"files": {}}, "fpga-sim")
    import fpga.backend
    monkeypatch.setattr(artifact, "_provided", {})
    import importlib
    importlib.reload(fpga.backend)  # importing it is what registers it
    assert artifact._provided["fpga-sim"] is fpga.backend.load
    with pytest.raises(ValueError, match="not a provided back end"):
        artifact.register_backend("flat", fpga.backend.load)
