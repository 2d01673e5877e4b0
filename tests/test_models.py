"""Model resolution: alias, local directory, clear errors for unknown models."""

import pytest

from cselab.errors import ModelError
from cselab.models.checkpoints import resolve_model


def test_minilm_alias():
    path = resolve_model("all-MiniLM-L6-v2")
    assert (path / "config.json").is_file()
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == path


def test_local_directory(tiny_bert, tmp_path):
    assert resolve_model(str(tiny_bert)) == tiny_bert.resolve()
    with pytest.raises(ModelError, match="has no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model("./no/such/model")


def test_unknown_hub_model_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match=r"unknown model 'no-such-org/no-such-model'.*not in the Hugging Face cache"):
        resolve_model("no-such-org/no-such-model")
