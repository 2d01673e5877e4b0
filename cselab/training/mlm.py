"""Masked-language-model parts shared by the methods that mask their input (InfoCSE, DiffCSE):
BERT's 80/10/10 masking, an MLM head, extra transformer layers over a lower layer's states
(Condenser's design, which InfoCSE's auxiliary network follows), and the masked-token loss.

Everything works on any BERT-like Hugging Face backbone (``embeddings`` + ``encoder.layer``),
including checkpoints without an MLM head (all-MiniLM-L6-v2): the head is then new, else it
starts from the checkpoint's (``cls.predictions.*`` of BERT, ``lm_head.*`` of RoBERTa).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cselab.data.tokens import tensor_to_device
from cselab.models.heads import init_linear
from cselab.models.masks import extended_mask, model_mask, sync_free
from cselab.training.losses import fp32

IGNORE = -100
HEAD_FILE = "mlm_head.pt"   # a checkpoint folder's MLM head when its format has none (a stage export)


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, rate: float, tokenizer,
                generator: torch.Generator | None = None,
                word_starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking (Devlin et al., 2019): each real, non-special token is selected with
    probability ``rate``; of the selected, 80% become ``[MASK]``, 10% a random token, 10% stay.
    With ``word_starts`` (:func:`word_start_table`), whole words are selected together (each
    word with probability ``rate``, all its sub-tokens with it: the whole-word masking of
    Condenser's pretraining). Returns ``(masked_ids, labels)`` with ``labels`` the original id at
    selected positions and -100 elsewhere. Vectorised; no Python loop over tokens.
    The draws cover the tensors' shape: callers pass the batch at its natural width
    (:func:`natural`), so padding added beyond it changes no draw."""
    special = torch.zeros_like(input_ids, dtype=torch.bool)
    for tid in {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id,
                tokenizer.bos_token_id, tokenizer.eos_token_id} - {None}:
        special |= input_ids == tid
    candidates = attention_mask.bool() & ~special

    def uniform():
        return tensor_to_device(torch.rand(input_ids.shape, generator=generator, device="cpu"), input_ids.device)

    draw = uniform()
    if word_starts is not None:  # every sub-token takes its word's first token's draw
        draw = draw.gather(1, _word_start_positions(input_ids, candidates, word_starts))
    selected = candidates & (draw < rate)
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    draw = uniform()
    masked = torch.where(selected & (draw < 0.8), tokenizer.mask_token_id, input_ids)
    random_pos = selected & (draw >= 0.8) & (draw < 0.9)
    vocab = len(tokenizer)
    random_ids = tensor_to_device(torch.randint(vocab, input_ids.shape, generator=generator, device="cpu"),
                                  input_ids.device)
    return torch.where(random_pos, random_ids, masked), labels  # torch.where: no device sync (unlike x[mask] = v)


def natural(batch: dict, *keys: str) -> tuple[torch.Tensor, ...]:
    """``batch[key]`` for each key, cut to the batch's natural width (:func:`batch_width`): what a
    method draws random numbers over or runs extra networks on, so that padding a caller added
    (``training.pad_to_multiple_of``, ``compile``) changes no number."""
    width = batch_width(batch)
    return tuple(batch[k] if width is None else batch[k][:, :width] for k in keys)


def batch_width(batch: dict) -> int | None:
    """A training batch's natural padded length (its longest row's real tokens) from the host-side
    ``lengths`` the batch builder passes (no device sync); None when the batch has none."""
    lengths = batch.get("lengths")
    return int(lengths.max()) if lengths is not None and len(lengths) else None


def word_start_table(tokenizer) -> torch.Tensor:
    """``[vocab]`` bool: whether a token begins a word. WordPiece continues a word with ``##``
    pieces; byte-level BPE (RoBERTa) and SentencePiece begin one with ``Ġ`` / ``▁``."""
    vocab = tokenizer.get_vocab()
    table = torch.ones(max(len(tokenizer), max(vocab.values()) + 1), dtype=torch.bool)
    tokens = list(vocab)
    if any(t.startswith("##") for t in tokens):
        for t, i in vocab.items():
            table[i] = not t.startswith("##")
    else:
        marker = "\u0120" if any(t.startswith("\u0120") for t in tokens) else "\u2581"
        for t, i in vocab.items():
            table[i] = t.startswith(marker)
    return table


def _word_start_positions(input_ids: torch.Tensor, candidates: torch.Tensor, word_starts: torch.Tensor):
    """For each position, the position of the first token of its word (a candidate token that
    begins a word, or follows a non-candidate, starts one)."""
    begins = tensor_to_device(word_starts, input_ids.device)[input_ids.clamp(max=len(word_starts) - 1)]
    after_other = torch.ones_like(candidates)
    after_other[:, 1:] = ~candidates[:, :-1]
    start = candidates & (begins | after_other) | ~candidates
    positions = torch.arange(input_ids.size(1), device=input_ids.device).expand_as(input_ids)
    return torch.where(start, positions, torch.zeros_like(positions)).cummax(dim=1).values


def mlm_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the masked positions only, in fp32; 0 (with a gradient path) when a
    batch has no masked token. On the CPU the head runs on the masked rows alone; on CUDA on every
    position with the others ignored (the same loss: picking the masked rows would make the host
    wait for their count)."""
    where = labels != IGNORE
    if sync_free(hidden.device):
        logits = head(hidden.reshape(-1, hidden.size(-1)))
        with fp32(hidden.device):
            total = F.cross_entropy(logits.float(), labels.reshape(-1), ignore_index=IGNORE, reduction="sum")
            return total / where.sum().clamp(min=1)
    logits = head(hidden[where])
    with fp32(hidden.device):
        if logits.size(0) == 0:
            return logits.float().sum() * 0.0
        return F.cross_entropy(logits.float(), labels[where])


class MLMHead(nn.Module):
    """BERT's MLM prediction head: dense + activation + LayerNorm, then the vocabulary decoder
    (its bias is the per-token output bias)."""

    def __init__(self, config):
        super().__init__()
        from transformers.models.bert.modeling_bert import BertPredictionHeadTransform

        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden))


def make_mlm_head(config, model_dir: Path | None = None) -> MLMHead:
    """An MLM head initialised from ``model_dir``'s when the checkpoint has one, else BERT's init."""
    head = MLMHead(config)
    init_linear(head, getattr(config, "initializer_range", 0.02))
    for m in head.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    state = checkpoint_mlm_head(model_dir) if model_dir else {}
    if state:
        head.load_state_dict(state, strict=False)
    return head


_HEAD_KEYS = {  # the checkpoint's name -> BertLMPredictionHead's
    "cls.predictions.transform.dense.weight": "transform.dense.weight",
    "cls.predictions.transform.dense.bias": "transform.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "transform.LayerNorm.weight",
    "cls.predictions.transform.LayerNorm.bias": "transform.LayerNorm.bias",
    "cls.predictions.transform.LayerNorm.gamma": "transform.LayerNorm.weight",
    "cls.predictions.transform.LayerNorm.beta": "transform.LayerNorm.bias",
    "cls.predictions.decoder.weight": "decoder.weight",
    "cls.predictions.bias": "decoder.bias",
    "cls.predictions.decoder.bias": "decoder.bias",
    "lm_head.dense.weight": "transform.dense.weight",
    "lm_head.dense.bias": "transform.dense.bias",
    "lm_head.layer_norm.weight": "transform.LayerNorm.weight",
    "lm_head.layer_norm.bias": "transform.LayerNorm.bias",
    "lm_head.decoder.weight": "decoder.weight",
    "lm_head.bias": "decoder.bias",
    "lm_head.decoder.bias": "decoder.bias",
}


def checkpoint_mlm_head(model_dir: Path) -> dict[str, torch.Tensor]:
    """The MLM head's tensors in a checkpoint folder (empty when it has none)."""
    model_dir = Path(model_dir)
    tensors: dict[str, torch.Tensor] = {}
    st = model_dir / "model.safetensors"
    if st.is_file():
        from safetensors import safe_open

        with safe_open(str(st), framework="pt") as f:
            for key in f.keys():
                if key in _HEAD_KEYS:
                    tensors[_HEAD_KEYS[key]] = f.get_tensor(key)
    elif (model_dir / "pytorch_model.bin").is_file():
        state = torch.load(model_dir / "pytorch_model.bin", map_location="cpu", weights_only=True)
        tensors = {_HEAD_KEYS[k]: v for k, v in state.items() if k in _HEAD_KEYS}
    if "decoder.weight" not in tensors and tensors:  # a tied decoder is stored once, as the word embeddings
        for key in ("bert.embeddings.word_embeddings.weight", "roberta.embeddings.word_embeddings.weight"):
            found = _read_tensor(model_dir, key)
            if found is not None:
                tensors["decoder.weight"] = found
                break
    return tensors


def _read_tensor(model_dir: Path, key: str) -> torch.Tensor | None:
    st = model_dir / "model.safetensors"
    if not st.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(st), framework="pt") as f:
        return f.get_tensor(key) if key in f.keys() else None


def layers(backbone: nn.Module) -> nn.ModuleList:
    return backbone.encoder.layer


def new_layers(backbone: nn.Module, n: int) -> nn.ModuleList:
    """``n`` transformer layers of the backbone's own layer class, with BERT's init (Condenser's head)."""
    config = backbone.config
    cls = type(layers(backbone)[0])
    extra = nn.ModuleList(cls(config) for _ in range(n))
    init_linear(extra, getattr(config, "initializer_range", 0.02))
    for m in extra.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return extra


def run_layers(stack, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = extended_mask(attention_mask, hidden.dtype)
    for layer in stack:
        out = layer(hidden, attention_mask=mask)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


class LowerLayers(nn.Module):
    """A copy of the embeddings and the lowest ``k`` layers of a backbone: ``forward`` returns
    the k-th layer's hidden states (InfoCSE's auxiliary network's own lower layers)."""

    def __init__(self, backbone: nn.Module, k: int):
        super().__init__()
        self.embeddings = copy.deepcopy(backbone.embeddings)
        self.stack = copy.deepcopy(layers(backbone)[:k])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.embeddings(input_ids=input_ids, token_type_ids=torch.zeros_like(input_ids))
        return run_layers(self.stack, hidden, attention_mask)


class MaskedLM(nn.Module):
    """A backbone and its MLM head (a stage export), or a Hugging Face masked LM:
    ``forward(input_ids, attention_mask)`` gives vocabulary logits either way."""

    def __init__(self, backbone: nn.Module, head: nn.Module | None = None):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = model_mask(attention_mask)
        if self.head is None:
            return self.backbone(input_ids=input_ids, attention_mask=mask).logits
        return self.head(self.backbone(input_ids=input_ids, attention_mask=mask).last_hidden_state)


def load_masked_lm(path: Path) -> MaskedLM:
    """A masked LM from a checkpoint folder: a stage export (backbone + :data:`HEAD_FILE`) or any
    Hugging Face masked LM (BERT, RoBERTa, DistilBERT, ...). A checkpoint without an MLM head
    (a sentence-tuned model) raises ModelError instead of predicting with a random head."""
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

    from cselab.errors import ModelError

    path = Path(path)
    try:
        if (path / HEAD_FILE).is_file():
            config = AutoConfig.from_pretrained(path)
            head = MLMHead(config)
            head.load_state_dict(torch.load(path / HEAD_FILE, map_location="cpu", weights_only=True))
            return MaskedLM(AutoModel.from_pretrained(path), head)
        model, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load a masked LM from {path}: {e}") from e
    if any(k for k in info.get("missing_keys", []) if any(p in k for p in ("cls.", "lm_head", "vocab_"))):
        raise ModelError(f"{path} has no MLM head (a sentence-tuned checkpoint?); name a masked LM as the "
                         f"generator, or a pretraining stage that trains one")
    return MaskedLM(model)
