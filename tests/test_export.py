"""Results and models in the field's formats: MTEB result files read back by MTEB's own loader,
MTEB's evaluator against ours on the real SentEval STS files, the model card."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from cselab.export import card as cards
from cselab.export.mteb_results import data_revision, read_main_scores, write_mteb_results
from cselab.settings.sections import Card
from tests.helpers import find_shared_data

STS = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
       "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
MTEB_NAMES = {"STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
              "STS-B": "STSBenchmark", "SICK-R": "SICK-R"}


def sts_result(offset: float = 0.0) -> dict:
    tasks = {t: {"spearman_all": 70.0 + i + offset, "pearson_all": 60.0 + i} for i, t in enumerate(STS)}
    return {"tasks": tasks, "scores": {c: tasks[t]["spearman_all"] for t, c in STS.items()}, "wall_seconds": 3.0,
            "mlflow_run_id": None}


TRANSFER = {"scores": {"MR": 80.5, "CR": 85.25, "SUBJ": 94.0, "MPQA": 88.0, "SST2": 85.0, "TREC": 90.2, "MRPC": 75.1}}
BEIR = {"dataset": "scifact", "metrics": {"ndcg@10": 0.612, "recall@100": 0.9, "map@10": 0.55}}
MANIFEST = {"source": "/somewhere", "root": "/somewhere/senteval", "tasks": {"STS12": {"files": {"a": {"sha256": "x"}}}}}


def sources() -> list:
    """(kind, result, data manifest) of one experiment's STS, transfer and BEIR evaluations."""
    return [(kind, doc, MANIFEST) for kind, doc in {"sts": sts_result(), "transfer": TRANSFER, "beir": BEIR}.items()]


def test_mteb_files_read_back_by_mtebs_loader(tmp_path):
    import mteb

    out = tmp_path / "mteb" / "simcse-x-s1"
    written = write_mteb_results(out, "simcse-x-s1", "rev123", sources())
    assert sum(len(v) for v in written) == 7 + 7 + 1
    scores = read_main_scores(out)
    for column, name in MTEB_NAMES.items():
        assert scores[name] == pytest.approx(sts_result()["scores"][column] / 100, abs=1e-6)
    assert scores["SentEvalMR"] == pytest.approx(0.805) and scores["SciFact"] == pytest.approx(0.612)
    doc = json.loads((out / "STS12.json").read_text())
    assert doc["dataset_revision"] == data_revision(MANIFEST) and doc["mteb_version"] == mteb.__version__
    entry = doc["scores"]["test"][0]
    assert entry["main_score"] == entry["cosine_spearman"] and entry["hf_subset"] == "default"
    assert entry["languages"] == ["eng-Latn"]
    assert json.loads((out / "SciFact.json").read_text())["scores"]["test"][0]["ndcg_at_10"] == pytest.approx(0.612)
    # MTEB's result cache (model/revision folders with model_meta.json) loads the folder as one model revision
    cache = tmp_path / "cache" / "results" / "cselab__simcse-x-s1"
    cache.mkdir(parents=True)
    os.symlink(out, cache / "rev123")
    loaded = mteb.ResultCache(tmp_path / "cache").load_results(include_remote=False)
    (model,) = loaded.model_results
    assert (model.model_name, model.model_revision) == ("cselab/simcse-x-s1", "rev123")
    got = {t.task_name: t.get_score() for t in model.task_results}
    assert got["STSBenchmark"] == pytest.approx(0.75) and len(got) == 15


def test_data_revision_is_the_content_not_the_location():
    moved = {**MANIFEST, "source": "/elsewhere", "root": "/elsewhere/senteval"}
    assert data_revision(moved) == data_revision(MANIFEST)
    changed = {**MANIFEST, "tasks": {"STS12": {"files": {"a": {"sha256": "y"}}}}}
    assert data_revision(changed) != data_revision(MANIFEST)


@pytest.mark.skipif(find_shared_data() is None, reason="needs the real SentEval tree (../shared/data)")
def test_mteb_evaluator_agrees_with_ours_on_real_sts():
    """The untrained MiniLM (a real checkpoint) on the real SentEval files: MTEB's STS task
    classes and sentence-transformers' encoding vs our encoder and evaluation, per task."""
    from cselab.evaluation.sts import evaluate_sts
    from cselab.export.mteb_check import compare, mteb_sts_scores
    from cselab.models.checkpoints import resolve_model
    from cselab.models.encoder import load_encoder

    root = find_shared_data() / "senteval"
    model_dir = resolve_model("all-MiniLM-L6-v2")
    # a year's subsets concatenated (STS13's three: 1,500 pairs, against STS12's five and 3,108),
    # a year with unscored pairs, STS-B
    tasks = ["STS13", "STS16", "STSBenchmark"]
    encoder = load_encoder(model_dir, pooler="cls")
    ours = evaluate_sts(lambda s: encoder.encode(s, batch_size=128, max_len=512), root, tasks)["scores"]
    theirs = mteb_sts_scores(model_dir, root, "cls", 512, list(ours))
    rows = compare("untrained-minilm", ours, theirs, tolerance=0.01)
    assert len(rows) == 3 and all(r["agree"] for r in rows), rows
    assert all(50 < r["mteb"] < 95 for r in rows)  # real scores, not a constant


def test_mteb_check_flags_a_disagreement(tmp_path):
    from cselab.export.mteb_check import compare, write_check

    rows = compare("e", {"STS12": 70.0, "STS-B": 80.0}, {"STS12": 70.004, "STS-B": 80.5}, tolerance=0.01)
    assert [r["agree"] for r in rows] == [True, False]
    write_check(rows, tmp_path / "c.csv", tmp_path / "c.md")
    md = (tmp_path / "c.md").read_text()
    assert "1 task(s) differ" in md and "e/STS-B (+0.5000)" in md


def card_inputs():
    spec = {"id": "simcse-minilm-s1", "name": "simcse-minilm", "plm": "minilm", "model": "all-MiniLM-L6-v2",
            "method": "simcse", "objective": "simcse", "weight": 1.0, "signature": "simcse", "options": {"head": "mlp"},
            "auxiliaries": {}, "seed": 1,
            "training": {"batch_size": 64, "lr": 3e-5, "max_steps": 50, "max_len": 32, "temperature": 0.05,
                         "pooler": "cls", "dropout": 0.1, "precision": "fp32"}}
    rng = np.random.default_rng(0)
    gold = {c: rng.uniform(0, 5, 200) for c in STS.values()}
    sts_pairs = {c: (g, g + rng.normal(0, 1.5, 200)) for c, g in gold.items()}
    labels = {t: rng.integers(0, 2, 300) for t in TRANSFER["scores"]}
    transfer_pairs = {t: (y, np.where(rng.random(300) < 0.8, y, 1 - y)) for t, y in labels.items()}
    evaluation = {"sts": sts_result(), "sts_ci": cards.item_intervals(sts_pairs, "spearman", 200, 0.95),
                  "transfer": TRANSFER, "transfer_ci": cards.item_intervals(transfer_pairs, "accuracy", 200, 0.95),
                  "stsb_dev": 81.2}
    provenance = {"data": {"SentEval": "a" * 64, "corpus": "b" * 64}, "data_revision": "a" * 64, "commit": "abc123",
                  "invocation": "snakemake --cores 2 --configfile configs/smoke.yaml results/table1.csv",
                  "command": cards.reproduce_command(["--cores", "2", "--configfile", "configs/smoke.yaml",
                                                      "results/table1.csv"], "results/export/simcse-minilm-s1")}
    options = cards.CardOptions(Card(license="apache-2.0", datasets=("princeton-nlp/datasets-for-simcse",)),
                                pooler="cls", confidence=0.95)
    return spec, {"steps": 50, "best_step": 40}, evaluation, provenance, options


def front_matter(text: str, folder: Path) -> dict:
    """The card's front matter as the push rule reads it (it refuses a folder without one)."""
    from cselab.export.hub import check_export

    folder.mkdir(exist_ok=True)
    (folder / "README.md").write_text(text)
    return check_export(folder)


def test_card_front_matter_names_base_model_and_every_score(tmp_path):
    spec, summary, evaluation, provenance, options = card_inputs()
    text = cards.render_card(spec, summary, evaluation, provenance, options)
    meta = front_matter(text, tmp_path / "export")
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "sentence-similarity"
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["datasets"] == ["princeton-nlp/datasets-for-simcse"] and "simcse" in meta["tags"]
    (index,) = meta["model-index"]
    reported = {(r["dataset"]["type"], r["metrics"][0]["type"]): r["metrics"][0]["value"] for r in index["results"]}
    for column, score in evaluation["sts"]["scores"].items():
        assert reported[(f"senteval/{column}", "cosine_spearman")] == pytest.approx(score, abs=0.005)
    for task, acc in TRANSFER["scores"].items():
        assert reported[(f"senteval/{task}", "accuracy")] == pytest.approx(acc, abs=0.005)
    assert all(r["dataset"]["revision"] == "a" * 64 for r in index["results"])
    body = text.split("\n---\n", 1)[1]
    ci = evaluation["sts_ci"]["STS12"]
    assert f"[{ci['ci_low']:.2f}, {ci['ci_high']:.2f}]" in body and "95% CI" in body
    assert "abc123" in body and "snakemake --cores all --configfile configs/smoke.yaml results/export/simcse-minilm-s1" in body
    assert "| batch_size | 64 |" in body and "b" * 64 in body


def test_item_intervals_bracket_the_score():
    rng = np.random.default_rng(1)
    g = rng.normal(size=300)
    ci = cards.item_intervals({"A": (g, g + rng.normal(size=300)), "B": (g, g + rng.normal(size=300) * 3)},
                              "spearman", 300, 0.95)
    for v in ci.values():
        assert v["ci_low"] < v["score"] < v["ci_high"] and v["ci_high"] - v["ci_low"] < 20
    assert ci["Avg"]["score"] == pytest.approx((ci["A"]["score"] + ci["B"]["score"]) / 2)


def test_reproduce_command_keeps_config_options_only():
    argv = ["--cores", "8", "--configfile", "configs/smoke.yaml", "configs/smoke_seeds.yaml", "--config",
            "data_dir=../shared/data", "seeds=[1]", "--use-conda", "results/table1.csv", "exports"]
    assert cards.reproduce_command(argv, "results/export/e") == (
        "snakemake --cores all --configfile configs/smoke.yaml configs/smoke_seeds.yaml --config "
        "data_dir=../shared/data 'seeds=[1]' results/export/e")
    assert cards.base_model("/models/local") is None and cards.base_model("bert-base-uncased") == "bert-base-uncased"
