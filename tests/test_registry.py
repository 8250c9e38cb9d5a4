"""The model registry (models/registry.py, `engine model register|list|show|promote|rollback`):
verified artifacts copied in read-only under the sha256 of their manifest, versions per name,
promotion and rollback flipping the live link, and an engine run with --model registry:NAME
adopting each move between two ticks with nothing lost."""
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from engine.signal_log import read_signals
from tests.conftest import strategy_core
from tests.helpers.as_user import can_make_users, throwaway_users
from tests.helpers.daemon import Daemon, wait_until
from tests.helpers.feedutil import cli, one_line_error
from tests.test_hot_swap import second_model  # noqa: F401  (a module fixture: another real model)


def _files(d):
    """{relative path: sha256} of every file under d (what a version's bytes are)."""
    d = Path(d).resolve()
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def _listed(d):
    """The artifact's own files: those its manifest lists, and the manifest."""
    m = json.loads((Path(d) / "manifest.json").read_text())
    return set(m["files"]) | {"manifest.json"}


def test_register_promote_rollback(tmp_path, default_model, second_model):  # noqa: F811
    reg = tmp_path / "reg"
    r = cli("model", "register", str(default_model), "--name", "micro", "--registry", str(reg), "--promote")
    assert r.returncode == 0 and "registered micro@1" in r.stdout and "promoted micro@1" in r.stdout, r.stderr
    r = cli("model", "register", str(default_model), "--name", "micro", "--registry", str(reg))
    assert r.returncode == 0 and "already registered as micro@1" in r.stdout, r.stdout  # (the same bytes)
    r = cli("model", "register", str(second_model), "--name", "micro", "--registry", str(reg), "--note", "smaller")
    assert r.returncode == 0 and "registered micro@2" in r.stdout, r.stderr
    # content-addressed, read-only copies of exactly the artifact's files
    e = json.loads((reg / "names" / "micro.json").read_text())
    v1, v2 = e["versions"]
    for v, src in ((v1, default_model), (v2, second_model)):
        obj = reg / "objects" / v["id"]
        assert v["id"] == hashlib.sha256((Path(src) / "manifest.json").read_bytes()).hexdigest()
        assert {k: h for k, h in _files(src).items() if k in _listed(src)} == _files(obj)
        assert all(not (p.stat().st_mode & 0o222) for p in obj.rglob("*"))
    assert v2["note"] == "smaller" and v1["training"]["source"].startswith("synthetic://")
    assert isinstance(v1["metrics"]["test_auc"], float) and v1["strategy"]["name"] == "microstructure"
    live = reg / "live" / "micro"
    assert os.readlink(live) == f"../objects/{v1['id']}"

    r = cli("model", "list", "--registry", str(reg))
    assert r.stdout.strip() == "micro: 2 version(s), live: 1", r.stdout
    r = cli("model", "promote", "micro@2", "--registry", str(reg))
    assert r.returncode == 0 and os.readlink(live) == f"../objects/{v2['id']}", r.stderr
    r = cli("model", "list", "micro", "--registry", str(reg))
    assert "micro@2  (live)" in r.stdout and "micro@1  " in r.stdout, r.stdout
    r = cli("model", "show", "micro", "--registry", str(reg))
    assert json.loads(r.stdout)["version"] == 2 and json.loads(r.stdout)["live"] is True
    # rollback: the previous version's exact bytes are live again; once more: nothing before it
    r = cli("model", "rollback", "micro", "--registry", str(reg))
    assert r.returncode == 0 and "micro@1" in r.stdout, r.stderr
    assert {k: h for k, h in _files(default_model).items() if k in _listed(default_model)} == _files(live)
    assert "nothing to roll back to" in one_line_error(cli("model", "rollback", "micro", "--registry", str(reg)))
    r = cli("model", "inspect", "--verify", str(live))  # (what an engine loads from it: verified, bit-exact)
    assert r.returncode == 0 and json.loads(r.stdout)["verified"] is True, r.stderr


@pytest.mark.parametrize("args,said", [
    (["model", "promote", "micro@9"], "micro has no version 9"),
    (["model", "promote", "micro@x"], "the version after @ is a number"),
    (["model", "promote", "micro@\uff11"], "the version after @ is a number"),  # (a full-width 1: isdigit says yes)
    (["model", "show", "micro@\u00b9"], "the version after @ is a number"),  # (a superscript 1)
    (["model", "show", "nothere"], "no model named 'nothere'"),
    (["model", "register", "/etc", "--name", "m"], "not a model artifact"),
    (["model", "register", "DEFAULT", "--name", "../up"], "model name '../up'"),
])
def test_bad_registry_input_is_one_line(tmp_path, default_model, args, said):
    reg = tmp_path / "reg"
    assert cli("model", "register", str(default_model), "--name", "micro", "--registry", str(reg)).returncode == 0
    args = [str(default_model) if a == "DEFAULT" else a for a in args]
    assert said in one_line_error(cli(*args, "--registry", str(reg)))


def test_a_registry_others_can_write_is_refused(tmp_path, default_model):
    reg = tmp_path / "reg"
    assert cli("model", "register", str(default_model), "--name", "micro", "--registry", str(reg)).returncode == 0
    os.chmod(reg, stat.S_IRWXU | stat.S_IWGRP | stat.S_IXGRP | stat.S_IRGRP)
    assert "only it can write" in one_line_error(cli("model", "list", "--registry", str(reg)))


def _planted_by(other, script):
    """Run `script` as the other user (a shell)."""
    from tests.helpers.as_user import shell_as
    shell_as(other, script)


@pytest.fixture
def open_tmp():
    """A directory of ours other users may enter (pytest's tmp_path is under root's 0700 one)."""
    d = Path(tempfile.mkdtemp(prefix="engine-registry-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(bool(can_make_users()), reason=str(can_make_users()))
def test_live_names_objects_another_user_planted_are_refused_never_used(open_tmp, default_model, second_model,  # noqa: F811
                                                                        monkeypatch):
    """A registry directory that was open to others (made 0777, then closed by its owner): what another
    user made in it stays theirs. Their live/, names/ and objects/ were kept and used (engine model
    register wrote into them, a run loaded their live link); now each is refused by name. So is an
    entry they planted in an open subdirectory of ours: a name, a live link, an object."""
    from models.registry import RegistryError, resolve_model
    tmp_path = open_tmp
    reg = tmp_path / "reg"
    reg.mkdir()
    os.chmod(reg, 0o777)
    fake = "f" * 64
    with throwaway_users(1) as (other,):
        _planted_by(other, f"cd {reg} && mkdir names live objects objects/{fake} && "
                           f"echo '{{\"name\": \"micro\", \"versions\": [{{\"version\": 1, \"id\": \"{fake}\"}}]}}' "
                           f"> names/micro.json && ln -s ../objects/{fake} live/micro && chmod 755 names live objects")
        os.chmod(reg, 0o700)  # (its owner closes it: what was planted stays)
        for args in (("model", "register", str(default_model), "--name", "micro"), ("model", "list"),
                     ("model", "promote", "micro@1")):
            line = one_line_error(cli(*args, "--registry", str(reg)))
            assert f"registry {reg}: objects is owned by uid {other.pw_uid}" in line and "refused" in line, line
        monkeypatch.setenv("ENGINE_REGISTRY", str(reg))
        with pytest.raises(RegistryError, match=f"objects is owned by uid {other.pw_uid}"):
            resolve_model("registry:micro")
        assert not list((reg / "objects" / fake).iterdir())  # (nothing of ours went into theirs)

        # a registry of ours whose subdirectories were left open: each planted entry is refused by name
        good = tmp_path / "good"
        assert cli("model", "register", str(default_model), "--name", "micro", "--registry", str(good),
                   "--promote").returncode == 0
        assert cli("model", "register", str(second_model), "--name", "other", "--registry", str(good)).returncode == 0
        v2 = json.loads((good / "names" / "other.json").read_text())["versions"][0]["id"]
        os.chmod(good, 0o755)
        for sub in ("names", "live", "objects"):
            os.chmod(good / sub, 0o777)
        planted = json.dumps({"name": "evil", "versions": [{"version": 1, "id": v2}]})
        _planted_by(other, f"cd {good} && echo '{planted}' > names/evil.json && ln -sfn ../objects/{v2} live/micro && "
                           f"mkdir objects/{'e' * 64}")
        for sub in ("names", "live", "objects"):
            os.chmod(good / sub, 0o700)
        line = one_line_error(cli("model", "show", "evil", "--registry", str(good)))
        assert f"names/evil.json is owned by uid {other.pw_uid}" in line, line
        monkeypatch.setenv("ENGINE_REGISTRY", str(good))
        with pytest.raises(RegistryError, match=f"live/micro is owned by uid {other.pw_uid}"):
            resolve_model("registry:micro")  # (their link, though to one of our objects: a run would load it)
        e = json.loads((good / "names" / "micro.json").read_text())
        e["versions"].append(dict(e["versions"][0], version=2, id="e" * 64))
        (good / "names" / "micro.json").write_text(json.dumps(e))
        line = one_line_error(cli("model", "promote", "micro@2", "--registry", str(good)))
        assert f"objects/{'e' * 64} is owned by uid {other.pw_uid}" in line, line
        assert resolve_model("registry:micro@1").endswith(e["versions"][0]["id"])  # (ours: still served)


def test_a_running_engine_follows_promotion_and_rollback(tmp_path, default_model, second_model,  # noqa: F811
                                                        monkeypatch):
    reg = tmp_path / "reg"
    monkeypatch.setenv("ENGINE_REGISTRY", str(reg))
    for d in (default_model, second_model):
        assert cli("model", "register", str(d), "--name", "micro").returncode == 0
    assert cli("model", "promote", "micro@1").returncode == 0
    ids = [json.loads(cli("model", "show", f"micro@{v}").stdout)["model_id"] for v in (1, 2)]
    name = f"enginetest-registry-{os.getpid()}"
    d = Daemon(tmp_path, name, "--feed", "synthetic://?instruments=4&seed=3&rate=20000", "--model", "registry:micro",
               core=strategy_core())
    try:
        d.wait_for("endpoints in ")
        assert d.status()["model"]["id"] == ids[0]
        wait_until(lambda: d.status()["counters"]["signals"] > 20, "signals")
        assert cli("model", "promote", "micro@2").returncode == 0
        wait_until(lambda: d.status()["model"]["id"] == ids[1], "the promoted version loaded")
        wait_until(lambda: (read_signals(d.sig_path)["model_gen"] == 2).any(), "signals scored by it")
        assert cli("model", "rollback", "micro").returncode == 0
        wait_until(lambda: d.status()["model"]["id"] == ids[0], "the previous version loaded again")
        c = d.status()["counters"]
        assert c["lost"] == 0 and c["gaps"] == 0, c
    finally:
        d.stop()
    assert "micro now points at" in d.log()
    gens = set(read_signals(d.sig_path)["model_gen"].tolist())
    assert {1, 2} <= gens, gens


def test_rollback_to_a_named_version_and_the_default_registry(tmp_path, default_model, second_model,  # noqa: F811
                                                             monkeypatch):
    """rollback NAME@V steps back to an earlier live version, undoing every promotion since (the
    live one, one never live before: refused and said); with neither --registry nor
    ENGINE_REGISTRY the registry is the state directory's."""
    monkeypatch.delenv("ENGINE_REGISTRY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    third = tmp_path / "third"  # (another artifact: the same files, a manifest with one more key)
    shutil.copytree(default_model, third)
    m = json.loads((third / "manifest.json").read_text())
    (third / "manifest.json").write_text(json.dumps({**m, "note": "third"}))
    for d in (default_model, second_model, third):
        r = cli("model", "register", str(d), "--name", "micro")
        assert r.returncode == 0, r.stderr
    reg = tmp_path / "state" / "engine" / "registry"
    ids = [v["id"] for v in json.loads((reg / "names" / "micro.json").read_text())["versions"]]
    for v in (1, 2, 3):
        assert cli("model", "promote", f"micro@{v}").returncode == 0
    live = reg / "live" / "micro"
    assert "is the live version already" in one_line_error(cli("model", "rollback", "micro@3"))
    r = cli("model", "rollback", "micro@1")  # (two promotions undone)
    assert r.returncode == 0 and os.readlink(live) == f"../objects/{ids[0]}", r.stderr
    assert "nothing to roll back to" in one_line_error(cli("model", "rollback", "micro"))
    assert "not live before the live version" in one_line_error(cli("model", "rollback", "micro@2"))
    assert cli("model", "promote", "micro@3").returncode == 0
    r = cli("model", "rollback", "micro")
    assert r.returncode == 0 and os.readlink(live) == f"../objects/{ids[0]}", r.stderr
    assert [v["id"] for v in json.loads((reg / "names" / "micro.json").read_text())["versions"]] == ids


def test_with_a_verify_key_only_what_it_signed_is_registered(tmp_path, default_model, monkeypatch):
    from models import signing
    monkeypatch.delenv(signing.ENV_VERIFY, raising=False)
    monkeypatch.delenv(signing.ENV_SIGN, raising=False)
    keys = tmp_path / "keys"
    keys.mkdir()
    signing.keygen(keys, "a")
    signing.keygen(keys, "b")
    art = tmp_path / "art"
    shutil.copytree(default_model, art)
    for s in signing.SIGNATURE_FILES.values():
        (art / s).unlink(missing_ok=True)
    reg = tmp_path / "reg"
    said = one_line_error(cli("model", "register", str(art), "--name", "m", "--registry", str(reg),
                              "--verify-key", str(keys / "a.pub")))
    assert "manifest.sig" in said or "signature" in said, said
    signing.sign_directory(art, signing.load_key(keys / "a.key", private=True))
    said = one_line_error(cli("model", "register", str(art), "--name", "m", "--registry", str(reg),
                              "--verify-key", str(keys / "b.pub")))
    assert "signature" in said or "key" in said, said
    assert not (reg / "names" / "m.json").exists()  # (nothing registered by either)
    r = cli("model", "register", str(art), "--name", "m", "--registry", str(reg), "--verify-key", str(keys / "a.pub"))
    assert r.returncode == 0, r.stderr
    v = json.loads((reg / "names" / "m.json").read_text())["versions"][0]
    assert v["signature"].startswith("verified"), v["signature"]
    obj = reg / "objects" / v["id"]
    assert (obj / "manifest.sig").read_bytes() == (art / "manifest.sig").read_bytes()  # kept: loads check it again
    r = cli("model", "inspect", "--verify", str(obj), "--verify-key", str(keys / "a.pub"))
    assert r.returncode == 0 and json.loads(r.stdout)["verified"] is True, r.stderr
