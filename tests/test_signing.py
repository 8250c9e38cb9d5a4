"""Signed model artifacts (issue 13 item 9): with a verify key configured, every load refuses an
unsigned artifact, one signed with another key, or one changed after signing, before any of its
native code is opened. Real ed25519/HMAC keys, the real default model, a real shared library
whose constructor leaves a marker if it is ever loaded."""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

from models import artifact, signing

from .conftest import ROOT, engine_cmd, engine_env
from .helpers.feedutil import one_line_error

EVIL_C = r"""
#include <stdio.h>
#include <stdint.h>
__attribute__((constructor)) static void pwn(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("constructor ran\n", f); fclose(f); }
}
int engine_abi_version(void) { return 99; }
int engine_num_feature(void) { return 0; }
void engine_predict(const float *row, float *out) { *out = 0; }
void engine_predict_batch(const float *rows, int64_t n, float *out) {}
"""


def _engine(*args, env=None, timeout=120):
    return subprocess.run(engine_cmd(*args), cwd=ROOT, env=env or engine_env(), capture_output=True, text=True,
                          timeout=timeout)


def _env(verify=None, sign=None):
    env = engine_env()
    env.pop(signing.ENV_VERIFY, None)
    env.pop(signing.ENV_SIGN, None)
    if verify:
        env[signing.ENV_VERIFY] = str(verify)
    if sign:
        env[signing.ENV_SIGN] = str(sign)
    return env


@pytest.fixture(autouse=True)
def _no_key_from_outside(monkeypatch):
    monkeypatch.delenv(signing.ENV_VERIFY, raising=False)
    monkeypatch.delenv(signing.ENV_SIGN, raising=False)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    signing.keygen(d, "a")
    signing.keygen(d, "b")
    signing.keygen(d, "h", use_hmac=True)
    return d


@pytest.fixture(scope="module")
def unsigned(default_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("art") / "unsigned"
    shutil.copytree(default_model, d)
    for s in signing.SIGNATURE_FILES.values():
        (d / s).unlink(missing_ok=True)
    return d


@pytest.fixture(scope="module")
def signed(unsigned, keys, tmp_path_factory):
    d = tmp_path_factory.mktemp("art") / "signed"
    shutil.copytree(unsigned, d)
    signing.sign_directory(d, signing.load_key(keys / "a.key", private=True))
    return d


@pytest.fixture(scope="module")
def evil_so(tmp_path_factory):
    """A shared library whose constructor writes MARKER when dlopen'ed; (path, marker)."""
    d = tmp_path_factory.mktemp("evil")
    marker = d / "MARKER"
    (d / "evil.c").write_text(EVIL_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", f'-DMARKER="{marker}"', "-o", str(d / "evil.so"),
                    str(d / "evil.c")], check=True)
    return d / "evil.so", marker


def tamper(src, dst, evil):
    """What the attacker did: replace the flat-portable library and rewrite its hash in the
    manifest (manifest.sig, if any, left as it was)."""
    shutil.copytree(src, dst)
    raw = (dst / artifact.MANIFEST).read_text()
    m = json.loads(raw)
    rel = m["backends"]["flat-portable"]["lib"]
    shutil.copyfile(evil, dst / rel)
    m["files"][rel] = hashlib.sha256(evil.read_bytes()).hexdigest()
    (dst / artifact.MANIFEST).write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    return dst


def test_signed_artifact_loads_and_says_so(signed, keys, monkeypatch):
    assert artifact.signature_status(signed) == "signed (not verified: no key configured)"
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "a.pub"))
    pred = artifact.load(signed, backend="flat-portable")
    assert pred.backend == "flat-portable"
    kid = signing.load_key(keys / "a.pub", private=False).key_id
    assert artifact.signature_status(signed) == f"verified (ed25519 key {kid})"


def test_tampered_library_never_runs_with_a_key(signed, keys, evil_so, tmp_path, monkeypatch):
    evil, marker = evil_so
    d = tamper(signed, tmp_path / "tampered", evil)
    marker.unlink(missing_ok=True)
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "a.pub"))
    with pytest.raises(artifact.SignatureError, match=r"manifest.json changed after signing"):
        artifact.load(d, backend="flat-portable")
    with pytest.raises(artifact.SignatureError, match="changed after signing"):
        artifact.load(d)  # auto: every back end
    # the attacker also rewrites the signature file's sha256: still no valid signature
    sig = json.loads((d / "manifest.sig").read_text())
    sig["sha256"] = hashlib.sha256((d / "manifest.json").read_bytes()).hexdigest()
    (d / "manifest.sig").write_text(json.dumps(sig))
    with pytest.raises(artifact.SignatureError, match="forged or damaged"):
        artifact.load(d, backend="flat-portable")
    # ... or signs it with a key of their own
    signing.sign_directory(d, signing.load_key(keys / "b.key", private=True))
    with pytest.raises(artifact.SignatureError, match=r"signature does not match key .* it was made with ed25519 key"):
        artifact.load(d, backend="flat-portable")
    # ... or deletes the signature
    (d / "manifest.sig").unlink()
    with pytest.raises(artifact.SignatureError, match=r"unsigned \(manifest.sig missing\)"):
        artifact.load(d, backend="flat-portable")
    assert not marker.exists()
    # the control: without a key the sha256 list alone lets the constructor run (the attack)
    monkeypatch.delenv(signing.ENV_VERIFY)
    with pytest.raises(artifact.ArtifactError, match="C ABI 99"):
        artifact.load(d, backend="flat-portable")
    assert marker.exists()


def test_unsigned_is_refused_with_a_key_and_loads_without(unsigned, keys, monkeypatch):
    assert artifact.signature_status(unsigned) == "unsigned"
    artifact.load(unsigned, backend="flat-portable")  # no key: as before
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "a.pub"))
    with pytest.raises(artifact.SignatureError, match="unsigned"):
        artifact.read_manifest(unsigned)
    assert artifact.signature_status(unsigned).startswith("refused: ")
    # inspect without --verify still shows the manifest (no code is opened)
    assert artifact.read_manifest(unsigned, check_signature=False)["files"]


def test_wrong_key_is_refused(signed, keys, monkeypatch):
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "b.pub"))
    b = signing.load_key(keys / "b.pub", private=False)
    with pytest.raises(artifact.SignatureError, match=f"signature does not match key {b.key_id}"):
        artifact.load(signed, backend="flat-portable")


def test_the_reload_path_checks_the_signature(unsigned, signed, keys, monkeypatch):
    """SIGHUP and `engine ctl reload` call runner.reload_model -> load_model -> artifact.load."""
    from app.live import RunConfig, load_model
    from engine.strategy_load import load
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "a.pub"))
    strategy = load()
    pred, _ = load_model(RunConfig(model=str(signed), backend="flat-portable"), strategy)
    assert pred.backend == "flat-portable"
    with pytest.raises(artifact.SignatureError, match="unsigned"):
        load_model(RunConfig(model=str(unsigned), backend="flat-portable"), strategy)


def test_hmac_keys(unsigned, keys, tmp_path, monkeypatch):
    d = tmp_path / "h"
    shutil.copytree(unsigned, d)
    h = signing.load_key(keys / "h.hmac", private=True)
    assert h.alg == "hmac-sha256" and oct((keys / "h.hmac").stat().st_mode & 0o777) == "0o600"
    signing.sign_directory(d, h)
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "h.hmac"))
    artifact.read_manifest(d)
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "a.pub"))
    with pytest.raises(artifact.SignatureError, match="it was made with hmac-sha256 key"):
        artifact.read_manifest(d)
    loose = tmp_path / "loose.hmac"
    shutil.copyfile(keys / "h.hmac", loose)
    loose.chmod(0o644)
    with pytest.raises(signing.KeyFileError, match="accessible by group/other"):
        signing.load_key(loose, private=False)


def test_key_files_are_opened_safely(keys, tmp_path):
    assert (keys / "a.key").stat().st_mode & 0o777 == 0o600
    assert (keys / "a.pub").stat().st_mode & 0o777 == 0o644
    loose = tmp_path / "loose.key"
    shutil.copyfile(keys / "a.key", loose)
    loose.chmod(0o640)
    with pytest.raises(signing.KeyFileError, match=r"private key .*loose.key is accessible by group/other \(mode "
                                                   r"0640\); refusing it: chmod 600"):
        signing.load_key(loose, private=True)
    os.symlink(keys / "a.key", tmp_path / "link.key")
    with pytest.raises(signing.KeyFileError, match="is a symbolic link"):
        signing.load_key(tmp_path / "link.key", private=True)
    with pytest.raises(signing.KeyFileError, match="is a public key"):
        signing.load_key(keys / "a.pub", private=True)
    with pytest.raises(signing.KeyFileError, match="is a private key"):
        signing.load_key(keys / "a.key", private=False)
    gw = tmp_path / "gw.pub"
    shutil.copyfile(keys / "a.pub", gw)
    gw.chmod(0o664)
    with pytest.raises(signing.KeyFileError, match="writable by group/other"):
        signing.load_key(gw, private=False)
    with pytest.raises(signing.KeyFileError, match="exists; refusing to overwrite"):
        signing.keygen(keys, "a")


def test_signing_at_build_time(keys, tmp_path, monkeypatch):
    """write_manifest (every artifact build ends there) signs with the configured signing key,
    and refuses to leave an unsigned artifact where a verify key is configured."""
    d = tmp_path / "built"
    d.mkdir()
    (d / "model.json").write_text("{}")
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "a.pub"))
    with pytest.raises(artifact.SignatureError, match="no signing key"):
        artifact.write_manifest(d, {})
    monkeypatch.setenv(signing.ENV_SIGN, str(keys / "a.key"))
    artifact.write_manifest(d, {})
    assert (d / "manifest.sig").exists() and "manifest.sig" not in artifact.read_manifest(d)["files"]


def test_fpga_directories_are_signed_too(keys, tmp_path, monkeypatch):
    from fpga import export
    from fpga.fixed import FixedPointError
    d = tmp_path / "fpga"
    d.mkdir()
    (d / "fpga.json").write_text(json.dumps({"format": export.FORMAT, "files": {}}))
    export.read(d)  # no key: as before
    monkeypatch.setenv(signing.ENV_VERIFY, str(keys / "a.pub"))
    with pytest.raises(FixedPointError, match=r"unsigned \(fpga.sig missing\)"):
        export.read(d)
    signing.sign_directory(d, signing.load_key(keys / "a.key", private=True))
    export.read(d)
    # a manifest's signature cannot pass for an FPGA directory's
    (d / "fpga.sig").write_text((d / "fpga.sig").read_text().replace('"fpga.json"', '"manifest.json"'))
    with pytest.raises(FixedPointError, match="signs 'manifest.json'"):
        export.read(d)


def test_signing_checks_an_fpga_directory_without_knowing_fpga(keys, tmp_path):
    """sign_directory signs any directory whose fpga.json/manifest.json lists its files' sha256s,
    after checking them (models/signing.py imports nothing from fpga/)."""
    import hashlib
    d = tmp_path / "fpga"
    d.mkdir()
    (d / "kernel.cpp").write_text("int x;\n")
    files = {"kernel.cpp": hashlib.sha256(b"int x;\n").hexdigest()}
    (d / "fpga.json").write_text(json.dumps({"format": 1, "files": files}))
    key = signing.load_key(keys / "a.key", private=True)
    path, sha = signing.sign_directory(d, key)
    assert path == d / "fpga.sig" and sha == hashlib.sha256((d / "fpga.json").read_bytes()).hexdigest()
    (d / "kernel.cpp").write_text("int y;\n")
    with pytest.raises(artifact.ArtifactError, match=r"kernel.cpp does not match its manifest hash .*\); "
                                                      r"refusing to sign it$"):
        signing.sign_directory(d, key)
    with pytest.raises(artifact.ArtifactError, match="neither a model artifact"):
        signing.sign_directory(tmp_path, key)


def test_cli_refusals_are_one_line(signed, unsigned, keys, evil_so, tmp_path):
    evil, marker = evil_so
    d = tamper(signed, tmp_path / "tampered", evil)
    marker.unlink(missing_ok=True)
    pub = str(keys / "a.pub")
    r = _engine("model", "inspect", str(d), "--verify", "--verify-key", pub, env=_env())
    line = one_line_error(r)
    assert str(d) in line and "changed after signing" in line
    r = _engine("model", "inspect", str(d), "--verify", env=_env(verify=pub))  # the same from the environment
    assert "changed after signing" in one_line_error(r)
    np_in = tmp_path / "X.npy"
    import numpy as np
    np.save(np_in, np.zeros((3, 9), np.float32))
    r = _engine("predict", str(unsigned), "--input", str(np_in), "--output", str(tmp_path / "y.npy"),
                "--verify-key", pub, env=_env())
    line = one_line_error(r)
    assert str(unsigned) in line and "unsigned" in line and not (tmp_path / "y.npy").exists()
    r = _engine("fpga", "generate", str(signed), "--out", str(tmp_path / "f"), env=_env(verify=keys / "b.pub"))
    line = one_line_error(r)
    assert str(signed) in line and "signature does not match key" in line and not (tmp_path / "f").exists()
    r = _engine("fpga", "generate", str(d), "--out", str(tmp_path / "f"), "--verify-key", pub, env=_env())
    assert "changed after signing" in one_line_error(r)
    r = _engine("fpga", "generate", str(signed / "model.json"), "--out", str(tmp_path / "f"), "--verify-key", pub,
                env=_env())
    assert "a bare XGBoost .json has no signature" in one_line_error(r)
    fd = tmp_path / "fd"
    fd.mkdir()
    (fd / "fpga.json").write_text(json.dumps({"format": 1, "files": {}}))
    for cmd in ("sim", "build"):
        r = _engine("fpga", cmd, str(fd), "--verify-key", pub, env=_env())
        assert "unsigned (fpga.sig missing)" in one_line_error(r), cmd
    assert not marker.exists()
    loose = tmp_path / "loose.key"
    shutil.copyfile(keys / "a.key", loose)
    loose.chmod(0o644)
    r = _engine("model", "sign", str(unsigned), "--key", str(loose), env=_env())
    assert "accessible by group/other" in one_line_error(r)


def test_cli_keygen_sign_inspect(unsigned, tmp_path):
    r = _engine("model", "keygen", "--out", str(tmp_path / "k"), env=_env())
    assert r.returncode == 0, r.stderr
    d = tmp_path / "a"
    shutil.copytree(unsigned, d)
    r = _engine("model", "inspect", str(d), env=_env())
    assert json.loads(r.stdout)["signature"] == "unsigned"
    r = _engine("model", "sign", str(d), "--key", str(tmp_path / "k" / "model.key"), env=_env())
    assert r.returncode == 0 and "manifest.sig" in r.stdout, r.stderr
    r = _engine("model", "inspect", str(d), env=_env())
    assert json.loads(r.stdout)["signature"] == "signed (not verified: no key configured)"
    r = _engine("model", "inspect", str(d), "--verify", env=_env(verify=tmp_path / "k" / "model.pub"))
    m = json.loads(r.stdout)
    assert r.returncode == 0 and m["verified"] and m["signature"].startswith("verified (ed25519 key ")


def test_run_config_verify_key(unsigned, keys, tmp_path):
    """`engine run --config` with [model] verify_key refuses an unsigned --model at start."""
    cfg = tmp_path / "engine.toml"
    cfg.write_text(f'[model]\ndir = "{unsigned}"\nverify_key = "{keys / "a.pub"}"\n')
    r = _engine("run", "--config", str(cfg), "--duration", "1", "--http", "none", "--pub", "none", "--no-doctor",
                "--hlog", "none", "--signals-out", str(tmp_path / "s.sig"), env=_env())
    assert r.returncode == 2, r.stderr
    assert f"engine: error: {unsigned}: unsigned (manifest.sig missing)" in r.stderr and "Traceback" not in r.stderr


def test_compile_and_fpga_generate_sign_what_they_write(keys, tmp_path):
    """engine compile --sign-key signs the artifact (its own validation load already checked
    against the verify key); fpga generate verifies it and signs fpga.json; fpga sim runs it."""
    import numpy as np
    import xgboost as xgb
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 4)).astype(np.float32)
    b = xgb.train({"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(X, X[:, 0] > 0), 6)
    b.save_model(str(tmp_path / "m.json"))
    env = _env(verify=keys / "a.pub")
    r = _engine("compile", str(tmp_path / "m.json"), "--out", str(tmp_path / "g"), "--generic", "--backends", "flat",
                env=env)
    assert "no signing key" in one_line_error(r) and not (tmp_path / "g").exists()
    r = _engine("compile", str(tmp_path / "m.json"), "--out", str(tmp_path / "g"), "--generic", "--backends", "flat",
                "--sign-key", str(keys / "a.key"), env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "g" / "manifest.sig").exists()
    r = _engine("fpga", "generate", str(tmp_path / "g"), "--out", str(tmp_path / "f"), "--sign-key",
                str(keys / "a.key"), env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "f" / "fpga.sig").exists()
    r = _engine("fpga", "sim", str(tmp_path / "f"), "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["cpp_bit_exact"], r.stderr
    r = _engine("fpga", "sim", str(tmp_path / "f"), "--json", env=_env(verify=keys / "b.pub"))
    assert "signature does not match key" in one_line_error(r)
