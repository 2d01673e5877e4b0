"""ONNX export of the encoder: a valid graph with dynamic axes, equal to PyTorch's embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import find_shared_data


def test_tiny_bert_export_is_valid_and_dynamic(tiny_bert, tmp_path):
    import onnx
    import onnxruntime as ort
    import torch
    from transformers import AutoModel

    from cselab.export.onnx import compare_with_torch, export_onnx

    out = tmp_path / "export" / "onnx" / "model.onnx"
    info = export_onnx(tiny_bert, out, opset=16)
    assert out.is_file() and info["file"] == str(out) and info["bytes"] == out.stat().st_size
    assert [p.name for p in out.parent.iterdir()] == ["model.onnx"]  # no temporary file left behind
    assert len(info["sha256"]) == 64
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    assert info["opset"] == 16
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [16]
    assert info["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert info["outputs"] == ["last_hidden_state"]
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param and dims[1].dim_param, f"{value.name}: batch/sequence axes are not dynamic"
    assert model.graph.output[0].type.tensor_type.shape.dim[2].dim_value == 32

    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    backbone = AutoModel.from_pretrained(tiny_bert).eval()
    rng = np.random.default_rng(0)
    for batch, length, padded in [(1, 3, False), (1, 6, True), (5, 17, True), (4, 11, False), (3, 64, True)]:
        ids = rng.integers(1000, 2000, (batch, length))
        mask = np.ones((batch, length), dtype=np.int64)
        if padded:  # the last row padded (the export was traced on a padded batch of 2 x 9)
            mask[-1, length // 2:] = 0
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (hidden,) = session.run(None, feeds)
        assert hidden.shape == (batch, length, 32)
        with torch.no_grad():
            ref = backbone(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state.numpy()
        np.testing.assert_allclose(hidden, ref, atol=1e-4)  # eval mode: no dropout in the graph

    sentences = ["a man is playing a flute .", "a dog runs", "x " * 70, "the sun shines on the river ."]
    for pooler in ("cls", "avg"):
        result = compare_with_torch(tiny_bert, out, sentences, pooler, max_len=48)
        assert result["equal"] and result["sentences"] == 4, result
        assert result["max_abs_diff"] <= 1e-4 and result["min_cosine"] > 0.9999


@pytest.fixture(scope="module")
def minilm_onnx(tmp_path_factory):
    from cselab.export.onnx import export_onnx
    from cselab.models.checkpoints import resolve_model

    model_dir = resolve_model("all-MiniLM-L6-v2")
    out = tmp_path_factory.mktemp("minilm-onnx") / "onnx" / "model.onnx"
    export_onnx(model_dir, out)
    return model_dir, out


@pytest.mark.skipif(find_shared_data() is None, reason="no shared data dir with senteval/ (../shared/data "
                    "or $CSELAB_SHARED_DATA): the real STS-B dev sentences are unavailable")
@pytest.mark.parametrize("pooler,first", [("cls", None), ("avg", 600)])  # every sentence for the papers' pooler
def test_minilm_onnx_equals_torch_on_stsb_dev(minilm_onnx, pooler, first):
    from cselab.data.tasks import stsb_dev
    from cselab.export.onnx import compare_with_torch

    dev = stsb_dev(find_shared_data() / "senteval")
    sentences = list(dict.fromkeys(dev.sent1 + dev.sent2))
    assert len(sentences) > 2500
    sentences = sentences[:first]
    model_dir, onnx_file = minilm_onnx
    result = compare_with_torch(model_dir, onnx_file, sentences, pooler, atol=1e-4)
    assert result["sentences"] == len(sentences)
    assert result["equal"] and result["max_abs_diff"] <= 1e-4, result


def test_export_of_a_folder_that_is_not_a_model(tmp_path):
    from cselab.errors import ExportError, ModelError
    from cselab.export.onnx import export_onnx

    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "notes.txt").write_text("no checkpoint here")
    out = tmp_path / "export" / "onnx" / "model.onnx"
    with pytest.raises((ExportError, ModelError), match="config.json") as err:
        export_onnx(folder, out)
    assert str(folder) in str(err.value) and "\n" not in str(err.value)
    assert not out.exists()
