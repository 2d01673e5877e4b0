"""Inference path (length-sorted, dynamic padding) and the checkpoint export formats."""

import numpy as np
import pytest
import torch

from cselab.models.encoder import load_encoder

SENTS = ["a short one .", "a considerably longer sentence with many more words in it than the others .",
         "mid length sentence here .", "x", "a short one ."]


def test_encode_keeps_order_and_matches_unbatched(tiny_encoder):
    out = tiny_encoder.encode(SENTS, batch_size=2)
    assert out.shape == (5, 32) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], out[4], atol=1e-6)
    for i, s in enumerate(SENTS):
        batch = tiny_encoder.pad(tiny_encoder.tokenize([s], 512))
        with torch.inference_mode():
            ref = tiny_encoder.eval()(**batch)[0].numpy()
        np.testing.assert_allclose(out[i], ref, atol=1e-5)


def test_encode_is_deterministic_and_restores_train_mode(tiny_encoder):
    tiny_encoder.train()
    a, b = tiny_encoder.encode(SENTS), tiny_encoder.encode(SENTS)
    np.testing.assert_array_equal(a, b)
    assert tiny_encoder.training


def test_save_loads_in_transformers_and_sentence_transformers(tiny_encoder, tmp_path):
    tiny_encoder.save(tmp_path / "ckpt", max_seq_length=64)
    again = load_encoder(tmp_path / "ckpt")
    np.testing.assert_allclose(again.encode(SENTS), tiny_encoder.encode(SENTS), atol=1e-6)
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(tmp_path / "ckpt"), device="cpu")
    np.testing.assert_allclose(model.encode(SENTS), tiny_encoder.encode(SENTS), atol=1e-5)
