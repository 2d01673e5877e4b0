"""Embeddings for evaluation: every evaluator encodes each unique sentence once
(:func:`encode_unique`) through an on-disk cache per (checkpoint, encoder settings, dataset).

Adding a metric or a table never re-encodes: every evaluator asks the cache first. The key is
the checkpoint's fingerprint (sha256 of its config and weight files) plus the encoder settings
(pooler, max_len), so a changed checkpoint misses and is re-encoded; the stored sentence hash
guards against a dataset whose content changed under the same name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from cselab.io import DamagedEntry, lines_sha256, open_atomic, read_cache_entry, sha256_file, write_json
from cselab.settings import Evaluation, evaluation_settings

log = logging.getLogger(__name__)

Encode = Callable[[list[str]], np.ndarray]

WEIGHT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "head.pt")


def model_fingerprint(model_dir: Path) -> str:
    """sha256 over the checkpoint's config and weights (sharded safetensors included)."""
    model_dir = Path(model_dir)
    files = sorted({*(model_dir / f for f in WEIGHT_FILES), *model_dir.glob("model-*.safetensors")})
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + sha256_file(f).encode())
    return h.hexdigest()


class EmbeddingCache:
    """``cache.get(dataset, sentences, encode)`` returns embeddings, computing them only on a miss."""

    def __init__(self, cache_dir: Path, model_dir: Path, settings: dict):
        self.fingerprint = model_fingerprint(model_dir)
        key = hashlib.sha256((self.fingerprint + json.dumps(settings, sort_keys=True)).encode()).hexdigest()[:20]
        self.dir = Path(cache_dir) / key
        self.hits = self.misses = 0

    def get(self, dataset: str, sentences: list[str], encode: Callable[[list[str]], np.ndarray],
            dtype: str = "float32") -> np.ndarray:
        """The embeddings of ``sentences`` under ``dataset``, stored as ``dtype`` (float16 halves
        a large corpus's cache); the JSON beside the array is written last, so an array without
        it (a job killed while writing) is never read as complete."""
        npy, meta = self.dir / f"{dataset}.npy", self.dir / f"{dataset}.json"
        digest = lines_sha256(sentences)
        if npy.is_file() and meta.is_file():
            hit = read_cache_entry(npy, lambda p: self._read(p, meta, digest, len(sentences), dtype),
                                   "embedding cache", "encoding again", also=(meta,))
            if hit is not None and hit is not _OTHER:
                self.hits += 1
                log.info("embedding cache hit: %s (%d sentences)", dataset, len(sentences))
                return hit
        self.misses += 1
        meta.unlink(missing_ok=True)
        emb = np.asarray(encode(sentences), dtype=dtype)
        with open_atomic(npy, "wb") as fh:
            np.save(fh, emb)
        st = npy.stat()
        write_json(meta, {"n": len(sentences), "sentences_sha256": digest, "dim": emb.shape[1], "dtype": dtype,
                          "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(npy)})
        return emb

    @staticmethod
    def _read(npy: Path, meta: Path, digest: str, n: int, dtype: str):
        """The cached array when its record matches these sentences (else :data:`_OTHER`: another
        content under the name, encoded again) and it is whole: its size, its bytes (hashed when
        its mtime moved since it was written) and its shape as recorded, else :class:`DamagedEntry`."""
        info = json.loads(meta.read_text())
        if info.get("sentences_sha256") != digest or info.get("n") != n or info.get("dtype", "float32") != dtype:
            return _OTHER
        st = npy.stat()
        if info.get("bytes", st.st_size) != st.st_size:
            raise DamagedEntry(f"it has {st.st_size} bytes, its record {info['bytes']}")
        if info.get("sha256") and info.get("mtime_ns") != st.st_mtime_ns and sha256_file(npy) != info["sha256"]:
            raise DamagedEntry("its bytes changed since it was written (sha256)")
        emb = np.load(npy)
        if emb.shape != (n, info.get("dim", emb.shape[-1])):
            raise DamagedEntry(f"it has shape {emb.shape}, its record ({n}, {info.get('dim')})")
        return emb


#: :meth:`EmbeddingCache._read`'s answer for an entry of other sentences under the same name
_OTHER = object()


class Embeddings:
    """Embeddings of unique sentences, looked up by sentence.

    Calling it with a list of sentences returns their rows, so it is itself an ``encode``
    function: evaluators that share one encoding pass (STS-B dev Spearman and alignment /
    uniformity during training) take it where they would take an encoder.
    """

    def __init__(self, sentences: list[str], vectors: np.ndarray):
        self.sentences, self.vectors = sentences, vectors
        self.index = {s: i for i, s in enumerate(sentences)}

    def __len__(self) -> int:
        return len(self.sentences)

    def __call__(self, sentences: Iterable[str]) -> np.ndarray:
        return self.vectors[[self.index[s] for s in sentences]]


def encode_unique(encode: Encode, sentences: Iterable[str], dtype=np.float32, allow_nan: bool = False) -> Embeddings:
    """Call ``encode`` once on the unique ``sentences`` (first-seen order); check the result.
    ``allow_nan`` lets a collapsed model through (STS then scores it NaN instead of failing)."""
    unique = list(dict.fromkeys(sentences))
    if isinstance(encode, Embeddings):  # already encoded: a lookup, not a second pass
        return Embeddings(unique, encode(unique).astype(dtype, copy=False))
    vectors = np.asarray(encode(unique), dtype=dtype)
    if vectors.ndim != 2 or vectors.shape[0] != len(unique):
        raise ValueError(f"encode returned shape {vectors.shape} for {len(unique)} sentences; "
                         "expected (n_sentences, dim)")
    if not allow_nan and not np.all(np.isfinite(vectors)):
        raise ValueError("encode returned NaN or infinite values")
    return Embeddings(unique, vectors)


class ModelEncoder:
    """The model an evaluation job scores: its encoder (no training head), the embedding cache
    under ``cache_dir`` and timing. ``settings``: the encoder settings (``pooler``, ``max_len``,
    ``batch_size``, ``cache``, ``max_tokens``; :func:`cselab.pipeline.config.encoder_settings`),
    typed or the job's plain dict."""

    def __init__(self, model_dir: Path, settings: dict | Evaluation, cache_dir: Path | None):
        settings = settings if isinstance(settings, Evaluation) else evaluation_settings(settings)
        self.settings, self.dir = settings, Path(model_dir)
        key = {"pooler": settings.pooler, "max_len": settings.max_len}
        use_cache = cache_dir and settings.cache
        self.cache = EmbeddingCache(Path(cache_dir), self.dir, key) if use_cache else None
        self.encoded, self.encode_seconds = 0, 0.0

    @functools.cached_property
    def encoder(self):
        """The checkpoint's encoder, loaded at the first sentence the cache does not hold: a job
        whose every dataset is cached (an evaluation setting changed, a table added) loads no
        model (nor transformers)."""
        import torch

        from cselab.models.encoder import load_encoder

        encoder = load_encoder(self.dir, pooler=self.settings.pooler)
        if torch.cuda.is_available():  # bf16 forward there (SentenceEncoder.encode)
            encoder.to("cuda")
        return encoder

    def dim(self) -> int:
        """The embedding size."""
        return int(self.encoder.backbone.config.hidden_size)

    def encode_fn(self, dataset: str | None, max_len: int | None = None, sequence: bool = False,
                  dtype: str = "float32") -> Encode:
        """An ``encode`` for evaluators, through the cache under ``dataset`` (None: no cache,
        for a corpus streamed once), stored as ``dtype``.

        ``sequence=True`` is for evaluators that call ``encode`` several times (retrieval's
        corpus chunks): the n-th call is cached as ``<dataset>.<n>``.
        """
        import time

        def encode(sentences):
            # torch is imported only where a sentence is encoded
            from cselab.models.encoder import DEFAULT_MAX_TOKENS

            tic = time.perf_counter()
            out = self.encoder.encode(sentences, batch_size=self.settings.batch_size,
                                      max_len=max_len or self.settings.max_len,
                                      max_tokens=self.settings.max_tokens or DEFAULT_MAX_TOKENS)
            self.encoded += len(sentences)
            self.encode_seconds += time.perf_counter() - tic
            return out

        if self.cache is None or dataset is None:
            return encode
        name = dataset + ("" if max_len in (None, self.settings.max_len) else f"-len{max_len}")
        if not sequence:
            return lambda sentences: self.cache.get(name, list(sentences), encode, dtype)
        calls = iter(range(1 << 30))
        return lambda sentences: self.cache.get(f"{name}.{next(calls)}", list(sentences), encode, dtype)

    def stats(self) -> dict:
        return {"model_dir": str(self.dir), "model_loaded": "encoder" in self.__dict__,
                "encoded_sentences": self.encoded,
                "encode_seconds": self.encode_seconds,
                "encode_sentences_per_s": self.encoded / self.encode_seconds if self.encode_seconds else None,
                "cache_hits": self.cache.hits if self.cache else 0,
                "cache_misses": self.cache.misses if self.cache else 0}
