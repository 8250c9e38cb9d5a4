"""What an artifact's manifest is, below both loading (artifact.py) and signing (signing.py).

A directory is described by a JSON file (an artifact's manifest.json, an FPGA directory's
fpga.json) whose "files" maps every file's path to its sha256. This module holds the names and
errors both sides share and the one check they both run: every listed file still hashes to its
entry. It imports nothing from the project, so artifact.py -> signing.py -> manifest.py run one
way.
"""
import hashlib
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1
PROBABILITY_OBJECTIVES = ("binary:logistic",)  # the engine applies the sigmoid to these models' margin


class ArtifactError(RuntimeError):
    """An artifact is missing, changed, or does not fit this engine; the message says which."""


class SignatureError(ArtifactError):
    """A verify key is configured and the artifact is unsigned, signed with another key, or
    changed after signing."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_files(art_dir, manifest):
    """Every listed file exists and hashes to the manifest's sha256; returns verified bytes of each."""
    art_dir = Path(art_dir).resolve()
    blobs = {}
    for rel, want in manifest["files"].items():
        p = (art_dir / rel).resolve()
        if art_dir not in p.parents:
            raise ArtifactError(f"{art_dir}: manifest names a file outside the artifact: {rel}")
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"{art_dir}: {rel} is listed in the manifest but missing") from None
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            raise ArtifactError(f"{art_dir}: {rel} does not match its manifest hash "
                                f"(sha256 {got[:16]}..., manifest {want[:16]}...); refusing to load it")
        blobs[rel] = data
    return blobs


def score_kind(manifest):
    """What the model hands a strategy's decide: "probability" (the sigmoid of its margin) or
    "margin" (its raw output: a regression, e.g. trained with --labels ternary). Derived from the
    recorded objective, so it cannot disagree with what the loop applies."""
    return "probability" if manifest.get("objective") in PROBABILITY_OBJECTIVES else "margin"


def describe_model(manifest):
    """'this model (objective reg:squarederror, --labels ternary)', as a refusal names a model."""
    training = manifest.get("training")
    labels = training.get("labels") if isinstance(training, dict) else None
    extra = f", --labels {labels}" if labels else ""
    return f"this model (objective {manifest.get('objective')}{extra})"
