"""MLflow tracking: every rule job is one MLflow run.

The store is ``sqlite:///results/mlflow.db`` by default (artifacts under
``results/mlartifacts``); ``MLFLOW_TRACKING_URI`` points the workflow at any tracking server.
Each run is tagged with the rule, the experiment id, the git commit and library versions, so a
number can always be traced back to the code and settings that produced it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import platform
import re
import subprocess
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

_PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "scipy", "mlflow", "snakemake", "sentence-transformers")


def versions() -> dict[str, str]:
    from importlib import metadata

    import cselab

    out = {"python": platform.python_version(), "cselab": cselab.__version__}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_commit() -> str:
    """The commit of the cselab checkout (``+dirty`` when it has uncommitted changes)."""
    repo = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def metric_name(name: str) -> str:
    """MLflow allows letters, digits and ``_-. :/`` in metric names: ``R@1`` -> ``R_at_1``."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name.replace("@", "_at_"))


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Serialise creation of a local SQLite store (parallel first jobs would race the schema)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.parent / ".mlflow.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def init_store(uri: str, experiment_name: str) -> str:
    """Create (or find) the MLflow experiment; returns its id. Safe to call from many jobs."""
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(uri)
    with _store_lock(uri):
        exp = mlflow.get_experiment_by_name(experiment_name)
        if exp is not None:
            return exp.experiment_id
        location = None
        if uri.startswith("sqlite:///"):
            location = (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts").as_uri()
        try:
            return mlflow.create_experiment(experiment_name, artifact_location=location)
        except MlflowException:  # created meanwhile by another process
            return mlflow.get_experiment_by_name(experiment_name).experiment_id


class Run:
    """A thin handle on the active MLflow run."""

    def __init__(self, run):
        self.run = run
        self.run_id = run.info.run_id

    def log_params(self, params: dict) -> None:
        import mlflow

        flat = {k: (json.dumps(v) if isinstance(v, (list, tuple)) else v) for k, v in flatten(params).items()}
        items = list(flat.items())
        for i in range(0, len(items), 100):
            mlflow.log_params(dict(items[i:i + 100]))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        import mlflow

        mlflow.log_metrics({metric_name(k): float(v) for k, v in metrics.items() if v is not None}, step=step)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        import mlflow

        path = Path(path)
        if path.is_dir():
            mlflow.log_artifacts(str(path), artifact_path=artifact_path)
        else:
            mlflow.log_artifact(str(path), artifact_path=artifact_path)

    def set_tags(self, tags: dict[str, Any]) -> None:
        import mlflow

        mlflow.set_tags({k: str(v) for k, v in tags.items()})


@contextlib.contextmanager
def mlflow_run(*, uri: str, experiment_name: str, rule: str, experiment_id: str | None = None,
               params: dict | None = None, tags: dict | None = None, label: str | None = None) -> Iterator[Run]:
    """Open one MLflow run for a rule job, tagged for traceability; failed jobs end FAILED."""
    import mlflow

    exp = init_store(uri, experiment_name)
    all_tags = {"rule": rule, "experiment_id": experiment_id or "", "git_commit": git_commit(),
                **{f"version.{k}": v for k, v in versions().items()}, **(tags or {})}
    run_name = f"{rule}:{experiment_id or label}" if (experiment_id or label) else rule
    with mlflow.start_run(experiment_id=exp, run_name=run_name, tags={k: str(v) for k, v in all_tags.items()}) as run:
        handle = Run(run)
        if params:
            handle.log_params(params)
        yield handle
