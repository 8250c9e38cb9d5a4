"""The model registry: verified artifacts by name and version, promotion and rollback
(`engine model register | list | show | promote | rollback`).

A registry is a directory of this user's (0700): `--registry DIR`, else ENGINE_REGISTRY, else
the state directory's `registry`. What is in it must be this user's (or root's) and writable by
nobody else, checked as it is read: a `live/`, `names/` or `objects/` (or an entry in them) another
user made, while the directory was open to them, is refused by name, never used:
  objects/ID/       an artifact as registered, read-only: every file its manifest lists, the
                    manifest, its signature if signed. ID = sha256 of the manifest's bytes, which
                    hold every file's sha256: the ID names the artifact's exact bytes (the same
                    artifact registered twice is one object)
  names/NAME.json   the name's versions (1, 2, ...: the ID, when, where from, and what the manifest
                    says of the model: strategy, training data and its test metrics) and its
                    promotions, oldest first; written whole (a temporary file renamed)
  live/NAME         a symlink to ../objects/ID, the promoted version: what `engine run --model
                    registry:NAME` loads. A promotion or a rollback flips it atomically, and a
                    running engine whose model is a symlink reloads when its target moves (the
                    verified hot swap: app/daemon.py), between two ticks
  .lock             held (flock) by every writer
Nothing is deleted: a rollback promotes the version promoted before (or an earlier one named),
whose bytes are still there. With a verify key configured (--verify-key, ENGINE_MODEL_VERIFY_KEY)
only an artifact whose manifest that key signed is registered, and its signature is kept beside it
(every load from the registry checks it again).
"""
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path

from .manifest import MANIFEST, ArtifactError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PREFIX = "registry:"  # --model registry:NAME


class RegistryError(ValueError):
    pass


def default_dir():
    from engine import dirs
    return os.environ.get("ENGINE_REGISTRY") or dirs.state_path("registry")


def check_name(name):
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise RegistryError(f"model name {name!r}: 1 to 64 letters, digits, '.', '_' or '-', not starting with "
                            "'.', '_' or '-'")
    return name


def parse_ref(ref):
    """NAME or NAME@VERSION -> (name, version or None)."""
    name, at, v = str(ref).partition("@")
    check_name(name)
    if not at:
        return name, None
    if not (v.isascii() and v.isdigit()) or int(v) < 1:  # (isdigit alone takes '１' and '²')
        raise RegistryError(f"{ref}: the version after @ is a number from 1 (engine model list {name})")
    return name, int(v)


class Registry:
    def __init__(self, root=None, create=False):
        self.root = Path(root or default_dir())
        if create:
            from engine.dirs import private_dir
            try:
                private_dir(str(self.root))
            except (OSError, RuntimeError) as e:
                raise RegistryError(f"registry {self.root}: {getattr(e, 'strerror', None) or e}") from None
            for sub in ("objects", "names", "live"):
                self._trusted(self.root / sub, directory=True)  # (one planted there is never taken as ours)
                (self.root / sub).mkdir(mode=0o700, exist_ok=True)
        elif not (self.root / "names").is_dir():
            raise RegistryError(f"no model registry at {self.root} (engine model register makes it; --registry or "
                                "ENGINE_REGISTRY name another)")
        self._check_owner()

    def _check_owner(self):
        st = os.lstat(self.root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise RegistryError(f"registry {self.root}: not a directory of uid {os.geteuid()} that only it can write")
        for sub in ("objects", "names", "live"):  # (made by another user while the registry was open to them?)
            self._trusted(self.root / sub, directory=True)

    def _trusted(self, path, directory=False, st=None):
        """path (lstat: never followed; or its fstat `st`) is this user's or root's and nobody else
        can write it (a directory: a real one); else RegistryError naming it. Absent: None."""
        if st is None:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return None
        me = os.geteuid()
        why = ("not a directory" if directory and not stat.S_ISDIR(st.st_mode) else
               f"owned by uid {st.st_uid}, not this user (uid {me}) nor root" if st.st_uid not in (me, 0) else
               f"writable by {'others' if st.st_mode & 0o002 else 'its group'}"
               if st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode) else None)
        if why:
            raise RegistryError(f"registry {self.root}: {os.path.relpath(path, self.root)} is {why}: refused (not "
                                "made by this registry's owner: remove it)")
        return st

    def _trusted_object(self, oid):
        """objects/ID and everything in it, checked as _trusted (a version's bytes are only ours)."""
        d = self.object_dir(oid)
        if not re.fullmatch(r"[0-9a-f]{64}", str(oid)):
            raise RegistryError(f"registry {self.root}: {oid!r} is not an object id")
        if self._trusted(d, directory=True) is not None:
            for p in d.rglob("*"):
                self._trusted(p)
        return d

    @contextlib.contextmanager
    def _locked(self):
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            self._trusted(self.root / ".lock", st=os.fstat(fd))  # (another user's lock could hold us forever)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------------

    def names(self):
        return sorted(p.stem for p in (self.root / "names").glob("*.json"))

    def entry(self, name):
        p = self.root / "names" / f"{check_name(name)}.json"
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise RegistryError(f"no model named {name!r} in {self.root} (engine model list)") from None
        except OSError as ex:
            raise RegistryError(f"{p}: unreadable ({ex.strerror}; a link is never followed)") from None
        try:
            self._trusted(p, st=os.fstat(fd))  # (the file opened: never another user's planted entry)
            with os.fdopen(os.dup(fd), "rb") as f:
                e = json.loads(f.read())
        except RegistryError:
            raise
        except (OSError, ValueError) as ex:
            raise RegistryError(f"{p}: unreadable ({ex})") from None
        finally:
            os.close(fd)
        if not isinstance(e, dict) or not isinstance(e.get("versions"), list):
            raise RegistryError(f"{p}: not a registry entry")
        return e

    def version(self, ref):
        """The record of NAME@VERSION (NAME alone: the promoted one, else the latest)."""
        name, v = parse_ref(ref)
        e = self.entry(name)
        if v is None:
            v = e["promotions"][-1]["version"] if e.get("promotions") else e["versions"][-1]["version"]
        for rec in e["versions"]:
            if rec["version"] == v:
                return name, rec
        raise RegistryError(f"{name} has no version {v} (versions 1 to {len(e['versions'])})")

    def live(self, name):
        """The path `engine run --model` loads for NAME: the promoted version's symlink."""
        return str(self.root / "live" / check_name(name))

    def check_live(self, name):
        """NAME's live link, if there is one, is ours and points at a trusted object of this
        registry (what a run loads through it); RegistryError naming what is not."""
        link = Path(self.live(name))
        if self._trusted(link) is None:
            return False
        target = os.readlink(link) if link.is_symlink() else ""
        oid = target.removeprefix("../objects/")
        if target == oid or not re.fullmatch(r"[0-9a-f]{64}", oid):
            raise RegistryError(f"registry {self.root}: live/{name} is not a link to ../objects/ID: refused (not made "
                                "by engine model promote: remove it, then promote a version)")
        self._trusted_object(oid)
        return True

    def object_dir(self, oid):
        return self.root / "objects" / oid

    # -- writing ---------------------------------------------------------------------------

    def register(self, art_dir, name, verify=True, note=None, gate=None):
        """Copy a verified artifact in as NAME's next version (the same bytes again: the version it
        has). gate: the validation gate it passed (replay/retrain.py), kept in its record. Returns
        (record, new)."""
        from . import artifact
        check_name(name)
        art = Path(art_dir)
        raw = artifact.manifest_bytes(art)
        m = artifact.read_manifest(art)  # (a configured verify key: its signature first)
        blobs = artifact.verify_files(art, m)  # every file, hashed, before anything is copied
        if verify:
            artifact.load(art).release()  # bit-exact with XGBoost on its validation rows, here
        oid = hashlib.sha256(raw).hexdigest()
        with self._locked():
            try:
                e = self.entry(name)
            except RegistryError:
                e = {"name": name, "versions": [], "promotions": []}
            for rec in e["versions"]:
                if rec["id"] == oid:
                    return rec, False
            self._store(art, oid, raw, blobs)
            tr = m.get("training") if isinstance(m.get("training"), dict) else {}
            rec = {"version": len(e["versions"]) + 1, "id": oid, "registered_unix": round(time.time(), 3),
                   "source": str(art.resolve()), "model_id": m["files"].get("model.json", "")[:12],
                   "num_trees": m.get("num_trees"), "objective": m.get("objective"), "strategy": m.get("strategy"),
                   "training": {k: tr[k] for k in tr if k in ("source", "sources", "ticks", "rows", "horizon",
                                                              "recordings", "days", "data")},
                   "metrics": {k: tr[k] for k in tr if k.startswith(("test_", "valid_"))},
                   "signature": artifact.signature_status(art), "note": note, "gate": gate}
            e["versions"].append(rec)
            self._write_entry(name, e)
        return rec, True

    def _store(self, art, oid, raw, blobs):
        dest = self._trusted_object(oid)  # (an object of the same id planted by another user is refused)
        if dest.is_dir():
            return
        tmp = dest.with_name(f".{oid}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(mode=0o700)
            for rel, data in list(blobs.items()) + [(MANIFEST, raw)] + self._signature(art):
                p = tmp / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
                p.chmod(0o444)
            for d in sorted({p.parent for p in tmp.rglob("*")}, key=lambda p: -len(p.parts)):
                d.chmod(0o555)
            os.rename(tmp, dest)
        except BaseException:
            if tmp.exists():
                for d in [tmp, *tmp.rglob("*")]:
                    if d.is_dir():
                        d.chmod(0o700)
                shutil.rmtree(tmp, ignore_errors=True)
            raise

    @staticmethod
    def _signature(art):
        sig = art / "manifest.sig"
        return [("manifest.sig", sig.read_bytes())] if sig.is_file() and not sig.is_symlink() else []

    def _write_entry(self, name, e):
        p = self.root / "names" / f"{name}.json"
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600),
                       "w") as f:
            json.dump(e, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)

    def promote(self, ref, why="promote"):
        """Make NAME@VERSION the one NAME's live link points at; returns (name, its record)."""
        with self._locked():
            return self._promote(ref, why)

    def _promote(self, ref, why):
        name, rec = self.version(ref)
        e = self.entry(name)
        if not self._trusted_object(rec["id"]).is_dir():
            raise RegistryError(f"{name}@{rec['version']}: its object {rec['id'][:12]} is missing from "
                                f"{self.root}/objects")
        link = Path(self.live(name))
        tmp = link.with_name(f".{name}.new-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(f"../objects/{rec['id']}", tmp)
        os.replace(tmp, link)  # (atomic: a reader sees the old version or the new one)
        e.setdefault("promotions", []).append({"version": rec["version"], "unix": round(time.time(), 3), "how": why})
        self._write_entry(name, e)
        return name, rec

    def rollback(self, ref):
        """NAME: promote again the version that was live before the current one was promoted (each
        rollback steps one promotion further back). NAME@VERSION: step back to VERSION, which must
        have been live before (as many promotions undone as that takes). Read and written under
        the lock, so a promotion in between cannot be rolled over unseen."""
        name, v = parse_ref(ref)
        with self._locked():
            stack = promoted(self.entry(name))
            if v is None:
                if len(stack) < 2:
                    raise RegistryError(f"{name}: nothing to roll back to (live: "
                                        f"{'version ' + str(stack[-1]) if stack else 'none'}, promoted before it: none)")
                v = stack[-2]
            elif stack and v == stack[-1]:
                raise RegistryError(f"{name}@{v} is the live version already")
            elif v not in stack[:-1]:
                raise RegistryError(f"{name}@{v}: not live before the live version "
                                    f"({'version ' + str(stack[-1]) if stack else 'none'}; live before it: "
                                    f"{', '.join(map(str, stack[:-1])) or 'none'}): engine model promote {name}@{v}")
            return self._promote(f"{name}@{v}", why=f"rollback from {stack[-1]}")


def promoted(entry):
    """The versions made live in turn, a rollback undoing the promotions since the version it made
    live again: [-1] is live."""
    stack = []
    for p in entry.get("promotions") or []:
        if str(p.get("how", "")).startswith("rollback"):
            if stack:
                stack.pop()
            while len(stack) > 1 and stack[-1] != p["version"] and p["version"] in stack:
                stack.pop()
        else:
            stack.append(p["version"])
    return stack


def resolve_model(path):
    """--model registry:NAME -> the live link of NAME in the default registry (a run reloads when a
    promotion moves it); registry:NAME@VERSION -> that version's object; anything else as is."""
    if not (isinstance(path, str) and path.startswith(PREFIX)):
        return path
    ref = path[len(PREFIX):]
    reg = Registry()
    name, v = parse_ref(ref)
    if v is not None:
        return str(reg._trusted_object(reg.version(ref)[1]["id"]))
    reg.entry(name)  # (a clear error for an unknown name)
    if not reg.check_live(name):
        raise ArtifactError(f"{path}: no version of {name} is promoted (engine model promote {name}@VERSION)")
    return reg.live(name)
