"""A corpus tokenised once into flat tensors, cached on disk and batched without Python lists.

Training reads its batches from :class:`TokenizedCorpus`: every sentence's token ids end to end
in one ``int32`` tensor plus an ``int64`` offsets tensor, so a batch is a gather over a
``[B, T]`` index grid (:meth:`TokenizedCorpus.batch`), not a loop over rows. Tokenising the
1M-sentence corpus takes about a minute on 2 cores; :func:`tokenize_corpus` does it once per
(texts, tokenizer, max_len) and keeps the result under a cache folder shared by every
experiment and seed (``results/cache/tokens``), keyed by a hash of the three.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from cselab.io import DamagedEntry, atomic_path, lines_sha256, read_cache_entry

log = logging.getLogger(__name__)

#: sentences tokenised per call of the (Rust) tokenizer
CHUNK = 50_000


class TokenizedCorpus:
    """Token id lists stored flat: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``."""

    def __init__(self, ids: torch.Tensor, offsets: torch.Tensor):
        if offsets.ndim != 1 or offsets.numel() < 1 or int(offsets[-1]) != ids.numel():
            raise ValueError("offsets must be 1-D, start at 0 and end at len(ids)")
        self.ids, self.offsets = ids, offsets
        self.lengths = offsets[1:] - offsets[:-1]

    @classmethod
    def from_lists(cls, rows: Sequence[Sequence[int]]) -> "TokenizedCorpus":
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(offsets[-1]))
        return cls(torch.from_numpy(flat), torch.from_numpy(offsets))

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    def __getitem__(self, i: int) -> list[int]:
        return self.ids[int(self.offsets[i]):int(self.offsets[i + 1])].tolist()

    def batch(self, index: torch.Tensor, pad_id: int, multiple: int = 1) -> dict[str, torch.Tensor]:
        """Right-padded ``input_ids`` (int64) and ``attention_mask`` of the rows ``index`` (a 1-D
        int64 tensor), on the CPU. ``multiple`` rounds the padded length up to a multiple of it
        (a few sequence lengths for ``torch.compile``; padding is masked, the math is the same)."""
        starts, lengths = self.offsets[index], self.lengths[index]
        width = int(host_max(lengths))
        if multiple > 1:
            width = -(-width // multiple) * multiple
        positions = torch.arange(width)
        mask = positions < lengths[:, None]
        gather = (starts[:, None] + positions).clamp_(max=max(self.ids.numel() - 1, 0))
        input_ids = torch.where(mask, self.ids[gather].long(), pad_id)
        return {"input_ids": input_ids, "attention_mask": mask.long()}


def host_sum(values: torch.Tensor) -> int:
    """The sum of a CPU tensor's values, read on the host (numpy: no torch op, so a step's
    bookkeeping never shows up as a host sync when its tensors are counted)."""
    return int(values.numpy().sum()) if values.numel() else 0


def host_max(values: torch.Tensor) -> int:
    """The largest value of a non-empty CPU tensor, read on the host (see :func:`host_sum`)."""
    return int(values.numpy().max())


def to_device(batch: dict[str, torch.Tensor], device: torch.device | str) -> dict[str, torch.Tensor]:
    """Move a CPU batch to ``device``; to CUDA through pinned memory with a non-blocking copy
    (the host goes on building the next step while the copy runs)."""
    return {k: tensor_to_device(v, device) for k, v in batch.items()}


def tensor_to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """One tensor to ``device`` without making the host wait: a CPU tensor goes to CUDA through
    pinned memory with a non-blocking copy (a pageable copy waits for the device)."""
    device = torch.device(device)
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of everything that decides a tokenizer's ids: its full serialisation (vocabulary,
    normaliser, special tokens) for a fast tokenizer, else its class, vocabulary and settings."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # truncation and padding are call settings the tokenizer keeps: not identity
        state = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        h.update(json.dumps(state, sort_keys=True).encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
        h.update(json.dumps(getattr(tokenizer, "init_kwargs", {}), sort_keys=True, default=str).encode())
    return h.hexdigest()


def _read_cached(path: Path, n: int) -> TokenizedCorpus:
    """A cached corpus, whole (every member read, so a bad CRC shows) and of ``n`` sentences."""
    with np.load(path) as data:
        corpus = TokenizedCorpus(torch.from_numpy(data["ids"]), torch.from_numpy(data["offsets"]))
    if len(corpus) != n:
        raise DamagedEntry(f"it holds {len(corpus)} sentences, the corpus {n}")
    return corpus


def tokenize_corpus(texts: Sequence[str], tokenizer, max_len: int, cache_dir: Path | None = None) -> TokenizedCorpus:
    """Token ids (special tokens added, truncated to ``max_len``) of ``texts``, as a
    :class:`TokenizedCorpus`; read from ``cache_dir`` when the same texts were tokenised before
    by the same tokenizer at the same ``max_len`` (an unreadable cache file, cut short, empty, with
    a bad CRC or garbage, is removed with one warning and built again)."""
    path = None
    if cache_dir is not None:
        key = hashlib.sha256(f"{lines_sha256(texts)}|{tokenizer_fingerprint(tokenizer)}|{max_len}".encode())
        path = Path(cache_dir) / f"{key.hexdigest()[:24]}.npz"
        if path.is_file():
            corpus = read_cache_entry(path, lambda p: _read_cached(p, len(texts)), "token cache", "tokenising again")
            if corpus is not None:
                log.info("token cache hit: %s (%d sentences)", path.name, len(texts))
                return corpus
    ids, lengths = [], []
    for start in range(0, len(texts), CHUNK):
        rows = tokenizer(list(texts[start:start + CHUNK]), truncation=True, max_length=max_len,
                         add_special_tokens=True)["input_ids"]
        lengths.append(np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows)))
        ids.append(np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(lengths[-1].sum())))
    lengths_all = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(lengths_all) + 1, dtype=np.int64)
    np.cumsum(lengths_all, out=offsets[1:])
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)
    if path is not None:
        with atomic_path(path, suffix=f".{os.getpid()}.tmp") as tmp:  # jobs may race on one key
            with open(tmp, "wb") as fh:
                np.savez(fh, ids=flat, offsets=offsets)
    return TokenizedCorpus(torch.from_numpy(flat), torch.from_numpy(offsets))
