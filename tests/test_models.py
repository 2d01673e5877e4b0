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


def test_checkpoint_shape_reads_config_json_as_transformers_does(tiny_bert, tmp_path):
    from transformers import AutoConfig

    from cselab.models.checkpoints import checkpoint_shape

    for path in (tiny_bert, resolve_model("all-MiniLM-L6-v2")):
        cfg = AutoConfig.from_pretrained(path)
        assert checkpoint_shape(path) == {"model_type": cfg.model_type, "hidden_size": cfg.hidden_size,
                                          "num_hidden_layers": cfg.num_hidden_layers}
    (tmp_path / "config.json").write_text('{"hidden_size": 8')
    with pytest.raises(ModelError, match=r"cannot read the model's .*config.json: JSONDecodeError"):
        checkpoint_shape(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ModelError, match="names no model_type"):
        checkpoint_shape(tmp_path)


def test_rule_resolve_plms_job_imports_neither_torch_nor_transformers(tiny_bert, tmp_path):
    """Its record is the config's three fields; the job's process pays no model library for them."""
    import json
    import subprocess
    import sys

    out = tmp_path / "plm.json"
    code = f"""
import json, sys
from types import SimpleNamespace
from cselab.pipeline.jobs import data

class Run:
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def set_tags(self, tags): self.tags = tags

data.run = lambda smk, **kwargs: Run()
data.resolve_plm(SimpleNamespace(wildcards=SimpleNamespace(plm="tiny"), params=SimpleNamespace(model={str(tiny_bert)!r}),
                                 output=[{str(out)!r}]))
print(json.dumps(sorted(m for m in ("torch", "transformers") if m in sys.modules)))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
    record = json.loads(out.read_text())
    assert record["model_type"] == "bert" and record["path"] == str(tiny_bert.resolve())
