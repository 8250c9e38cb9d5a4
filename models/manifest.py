"""What an artifact's manifest is, below both loading (artifact.py) and signing (signing.py).

A directory is described by a JSON file (an artifact's manifest.json, an FPGA directory's
fpga.json) whose "files" maps every file's path to its sha256. This module holds the names and
errors both sides share and the one check they both run: every listed file still hashes to its
entry. It imports nothing from the project, so artifact.py -> signing.py -> manifest.py run one
way.
"""
import errno
import hashlib
import os
import re
import stat
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1
PROBABILITY_OBJECTIVES = ("binary:logistic",)  # the engine applies the sigmoid to these models' margin
# Every read is bounded: a manifest is a few kB; one file of a model of thousands of deep trees
# (its model.json) is hundreds of MB; the whole artifact is read into memory to be verified.
MAX_MANIFEST_BYTES = 4 << 20
MAX_FILE_BYTES = 1 << 30
MAX_ARTIFACT_BYTES = 2 << 30
MAX_FILES = 4096
# The stored validation rows every load re-runs bit for bit. Builds store ~3,000 (models/build.py);
# this floor refuses hand-made or truncated sets, for which "bit-exact" says little: a back end
# wrong on 5% of inputs passes 64 rows with probability 0.95**64 < 4%, and 64 rows fill whole
# SIMD blocks of every flat kernel as well as its remainder path.
MIN_VALIDATION_ROWS = 64
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ArtifactError(RuntimeError):
    """An artifact is missing, changed, or does not fit this engine; the message says which."""


class SignatureError(ArtifactError):
    """A verify key is configured and the artifact is unsigned, signed with another key, or
    changed after signing."""


def read_regular(path, limit=MAX_FILE_BYTES):
    """The bytes of `path`, which must be a regular file of at most `limit` bytes (read_file)."""
    return read_file(path, limit)[0]


def read_file(path, limit, error=ArtifactError, name=None):
    """(bytes, permission bits) of `path`, which must be a regular file of at most `limit` bytes.
    O_NOFOLLOW: a symbolic link is refused; O_NONBLOCK: a FIFO (or a device) opens without waiting
    for a writer and is then refused, as fstat does not call it a regular file. Nothing here can
    block forever on a local file (a stalled network file system still can: the engine's stop does
    not wait on a reload). FileNotFoundError passes through; anything else is error(one line
    starting with `name`, default the path)."""
    name = name or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        why = "it is a symbolic link (refused)" if e.errno == errno.ELOOP else e.strerror
        raise error(f"{name}: cannot open: {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{name}: not a regular file (mode {stat.filemode(st.st_mode)}); refusing to read it")
        if st.st_size > limit:
            raise error(f"{name}: {st.st_size} bytes, more than the {limit} allowed")
        chunks, n = [], 0
        while True:  # (the file may grow while read: never past the bound)
            b = os.read(fd, min(1 << 20, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
            if n > limit:
                raise error(f"{name}: grew past the {limit} bytes allowed while read")
        return b"".join(chunks), stat.S_IMODE(st.st_mode)
    except OSError as e:
        raise error(f"{name}: unreadable: {e.strerror}") from None
    finally:
        os.close(fd)


def _field_error(path, field, want):
    return ArtifactError(f"{path}: malformed manifest: {field} must be {want}")


def _safe_rel(rel):
    """A relative path inside the artifact: no absolute path, no '..', no empty or odd part."""
    if not isinstance(rel, str) or not rel or len(rel) > 512 or "\0" in rel or rel.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _list_of_str(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def check_manifest(path, m):
    """Every field a load, a reload or `model inspect` reads has the type they expect: anything
    else is one ArtifactError naming the file and the field, never a TypeError from inside a load."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ArtifactError(f"{path}: unknown manifest format {m.get('format') if isinstance(m, dict) else m!r:.80}")
    files = m.get("files")
    if not isinstance(files, dict) or not 0 < len(files) <= MAX_FILES:
        raise _field_error(path, "files", f"an object of 1 to {MAX_FILES} path: sha256 entries")
    for rel, h in files.items():
        if not _safe_rel(rel):
            raise _field_error(path, f"files key {rel!r:.80}", "a relative path inside the artifact")
        if not isinstance(h, str) or not _SHA256.fullmatch(h):
            raise _field_error(path, f"files[{rel!r:.80}]", "a sha256 (64 lowercase hex digits)")
    for key, ok, want in (("feature_names", _list_of_str, "a list of names"),
                          ("objective", lambda v: isinstance(v, str), "a string"),
                          ("num_trees", lambda v: _is_int(v) and v > 0, "a positive integer"),
                          ("generic", lambda v: isinstance(v, bool), "true or false"),
                          ("strategy", lambda v: v is None or isinstance(v, dict), "an object or null"),
                          ("training", lambda v: v is None or isinstance(v, dict), "an object or null"),
                          ("target", lambda v: isinstance(v, dict) and isinstance(v.get("machine"), str),
                           'an object with "machine"'),
                          ("backends", lambda v: isinstance(v, dict), "an object")):
        if key in m and not ok(m[key]):
            raise _field_error(path, key, want)
    for name, b in (m.get("backends") or {}).items():
        if not (isinstance(b, dict) and _safe_rel(b.get("lib")) and _list_of_str(b.get("requires", []))
                and ("model" not in b or _safe_rel(b["model"]))):
            raise _field_error(path, f"backends[{name!r:.80}]", 'an object with "lib" (a file), "requires" (a list)')
    if "validation" in m:
        v = m["validation"]
        if not (isinstance(v, dict) and _safe_rel(v.get("rows_file")) and _is_int(v.get("rows"))
                and _list_of_str(v.get("checked_backends", []))):
            raise _field_error(path, "validation", 'an object with "rows_file" (a file), "rows" (an integer)')
        if v["rows"] < MIN_VALIDATION_ROWS:
            raise _field_error(path, "validation.rows", f"at least {MIN_VALIDATION_ROWS} (it is {v['rows']})")
    return m


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_files(art_dir, manifest):
    """Every listed file exists and hashes to the manifest's sha256; returns verified bytes of each."""
    art_dir = Path(art_dir).resolve()
    blobs, total = {}, 0
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or len(files) > MAX_FILES:
        raise ArtifactError(f"{art_dir}: malformed manifest: files must be an object of at most {MAX_FILES} entries")
    for rel, want in files.items():
        if not _safe_rel(rel) or art_dir not in (art_dir / rel).resolve().parents:
            raise ArtifactError(f"{art_dir}: manifest names a file outside the artifact: {rel!r:.80}")
        try:  # (the unresolved path, opened with O_NOFOLLOW: a file replaced by a link is refused)
            data = read_regular(art_dir / rel, min(MAX_FILE_BYTES, MAX_ARTIFACT_BYTES - total))
        except FileNotFoundError:
            raise ArtifactError(f"{art_dir}: {rel} is listed in the manifest but missing") from None
        total += len(data)
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
