"""A real tmpfs of a few hundred KB for the full-disk tests (tests/test_full_disk.py,
tests/test_partial_outputs.py): mounted on a new directory, filled on request to leave only so
many bytes free, unmounted after; the test is skipped where none can be mounted (it needs root)."""
import os
import subprocess
from contextlib import contextmanager

import pytest


@contextmanager
def small_fs(d, size):
    """Mount a tmpfs of `size` ("2m", "256k") on the new directory d; yields fill(n), which fills
    it up to n free bytes and returns d."""
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.strip() or r.returncode}")

    def fill(free):
        st = os.statvfs(d)
        (d / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - free))
        return d
    try:
        yield fill
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
