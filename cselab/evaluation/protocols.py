"""Protocol sensitivity: one checkpoint's STS scores under each evaluation protocol the literature
uses (``results/table_protocols.csv``).

The protocols differ in four choices (SimCSE issues #25, #87, #169; sentence-transformers #1165):

- aggregation of STS12-16's subsets: ``all`` (one Spearman over the year's concatenated
  subsets, what SimCSE and the papers after it report), ``mean`` (their unweighted mean) or
  ``wmean`` (weighted by subset size; SentEval prints all three);
- pooler: ``cls`` (SimCSE's: [CLS] through the pooler layer, i.e. a trained checkpoint's training
  head, or the backbone's pooler output for an untrained PLM), ``cls_before_pooler`` (the raw
  final-layer [CLS], SimCSE's unsupervised evaluation and this pipeline's ``cls``), ``avg`` (mean
  of the final layer over real tokens), ``avg_top2`` (mean of the last two layers),
  ``avg_first_last`` (mean of the embedding output and the final layer: the first "layer" as
  DiffCSE's and InfoCSE's code take it) and ``avg_first_last_layer1`` (mean of the first
  transformer layer and the final layer, as SimCSE's evaluation script takes it since its fix);
- truncation of evaluation sentences: none (the model's limit) or at 32 tokens (the training
  length);
- STS-B's split: the test split (the papers' tables) or dev (checkpoint selection).

Each (checkpoint, truncation) runs one forward per sentence, from which every pooler is read
(every layer's hidden states and the pooler output of the same forward); at 32
tokens only sentences longer than 32 tokens are run again (the others have the same input).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from cselab.data.tasks import load_sts_task, stsb_dev
from cselab.evaluation.encoding import Embeddings
from cselab.evaluation.sts import COLUMN_NAMES, STS_TASKS, evaluate_stsb_dev, evaluate_sts

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_top2", "avg_first_last", "avg_first_last_layer1")
AGGREGATIONS = ("all", "mean", "wmean")
#: aggregation -> the per-task key of :func:`cselab.evaluation.sts.evaluate_sts`
_AGGREGATION_KEYS = {"all": "spearman_all", "mean": "mean_spearman", "wmean": "wmean_spearman"}
#: the protocol the four papers declare (SimCSE's unsupervised evaluation, followed by CompCSE,
#: DiffCSE, InfoCSE and the gradient paradigm): "all", raw [CLS], no truncation, STS-B test
PAPERS_PROTOCOL = {"aggregation": "all", "pooler": "cls_before_pooler", "truncation": None}
PAPERS = "SimCSE, CompCSE, DiffCSE, InfoCSE, gradient paradigm"


def evaluation_sentences(root: Path, tasks: Sequence[str] = STS_TASKS) -> list[str]:
    """The unique sentences of the STS test sets ``tasks`` (all 7 by default) and STS-B dev
    (first-seen order)."""
    out = dict.fromkeys(s for task in tasks for sub in load_sts_task(root, task)
                        for s in (*sub.sent1, *sub.sent2))
    dev = stsb_dev(root)
    out.update(dict.fromkeys([*dev.sent1, *dev.sent2]))
    return list(out)


@torch.inference_mode()
def pooled_all(encoder, head, ids: list[list[int]], batch_size: int = 128) -> dict[str, np.ndarray]:
    """Every pooler's embeddings of tokenised sentences ``ids`` from one padded forward per batch
    (length-sorted batches). ``head``: the checkpoint's training head (numpy -> numpy) for
    ``cls``, or None (the backbone's pooler output; NaN rows where it has none)."""
    from cselab.models.encoder import DEFAULT_MAX_TOKENS, token_batches

    encoder.eval()
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = {p: np.full((len(ids), encoder.hidden_size), np.nan, dtype=np.float32) for p in POOLERS}
    for idx in token_batches([len(ids[i]) for i in order], batch_size, DEFAULT_MAX_TOKENS):
        rows = [order[i] for i in idx]
        batch = encoder.pad([ids[i] for i in rows])
        hidden = encoder.backbone(**batch, output_hidden_states=True)
        mask = batch["attention_mask"].unsqueeze(-1).float()
        layers = [h.float() for h in hidden.hidden_states]  # the embedding output, then each layer's
        last = hidden.last_hidden_state.float()
        out["cls_before_pooler"][rows] = last[:, 0].cpu().numpy()
        for pooler, pair in (("avg", (last, last)), ("avg_top2", (layers[-2], last)),
                             ("avg_first_last", (layers[0], last)), ("avg_first_last_layer1", (layers[1], last))):
            out[pooler][rows] = (((pair[0] + pair[1]) / 2 * mask).sum(1) / mask.sum(1)).cpu().numpy()
        if head is not None:
            out["cls"][rows] = head(out["cls_before_pooler"][rows])
        elif getattr(hidden, "pooler_output", None) is not None:
            out["cls"][rows] = hidden.pooler_output.float().cpu().numpy()
    return out


def embed_protocols(encoder, head, sentences: list[str], truncations: list[int | None], max_len: int = 512,
                    batch_size: int = 128) -> dict[tuple[str, int | None], Embeddings]:
    """(pooler, truncation) -> the sentences' embeddings. Untruncated means the model's limit
    ``max_len``; a truncated setting re-runs only the sentences longer than its length."""
    full_ids = encoder.tokenize(sentences, max_len)
    full = pooled_all(encoder, head, full_ids, batch_size)
    out = {(p, None): Embeddings(sentences, full[p]) for p in POOLERS}
    for length in (t for t in truncations if t is not None):
        longer = [i for i, row in enumerate(full_ids) if len(row) > length]
        if not longer:  # no sentence reaches the cut: the untruncated embeddings are the answer
            out.update({(p, length): out[(p, None)] for p in POOLERS})
            continue
        cut = pooled_all(encoder, head, encoder.tokenize([sentences[i] for i in longer], length), batch_size)
        for p in POOLERS:
            vectors = full[p].copy()
            vectors[longer] = cut[p]
            out[(p, length)] = Embeddings(sentences, vectors)
    return out


def score_protocols(embeddings: dict[tuple[str, int | None], Embeddings], root: Path,
                    tasks: Sequence[str] = STS_TASKS) -> list[dict]:
    """One row per (pooler, truncation, aggregation): the columns of the STS tasks ``tasks``
    (all 7 by default), their average, STS-B dev, and ``papers``: who declares the protocol
    (:data:`PAPERS_PROTOCOL`). A pooler the checkpoint cannot give (``cls`` of a PLM without a
    pooler layer) has no rows."""
    rows = []
    for (pooler, truncation), embedded in embeddings.items():
        if np.isnan(embedded.vectors).all():
            continue
        sts = evaluate_sts(embedded, root, tasks)
        dev = evaluate_stsb_dev(embedded, root)["scores"]["STS-B dev"]
        for aggregation in AGGREGATIONS:
            key = _AGGREGATION_KEYS[aggregation]
            scores = {COLUMN_NAMES[t]: sts["tasks"][t][key] for t in tasks}
            protocol = {"aggregation": aggregation, "pooler": pooler, "truncation": truncation}
            rows.append({**protocol, **scores, "avg": float(np.mean(list(scores.values()))), "STS-B dev": dev,
                         "papers": PAPERS if protocol == PAPERS_PROTOCOL else ""})
    return rows


def checkpoint_protocols(model_dir: Path, root: Path, truncations: list[int | None], batch_size: int = 128,
                         tasks: Sequence[str] = STS_TASKS) -> list[dict]:
    """:func:`score_protocols` of the checkpoint (or untrained PLM) at ``model_dir`` over the STS
    tasks ``tasks``: its encoder, and its training head for ``cls`` when it has one."""
    from cselab.models.encoder import load_encoder
    from cselab.models.heads import HEAD_META, load_head

    encoder = load_encoder(model_dir)
    if torch.cuda.is_available():
        encoder.to("cuda")
    head = load_head(model_dir) if (Path(model_dir) / HEAD_META).is_file() else None
    sentences = evaluation_sentences(root, tasks)
    return score_protocols(embed_protocols(encoder, head, sentences, truncations, batch_size=batch_size), root, tasks)


def spread(rows: list[dict]) -> dict:
    """A checkpoint's spread over protocols: the range of the STS average, and the STS average
    of the papers' protocol."""
    avgs = [r["avg"] for r in rows]
    declared = [r["avg"] for r in rows if r["papers"]]
    return {"avg_min": min(avgs), "avg_max": max(avgs), "spread": max(avgs) - min(avgs),
            "papers_avg": declared[0] if declared else float("nan")}
