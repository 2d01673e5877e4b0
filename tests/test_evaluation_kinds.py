"""The evaluation kinds' registry (:mod:`cselab.evaluation.kinds`): every result file, rule, job
and default price of an evaluation comes from one declaration, and a kind of one's own is one
module named under ``plugins:`` plus its config entry, planned by Snakemake like a built-in one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cselab.errors import ConfigError
from cselab.evaluation import kinds as registry
from cselab.evaluation.kinds import evaluation_kinds, kind_of_rule, result_files
from cselab.pipeline import cost, outputs
from cselab.pipeline.config import load_plugins, load_schema, validate
from cselab.reporting.kinds import READS, table_kinds
from cselab.reporting.power import METRICS
from cselab.reporting.tables import EXTRA_COLUMNS
from tests.helpers import read_yaml
from tests.test_cost_plan import merged

ROOT = Path(__file__).resolve().parents[1]
BUILT_IN = {"sts", "stsb_dev", "stsb_dev_head", "transfer", "transfer_dev", "beir", "stsb_retrieval", "geometry"}

PLUGIN = '''"""A plugin evaluation kind for the registry test (written by the test): the number of
whitespace tokens of a few sentences, no model run."""

from dataclasses import dataclass, field

from cselab.evaluation.kinds import evaluation

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.", "The cat sleeps."]


@dataclass
class TokenCountSettings:
    lowercase: bool = False
    unit: str = field(default="word", metadata={"schema": {"enum": ["word", "char"]}})


@evaluation("token_count", results={"token_count": "token_count.json"}, inputs={"model": "model"},
            settings=TokenCountSettings, threads=1, resources={"mem_mb": 1000, "runtime": 5})
def token_count(smk):
    opts = smk.params.token_count

    def compute(model):
        texts = [s.lower() if opts["lowercase"] else s for s in SENTENCES]
        n = sum(len(t.split()) if opts["unit"] == "word" else len(t) for t in texts)
        return {"scores": {"tokens": n}}

    return compute, {"token_count": opts}
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin module in ``tmp_path`` (the working directory), loaded in this process for the
    test and forgotten after it."""
    (tmp_path / "token_count.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    load_plugins(["token_count.py"])
    yield tmp_path
    registry._KINDS.pop("token_count", None)
    sys.modules.pop("cselab_plugin_token_count", None)


def smoke_config(**patch) -> dict:
    """config.yaml with configs/smoke.yaml and ``patch`` merged over it, as Snakemake merges them."""
    config = merged("configs/smoke.yaml")
    for key, value in patch.items():
        config[key] = {**config[key], **value} if isinstance(config.get(key), dict) else value
    return config


def test_every_result_comes_from_a_registered_kind():
    kinds = evaluation_kinds()
    assert BUILT_IN <= set(kinds)
    assert dict(outputs.RESULT) == {r: f"{outputs.EXPERIMENT_DIR}/{f}" for r, f in result_files().items()}
    owners = [r for k in kinds.values() for r in k.results]
    assert len(owners) == len(set(owners))  # each result is one kind's
    for kind in kinds.values():
        assert kind_of_rule(kind.rule) is kind
        first, named = kind.outputs()
        assert first == [next(iter(kind.results))] and set(named.values()) | set(first) == set(kind.results)
    assert outputs.RESULT["sts"] == "results/experiments/{exp}/sts.json"
    assert kinds["sts"].outputs() == (["sts"], {"pairs": "sts_pairs"})
    assert kind_of_rule("evaluate_beir_shared_fever") is kinds["beir"]  # a shared corpus's job: its kind's


def test_every_result_a_table_figure_or_planner_reads_is_registered():
    registered = set(outputs.RESULT)
    for name, kind in table_kinds().items():
        assert set(kind.results) <= registered, name
    assert set(EXTRA_COLUMNS.values()) <= registered
    assert {m[0] for m in METRICS.values()} <= registered
    assert {"stsb_dev"} <= registered and "stsb_dev" in READS


def test_no_rule_or_price_lists_a_kind_by_hand():
    """The rules are generated from the registry, and each kind has a price (its own or the default)."""
    smk = (ROOT / "rules" / "evaluate.smk").read_text()
    assert not [k for k in evaluation_kinds() if f'"{k}"' in smk or f"evaluate_{k}" in smk]
    for kind in evaluation_kinds().values():
        model = cost.model_of(cost.DryJob(kind.rule, {"exp": "x"}))
        assert model is not cost.fixed, kind.name
    assert cost.model_of(cost.DryJob("evaluate_stsb_dev_head")).__doc__.startswith("Evaluation kind")


def test_the_registry_imports_no_heavy_package():
    code = ("import sys; from cselab.evaluation.kinds import evaluation_kinds; from cselab.pipeline import outputs;"
            "evaluation_kinds(); dict(outputs.RESULT);"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'scipy', 'sklearn', 'transformers'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_a_plugin_kind_gets_its_result_job_settings_and_price(plugin):
    kind = evaluation_kinds()["token_count"]
    assert outputs.RESULT["token_count"] == "results/experiments/{exp}/token_count.json"
    assert kind_of_rule("evaluate_token_count") is kind and kind.rule == "evaluate_token_count"
    schema = load_schema()["properties"]["evaluation"]["properties"]["token_count"]
    assert schema["properties"]["unit"] == {"type": "string", "enum": ["word", "char"]}
    cfg = validate(smoke_config(plugins=["token_count.py"], evaluation={"token_count": {"lowercase": True}}))
    assert kind.rule_params(cfg) == {"token_count": {"lowercase": True, "unit": "word"}}
    with pytest.raises(ConfigError, match="evaluation.token_count.unit"):
        validate(smoke_config(plugins=["token_count.py"], evaluation={"token_count": {"unit": "byte"}}))

    class Params:
        token_count = {"lowercase": False, "unit": "word"}

    compute, logged = kind.job(type("Job", (), {"params": Params})())
    assert compute(None) == {"scores": {"tokens": 15}} and logged == {"token_count": Params.token_count}
    assert cost.model_of(cost.DryJob("evaluate_token_count", {"exp": "x"})).__doc__.startswith("Evaluation kind")


def test_a_plugin_kind_is_planned_by_snakemake(tmp_path):
    """A module under ``plugins:`` registering a kind, and its config entry: Snakemake plans its
    rule for its result file, with the kind's log and resources; without the plugin the entry
    is an unknown key."""
    (tmp_path / "token_count.py").write_text(PLUGIN)
    (tmp_path / "plugin.yaml").write_text(yaml.safe_dump(
        {"plugins": ["token_count.py"], "evaluation": {"token_count": {"unit": "char"}}}))
    target = "results/experiments/untrained-minilm/token_count.json"

    def plan(*configfiles):
        cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "-n",
               "--cores", "2", "--configfile", str(ROOT / "configs" / "smoke.yaml"), *configfiles, "--", target]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    proc = plan(str(tmp_path / "plugin.yaml"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    block = proc.stdout.split("rule evaluate_token_count:", 1)[1].split("\n\n", 1)[0]
    assert f"output: {target}" in block and "logs/evaluate_token_count/untrained-minilm.log" in block
    assert "mem_mb=1000" in block and "threads:" not in block  # one thread (Snakemake prints more only)
    assert "resolve_plm" in proc.stdout  # it reads the model as every evaluation does

    (tmp_path / "no_plugin.yaml").write_text(json.dumps({"evaluation": {"token_count": {"unit": "char"}}}))
    proc = plan(str(tmp_path / "no_plugin.yaml"))
    assert proc.returncode != 0 and "token_count" in proc.stdout + proc.stderr


def test_a_plugin_kind_runs_its_job_through_snakemake(tmp_path, tiny_bert):
    """The job process loads the config's plugins too: the plugin's rule runs its job function,
    with its settings as params, and writes its result file."""
    from tests.helpers import make_corpus, make_senteval
    from tests.test_workflow import snakemake, write_config

    make_senteval(tmp_path / "data" / "senteval")
    make_corpus(tmp_path / "data" / "corpus.txt", 50)
    (tmp_path / "tiny-bert").symlink_to(tiny_bert)
    write_config(tmp_path)
    config = read_yaml(tmp_path / "test.yaml")
    config["plugins"] = ["token_count.py"]
    config["evaluation"]["token_count"] = {"unit": "char"}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "token_count.py").write_text(PLUGIN)

    target = "results/experiments/untrained-tiny/token_count.json"
    snakemake(tmp_path, "--cores", "1", "--", target)
    result = json.loads((tmp_path / target).read_text())
    sentences = ["A man is playing a guitar.", "Two dogs run on the beach.", "The cat sleeps."]
    assert result["scores"] == {"tokens": sum(map(len, sentences))} and result["experiment"] == "untrained-tiny"
    assert (tmp_path / "logs" / "evaluate_token_count" / "untrained-tiny.log").is_file()
