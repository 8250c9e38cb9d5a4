"""Signed artifacts: who built a model, not only that its files are intact.

A manifest's sha256 list proves integrity; whoever can rewrite the files can rewrite the hashes
too. A signature over the manifest's exact bytes (and so over every file's sha256) proves the
artifact came from a holder of the signing key. Two kinds of key:

- ed25519 (preferred): the private key stays on the build host and signs; the engine host holds
  only the public key and verifies. `engine model keygen --out DIR` writes both (PEM; OpenSSH
  ed25519 keys are read too).
- HMAC-SHA256 (`keygen --hmac`): one shared secret (any file that is not PEM/OpenSSH, at least 32
  bytes) both signs and verifies, so the engine host holds a key that can sign.

The signature lives next to the signed file: manifest.sig for an artifact's manifest.json,
fpga.sig for an FPGA directory's fpga.json. Configuration: ENGINE_MODEL_VERIFY_KEY (set by
`--verify-key` and `[model] verify_key`) and ENGINE_MODEL_SIGN_KEY (set by `--sign-key`); the
environment carries them to every process that loads a model (Dask workers included). With a
verify key every load refuses an unsigned or wrongly signed artifact before any native code is
opened; without one, loads work as before and `engine model inspect` says what is there.

Key files are opened with O_NOFOLLOW (a symbolic link is refused), must be regular files, and a
secret (ed25519 private key, HMAC key) readable by group or other is refused, as is a verify key
others can write.
"""
import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .manifest import (MANIFEST, MAX_MANIFEST_BYTES, ArtifactError, SignatureError, read_file, read_regular,
                       verify_files)

ENV_VERIFY = "ENGINE_MODEL_VERIFY_KEY"
ENV_SIGN = "ENGINE_MODEL_SIGN_KEY"
SIG_FORMAT = 1
ED25519, HMAC = "ed25519", "hmac-sha256"
SIGNATURE_FILES = {"manifest.json": "manifest.sig", "fpga.json": "fpga.sig"}
MAX_KEY_BYTES = 64 << 10
MIN_HMAC_BYTES = 32


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names it and says why."""


def signature_error(msg):
    """A SignatureError (an ArtifactError: every caller that handles a bad artifact handles it)."""
    return SignatureError(msg)


def _message(signed_name, data):
    """What is signed: a domain tag, the signed file's role and its exact bytes (a manifest's
    signature cannot pass for an FPGA directory's, or the other way round)."""
    return b"engine-signature-v1\0" + signed_name.encode() + b"\0" + data


@dataclass
class Key:
    alg: str
    key_id: str
    path: str
    secret: object  # Ed25519PrivateKey, HMAC bytes, or None (a public key)
    public: object  # Ed25519PublicKey, HMAC bytes

    @property
    def can_sign(self):
        return self.secret is not None

    def describe(self):
        return f"{self.alg} key {self.key_id} ({self.path})"

    def sign(self, signed_name, data):
        msg = _message(signed_name, data)
        if self.alg == HMAC:
            return hmac.new(self.secret, msg, hashlib.sha256).digest()
        return self.secret.sign(msg)

    def verify(self, signed_name, data, sig):
        msg = _message(signed_name, data)
        if self.alg == HMAC:
            return hmac.compare_digest(hmac.new(self.public, msg, hashlib.sha256).digest(), sig)
        from cryptography.exceptions import InvalidSignature
        try:
            self.public.verify(sig, msg)
            return True
        except InvalidSignature:
            return False


def _read_key_file(path):
    """The bytes of a key file, opened without following a symbolic link; (data, mode)."""
    try:
        return read_file(path, MAX_KEY_BYTES, KeyFileError, f"key file {path}")
    except FileNotFoundError:
        raise KeyFileError(f"key file {path}: cannot open: no such file") from None


def _key_id(raw):
    return hashlib.sha256(raw).hexdigest()[:16]


def load_key(path, *, private):
    """A Key from a file: private=True for signing (an ed25519 private key or an HMAC secret),
    False for verifying (an ed25519 public key or an HMAC secret)."""
    data, mode = _read_key_file(path)
    text = data.lstrip()
    pem = text.startswith(b"-----BEGIN ") or text.startswith(b"ssh-ed25519 ")
    if not pem:  # an HMAC secret: both signs and verifies, so it is a secret either way
        if mode & 0o077:
            raise KeyFileError(f"HMAC key {path} is accessible by group/other (mode {mode:04o}); "
                               f"refusing it: chmod 600 {path}")
        secret = data.strip()
        if len(secret) < MIN_HMAC_BYTES:
            raise KeyFileError(f"key file {path} is neither an ed25519 key (PEM/OpenSSH) nor an HMAC secret of at "
                               f"least {MIN_HMAC_BYTES} bytes")
        return Key(HMAC, "hmac-" + _key_id(b"engine-hmac-key-id\0" + secret), str(path), secret, secret)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    is_private = b"PRIVATE KEY-----" in text.split(b"\n", 1)[0]
    if private and not is_private:
        raise KeyFileError(f"{path} is a public key; signing needs the private key (`engine model keygen` writes "
                           "NAME.key next to NAME.pub)")
    if not private and is_private:
        raise KeyFileError(f"{path} is a private key; configure the public key (NAME.pub) to verify, and keep the "
                           "private key on the build host")
    if is_private and mode & 0o077:
        raise KeyFileError(f"private key {path} is accessible by group/other (mode {mode:04o}); refusing it: "
                           f"chmod 600 {path}")
    if not is_private and mode & 0o022:
        raise KeyFileError(f"verify key {path} is writable by group/other (mode {mode:04o}): whoever can rewrite "
                           f"it can sign models; refusing it: chmod 644 {path}")
    try:
        if is_private:
            k = (serialization.load_ssh_private_key(data, password=None) if b"OPENSSH" in text[:40]
                 else serialization.load_pem_private_key(data, password=None))
        else:
            k = (serialization.load_ssh_public_key(text) if text.startswith(b"ssh-")
                 else serialization.load_pem_public_key(data))
    except (ValueError, TypeError) as e:
        raise KeyFileError(f"key file {path}: cannot read the key ({e})") from None
    if not isinstance(k, (Ed25519PrivateKey, Ed25519PublicKey)):
        raise KeyFileError(f"key file {path} holds a {type(k).__name__.lstrip('_')}, not an ed25519 key")
    pub = k.public_key() if is_private else k
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return Key(ED25519, _key_id(raw), str(path), k if is_private else None, pub)


# ---- configuration (the environment, so child processes inherit it) -------------------------

_cache = {}


def _configured(env, private):
    p = os.environ.get(env, "").strip()
    if not p:
        return None
    st = None
    try:
        st = os.lstat(p)
        tag = (st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        tag = None
    hit = _cache.get((env, p))
    if hit is not None and tag is not None and hit[0] == tag:
        return hit[1]
    key = load_key(p, private=private)
    _cache[(env, p)] = (tag, key)
    return key


def verify_key():
    """The configured verify key, or None. A configured key that cannot be read is an error
    (fail closed: a broken key never means 'no verification')."""
    try:
        return _configured(ENV_VERIFY, False)
    except KeyFileError as e:
        raise signature_error(f"{e} ({ENV_VERIFY}); refusing to load any model") from None


def sign_key():
    """The configured signing key, or None."""
    return _configured(ENV_SIGN, True)


def use_verify_key(path):
    """--verify-key / [model] verify_key: check the key now and put it in the environment."""
    if path:
        os.environ[ENV_VERIFY] = os.path.abspath(path)
    if os.environ.get(ENV_VERIFY, "").strip():
        return _configured(ENV_VERIFY, False)
    return None


def use_sign_key(path):
    """--sign-key: check the key now and put it in the environment (every artifact written in
    this process and its children is signed with it)."""
    if path:
        os.environ[ENV_SIGN] = os.path.abspath(path)
    if os.environ.get(ENV_SIGN, "").strip():
        return _configured(ENV_SIGN, True)
    return None


# ---- signatures -------------------------------------------------------------------------------

def signature_path(directory, signed_name):
    return Path(directory) / SIGNATURE_FILES[signed_name]


def make_signature(key, signed_name, data):
    """The signature file's content for `data` (the exact bytes of the signed file)."""
    if not key.can_sign:
        raise KeyFileError(f"{key.path} cannot sign (a public key)")
    return json.dumps({"format": SIG_FORMAT, "alg": key.alg, "key_id": key.key_id, "signed": signed_name,
                       "sha256": hashlib.sha256(data).hexdigest(),
                       "signature": base64.b64encode(key.sign(signed_name, data)).decode()},
                      indent=2, sort_keys=True) + "\n"


def write_signature(directory, signed_name, data, key):
    """Sign `data` (the bytes of directory/signed_name) and write the signature atomically."""
    out = signature_path(directory, signed_name)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    tmp.write_text(make_signature(key, signed_name, data))
    os.replace(tmp, out)
    return out


def _read_signature(directory, signed_name):
    """The parsed signature file, or None when there is none; raises on a malformed one."""
    p = signature_path(directory, signed_name)
    try:
        raw = read_regular(p, MAX_KEY_BYTES)  # (a FIFO or a link planted there is refused, not waited on)
    except FileNotFoundError:
        return None
    except ArtifactError as e:
        raise signature_error(f"{e}; refusing to load it") from None
    try:
        s = json.loads(raw[:MAX_KEY_BYTES])
        sig = base64.b64decode(s["signature"], validate=True)
        if s.get("format") != SIG_FORMAT or not isinstance(s.get("key_id"), str):
            raise ValueError("unknown format")
    except (ValueError, KeyError, TypeError) as e:
        raise signature_error(f"{directory}: {p.name} is not a signature file ({e}); refusing to load it") from None
    s["_sig"] = sig
    return s


def check(directory, signed_name, data, key="configured"):
    """Refuse `data` (the bytes of directory/signed_name, read once by the caller, which then
    parses those same bytes) unless it is signed with the configured verify key. Returns the key
    that verified it, or None when no key is configured."""
    key = verify_key() if key == "configured" else key
    if key is None:
        return None
    sig_name = SIGNATURE_FILES[signed_name]
    s = _read_signature(directory, signed_name)
    if s is None:
        raise signature_error(f"{directory}: unsigned ({sig_name} missing) but a verify key is configured "
                              f"({key.describe()}); refusing to load it. Sign it where it was built: engine model "
                              f"sign {directory} --key PRIVATE_KEY")
    if s.get("signed") != signed_name:
        raise signature_error(f"{directory}: {sig_name} signs {s.get('signed')!r}, not {signed_name}; refusing to "
                              "load it")
    if s.get("alg") != key.alg or s["key_id"] != key.key_id:
        raise signature_error(f"{directory}: signature does not match key {key.key_id} ({key.path}): it was made "
                              f"with {s.get('alg')} key {s['key_id']}; refusing to load it")
    if key.verify(signed_name, data, s["_sig"]):
        return key
    if s.get("sha256") != hashlib.sha256(data).hexdigest():
        raise signature_error(f"{directory}: {signed_name} changed after signing (the signature by key "
                              f"{key.key_id} covers other bytes); refusing to load it")
    raise signature_error(f"{directory}: signature does not match key {key.key_id} ({key.path}): {sig_name} is "
                          "forged or damaged; refusing to load it")


def status(directory, signed_name, data):
    """One line for `engine model inspect`: unsigned, signed (not verified: no key configured),
    verified (KEY), or refused: WHY."""
    try:
        s = _read_signature(directory, signed_name)
    except ArtifactError as e:
        s, bad = None, str(e)
    else:
        bad = None
    try:
        key = verify_key()
    except ArtifactError as e:
        return f"refused: {e}"
    if key is None:
        if bad:
            return f"bad signature file: {bad}"
        return "unsigned" if s is None else "signed (not verified: no key configured)"
    try:
        check(directory, signed_name, data, key)
    except ArtifactError as e:
        return f"refused: {e}"
    return f"verified ({key.alg} key {key.key_id})"


def signer(directory, signed_name):
    """'ALG key ID' of an existing signature (unverified), or None."""
    try:
        s = _read_signature(directory, signed_name)
    except ArtifactError:
        return None
    return None if s is None else f"{s.get('alg')} key {s.get('key_id')}"


# ---- keygen -------------------------------------------------------------------------------------

def _create(path, data, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def keygen(out_dir, name="model", use_hmac=False):
    """Write a new key pair (NAME.key 0600, NAME.pub 0644) or an HMAC secret (NAME.hmac 0600)
    into out_dir; never overwrites. Returns (key_id, [paths])."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    if use_hmac:
        paths = [out / f"{name}.hmac"]
    else:
        paths = [out / f"{name}.key", out / f"{name}.pub"]
    for p in paths:
        if os.path.lexists(p):
            raise KeyFileError(f"{p} exists; refusing to overwrite a key (choose another --out or --name)")
    if use_hmac:
        secret = os.urandom(32).hex().encode()
        _create(paths[0], secret + b"\n", 0o600)
        return load_key(paths[0], private=True).key_id, paths
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    k = Ed25519PrivateKey.generate()
    _create(paths[0], k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()), 0o600)
    _create(paths[1], k.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
    return load_key(paths[1], private=False).key_id, paths


def sign_directory(directory, key):
    """`engine model sign DIR`: sign a directory's file list (an artifact's manifest.json or an FPGA
    directory's fpga.json: SIGNATURE_FILES) after checking every file it lists still hashes to its
    sha256: a signature vouches for what is there. Any directory described that way is signed the
    same way, so this needs nothing from the package that wrote it (each checks its own format when
    it reads the directory). Returns (signature path, sha256 of the signed bytes)."""
    d = Path(directory)
    name = next((n for n in SIGNATURE_FILES if (d / n).exists()), None)
    if name is None:
        raise ArtifactError(f"{d}: neither a model artifact ({MANIFEST}) nor an FPGA directory (fpga.json)")
    raw = read_regular(d / name, MAX_MANIFEST_BYTES)
    try:
        m = json.loads(raw)
        if not isinstance(m, dict) or not isinstance(m.get("files"), dict):
            raise ValueError("no file list")
    except ValueError as e:
        what = "manifest" if name == MANIFEST else name
        raise ArtifactError(f"{d}: unreadable {what} ({e}); refusing to sign it") from None
    try:
        verify_files(d, m)
    except ArtifactError as e:
        raise ArtifactError(f"{str(e).removesuffix('; refusing to load it')}; refusing to sign it") from None
    return write_signature(d, name, raw, key), hashlib.sha256(raw).hexdigest()
