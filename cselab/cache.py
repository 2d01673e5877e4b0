"""On-disk embedding cache, per (checkpoint, encoder settings, dataset).

Adding a metric or a table never re-encodes: every evaluator asks the cache first. The key is
the checkpoint's fingerprint (sha256 of its config and weight files) plus the encoder settings
(pooler, max_len), so a changed checkpoint misses and is re-encoded; the stored sentence hash
guards against a dataset whose content changed under the same name.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable

import numpy as np

from cselab.data import sha256_file

log = logging.getLogger(__name__)

WEIGHT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "mlp_head.pt")


def model_fingerprint(model_dir: Path) -> str:
    """sha256 over the checkpoint's config and weights (sharded safetensors included)."""
    model_dir = Path(model_dir)
    files = sorted({*(model_dir / f for f in WEIGHT_FILES), *model_dir.glob("model-*.safetensors")})
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + sha256_file(f).encode())
    return h.hexdigest()


def sentences_hash(sentences: list[str]) -> str:
    h = hashlib.sha256()
    for s in sentences:
        h.update(s.encode("utf-8") + b"\n")
    return h.hexdigest()


class EmbeddingCache:
    """``cache.get(dataset, sentences, encode)`` returns embeddings, computing them only on a miss."""

    def __init__(self, cache_dir: Path, model_dir: Path, settings: dict):
        self.fingerprint = model_fingerprint(model_dir)
        key = hashlib.sha256((self.fingerprint + json.dumps(settings, sort_keys=True)).encode()).hexdigest()[:20]
        self.dir = Path(cache_dir) / key
        self.hits = self.misses = 0

    def get(self, dataset: str, sentences: list[str], encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        npy, meta = self.dir / f"{dataset}.npy", self.dir / f"{dataset}.json"
        digest = sentences_hash(sentences)
        if npy.is_file() and meta.is_file():
            info = json.loads(meta.read_text())
            if info.get("sentences_sha256") == digest and info.get("n") == len(sentences):
                self.hits += 1
                log.info("embedding cache hit: %s (%d sentences)", dataset, len(sentences))
                return np.load(npy)
        self.misses += 1
        emb = np.asarray(encode(sentences), dtype=np.float32)
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = npy.with_suffix(".tmp.npy")
        np.save(tmp, emb)
        tmp.replace(npy)
        meta.write_text(json.dumps({"n": len(sentences), "sentences_sha256": digest, "dim": emb.shape[1]}))
        return emb

    def encoder(self, dataset: str, encode: Callable[[list[str]], np.ndarray]) -> Callable[[list[str]], np.ndarray]:
        """Wrap ``encode`` for evaluators that call it once with their unique sentences."""
        return lambda sentences: self.get(dataset, list(sentences), encode)
