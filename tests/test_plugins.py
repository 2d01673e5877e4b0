"""A method from a module of one's own: one module named under ``plugins:`` and one ``methods:``
entry, nothing else edited. The module is CONTRIBUTING.md's walkthrough (ESimCSE's repeated
words, ``simcse_repeat``), read from there so the walkthrough stays true: Snakemake plans its
experiment without importing torch, the library trains it, and a method's declaration is checked
when the config is read (its training settings; the one spelling of its name)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cselab.errors import ConfigError
from cselab.pipeline import config as cc
from cselab.training import method_config as mc
from cselab.training.methods import find_config
from tests.helpers import read_yaml
from tests.test_config import deep_update
from tests.test_planning import HEAVY, PLAN

ROOT = Path(__file__).resolve().parents[1]


def walkthrough_module() -> str:
    """The method module of CONTRIBUTING.md's walkthrough."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    found = re.search(r"```python\n((?:(?!```).)*name = \"simcse_repeat\"(?:(?!```).)*)```", text, re.S)
    assert found, "CONTRIBUTING.md lost its walkthrough's module (name = \"simcse_repeat\")"
    return found[1]


def scratch_module() -> str:
    """The method module of CONTRIBUTING.md's walkthrough from scratch (DCL)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    found = re.search(r"```python\n((?:(?!```).)*name = \"dcl\"(?:(?!```).)*)```", text, re.S)
    assert found, "CONTRIBUTING.md lost its walkthrough from scratch (name = \"dcl\")"
    return found[1]


def test_the_method_written_from_scratch_plans_and_trains(tiny_bert, tmp_path):
    """CONTRIBUTING.md's method from scratch: its loss is the formula it cites, its config is read
    (declared settings, no undeclared read), its spec holds what it declared, and it trains."""
    import math

    import torch

    from cselab.training.loop import train
    from tests.helpers import make_corpus
    from tests.test_train import spec_for

    path = tmp_path / "dcl.py"
    path.write_text(scratch_module())
    try:
        cc.load_plugins([str(path)])
        module = sys.modules[f"cselab_plugin_{path.stem}"]
        u, v = torch.randn(5, 8), torch.randn(5, 8)
        s = torch.nn.functional.normalize(u, dim=-1) @ torch.nn.functional.normalize(v, dim=-1).T / 0.05
        by_hand = sum(-s[i, i] + torch.log(sum(torch.exp(s[i, j]) for j in range(5) if j != i)) for i in range(5)) / 5
        assert torch.allclose(module.decoupled_nce(u, v, 0.05), by_hand, atol=1e-5)
        cfg = validated(smoke_config(plugins=[str(path)], methods={"dcl": {}},
                                     experiments={"dcl-minilm": {"plm": "minilm", "method": "dcl"}}))
        spec = cc.experiment_spec(cfg, "dcl-minilm-s42")
        assert {"temperature", "pooler", "unpadded"} <= set(spec["training"]) and "batchnorm_stats" not in spec["training"]
        result = train(spec_for(tiny_bert, "dcl", max_steps=2, eval_steps=2, log_steps=1),
                       make_corpus(tmp_path / "corpus.txt", 40), lambda encoder: 1.0, tmp_path / "out")
        assert result.steps == 2 and all(math.isfinite(r["loss"]) for r in result.curve if "loss" in r)
    finally:
        mc._CONFIGS.pop("dcl", None)
        sys.modules.pop(f"cselab_plugin_{path.stem}", None)


@pytest.fixture
def plugin(tmp_path):
    """The walkthrough's module in a temporary folder; imported here by a test, it leaves the
    registries as they were."""
    path = tmp_path / "esimcse.py"
    path.write_text(walkthrough_module())
    yield path
    mc._CONFIGS.pop("simcse_repeat", None)
    sys.modules.pop(f"cselab_plugin_{path.stem}", None)


def smoke_config(**patch) -> dict:
    """configs/smoke.yaml (as a --configfile: over config.yaml) with ``patch`` merged in."""
    return deep_update(read_yaml(ROOT / "configs" / "smoke.yaml"), patch)


def with_repeat(plugin: Path) -> dict:
    return smoke_config(plugins=[str(plugin)], methods={"simcse_repeat": {"options": {"dup_rate": 0.2}}},
                        experiments={"repeat-minilm": {"plm": "minilm", "method": "simcse_repeat"}})


def validated(cfg: dict) -> dict:
    return cc.validate(deep_update(read_yaml(ROOT / "config.yaml"), cfg))


def test_a_plugin_method_is_planned_without_torch(plugin, tmp_path):
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(with_repeat(plugin)))
    target = "results/experiments/repeat-minilm-s42/train_summary.json"
    out = tmp_path / "imports.json"
    args = ["-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n", "--cores", "2",
            "--configfile", str(tmp_path / "test.yaml"), "--", target]
    proc = subprocess.run([sys.executable, "-c", PLAN, ",".join(HEAVY), str(out), *args],
                          capture_output=True, text=True, timeout=600)
    got = json.loads(out.read_text())
    assert got["code"] == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    jobs = re.findall(r"rule (\w+):\n(?:    .*\n)*?    wildcards: exp=([\w.-]+)", proc.stdout)
    assert ("train", "repeat-minilm-s42") in jobs, proc.stdout[-3000:]
    assert not got["loaded"] and not got["asked"], got  # the declaration planned it: no torch
    # what the train job gets: the method, its options, the training settings it declared
    spec = cc.experiment_spec(validated(with_repeat(plugin)), "repeat-minilm-s42")
    assert (spec["method"], spec["objective"], spec["options"]) == ("simcse_repeat", "simcse_repeat",
                                                                    {"dup_rate": 0.2})
    assert {"temperature", "pooler", "unpadded"} <= set(spec["training"]) and "batchnorm_stats" not in spec["training"]


def test_a_plugin_method_trains(plugin, tiny_bert, tmp_path):
    """Two steps on a tiny random BERT through the library's loop, the positive a longer sentence."""
    import csv
    import math

    import torch

    from cselab.models.encoder import load_encoder
    from cselab.training.loop import train
    from cselab.training.objective import build_objective, method_class
    from tests.helpers import make_corpus
    from tests.test_train import spec_for

    cc.load_plugins([str(plugin)])
    cls = method_class("simcse_repeat")  # built by its declaration, registered
    assert cls.name == "simcse_repeat" and issubclass(cls, find_config("simcse_repeat"))
    encoder = load_encoder(tiny_bert)
    objective = build_objective(spec_for(tiny_bert, "simcse_repeat", {"dup_rate": 1.0}), encoder)
    ids = encoder.tokenize(["a man plays a guitar on the street .", "hello world"], 16)
    batch = {**encoder.pad(ids), "lengths": torch.tensor([len(i) for i in ids])}
    torch.manual_seed(0)
    prepared = objective.prepare(batch)
    assert (prepared["pos_lengths"] >= batch["lengths"]).all() and (prepared["pos_lengths"] > batch["lengths"]).any()
    first = prepared["pos_ids"][0, : int(prepared["pos_lengths"][0])].tolist()
    assert first[0] == ids[0][0] and first[-1] == ids[0][-1] and set(first) == set(ids[0])  # repeats, nothing new

    spec = spec_for(tiny_bert, "simcse_repeat", {"dup_rate": 0.5}, max_steps=2, eval_steps=2, log_steps=1)
    result = train(spec, make_corpus(tmp_path / "corpus.txt", 40), lambda encoder: 1.0, tmp_path / "out")
    assert result.steps == 2
    losses = [float(r["loss"]) for r in csv.DictReader((tmp_path / "out" / "curve.csv").open()) if r.get("loss")]
    assert losses and all(math.isfinite(x) and x > 0 for x in losses)


def test_a_plugin_that_cannot_be_imported_is_one_message(tmp_path):
    with pytest.raises(ConfigError, match=r"plugins\[0\]'.*no plugin file"):
        cc.load_plugins([str(tmp_path / "missing.py")])
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    with pytest.raises(ConfigError, match=r"plugins\[1\]'.*could not import plugin.*no_such_module_here"):
        validated(smoke_config(plugins=["json", str(broken)]))


@pytest.fixture
def bad_method():
    """A declaration that reads a training setting which does not exist, registered for the test."""

    class BadKeys(mc.MethodConfig):
        name = "bad_keys"
        training_keys = ("temperature", "temprature")

    yield BadKeys
    mc._CONFIGS.pop("bad_keys", None)


def test_a_method_declaring_an_unknown_training_setting_is_refused_when_the_config_is_read(bad_method):
    cfg = smoke_config(methods={"bad_keys": {}}, experiments={"bad-minilm": {"plm": "minilm", "method": "bad_keys"}})
    with pytest.raises(ConfigError) as err:
        validated(cfg)
    msg = str(err.value)
    assert "methods.bad_keys" in msg and "'bad_keys'" in msg and "'temprature'" in msg
    assert "temperature" in msg.split("valid: ")[1].split(", ")


#: a plugin method that reads the contrastive temperature without declaring it
UNDECLARED = '''"""A method reading a training setting it does not declare (written by the test)."""
from cselab.models.heads import make_head
from cselab.training.methods import MethodConfig, Output, dropout_views


class SilentTemperature(MethodConfig):
    name = "silent_temperature"
    training_keys = ("pooler", "unpadded")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.head = make_head("mlp", ctx.hidden_size)
        self.temperature = ctx.training.temperature

    def forward(self, batch, shared):
        from cselab.training.losses import info_nce

        return Output({"contrastive": info_nce(*dropout_views(self.ctx, self.head, batch, shared), self.temperature)})
'''


def test_a_method_reading_a_setting_it_does_not_declare_is_refused_when_the_config_is_read(tmp_path):
    path = tmp_path / "silent.py"
    path.write_text(UNDECLARED)
    cfg = smoke_config(plugins=[str(path)], methods={"silent_temperature": {}},
                       experiments={"silent-minilm": {"plm": "minilm", "method": "silent_temperature"}})
    try:
        with pytest.raises(ConfigError) as err:
            validated(cfg)
    finally:
        mc._CONFIGS.pop("silent_temperature", None)
        sys.modules.pop(f"cselab_plugin_{path.stem}", None)
    msg = str(err.value)
    assert "methods.silent_temperature" in msg and "method 'silent_temperature'" in msg, msg
    assert "reads the training setting 'temperature'" in msg and "training_keys" in msg, msg
    assert f"({path}, line 13)" in msg, msg  # where the method reads it, not a generated module name


def test_the_built_in_methods_declare_every_setting_their_code_reads():
    from cselab.settings.training import OPERATIONAL
    from cselab.training.methods import registry

    built_in = {name: cls for name, cls in registry().items() if cls.__module__.startswith("cselab.training.methods")}
    assert len(built_in) >= 9
    for name, cls in built_in.items():
        assert cls.training_reads() <= set(cls.used_training_keys(cls.Options())), name
    assert "temperature" in built_in["simcse"].training_reads()  # the scan sees the reads it checks
    assert "pad_to_multiple_of" in built_in["compcse"].training_keys  # operational, declared: read, never in a spec
    assert set(OPERATIONAL) & set(cc.experiment_spec(validated(smoke_config()), "compcse-minilm-s42")["training"]) == set()


def _reads_dropout(ctx):
    return ctx.training.dropout


class _Reads(mc.MethodConfig):  # no name: not registered
    def __init__(self, ctx):
        t = ctx.training
        self.lr, self.on = t.lr, self.training  # nn.Module's own flag is no setting
        self.batch = getattr(self.ctx.training, "batch_size")
        self.max_len = ctx.training["max_len"]
        self.dropout = _reads_dropout(ctx)


def test_the_reads_of_the_training_settings_are_found_in_every_form():
    assert _Reads.training_reads() == {"lr", "batch_size", "max_len", "dropout"}


def test_one_spelling_per_method():
    # an entry named after a method trains it: no objective needed, another one refused
    cfg = validated(smoke_config())
    assert cfg["methods"]["simcse_edits"]["objective"] == "simcse_edits"
    with pytest.raises(ConfigError, match=r"'methods.simcse_edits.objective'.*named after the method"):
        validated(smoke_config(methods={"simcse_edits": {"objective": "simcse"}}))
    # a variant names its objective; an entry that is neither is one message
    assert validated(smoke_config())["methods"]["diffcse"]["objective"] == "simcse"
    with pytest.raises(ConfigError, match=r"'methods.simcse-edits'.*no method's name \(that entry is now "
                                          r"'simcse_edits'\)"):
        validated(smoke_config(methods={"simcse-edits": {"options": {"use": "positive"}}}))
    # the renamed entry's experiments keep their specs (a train job's params): nothing is retrained
    assert cc.experiment_spec(cfg, "edit-neg-mlm-minilm-s42")["method"] == "simcse-edits"


def test_a_method_reading_a_setting_it_did_not_declare_is_one_message(tiny_bert):
    """What the config check cannot see (a read by a computed name) is one message naming the
    method and the setting when the job builds it: the method holds exactly what it declared, so
    the read never sees a default. A spec that does not state a setting its method declares is
    refused too."""
    from cselab.models.encoder import load_encoder
    from cselab.training.objective import build_objective
    from tests.test_train import spec_for

    class ComputedRead(mc.MethodConfig):
        """Reads the temperature by a name the config check cannot see."""

        name = "computed_read"

        def __init__(self, ctx):
            super().__init__(ctx)
            self.temperature = getattr(ctx.training, "temper" + "ature")

        def forward(self, batch, shared):
            raise AssertionError("never reached: building the method fails")

    assert "temperature" not in ComputedRead.training_reads()  # passes planning
    encoder = load_encoder(tiny_bert)
    try:
        with pytest.raises(ConfigError, match=r"method 'computed_read' reads the training setting 'temperature', "
                                              r"which it does not declare.*training_keys.*: pooler, unpadded"):
            build_objective(spec_for(tiny_bert, "computed_read"), encoder)
    finally:
        mc._CONFIGS.pop("computed_read", None)
    spec = spec_for(tiny_bert)
    del spec["training"]["temperature"]  # as a spec built from a declaration without it
    with pytest.raises(ConfigError, match=r"method 'simcse' reads the training setting 'temperature', which the "
                                          r"spec of 'simcse-tiny-s7' does not state"):
        build_objective(spec, encoder)


def test_a_plugin_method_trains_in_its_snakemake_job(plugin, tmp_path_factory, tmp_path):
    """The train job (its own process, which knows the method only from the config's plugins)
    trains it: Snakemake runs the experiment's train rule on a tiny BERT and a synthetic corpus."""
    from tests.built import prepared_project
    from tests.test_workflow import snakemake, write_config

    prepared_project(tmp_path_factory, tmp_path)
    write_config(tmp_path)
    cfg = read_yaml(tmp_path / "test.yaml")
    cfg.update(plugins=[str(plugin)], methods={"simcse_repeat": {"options": {"dup_rate": 0.5}}},
               experiments={"repeat-tiny": {"plm": "tiny", "method": "simcse_repeat"}}, tables={})
    cfg["training"].update(max_steps=4, eval_steps=4)
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(cfg))
    target = "results/experiments/repeat-tiny-s42/train_summary.json"
    snakemake(tmp_path, "--cores", "1", target)
    summary = json.loads((tmp_path / target).read_text())
    assert summary["experiment"] == "repeat-tiny-s42" and summary["steps"] == 4, summary
