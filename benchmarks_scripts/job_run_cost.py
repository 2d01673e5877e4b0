"""What a rule job's MLflow run costs its process: open the local store, one run as a table job
opens it (rule, label, source), one metric, one artifact, its end; nothing else imported.

    python benchmarks_scripts/job_run_cost.py CHECKOUT FOLDER

``CHECKOUT``: the cselab checkout whose :func:`cselab.pipeline.tracking.mlflow_run` runs (two
checkouts compare two versions); ``FOLDER``: the workflow folder whose ``results/mlflow.db`` it
logs to (made if absent). Time it from outside, one process a run, e.g.
``farm-bench --vs 'python benchmarks_scripts/job_run_cost.py ../old /tmp/b-old' -- python
benchmarks_scripts/job_run_cost.py . /tmp/b-new``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

checkout, folder = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
sys.path.insert(0, str(checkout))
from cselab.pipeline.tracking import mlflow_run  # noqa: E402 (the checkout named first)

folder.mkdir(parents=True, exist_ok=True)
os.chdir(folder)
artifact = Path("artifact.txt")
artifact.write_text("one artifact\n")
with mlflow_run(uri="sqlite:///results/mlflow.db", experiment_name="cselab", rule="table", label="bench",
                source="workflow_scripts/table.py") as run:
    run.log_metrics({"rows": 3})
    run.log_artifact(artifact)
