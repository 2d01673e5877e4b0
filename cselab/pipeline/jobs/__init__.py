"""Rule jobs: one module per rule family (:mod:`.data`, :mod:`.train`, :mod:`.evaluate`,
:mod:`.report`), one function per rule, each one MLflow run.

``workflow_scripts/<rule>.py`` calls :func:`main` with its job function. Jobs take plain paths and
dicts from the ``snakemake`` object and call the library; a user error (:class:`CselabError`)
becomes one clear line on stderr and in the job's log, not a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Callable

from cselab.errors import CselabError
from cselab.io import quiet_third_party_loggers

log = logging.getLogger("cselab")



def run(smk, experiment_id: str | None = None, params: dict | None = None, label: str | None = None,
        resume: str | None = None):
    """The job's MLflow run (its source is the rule's own script); a remote tracking server is
    checked first (``mlflow.fallback``); ``resume``: an interrupted attempt's run to continue."""
    from cselab.pipeline.config import tracking_uri
    from cselab.pipeline.tracking import mlflow_run

    mlcfg = smk.config["mlflow"]
    return mlflow_run(uri=tracking_uri(smk.config), fallback=mlcfg["fallback"],
                      experiment_name=mlcfg["experiment_name"], rule=smk.rule, experiment_id=experiment_id,
                      params=params, label=label, tags={"snakemake.jobid": getattr(smk, "jobid", "")},
                      source=f"workflow_scripts/{smk.cselab_job}.py", resume=resume)


def senteval_root(manifest: str | Path) -> Path:
    return Path(json.loads(Path(manifest).read_text())["root"])


def main(smk, job: Callable) -> None:
    """Run ``job(smk)`` for a Snakemake ``script:``: log to the rule's log file, clear user errors."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if smk.log:
        Path(smk.log[0]).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(smk.log[0], mode="w"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        handlers=handlers, force=True)
    quiet_third_party_loggers()
    try:  # rules in the spans environment run without torch
        import torch

        torch.set_num_threads(max(1, int(smk.threads)))
    except ImportError:
        pass
    smk.cselab_job = job.__name__
    try:
        job(smk)
    except CselabError as e:
        log.error("%s", e)
        print(f"\ncselab error in rule {smk.rule}: {e}\n", file=sys.stderr)
        sys.exit(1)
    except BaseException:
        log.exception("rule %s failed", smk.rule)  # the traceback in the job's log file too
        raise
