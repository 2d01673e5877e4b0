"""Training heads over the pooled sentence embedding (SimCSE's "mlp_only_train": evaluation reads
the raw [CLS], except InfoCSE Table 9's "cls" pooler, which applies the saved head). A method
picks its head by name:

- ``mlp``: ``Linear(H, H) + Tanh`` (SimCSE, Gao et al., 2021, section 3; CompCSE);
- ``batchnorm``: ``Linear(H, 2H, no bias) -> BatchNorm1d(2H) -> ReLU -> Linear(2H, H, no bias)
  -> BatchNorm1d(H, affine=False)`` (DiffCSE, Chuang et al., 2022, section 3; InfoCSE's code);
- ``linear``: ``Linear(H, H)`` (the gradient paradigm, 2024, for BERT);
- ``tanh_linear``: ``Tanh`` then ``Linear(H, H)`` (the gradient paradigm's head for RoBERTa);
- ``none``: the identity.

Linear layers are initialised ``N(0, init_std)`` with zero bias: the references build the head
before the model's weight init runs, so it gets BERT's init (``init_std`` = the PLM's
``initializer_range``, 0.02); the gradient paradigm's head draws weights and biases from
``N(0, 6e-3)`` (``bias_std``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

#: the heads by name (the methods' option choices, read without torch when the workflow plans)
HEADS = ("mlp", "batchnorm", "linear", "tanh_linear", "none")


def make_head(kind: str, hidden: int, init_std: float = 0.02, bias_std: float = 0.0) -> nn.Module:
    from torch import nn

    if kind == "mlp":
        head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
    elif kind == "batchnorm":
        head = nn.Sequential(nn.Linear(hidden, 2 * hidden, bias=False), nn.BatchNorm1d(2 * hidden), nn.ReLU(),
                             nn.Linear(2 * hidden, hidden, bias=False), nn.BatchNorm1d(hidden, affine=False))
    elif kind == "linear":
        head = nn.Linear(hidden, hidden)
    elif kind == "tanh_linear":
        head = nn.Sequential(nn.Tanh(), nn.Linear(hidden, hidden))
    elif kind == "none":
        return nn.Identity()
    else:
        raise ValueError(f"unknown head {kind!r}; valid heads: {', '.join(HEADS)}")
    init_linear(head, init_std, bias_std)
    return head


def init_linear(module: nn.Module, std: float, bias_std: float = 0.0) -> None:
    """BERT's init for every Linear in ``module``: weights ``N(0, std)``, biases 0 (or ``N(0, bias_std)``)."""
    from torch import nn

    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                nn.init.normal_(m.bias, std=bias_std) if bias_std else nn.init.zeros_(m.bias)


HEAD_WEIGHTS, HEAD_META = "head.pt", "head.json"


def save_head(out_dir, head: nn.Module, kind: str) -> None:
    """A checkpoint's training head: its weights (``head.pt``) and its kind (``head.json``), so
    evaluation can rebuild it without knowing the method that trained it."""
    import json
    from pathlib import Path

    import torch

    torch.save(head.state_dict(), Path(out_dir) / HEAD_WEIGHTS)
    (Path(out_dir) / HEAD_META).write_text(json.dumps({"kind": kind}))


def load_head(model_dir):
    """The training head saved with a checkpoint (:func:`save_head`), as a numpy -> numpy function
    in eval mode (a BatchNorm head uses its running statistics): SimCSE's "cls" pooler at
    evaluation, where ``cls_before_pooler`` is the raw [CLS] every evaluator reads."""
    import json
    from pathlib import Path

    import numpy as np
    import torch

    from cselab.errors import ModelError

    model_dir = Path(model_dir)
    meta, weights = model_dir / HEAD_META, model_dir / HEAD_WEIGHTS
    if not meta.is_file() or not weights.is_file():
        raise ModelError(f"{model_dir} has no training head ({HEAD_WEIGHTS} and {HEAD_META}): an untrained PLM, a "
                         f"method without a head, or a checkpoint from before heads were saved with their kind, "
                         f"cannot be evaluated with the 'cls' pooler")
    kind = json.loads(meta.read_text())["kind"]
    state = torch.load(weights, map_location="cpu", weights_only=True)
    hidden = next(v for k, v in state.items() if k.endswith("weight")).shape[-1]
    head = make_head(kind, hidden)
    head.load_state_dict(state)
    head.eval()

    def apply(embeddings: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return head(torch.from_numpy(np.asarray(embeddings, dtype=np.float32))).numpy()

    return apply
