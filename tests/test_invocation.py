"""What an invocation reads of its command line (cselab.pipeline.invocation), the resources a
training job asks for, and the progress lines a long job writes (cselab.io.Progress)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cselab.io import Progress
from cselab.pipeline import invocation as inv
from tests.test_config import default, smoke  # noqa: F401 (fixtures: the shipped configs)


@pytest.mark.parametrize("args, dry, no_jobs, forced", [
    (["-n", "results/table1.csv"], True, False, False),
    (["-pn", "results/table1.csv"], True, False, False),
    (["--cores", "2", "results/table1.csv"], False, False, False),
    (["--unlock"], False, True, False),
    (["--touch", "--cores", "1"], False, True, False),
    (["--forcerun", "prepare_corpus"], False, False, True),
    (["-F"], False, False, True),
])
def test_the_command_line_says_what_the_invocation_does(args, dry, no_jobs, forced):
    run = inv.Invocation.of(args, main=True)
    assert (run.dry_run, run.no_jobs, run.forced_corpus) == (dry, no_jobs, forced)
    assert run.executing == (not dry and not no_jobs)
    assert not inv.Invocation.of(args, main=False).executing  # a cluster job re-reading the Snakefile


def test_training_asks_for_gpus_on_a_cluster_or_a_gpu_machine(monkeypatch):
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)
    monkeypatch.delenv(inv.GPUS_ENV, raising=False)
    monkeypatch.setattr("glob.glob", lambda pattern: [])  # no /dev/nvidia*
    assert not inv.asks_for_gpus(["--cores", "2", "results/table1.csv"])
    for args in (["--profile", "profiles/slurm"], ["--executor", "slurm"], ["-e", "slurm"],
                 ["--workflow-profile=profiles/x"]):
        assert inv.asks_for_gpus(args), args
    monkeypatch.setenv(inv.GPUS_ENV, "1")  # the cost plan prices GPU nodes from anywhere
    assert inv.asks_for_gpus(["--cores", "2"])
    monkeypatch.delenv(inv.GPUS_ENV)
    monkeypatch.setattr("glob.glob", lambda pattern: ["/dev/nvidia0"])
    assert inv.asks_for_gpus(["--cores", "8"])


def test_a_training_jobs_memory_follows_its_model_and_batch(smoke, default):
    from cselab.pipeline import experiments as E
    from cselab.pipeline.config import validate

    smoke_cfg, paper = validate(smoke), validate(default)
    minilm = E.training_mem_mb(E.typed_spec(smoke_cfg, "simcse-minilm-s42"))
    base = E.training_mem_mb(E.typed_spec(paper, "simcse-bert-base-s42"))
    large = E.training_mem_mb(E.typed_spec(paper, "simcse-bert-large-s42"))
    assert 3000 < minilm < base < large < 32000
    assert E.training_mem_mb(E.typed_spec(paper, "simcse-bert-base-s42"), processes=4) > 3 * base
    unknown = dict(E.experiment_spec(paper, "simcse-bert-base-s42"), model="/no/such/model")
    assert E.training_mem_mb(unknown) == 32000


def test_progress_lines_say_where_a_loop_stands(caplog, monkeypatch):
    clock = iter([0.0, 10.0, 40.0, 50.0, 100.0])
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    with caplog.at_level(logging.INFO, logger="progress-test"):
        p = Progress(logging.getLogger("progress-test"), "training x", 100, "steps")  # t = 0 (start, last)
        p.update(10)  # t = 10: under 30 s since the last line, nothing
        p.update(40)  # t = 40: a line
        p.update(45)  # t = 50: nothing
        p.close()  # t = 100
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "training x: 0 of 100 steps (0%), 0.0 steps/s, 0:00 elapsed, ETA unknown"
    assert lines[1] == "training x: 40 of 100 steps (40%), 1.0 steps/s, 0:40 elapsed, ETA 1:00"
    assert lines[2] == "training x: 45 of 100 steps (45%), 0.5 steps/s, 1:40 elapsed, done"
    assert len(lines) == 3


def test_a_job_reads_its_operational_settings_from_the_config_its_plan_was_made_of(smoke):
    """Snakemake's config, as a job receives it, is the validated config (a sweep's points and a
    methods table's experiments included) beside the config as given (the cost plan's): a job's
    operational settings come from the one merge its spec was made with."""
    from types import SimpleNamespace

    from cselab.pipeline import experiments as E
    from cselab.pipeline.config import validate
    from cselab.pipeline.operations import GIVEN, operations

    smoke["training"]["checkpoint_steps"] = 7
    smoke["methods"]["simcse"]["training"] = {"log_steps": 3}
    config = dict(smoke)
    cfg = validate(config)
    inv.hand_to_jobs(config, cfg)
    assert config[GIVEN] == smoke and {k: v for k, v in config.items() if k != GIVEN} == cfg
    point = next(e for e in cfg["experiments"] if "@" in e and cfg["experiments"][e]["method"] == "simcse")
    assert point not in smoke["experiments"]  # a sweep's point: only the validated config has it
    smk = SimpleNamespace(config=config)
    for exp in (f"{point}-s42", "simcse-minilm-s42"):
        ops = operations(smk, exp_id=exp).training
        assert ops == E.operational_settings(cfg, exp) and ops["checkpoint_steps"] == 7 and ops["log_steps"] == 3
    stage = next(iter(cfg["pretraining"]))
    assert operations(smk, stage=stage).training == E.operational_settings(cfg, stage=stage)
    assert operations(smk).config == smoke  # what the cost plan's dry run plans: the config as given


def _prepared(root, corpus=b"one sentence .\n"):
    """A project folder with a prepared corpus and its manifest, a PLM record and a SentEval record."""
    import hashlib
    import json

    (root / "resources/corpus").mkdir(parents=True)
    (root / "resources/corpus/corpus.txt").write_bytes(corpus)
    (root / "resources/corpus/manifest.json").write_text(json.dumps(
        {"out": "resources/corpus/corpus.txt", "out_bytes": len(corpus), "out_sha256": hashlib.sha256(corpus).hexdigest()}))
    (root / "resources/plms").mkdir(parents=True)
    (root / "resources/plms/tiny.json").write_text(json.dumps({"model": "./tiny-bert"}))
    (root / "resources/senteval/reads").mkdir(parents=True)
    (root / "resources/senteval/reads/stsb-dev.json").write_text(json.dumps({"root": "data", "files": {}}))


@pytest.mark.parametrize("damage,rule", [
    (lambda r: (r / "resources/plms/tiny.json").write_text('{"model": "./ti'), "resolve_plm"),
    (lambda r: (r / "resources/plms/tiny.json").write_text("[]"), "resolve_plm"),
    (lambda r: (r / "resources/senteval/reads/stsb-dev.json").write_bytes(b""), "senteval_reads"),
    (lambda r: (r / "resources/corpus/manifest.json").write_text('{"out": "resources/corpus/corpus.txt"}'),
     "prepare_corpus"),
])
def test_a_damaged_prepared_record_stops_planning_naming_it(tmp_path, monkeypatch, damage, rule):
    """Before Snakemake plans: a damaged record would make it plan the jobs that read it, and a job
    stopping on it would have had its outputs (an intact model) removed first. Forcing the rule that
    writes the record lets planning go on."""
    monkeypatch.chdir(tmp_path)
    _prepared(tmp_path)
    inv.check_prepared(inv.Invocation.of(["results/table1.csv"], True))  # sound: nothing said
    damage(tmp_path)
    with pytest.raises(inv.DataError, match=f"is damaged .*rule {rule} writes it: rebuild it with snakemake "
                                            f"--forcerun {rule}"):
        inv.check_prepared(inv.Invocation.of(["results/table1.csv"], True))
    inv.check_prepared(inv.Invocation.of(["--forcerun", rule, "--", "results/table1.csv"], True))


def test_a_changed_prepared_corpus_stops_planning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _prepared(tmp_path)
    (tmp_path / "resources/corpus/corpus.txt").write_bytes(b"one sentence")  # cut
    with pytest.raises(inv.DataError, match="resources/corpus/corpus.txt changed after rule prepare_corpus"):
        inv.check_prepared(inv.Invocation.of(["results/table1.csv"], True))
    inv.check_prepared(inv.Invocation.of(["-R", "prepare_corpus", "--", "results/table1.csv"], True))
    (tmp_path / "resources/corpus/corpus.txt").unlink()  # a missing corpus: Snakemake's to rebuild where needed
    inv.check_prepared(inv.Invocation.of(["results/table1.csv"], True))


@pytest.mark.parametrize("record", ["[]", '{"model.safetensors": {"bytes": 3}}', '{"model.safetensors": 7}', "{"])
def test_a_damaged_model_record_is_one_warning(tmp_path, caplog, record):
    """A model's files.json of another shape (or cut) cannot check the model: one warning naming it,
    the model used as it is (it may be intact), never a traceback at planning."""
    from cselab.models.checkpoints import FILES_RECORD, damaged_model

    (tmp_path / "model.safetensors").write_bytes(b"abc")
    (tmp_path / FILES_RECORD).write_text(record)
    with caplog.at_level(logging.WARNING):
        assert damaged_model(tmp_path) is None
    assert f"its record {tmp_path / FILES_RECORD} is damaged" in caplog.text


def test_an_empty_mlflow_store_is_one_message(tmp_path):
    """A 0-byte mlflow.db: MLflow would make a new store in it without a word."""
    from cselab.errors import TrackingError
    from cselab.pipeline.tracking import refuse_empty_store

    db = tmp_path / "mlflow.db"
    refuse_empty_store(f"sqlite:///{db}")  # none yet: a new store is made
    db.write_bytes(b"")
    with pytest.raises(TrackingError, match=r"mlflow.db is empty \(0 bytes\).*mv .*mlflow.db .*mlflow.db.damaged"):
        refuse_empty_store(f"sqlite:///{db}")


def test_a_damaged_training_summary_is_named(tmp_path):
    from cselab.reporting.tables import collapse_notes

    summary = tmp_path / "train_summary.json"
    summary.write_text('{"steps": 5, "collapse_alarms": [')
    with pytest.raises(inv.DataError, match=f"the training summary {summary} is damaged .*snakemake --force {summary}"):
        collapse_notes([{"id": "x-s1", "summary": str(summary)}])


def test_a_damaged_retrieval_file_names_the_rule_that_prepared_it(tmp_path):
    from cselab.data.beir import load_beir

    for folder, rule in (("resources/stsb_retrieval/data", "prepare_stsb_retrieval"), ("resources/beir/toy", "prepare_beir")):
        root = tmp_path / folder
        root.mkdir(parents=True)
        with pytest.raises(inv.DataError, match=f"--forcerun {rule} "):
            load_beir(root)


def test_a_damaged_table_is_moved_aside_to_be_built_again(tmp_path, monkeypatch, capsys):
    """A built table checked against the records its job wrote: cut, edited or half missing, a
    real run moves both files aside (Snakemake then builds the table when asked for it); a dry
    run only names it; a table without records (built before them) is left alone."""
    from cselab.evaluation.records import record_result

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    cfg = {"tables": {"table1": {}, "table2": {}}}
    for name in ("table1", "table2"):
        for ext in ("csv", "md"):
            (tmp_path / f"results/{name}.{ext}").write_text(f"{name} {ext}: a,b\n1,2\n")
            if name == "table1":
                record_result(tmp_path / f"results/{name}.{ext}", "table")
    assert inv.set_aside_damaged_reports(cfg, move=True) == []
    (tmp_path / "results/table2.csv").write_text("cut")  # no records: not checked
    (tmp_path / "results/table1.csv").write_text("table1 csv: a,")
    assert inv.set_aside_damaged_reports(cfg, move=False) == ["table1"]
    assert "table table1 is damaged (results/table1.csv: it has 14 bytes, rule table wrote 20)" in capsys.readouterr().err
    assert (tmp_path / "results/table1.csv").is_file()  # a dry run moves nothing
    assert inv.set_aside_damaged_reports(cfg, move=True) == ["table1"]
    assert not (tmp_path / "results/table1.csv").exists() and not (tmp_path / "results/table1.md").exists()
    assert len(list((tmp_path / "results").glob("table1.*.damaged-*"))) == 4  # both files and their records
    assert (tmp_path / "results/table2.csv").read_text() == "cut"
    for ext in ("csv", "md"):  # half of it missing
        (tmp_path / f"results/table1.{ext}").write_text("new\n")
        record_result(tmp_path / f"results/table1.{ext}", "table")
    (tmp_path / "results/table1.md").unlink()
    assert inv.set_aside_damaged_reports(cfg, move=False) == ["table1"]
    assert "results/table1.md is missing" in capsys.readouterr().err


def test_a_trainings_lost_curve_or_summary_is_restored_from_its_model(tmp_path, monkeypatch, capsys):
    """A curve deleted, a summary cut or a stage's plot edited beside an intact model: a real run
    copies each back (bytes and mtime) from the copy the model's folder keeps in its record; a dry
    run only names it; a copy the record does not hold, or a damaged model's, restores nothing."""
    import os

    from cselab.models.checkpoints import keep_training_copies, record_model_files

    monkeypatch.chdir(tmp_path)
    folders = {"exp": tmp_path / "results/experiments/x-s1", "stage": tmp_path / "resources/pretrained/st/tiny"}
    kept = {}
    for kind, folder in folders.items():
        (folder / "model").mkdir(parents=True)
        (folder / "model/model.safetensors").write_bytes(b"weights")
        record_model_files(folder / "model")
        names = ["curve.csv", "train_summary.json"] if kind == "exp" else ["curve.csv", "curve.png", "summary.json"]
        for name in names:
            (folder / name).write_text(f"{kind} {name}\n")
        keep_training_copies(folder / "model", [folder / name for name in names])
        kept[kind] = {name: ((folder / name).read_bytes(), (folder / name).stat().st_mtime_ns) for name in names}
    assert inv.restore_training_outputs(copy=True) == []
    exp, stage = folders["exp"], folders["stage"]
    (exp / "curve.csv").unlink()
    (exp / "train_summary.json").write_text("exp train_")
    (stage / "curve.png").write_text("stage curve.pnG\n")
    wrong = [exp / "curve.csv", exp / "train_summary.json", stage / "curve.png"]
    assert inv.restore_training_outputs(copy=False) == [p.relative_to(tmp_path) for p in wrong]
    err = capsys.readouterr().err
    assert ("cselab: results/experiments/x-s1/curve.csv is missing; a real run restores it from the copy its training "
            "kept in results/experiments/x-s1/model/training/ (the model is intact: it is not trained again)") in err
    assert "train_summary.json is not what its training wrote" in err and not (exp / "curve.csv").exists()
    assert inv.restore_training_outputs(copy=True, skip=[Path("results/experiments/x-s1/model")]) == [wrong[2]
                                                                                                  .relative_to(tmp_path)]
    assert inv.restore_training_outputs(copy=True) == [p.relative_to(tmp_path) for p in wrong[:2]]
    assert "restored from the copy" in capsys.readouterr().err
    for kind, folder in folders.items():
        for name, (data, mtime) in kept[kind].items():
            assert (folder / name).read_bytes() == data and (folder / name).stat().st_mtime_ns == mtime, name
    assert inv.restore_training_outputs(copy=True) == []
    (stage / "model/model.safetensors").write_bytes(b"weightz")  # a damaged stage: trained again, outputs with it
    os.utime(stage / "model/model.safetensors", ns=(1, 1))
    (stage / "summary.json").unlink()
    (exp / "model/training/curve.csv").unlink()  # a copy gone (the model damaged: moved aside), nothing to copy
    (exp / "curve.csv").unlink()
    assert inv.restore_training_outputs(copy=True) == []


def test_a_damaged_stage_is_named_kept_and_stops_the_training_that_starts_from_it(tmp_path, monkeypatch):
    """A pretraining stage's model no longer what its training wrote: planning names it with what
    to do and moves nothing (a stage built again retrains the intact trainings built on it); a
    training that would start from it stops before loading it, with the same message."""
    from cselab.errors import ModelError
    from cselab.models.checkpoints import record_model_files
    from cselab.pipeline.jobs.train import _check_stages

    monkeypatch.chdir(tmp_path)
    stage = Path("resources/pretrained/st/tiny/model")
    stage.mkdir(parents=True)
    (stage / "aux.json").write_text('{"lower_layers": 1}')
    record_model_files(stage)
    assert inv.damaged_stages() == []
    _check_stages({"stage": stage})  # intact: nothing said
    (stage / "aux.json").write_text('{"lower_layers": 12}')
    (hint,) = inv.damaged_stages()
    assert hint.startswith(f"the pretraining stage's model {stage} is damaged: {stage}/aux.json has 20 bytes, "
                           "training wrote 19. It is kept as it is")
    assert f"snakemake --forcerun {stage} <your target>" in hint
    assert (stage / "aux.json").read_text() == '{"lower_layers": 12}' and sorted(p.name for p in stage.parent.iterdir()) == ["model"]
    with pytest.raises(ModelError) as stopped:
        _check_stages({"stage": stage})
    assert str(stopped.value) == hint


def test_damaged_data_derived_from_the_corpus_stops_planning_unless_forced(tmp_path, monkeypatch):
    """A subsampled corpus cut after its rule recorded it, or a split edited to the same size:
    planning stops naming the file, what its record says and the command, and so does a training
    that reads it; forcing the file or its rule plans it again; a file without a record (written
    before records) is trusted."""
    from cselab.errors import DataError
    from cselab.evaluation.records import record_result

    monkeypatch.chdir(tmp_path)
    files = {"resources/subsample/subsuming.txt": "subsample", "resources/corpus/split/train-0.2.txt": "split_corpus",
             "resources/spans/spans.jsonl": "segment_corpus"}
    for path, rule in files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("one sentence\ntwo sentences\n")
        record_result(path, rule)
    Path("resources/corpus/split/heldout-0.2.txt").write_text("no record\n")
    run = inv.Invocation.of(["--cores", "1", "results/table2.csv"], main=True)
    inv.check_derived(run)
    Path("resources/subsample/subsuming.txt").write_text("one sentence\n")
    with pytest.raises(DataError) as cut:
        inv.check_derived(run)
    assert str(cut.value) == (
        "resources/subsample/subsuming.txt is damaged or edited (it has 13 bytes, rule subsample wrote 27). Restore "
        "it, or build it again with snakemake --forcerun resources/subsample/subsuming.txt "
        "<your target> (what read it is rebuilt with it: add -n to list that first)")
    from cselab.pipeline.jobs.train import _check_corpus

    with pytest.raises(DataError) as in_the_job:  # damaged after planning: the training that reads it stops
        _check_corpus(Path("resources/subsample/subsuming.txt"))
    assert str(in_the_job.value) == str(cut.value)
    _check_corpus(Path("resources/corpus/split/heldout-0.2.txt"))  # no record: trusted
    for forced in (["--forcerun", "resources/subsample/subsuming.txt"], ["-R", "subsample"], ["-F"],
                   ["--forcerun=subsample", "--cores", "1"], ["--forcerun", "table", "resources/subsample/subsuming.txt"]):
        inv.check_derived(inv.Invocation.of(["--cores", "1", *forced, "--", "results/table2.csv"], main=True))
    for not_forced in (["resources/subsample/subsuming.txt"], ["-n", "resources/subsample/subsuming.txt"],
                       ["--forcerun", "table", "--cores", "1", "resources/subsample/subsuming.txt"]):
        with pytest.raises(DataError):  # a target is built, not forced: the check stands
            inv.check_derived(inv.Invocation.of(not_forced, main=True))
    Path("resources/subsample/subsuming.txt").write_text("one sentence\ntwo sentences\n")
    Path("resources/corpus/split/train-0.2.txt").write_text("one sentence\ntwo sentencez\n")
    with pytest.raises(DataError, match=r"^resources/corpus/split/train-0.2.txt is damaged or edited \(it does not "
                                        "match the sha256 rule split_corpus recorded"):
        inv.check_derived(run)


def test_a_damaged_figure_is_moved_aside_like_a_table(tmp_path, monkeypatch, capsys):
    """A built figure's PNG cut after its job recorded it: moved aside with its CSV and both
    records, so the figure job draws it again when asked for; the config's tables are untouched."""
    from cselab.evaluation.records import record_result

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    for name in ("figure2.png", "figure2.csv", "table1.csv", "table1.md"):
        (tmp_path / "results" / name).write_bytes(b"\x89PNG and more bytes" if name.endswith("png") else b"a,b\n1,2\n")
        record_result(tmp_path / "results" / name, "figure" if name.startswith("figure") else "table")
    cfg = {"tables": {"table1": {}}, "figures": {"figure2": {}}}
    assert inv.set_aside_damaged_reports(cfg, move=True) == []
    (tmp_path / "results/figure2.png").write_bytes(b"\x89PNG")
    assert inv.set_aside_damaged_reports(cfg, move=True) == ["figure2"]
    assert ("the figure figure2 is damaged (results/figure2.png: it has 4 bytes, rule figure wrote 19); moved it "
            "aside") in capsys.readouterr().err
    assert sorted(p.name.split(".damaged-")[0] for p in (tmp_path / "results").glob("*.damaged-*")) == [
        "figure2.csv", "figure2.csv.sha256", "figure2.png", "figure2.png.sha256"]
    assert (tmp_path / "results/table1.csv").is_file() and (tmp_path / "results/table1.md").is_file()
