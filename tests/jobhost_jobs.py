"""Job functions for tests/test_jobhost.py: importable by the warm job host (the repository root
is on its path), each telling the test what it saw."""

import json
import os
import signal
import sys
import time
from pathlib import Path

from cselab.errors import CselabError


def _report(smk, **more) -> None:
    from cselab.pipeline.jobhost import describe

    Path(smk.params["report"]).write_text(json.dumps({
        "pid": os.getpid(), "parent": os.getppid(), "cwd": os.getcwd(), "marker": os.environ.get("JOBHOST_TEST_MARKER"),
        "argv": sys.argv, "ran": describe(), "umask": _umask(), **more}))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def echo(smk) -> None:
    """Writes to both streams and reports its process, folder, environment and umask."""
    print("to stdout from the job")
    print("to stderr from the job", file=sys.stderr)
    _report(smk)


def fail(smk) -> None:
    raise CselabError("the toy job's input is bad")


def crash(smk) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def wait_for_term(smk) -> None:
    """Reports, then waits for SIGTERM and leaves with status 3 after writing ``terminated``."""
    def on_term(signum, _frame):
        Path(smk.params["report"]).with_name("terminated").write_text(signal.Signals(signum).name)
        sys.exit(3)

    signal.signal(signal.SIGTERM, on_term)
    _report(smk)
    time.sleep(60)


def sleep(smk) -> None:
    _report(smk)
    time.sleep(60)


def train(smk) -> None:
    """Named as the training job is (the host holds torch for it, where it may): imports torch, and
    says whether transformers' conversion rules were built before it loads a model."""
    import torch  # noqa: F401

    rules = getattr(sys.modules.get("transformers.conversion_mapping"), "_checkpoint_conversion_mapping_cache", None)
    _report(smk, conversion_rules_built=rules is not None)


def nap(smk) -> None:
    """Reports, then works a few seconds more (long enough for the test to kill its host)."""
    _report(smk)
    time.sleep(4)
    Path(smk.params["report"]).with_name("done").write_text("yes")
