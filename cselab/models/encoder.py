"""The sentence encoder shared by every method and every evaluator: a PLM and a pooler.

The sentence embedding is the final-layer [CLS] vector (SimCSE's "cls_before_pooler") or the
mean of the final layer over real tokens (``avg``). Training heads belong to the methods
(:mod:`cselab.models.heads`). ``encode`` is the one inference path of every evaluator:
length-sorted batches, dynamic padding, ``torch.inference_mode``. The pooled forward runs over
real tokens only (:mod:`cselab.models.unpadded`) for BERT-style backbones unless
``unpadded`` is switched off; a forward that asks for the backbone's outputs is Hugging Face's.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

import numpy as np
import torch
from torch import nn

from cselab.data.tokens import host_max
from cselab.io import Progress
from cselab.models import unpadded
from cselab.models.masks import model_mask

log = logging.getLogger(__name__)

POOLERS = ("cls", "avg")
#: padded tokens per evaluation batch unless ``evaluation.max_tokens`` says otherwise
DEFAULT_MAX_TOKENS = 16384


class SentenceEncoder(nn.Module):
    def __init__(self, backbone: nn.Module, tokenizer, pooler: str = "cls"):
        super().__init__()
        if pooler not in POOLERS:
            raise ValueError(f"pooler must be one of {POOLERS}, got {pooler!r}")
        self.backbone, self.tokenizer, self.pooler = backbone, tokenizer, pooler
        #: while training, the padded forward at the batch's given width (a compiled step's static shapes)
        self.static_shapes = False
        #: pooled forward over real tokens only (None: the backbone does not support it, see ``use_unpadded``)
        self.unpadded = unpadded.unsupported(backbone) is None

    def use_unpadded(self, on: bool) -> str | None:
        """Switch the unpadded pooled forward on or off; returns why it stays off (an
        unsupported backbone) when asked for, else None."""
        reason = unpadded.unsupported(self.backbone) if on else None
        self.unpadded = on and reason is None
        return reason

    @property
    def hidden_size(self) -> int:
        return self.backbone.config.hidden_size

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def initializer_range(self) -> float:
        return getattr(self.backbone.config, "initializer_range", 0.02)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Sentence embeddings from final-layer states ``[B, T, H]``."""
        if self.pooler == "cls":
            return hidden[:, 0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, lengths: torch.Tensor | None = None,
                **backbone_kwargs):
        """Pooled sentence embeddings ``[B, H]``; with ``output_hidden_states=True`` (or other
        backbone arguments) also the backbone's output: ``(pooled, outputs)``. ``lengths``: the
        rows' real lengths as a CPU tensor when the caller has them (the unpadded forward then
        needs no device-to-host sync on CUDA); the pooled forward then runs at the batch's natural
        width, so padding added beyond it (``training.pad_to_multiple_of``) changes no dropout
        draw (attention dropout is drawn over ``[B, heads, L, L]``). With ``static_shapes`` (a compiled
        training step) a training forward is the padded one at the width it was given: few
        distinct shapes, one graph each, no host read."""
        static = self.static_shapes and self.training
        if lengths is not None and not backbone_kwargs and not static and len(lengths):
            width = host_max(lengths)
            input_ids, attention_mask = input_ids[:, :width], attention_mask[:, :width]
        if self.unpadded and not backbone_kwargs and not static:
            return unpadded.pooled(self.backbone, input_ids, attention_mask, self.pooler, lengths)
        mask = model_mask(attention_mask) if self.training else attention_mask  # no host wait in a CUDA step
        out = self.backbone(input_ids=input_ids, attention_mask=mask, **backbone_kwargs)
        pooled = self.pool(out.last_hidden_state, attention_mask)
        return (pooled, out) if backbone_kwargs else pooled

    def tokenize(self, sentences: list[str], max_len: int) -> list[list[int]]:
        return self.tokenizer(list(sentences), truncation=True, max_length=max_len,
                              add_special_tokens=True)["input_ids"]

    def pad(self, ids: list[list[int]]) -> dict[str, torch.Tensor]:
        return pad_batch(ids, self.tokenizer.pad_token_id, self.device)

    @torch.inference_mode()
    def encode(self, sentences: list[str], batch_size: int = 128, max_len: int = 512,
               max_tokens: int | None = None) -> np.ndarray:
        """Evaluation embeddings (no MLP head), in input order, as float32 numpy.

        Sentences are encoded shortest first; a batch holds up to ``batch_size`` sentences
        and, with ``max_tokens``, at most that many padded tokens (batch size chosen by
        tokens: many short sentences at once, few long ones). On CUDA the forward runs in
        bf16 (the embeddings come back as float32; similarities are computed in float64).
        """
        was_training = self.training
        self.eval()
        ids = self.tokenize(sentences, max_len)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), self.hidden_size), dtype=np.float32)
        device = self.device
        amp = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
               else contextlib.nullcontext())
        progress = Progress(log, "encoding", len(ids), "sentences", lazy=60.0)  # a line only past a minute
        with amp:
            for idx in token_batches([len(ids[i]) for i in order], batch_size, max_tokens):
                rows = [order[i] for i in idx]
                batch = self.pad([ids[i] for i in rows])
                lengths = torch.tensor([len(ids[i]) for i in rows])
                out[rows] = self(**batch, lengths=lengths).float().cpu().numpy()
                progress.update(idx.stop)
        progress.close()
        self.train(was_training)
        return out

    def save(self, out_dir: Path, max_seq_length: int = 512) -> None:
        """Save in Hugging Face format plus a sentence-transformers export (CLS pooling).

        The folder loads with ``AutoModel.from_pretrained`` and with ``SentenceTransformer(out_dir)``.
        """
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)
        (out_dir / "1_Pooling").mkdir(exist_ok=True)
        modes = {"cls": "pooling_mode_cls_token", "avg": "pooling_mode_mean_tokens"}
        pooling = {"word_embedding_dimension": self.hidden_size, "pooling_mode_cls_token": False,
                   "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False}
        pooling[modes[self.pooler]] = True
        files = {
            "1_Pooling/config.json": pooling,
            "modules.json": [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ],
            "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
            "config_sentence_transformers.json": {"similarity_fn_name": "cosine"},
        }
        for name, content in files.items():
            (out_dir / name).write_text(json.dumps(content, indent=2))


def token_batches(sorted_lengths: list[int], batch_size: int, max_tokens: int | None = None) -> list[range]:
    """Consecutive batches over lengths sorted ascending: each at most ``batch_size`` rows and,
    with ``max_tokens``, at most ``max_tokens`` padded tokens (rows x its longest length; a
    single row longer than that is a batch of its own)."""
    batches, start, n = [], 0, len(sorted_lengths)
    while start < n:
        end = start + 1
        while end < n and end - start < batch_size and (
                not max_tokens or (end + 1 - start) * sorted_lengths[end] <= max_tokens):
            end += 1
        batches.append(range(start, end))
        start = end
    return batches


def pad_batch(ids: list[list[int]], pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-pad token id lists into ``input_ids``/``attention_mask`` tensors."""
    length = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), length), dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, :len(x)] = torch.tensor(x, dtype=torch.long)
        mask[row, :len(x)] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}


def load_encoder(model_dir: Path, pooler: str | None = None, dropout: float | None = None) -> SentenceEncoder:
    """The PLM at ``model_dir`` as a sentence encoder (``pooler`` None: the encoder's own, for a
    job that reads no pooled embedding); ``dropout`` overrides the checkpoint's."""
    from cselab.models.checkpoints import load_backbone

    tokenizer, backbone = load_backbone(Path(model_dir), dropout=dropout)
    return SentenceEncoder(backbone, tokenizer, **({"pooler": pooler} if pooler else {}))
