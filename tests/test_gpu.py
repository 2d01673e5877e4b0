"""The GPU acceptance command at tiny size on the CPU (so it cannot rot), and the correctness
checks that need CUDA (marker ``gpu``: ``pytest -m gpu`` on the GPU machine; skipped here, with
the reason, without one)."""

from __future__ import annotations

import csv
import sys

import pytest
import torch

from tests.helpers import ROOT, make_corpus, make_senteval

sys.path.insert(0, str(ROOT / "benchmarks_scripts"))
import gpu_acceptance  # noqa: E402

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (run pytest -m gpu on a GPU)")


def test_acceptance_runs_on_the_cpu_at_tiny_size(tmp_path):
    senteval = make_senteval(tmp_path / "senteval", n_extra=30)
    corpus = make_corpus(tmp_path / "corpus.txt", 200)
    out = tmp_path / "out"
    status = gpu_acceptance.main(["--device", "cpu", "--size", "tiny", "--steps", "8", "--speed-steps", "3",
                                  "--rounds", "1", "--batch-sizes", "16,32", "--senteval", str(senteval),
                                  "--speed-cases", "simcse@16,compcse@16,simcse@32,simcse_chunk_4_b16@16,diffcse@16",
                                  "--corpus", str(corpus), "--out", str(out)])
    rows = list(csv.DictReader((out / "acceptance.csv").open()))
    failed = [r for r in rows if r["status"] == "FAILED"]
    assert status == 0 and not failed, failed
    trained = {(r["name"], r["precision"]) for r in rows if r["section"] == "train"}
    from cselab.training.methods.paradigm import LOSSES

    names = set(gpu_acceptance.method_cases(LOSSES))
    assert {n for n, _ in trained} == names and {p for _, p in trained} == {"fp32", "bf16"}
    assert {r["section"] for r in rows} == {"train", "layouts", "sts", "distributed", "speed"}
    speed = {r["name"]: r for r in rows if r["section"] == "speed" and r.get("sentences_per_s")}
    assert float(speed["simcse"]["ratio_to_plain"]) > 0 and float(speed["compcse"]["plain_sentences_per_s"]) > 0
    text = (out / "acceptance.md").read_text()
    assert text.startswith("# GPU acceptance on cpu") and "gpu_acceptance.py --device cpu" in text


# -- on CUDA --------------------------------------------------------------------------------------

@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_kernel_masks_equal_the_cpu_path(dtype):
    from cselab.models import keyed_ops
    from tests.test_keyed_kernel import LAYOUTS, SITE, _layout

    for layout in [*LAYOUTS, "packed"]:
        shape, keys, positions, group, inner, stride = _layout(layout)
        x = torch.randn(shape).to(dtype)
        cpu = keyed_ops.dropout_eager(x, keys, positions, SITE, 0.1, group, inner, stride)
        gpu = keyed_ops.keyed_dropout(x.cuda(), keys.cuda(), None if positions is None else positions.cuda(),
                                      SITE, 0.1, group, inner, stride).cpu()
        assert torch.equal(gpu == 0, cpu == 0), layout
        assert torch.equal(gpu, cpu), layout  # the GPU rounds to nearest, as torch does


@pytest.mark.gpu
@CUDA
def test_cuda_acceptance_checks(tmp_path):
    """The acceptance command's correctness sections on CUDA, at tiny size: every method in
    every precision with the sync debug mode on, layouts, CUDA vs CPU STS, one-process NCCL."""
    senteval = make_senteval(tmp_path / "senteval", n_extra=30)
    corpus = make_corpus(tmp_path / "corpus.txt", 200)  # as on the CPU: the generated default's 15 words make
    out = tmp_path / "out"  # sentences so alike that 6 steps of a tiny BERT raise the BatchNorm heads' loss
    status = gpu_acceptance.main(["--device", "cuda", "--size", "tiny", "--steps", "6", "--batch-sizes", "16",
                                  "--senteval", str(senteval), "--sections", "train,layouts,sts,distributed",
                                  "--corpus", str(corpus), "--out", str(out)])
    rows = list(csv.DictReader((out / "acceptance.csv").open()))
    assert status == 0, [r for r in rows if r["status"] == "FAILED"]
    assert all(r["sync_checked"] == "True" for r in rows if r["section"] == "train")
