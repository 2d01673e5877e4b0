"""BEIR datasets that share a corpus, through Snakemake: one job per checkpoint encodes the
corpus once and writes each dataset's result; the settings that only change how retrieval runs
rerun nothing; a cache larger than the job's declared disk, or a zip larger than the prepare
job's, stops with one message naming the dataset, the file and the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import make_beir, make_senteval, make_tiny_bert, run_snakemake

ROOT = Path(__file__).resolve().parents[1]
EXP = "untrained-tiny"


def _snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "test.yaml"), "--cores", "2", *args]
    proc = run_snakemake(cmd, dict(os.environ), timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
    return proc


def _config(workdir: Path, **beir) -> None:
    cfg = {"data": {"senteval": {"path": str(workdir / "data" / "senteval"), "strict_counts": False},
                    "beir": {"path": str(workdir / "data" / "beir")}},
           "mlflow": {"experiment_name": "cselab-test"}, "seeds": [42],
           "plms": {"tiny": {"model": str(workdir / "tiny-bert")}},
           "evaluation": {"batch_size": 64, "beir": {"datasets": ["toy-a", "toy-b", "toy-c"], "chunk_size": 16,
                                                     "k": 100, "max_len": 64,
                                                     "shared_corpora": {"pair": ["toy-a", "toy-b"]}, **beir}},
           "experiments": {EXP: {"plm": "tiny", "method": "untrained"}},
           "tables": {"table_beir": {"experiments": [EXP]}}}
    (workdir / "test.yaml").write_text(yaml.safe_dump(cfg))


def _result(workdir: Path, dataset: str) -> dict:
    return json.loads((workdir / "results" / "experiments" / EXP / "beir" / f"{dataset}.json").read_text())


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("beir")
    make_senteval(workdir / "data" / "senteval")
    beir = workdir / "data" / "beir"
    make_beir(beir / "toy-a", n_docs=50, n_queries=8)
    shutil.copytree(beir / "toy-a", beir / "toy-b")  # the same corpus, other queries
    make_beir(beir / "toy-b" / "tmp", n_docs=50, n_queries=8, seed=5)
    (beir / "toy-b" / "tmp" / "queries.jsonl").replace(beir / "toy-b" / "queries.jsonl")
    with open(beir / "toy-b" / "corpus.jsonl", "a") as fh:  # and 3 documents of its own
        for i in range(3):
            fh.write(json.dumps({"_id": f"b{i}", "title": "", "text": f"an extra document number {i}"}) + "\n")
    shutil.rmtree(beir / "toy-b" / "tmp")
    make_beir(beir / "toy-c", n_docs=30, n_queries=5, seed=9)
    make_tiny_bert(workdir / "tiny-bert")
    _config(workdir)
    proc = _snakemake(workdir, "results/table_beir.csv")
    return workdir, proc


def test_shared_corpus_is_one_job_encoding_each_document_once(shared_run):
    workdir, proc = shared_run
    assert (proc.stdout + proc.stderr).count("] start  evaluate_beir_shared_pair ") == 1  # cselab's console
    a, b, c = (_result(workdir, d) for d in ("toy-a", "toy-b", "toy-c"))
    assert a["search"]["shared_corpus"] == b["search"]["shared_corpus"] == ["toy-a", "toy-b"]
    assert a["search"]["encoded_docs"] == 53 and (a["n_docs"], b["n_docs"]) == (50, 53)
    assert c["search"]["shared_corpus"] == ["toy-c"] and c["n_docs"] == 30
    assert a["dataset"] == "toy-a" and b["dataset"] == "toy-b" and a["metrics"] != b["metrics"]
    assert a["subsets"] == b["subsets"] == {}
    table = (workdir / "results" / "table_beir.csv").read_text()
    assert "toy-a" in table and "toy-b" in table and "toy-c" in table


def test_shared_corpus_scores_equal_each_dataset_alone(shared_run):
    from cselab.evaluation.retrieval import evaluate_retrieval
    from cselab.models.encoder import load_encoder

    workdir, _ = shared_run
    enc = load_encoder(workdir / "tiny-bert", pooler="cls")
    for d in ("toy-a", "toy-b"):
        alone = evaluate_retrieval(lambda t: enc.encode(t, batch_size=64, max_len=64), workdir / "data" / "beir" / d,
                                   chunk_size=16)
        assert _result(workdir, d)["metrics"] == pytest.approx(alone["metrics"], abs=1e-6)


def test_how_retrieval_runs_reruns_nothing(shared_run):
    workdir, _ = shared_run
    _config(workdir, precision="fp16", query_block=3, resources={"toy-c": {"mem_mb": 9000}})
    assert "Nothing to be done" in _snakemake(workdir, "-n", "results/table_beir.csv").stdout
    for changed in ({"k": 50}, {"corpus_cache": True}):  # settings that change the result do rerun
        _config(workdir, **changed)
        assert "evaluate_beir" in _snakemake(workdir, "-n", "results/table_beir.csv").stdout
    _config(workdir)


def test_corpus_cache_is_fp16_and_rerun_from_cache(shared_run):
    workdir, _ = shared_run
    _config(workdir, corpus_cache=True)
    target = f"results/experiments/{EXP}/beir/toy-c.json"
    (workdir / target).unlink()
    _snakemake(workdir, target)
    cached = list((workdir / "results" / "cache" / "embeddings").glob("*/beir-toy-c-corpus*.json"))
    assert cached and all(json.loads(p.read_text())["dtype"] == "float16" for p in cached)
    first = _result(workdir, "toy-c")
    (workdir / target).unlink()
    _snakemake(workdir, target)
    again = _result(workdir, "toy-c")
    assert again["cache_misses"] == 0 and again["metrics"] == first["metrics"]
    _config(workdir)


def test_cache_larger_than_declared_disk_is_one_message(tmp_path):
    from types import SimpleNamespace

    from cselab.errors import DataError
    from cselab.evaluation.kinds.retrieval import check_cache_disk as _check_cache_disk

    manifest = {"root": str(tmp_path / "fever"), "counts": {"docs": 5_416_568}}
    smk = SimpleNamespace(resources={"disk_mb": 200})
    with pytest.raises(DataError) as e:
        _check_cache_disk(smk, [manifest], ["fever"], 768, {"corpus_cache": True})
    msg = str(e.value)
    assert "BEIR dataset 'fever'" in msg and str(tmp_path / "fever" / "corpus.jsonl") in msg
    assert "8,320 MB" in msg and "corpus_cache: false" in msg and "resources.fever.disk_mb" in msg
    _check_cache_disk(smk, [manifest], ["fever"], 768, {"corpus_cache": False})  # streamed: no cache, no check
    _check_cache_disk(SimpleNamespace(resources={"disk_mb": 9000}), [manifest], ["fever"], 768, {"corpus_cache": True})


def test_zip_larger_than_declared_disk_is_refused_before_unpacking(server, tmp_path):
    import io
    import zipfile

    from cselab.data.beir import prepare_beir
    from cselab.errors import DataError

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        make_beir(tmp_path / "src" / "big", n_docs=20, n_queries=2)
        for f in (tmp_path / "src").rglob("*"):
            if f.is_file():
                zf.write(f, f.relative_to(tmp_path / "src"))
        zf.writestr("big/padding.bin", b"0" * 3_000_000)  # unpacks to 3 MB, compresses to almost nothing
    server.files["/big.zip"] = buf.getvalue()
    kw = dict(url=server.url("/big.zip"), out_dir=tmp_path / "tree", manifest=tmp_path / "m.json",
              download_dir=tmp_path / "dl")
    with pytest.raises(DataError, match=r"BEIR dataset 'big': .*big\.zip unpacks to 3 MB, more than the 2 MB.*"
                                        r"resources\.big\.prepare_disk_mb"):
        prepare_beir("big", disk_mb=2, **kw)
    assert not (tmp_path / "tree").exists()
    assert prepare_beir("big", disk_mb=4, **kw)["counts"]["docs"] == 20
