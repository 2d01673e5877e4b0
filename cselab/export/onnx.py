"""The encoder as ONNX, checked against PyTorch with onnxruntime.

:func:`export_onnx` writes a model folder's backbone (the transformer, no pooling, no training
head) as one ONNX graph in the layout sentence-transformers' ONNX backend loads: put the file at
``<export folder>/onnx/model.onnx`` and ``SentenceTransformer(folder, backend="onnx")`` runs it,
with the folder's own ``1_Pooling``. Inputs are ``input_ids``, ``attention_mask`` (and
``token_type_ids`` when the backbone takes them), the output is ``last_hidden_state``
``[batch, sequence, hidden]``; batch and sequence length are dynamic axes.

The exporter is torch's TorchScript exporter (``torch.onnx.export(..., dynamo=False)``): it
needs nothing beyond torch and works offline. The dynamo exporter would need ``onnxscript``.

:func:`onnx_embeddings` pools the ONNX output in numpy exactly like
:meth:`cselab.models.encoder.SentenceEncoder.pool`; :func:`compare_with_torch` puts the two
side by side on a list of sentences.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import numpy as np

from cselab.errors import ExportError
from cselab.io import atomic_path, sha256_file

OUTPUT_NAME = "last_hidden_state"
#: the ONNX file's place inside an export folder, where sentence-transformers looks for it
ST_ONNX_PATH = Path("onnx") / "model.onnx"
DEFAULT_OPSET = 17


def _load_backbone(model_dir: Path):
    """The backbone of the model folder ``model_dir`` in eval mode (no dropout), or one
    :class:`ExportError` saying why the folder is not a model."""
    from cselab.models.checkpoints import load_backbone

    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ExportError(f"cannot export {model_dir} to ONNX: the folder does not exist")
    if not (model_dir / "config.json").is_file():
        raise ExportError(f"cannot export {model_dir} to ONNX: it is not a model folder (no config.json); "
                          f"give a trained experiment's model/ folder or a transformers checkpoint")
    _, backbone = load_backbone(model_dir)  # ModelError when the checkpoint is unreadable
    return backbone.eval()


def _input_names(backbone) -> list[str]:
    """The ONNX inputs: ``token_type_ids`` only for a backbone that takes segment ids."""
    names = ["input_ids", "attention_mask"]
    takes = "token_type_ids" in inspect.signature(backbone.forward).parameters
    if takes and getattr(backbone.config, "type_vocab_size", 0):
        names.append("token_type_ids")
    return names


def _last_hidden_state(backbone, names: list[str]):
    """The traced module: ``names`` taken positionally, the backbone's ``last_hidden_state`` out."""
    import torch

    class LastHiddenState(torch.nn.Module):
        """The backbone with a positional signature and a single tensor output."""

        def __init__(self):
            """Hold the backbone as a submodule (its parameters become the graph's weights)."""
            super().__init__()
            self.backbone = backbone

        def forward(self, *tensors):
            """``last_hidden_state`` ``[batch, sequence, hidden]`` of the inputs named ``names``."""
            return self.backbone(**dict(zip(names, tensors)), return_dict=True).last_hidden_state

    return LastHiddenState().eval()


def _dummy_inputs(names: list[str], vocab_size: int):
    """A padded batch of two rows (a real mask, so tracing keeps the masking path)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, max(6, min(vocab_size, 1000)), (2, 9), generator=gen)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    ids[1, 6:] = 0
    values = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return tuple(values[n] for n in names)


def export_onnx(model_dir: Path, out_file: Path, opset: int = DEFAULT_OPSET) -> dict:
    """Export the backbone of ``model_dir`` to ``out_file`` (for sentence-transformers:
    ``<export folder>/onnx/model.onnx``) with opset ``opset``, dynamic batch and sequence axes.

    The file is written beside its target and renamed into place only after
    ``onnx.checker`` accepted it. Returns ``{"opset", "inputs", "outputs", "file", "bytes",
    "sha256"}``. A folder that is not a model raises :class:`ExportError` (an unreadable
    checkpoint :class:`cselab.errors.ModelError`).
    """
    import onnx
    import torch

    if not isinstance(opset, int) or not 14 <= opset <= 20:
        raise ExportError(f"ONNX opset must be an integer in 14..20 (the TorchScript exporter's range "
                          f"with scaled-dot-product attention), got {opset!r}")
    out_file = Path(out_file)
    backbone = _load_backbone(Path(model_dir))
    names = _input_names(backbone)
    module = _last_hidden_state(backbone, names)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, OUTPUT_NAME]}
    try:
        with atomic_path(out_file) as tmp, torch.no_grad(), warnings.catch_warnings():
            # the legacy exporter's deprecation notice and tracer warnings about Python-side checks
            # (transformers' SDPA is_causal/mask-padding tests: the traced batch is padded, so the
            # mask path is kept; the graph is checked below and by compare_with_torch)
            warnings.simplefilter("ignore")
            torch.onnx.export(module, _dummy_inputs(names, backbone.config.vocab_size), str(tmp),
                              input_names=names, output_names=[OUTPUT_NAME], dynamic_axes=axes,
                              opset_version=opset, do_constant_folding=True, dynamo=False)
            onnx.checker.check_model(str(tmp))
    except Exception as e:
        raise ExportError(f"ONNX export of {model_dir} failed: {type(e).__name__}: {e}") from e
    model = onnx.load(str(out_file), load_external_data=False)
    return {
        "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "inputs": [i.name for i in model.graph.input],
        "outputs": [o.name for o in model.graph.output],
        "file": str(out_file),
        "bytes": out_file.stat().st_size,
        "sha256": sha256_file(out_file),
    }


def _session(onnx_file: Path):
    """An onnxruntime CPU inference session on ``onnx_file``."""
    import onnxruntime as ort

    from cselab.io import thread_budget

    onnx_file = Path(onnx_file)
    if not onnx_file.is_file():
        raise ExportError(f"ONNX file {onnx_file} does not exist; write it with export_onnx first")
    options = ort.SessionOptions()
    # no busy-waiting between ops: on a shared CPU spinning threads only steal time
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # the job's threads, not one per core of the machine: beside other work, an op split over more
    # threads than the job has waits for the thread that is off its core
    options.intra_op_num_threads = thread_budget()
    options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception classes for bad files
        raise ExportError(f"onnxruntime cannot load {onnx_file}: {e}") from e


def pool(hidden: np.ndarray, attention_mask: np.ndarray, pooler: str) -> np.ndarray:
    """Sentence embeddings from ``[B, T, H]`` states, as :meth:`SentenceEncoder.pool` computes
    them: the first token (``cls``) or the mean over real tokens (``avg``)."""
    if pooler == "cls":
        return hidden[:, 0]
    mask = attention_mask[..., None].astype(hidden.dtype)
    return (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1)


def onnx_embeddings(onnx_file: Path, tokenizer_dir: Path, sentences: list[str], pooler: str,
                    max_len: int = 512, batch_size: int = 64) -> np.ndarray:
    """Embeddings of ``sentences`` (float32, input order) from the ONNX file on onnxruntime's CPU,
    tokenized like :class:`SentenceEncoder` (special tokens, truncation to ``max_len``),
    length-sorted batches of ``batch_size`` right-padded rows, pooled with ``pooler``."""
    from transformers import AutoTokenizer

    from cselab.models.encoder import POOLERS, pad_batch, token_batches

    if pooler not in POOLERS:
        raise ExportError(f"pooler must be one of {POOLERS}, got {pooler!r}")
    session = _session(onnx_file)
    feeds = [i.name for i in session.get_inputs()]
    try:
        tokenizer = AutoTokenizer.from_pretrained(Path(tokenizer_dir))
    except (OSError, ValueError) as e:
        raise ExportError(f"cannot load the tokenizer in {tokenizer_dir}: {e}") from e
    ids = tokenizer(list(sentences), truncation=True, max_length=max_len, add_special_tokens=True)["input_ids"]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = None
    for idx in token_batches([len(ids[i]) for i in order], batch_size):
        rows = [order[i] for i in idx]
        batch = {k: v.numpy() for k, v in pad_batch([ids[r] for r in rows], tokenizer.pad_token_id).items()}
        batch["token_type_ids"] = np.zeros_like(batch["input_ids"])
        (hidden,) = session.run([OUTPUT_NAME], {n: batch[n] for n in feeds})
        emb = pool(hidden, batch["attention_mask"], pooler)
        if out is None:  # the hidden size, from the first batch (it may be symbolic in the graph)
            out = np.empty((len(ids), emb.shape[1]), dtype=np.float32)
        out[rows] = emb
    return out


def compare_with_torch(model_dir: Path, onnx_file: Path, sentences: list[str], pooler: str,
                       max_len: int = 512, atol: float = 1e-4) -> dict:
    """PyTorch's evaluation embeddings (``load_encoder(model_dir, pooler).encode``) against
    :func:`onnx_embeddings` on ``sentences``. Returns ``{"sentences", "max_abs_diff",
    "mean_abs_diff", "min_cosine", "atol", "equal"}``; ``equal``: max |diff| <= ``atol``."""
    from cselab.models.encoder import POOLERS, load_encoder

    if pooler not in POOLERS:
        raise ExportError(f"pooler must be one of {POOLERS}, got {pooler!r}")
    if not sentences:
        raise ExportError("compare_with_torch needs at least one sentence")
    got = onnx_embeddings(onnx_file, model_dir, sentences, pooler, max_len=max_len)
    ref = load_encoder(Path(model_dir), pooler).encode(list(sentences), batch_size=64, max_len=max_len)
    if ref.shape != got.shape:
        raise ExportError(f"{onnx_file} does not match {model_dir}: embeddings of shape {got.shape} "
                          f"vs PyTorch's {ref.shape}")
    a, b = ref.astype(np.float64), got.astype(np.float64)
    diff = np.abs(a - b)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    max_diff = float(diff.max())
    return {
        "sentences": len(sentences),
        "max_abs_diff": max_diff,
        "mean_abs_diff": float(diff.mean()),
        "min_cosine": float(((a * b).sum(1) / norms).min()),
        "atol": float(atol),
        "equal": bool(max_diff <= atol),
    }
