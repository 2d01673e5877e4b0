"""Pushing an export to the Hub (cselab.export.hub) against a loopback fake Hub
(tests/hub_server.py) with the real huggingface_hub client: nothing contacts huggingface.co."""

from __future__ import annotations

import json
import socket
import threading
import time
import types

import pytest

from cselab.errors import ExportError
from cselab.export.hub import PushSettings, check_export, hub_settings, push_export
from tests.hub_server import FakeHub

TOKEN = "hf_fake_token_0123456789"
ENV = "CSELAB_TEST_HUB_TOKEN"
CARD = """---
library_name: sentence-transformers
base_model: bert-base-uncased
pipeline_tag: sentence-similarity
model-index:
- name: cselab-exp1
  results:
  - task: {type: STS}
    dataset: {name: STS-B, type: mteb/stsbenchmark-sts}
    metrics: [{type: cosine_spearman, value: 81.2}]
---

# cselab-exp1

A sentence encoder.
"""
FILES = {
    "README.md": CARD.encode(),
    "config.json": b'{"model_type": "bert", "hidden_size": 32}\n',
    "modules.json": b'[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]\n',
    "onnx/model.onnx": bytes(range(256)) * 8 + b"\x00\xff onnx",
}
IGNORED = {".cache/huggingface/x.lock": b"lock", "__pycache__/m.cpython-311.pyc": b"\x00pyc",
           "onnx/__pycache__/n.pyc": b"\x00pyc", "model.lock": b""}


def run_within(fn, seconds: float = 20.0):
    """``fn()`` in a daemon thread; fail the test instead of hanging when it takes too long."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"push did not finish within {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture(autouse=True)
def _online_fast(monkeypatch):
    """tests/conftest.py sets HF_HUB_OFFLINE=1, which huggingface_hub reads once at import into
    ``constants.HF_HUB_OFFLINE`` (and then refuses every request, loopback included): switch
    the constant, not the variable. Retries back off without sleeping."""
    import huggingface_hub.constants
    import huggingface_hub.utils._http as http

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    fast = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    fast.sleep = lambda seconds: None
    monkeypatch.setattr(http, "time", fast)


@pytest.fixture(params=["xet-pipeline", "legacy-commit"])
def upload_path(request, monkeypatch):
    """Both upload paths of huggingface_hub 2.4: with hf_xet installed ``upload_folder`` runs the
    streamed multi-commit pipeline; with Xet disabled, ``create_commit`` (which also validates
    the card's YAML on the server)."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", request.param == "legacy-commit")
    return request.param


@pytest.fixture
def hub():
    h = FakeHub(token=TOKEN)
    yield h
    h.close()


@pytest.fixture
def export(tmp_path):
    folder = tmp_path / "export"
    for rel, data in {**FILES, **IGNORED}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def cfg(hub: FakeHub, **over) -> dict:
    return {"repo_id": "me/cselab-{exp}", "token_env": ENV, "endpoint": hub.endpoint,
            "private": True, "revision": "main", **over}


def push(folder, cfg_hub: dict, environ=None, experiment: str = "exp1") -> dict:
    """What the push rule does: settings from config and environment, then the push."""
    environ = {ENV: TOKEN} if environ is None else environ
    return run_within(lambda: push_export(folder, hub_settings(cfg_hub, environ), experiment))


def test_push_uploads_every_file_with_its_bytes(hub, export, upload_path):
    receipt = push(export, cfg(hub))

    create = hub.routed("create")
    assert len(create) == 1
    assert create[0].json() == {"name": "cselab-exp1", "organization": "me", "visibility": "private",
                                "type": "model"}
    assert hub.repos["me/cselab-exp1"].private
    commits = hub.routed("commit")
    assert len(commits) == 1 and commits[0].path == "/api/models/me/cselab-exp1/commit/main"
    assert commits[0].headers["content-type"] == "application/x-ndjson"
    lines = commits[0].ndjson()
    assert lines[0]["key"] == "header" and "exp1" in lines[0]["value"]["summary"]
    sent = {}
    for line in lines[1:]:
        assert line["key"] == "file" and line["value"]["encoding"] == "base64", line["key"]
        sent[line["value"]["path"]] = line["value"]["content"]
    import base64

    assert {p: base64.b64decode(c) for p, c in sent.items()} == FILES
    assert hub.repos["me/cselab-exp1"].files == FILES
    preupload = hub.routed("preupload")
    assert preupload and sorted(f["path"] for r in preupload for f in r.json()["files"]) == sorted(FILES)
    if upload_path == "legacy-commit":
        assert hub.routed("validate"), "the non-Xet path validates README.md's YAML on the server"
    assert all(r.route for r in hub.requests), [(r.method, r.path) for r in hub.requests if not r.route]
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in hub.requests)

    assert receipt["files"] == sorted(FILES)
    assert receipt["repo_id"] == "me/cselab-exp1" and receipt["experiment"] == "exp1"
    assert receipt["endpoint"] == hub.endpoint and receipt["revision"] == "main"
    assert receipt["commit_oid"] == hub.repos["me/cselab-exp1"].sha
    assert receipt["commit_url"] == f"{hub.endpoint}/me/cselab-exp1/commit/{receipt['commit_oid']}"
    assert TOKEN not in json.dumps(receipt)
    assert set(receipt) == {"repo_id", "endpoint", "revision", "commit_url", "commit_oid", "files", "experiment"}


def test_push_again_to_an_existing_repo(hub, export):
    push(export, cfg(hub, private=False))
    (export / "config.json").write_bytes(b'{"model_type": "bert", "hidden_size": 64}\n')
    push(export, cfg(hub, private=False))
    assert [r.json()["visibility"] for r in hub.routed("create")] == ["public", "public"]
    assert len(hub.commits) == 2
    assert hub.repos["me/cselab-exp1"].files["config.json"].endswith(b"64}\n")


@pytest.mark.parametrize("repo_id", [None, "", "   ", "missing-key"])
def test_no_repo_id(hub, export, repo_id):
    c = cfg(hub, repo_id=repo_id)
    if repo_id == "missing-key":
        del c["repo_id"]
    with pytest.raises(ExportError, match=r"hub\.repo_id") as err:
        push(export, c)
    assert "--config hub=" in str(err.value) and "config.yaml" in str(err.value)
    assert hub.requests == []


def test_repo_id_without_owner(hub, export):
    with pytest.raises(ExportError, match=r"hub\.repo_id.*owner/name"):
        push(export, cfg(hub, repo_id="cselab-{exp}"))
    assert hub.requests == []


@pytest.mark.parametrize("environ", [{}, {ENV: ""}, {ENV: "  "}, {"HF_TOKEN": TOKEN}])
def test_no_token(hub, export, environ):
    with pytest.raises(ExportError) as err:
        push(export, cfg(hub), environ=environ)
    msg = str(err.value)
    assert ENV in msg and "hub.token_env" in msg and TOKEN not in msg
    assert hub.requests == []


def test_default_token_variable_is_named(hub, export):
    c = cfg(hub)
    del c["token_env"]
    with pytest.raises(ExportError, match="HF_TOKEN.*hub.token_env"):
        push(export, c, environ={})
    assert push(export, c, environ={"HF_TOKEN": TOKEN})["files"] == sorted(FILES)


@pytest.mark.parametrize("card", [
    None,
    "# a model\n\nno front matter here\n",
    "---\nlibrary_name: [unclosed\n---\n",
    "---\nbase_model: bert-base-uncased\nmodel-index: []\n---\n",
    "---\nlibrary_name: sentence-transformers\n---\n",
    "---\n- a list\n---\n",
])
def test_export_without_a_model_card(hub, export, card):
    if card is None:
        (export / "README.md").unlink()
    else:
        (export / "README.md").write_text(card)
    with pytest.raises(ExportError, match="has no model card.*rule export_model") as err:
        push(export, cfg(hub))
    assert str(export) in str(err.value)
    assert hub.requests == []


def test_missing_export_folder(hub, tmp_path):
    with pytest.raises(ExportError, match="does not exist.*rule export_model"):
        push(tmp_path / "nope", cfg(hub))
    assert hub.requests == []


def test_check_export_returns_the_front_matter(export):
    meta = check_export(export)
    assert meta["library_name"] == "sentence-transformers" and meta["base_model"] == "bert-base-uncased"
    assert meta["model-index"][0]["name"] == "cselab-exp1"


@pytest.mark.parametrize("status,message", [(401, "Invalid username or password."),
                                            (500, "Internal Error - We're working hard to fix this")])
def test_server_refuses_the_commit(hub, export, upload_path, status, message):
    hub.fail["commit"] = (status, message)
    with pytest.raises(ExportError) as err:
        push(export, cfg(hub))
    msg = str(err.value)
    assert hub.endpoint in msg and "me/cselab-exp1" in msg and f"HTTP {status}: {message.rstrip('.')}" in msg
    assert not any(leak in msg for leak in ("HfHubHTTPError", "HTTPError", "Traceback", "raise", TOKEN))
    assert hub.commits == []
    # the Xet pipeline retries a failed commit with backoff (5 retries on 5xx), create_commit never
    retried = status == 500 and upload_path == "xet-pipeline"
    assert len(hub.routed("commit")) == (6 if retried else 1)
    if status == 401:
        assert "hub.token_env" in msg


def test_wrong_token(hub, export):
    with pytest.raises(ExportError, match="HTTP 401.*Invalid credentials.*write access") as err:
        push(export, cfg(hub), environ={ENV: "hf_wrong"})
    assert "hf_wrong" not in str(err.value)
    assert hub.routed("create") and not hub.routed("commit")


def test_unreachable_endpoint(export):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with pytest.raises(ExportError, match=f"{endpoint}.*me/cselab-exp1.*cannot reach"):
        push(export, {"repo_id": "me/cselab-{exp}", "token_env": ENV, "endpoint": endpoint})


def test_offline_mode_is_refused_before_any_request(hub, export, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ExportError, match="HF_HUB_OFFLINE"):
        push(export, cfg(hub))
    assert hub.requests == []


def test_exp_is_filled_and_revision_branch_created(hub, export):
    receipt = push(export, cfg(hub, repo_id="lab/{exp}-sts", revision="v1"), experiment="simcse_bert_s7")
    assert receipt["repo_id"] == "lab/simcse_bert_s7-sts" and receipt["revision"] == "v1"
    assert hub.routed("create")[0].json()["name"] == "simcse_bert_s7-sts"
    assert [r.path for r in hub.routed("branch")] == ["/api/models/lab/simcse_bert_s7-sts/branch/v1"]
    assert [r.path for r in hub.routed("commit")] == ["/api/models/lab/simcse_bert_s7-sts/commit/v1"]
    assert "{exp}" not in json.dumps([r.path for r in hub.requests])


def test_hub_settings_defaults():
    s = hub_settings({"repo_id": "me/m"}, {"HF_TOKEN": TOKEN})
    # a key the section leaves out takes the config's default: private, as config.yaml
    assert s == PushSettings(repo_id="me/m", token=TOKEN, endpoint="https://huggingface.co", private=True,
                             revision="main")
    assert TOKEN not in repr(s) and "token" not in s.logged()
    s = hub_settings({"repo_id": "me/m", "endpoint": None}, {"HF_TOKEN": TOKEN, "HF_ENDPOINT": "http://mirror:8/"})
    assert s.endpoint == "http://mirror:8"
    s = hub_settings({"repo_id": "me/m", "endpoint": "http://x", "private": False, "revision": "dev"}, {"HF_TOKEN": TOKEN})
    assert (s.endpoint, s.private, s.revision) == ("http://x", False, "dev")
