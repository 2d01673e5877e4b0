"""The operational settings: every setting that changes how a job runs (threads and processes,
batch sizes that cannot change a result, the embedding cache, logging, tracking, resources,
compile) and never what it computes. No job spec holds one (:mod:`cselab.pipeline.jobspecs`), so
changing one reruns nothing; a job reads them through :func:`cselab.pipeline.operations.operations`.

Declared here once, as config paths (``*``: any name), so that the rerun-precision test can
mutate each and see no job's params move.
"""

from __future__ import annotations

from cselab.settings.training import OPERATIONAL as TRAINING_OPERATIONAL

#: the ``evaluation`` settings that only batch the encoding or cache it (an embedding is the same)
EVALUATION = ("batch_size", "max_tokens", "cache")
#: the ``evaluation.beir`` settings that change how retrieval runs, not its scores
BEIR = ("precision", "query_block", "shared_corpora", "resources")
#: the ``spans`` settings of processes and shards (:data:`cselab.data.spans.OPERATIONAL`)
SPANS = ("n_process", "shards")

#: where training settings are written: each may set an operational one
TRAINING_SECTIONS = ("training", "plms.*.training", "methods.*.training", "experiments.*.training",
                     "pretraining.*.training")

PATHS: tuple[str, ...] = (
    *(f"{section}.{key}" for section in TRAINING_SECTIONS for key in TRAINING_OPERATIONAL),
    *(f"evaluation.{key}" for key in EVALUATION),
    *(f"evaluation.beir.{key}" for key in BEIR),
    *(f"spans.{key}" for key in SPANS),
    "mlflow",
)


def is_operational(path: str) -> bool:
    """Whether the config path ``path`` (``a.b.c``) is, or lies under, an operational setting."""
    parts = path.split(".")
    for pattern in PATHS:
        want = pattern.split(".")
        if len(parts) >= len(want) and all(w in ("*", p) for w, p in zip(want, parts)):
            return True
    return False
