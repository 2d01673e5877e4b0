"""The paths a CUDA step takes so that the host never waits for the device (found by the GPU
acceptance command's sync check on an H100) compute what the CPU paths compute.

``CSELAB_SYNC_FREE=1`` makes the CPU take them: the MLM loss over every position with the others
ignored (not the masked rows picked by a boolean index) and the 4-D additive attention mask handed
to a Hugging Face model (not the 2-D one it would check with ``mask.all()``)."""

import pytest
import torch
from transformers import AutoModel

from cselab.models.masks import model_mask
from cselab.training import mlm
from tests.test_chunks import CASES, assert_same_gradients, generator, one_step  # noqa: F401 (a fixture)


def test_mlm_loss_over_every_position_equals_the_masked_rows(monkeypatch):
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11)
    hidden = torch.randn(4, 6, 8, requires_grad=True)
    labels = torch.full((4, 6), mlm.IGNORE)
    labels[0, 1], labels[2, 3], labels[3, 5] = 4, 7, 10
    picked = mlm.mlm_loss(head, hidden, labels)
    monkeypatch.setenv("CSELAB_SYNC_FREE", "1")
    every = mlm.mlm_loss(head, hidden, labels)
    assert torch.allclose(picked, every, atol=1e-6)
    none = mlm.mlm_loss(head, hidden, torch.full((4, 6), mlm.IGNORE))
    assert none.item() == 0.0
    none.backward()  # still attached to the graph


def test_four_d_mask_gives_the_model_the_same_states(monkeypatch, tiny_bert):
    model = AutoModel.from_pretrained(tiny_bert).eval()
    ids = torch.randint(5, 100, (3, 7))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert model_mask(mask) is mask  # on the CPU: unchanged
        monkeypatch.setenv("CSELAB_SYNC_FREE", "1")
        four = model_mask(mask)
        assert four.shape == (3, 1, 1, 7)
        with_four = model(input_ids=ids, attention_mask=four).last_hidden_state
    real = mask.bool()
    assert torch.allclose(plain[real], with_four[real], atol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_method_steps_alike_on_the_sync_free_paths(tiny_bert, generator, case, monkeypatch):
    """Each method's and auxiliary's step (loss and every gradient) on CUDA's sync-free paths
    equals the CPU's, to float rounding."""
    loss, grads = one_step(tiny_bert, generator, case, None)
    monkeypatch.setenv("CSELAB_SYNC_FREE", "1")
    free_loss, free = one_step(tiny_bert, generator, case, None)
    assert free_loss == pytest.approx(loss, rel=1e-5)
    assert_same_gradients(grads, free)
