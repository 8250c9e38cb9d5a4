"""The feature schema an artifact was trained on: names plus a hash of the feature code."""
import hashlib
from pathlib import Path

from engine import features


def schema_hash():
    """sha256 over the feature names and the source of engine/features.py.

    Any edit to the feature code changes it, and a model trained on other features
    is refused by the live loop.
    """
    h = hashlib.sha256()
    h.update("\n".join(features.FEATURE_NAMES).encode())
    h.update(Path(features.__file__).read_bytes())
    return h.hexdigest()
