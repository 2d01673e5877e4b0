import os
import sys

# The suite's Python processes (Snakemake invocations, rule scripts' clients, torchrun workers,
# cluster jobs, the tests' own) import the checkout's modules: they cache its bytecode (in the
# checkout's ignored __pycache__ folders) even where the environment says not to
# (PYTHONDONTWRITEBYTECODE), instead of each compiling what it imports again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Parallel workers (`-n 2`) each get their share of the cores for torch's intra-op threads, set
# before anything imports torch: two workers that each spin OpenMP threads on every core slow
# each other down by up to 6x (the GPU acceptance test at tiny size: 54 s alone, 336 s beside a
# second copy with the default threads, 71 s with one thread each). Workflow jobs set their own
# threads from their rules' `threads` (cselab.pipeline.jobs.set_threads), which the tests' Snakemake
# runs cap at the same share (`--max-threads`, tests/helpers.capped).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _SHARE = str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, _SHARE)
    os.environ.setdefault("CSELAB_TEST_MAX_THREADS", _SHARE)  # Snakemake's --max-threads (tests/helpers.capped)

import pytest  # noqa: E402

from tests.helpers import LoopbackServer, make_tiny_bert  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage events from the tests' runs and servers


#: the files that run whole workflows (real snakemake, training, clusters), long ones first: with
#: parallel workers (``-n 2 --dist loadfile``) they start first and the short files fill in after,
#: so no worker is left alone with a long file at the end (xdist's own order puts files with many
#: quick tests first). The first two start together: test_workflow.py builds the tables template
#: that later files copy (tests/built.py) on both cores while test_slurm.py mostly waits for its
#: cluster's status checks; the fault tests' waits then fall beside the other workflow builds.
LONG_FILES = ("test_workflow.py", "test_slurm.py", "test_faults.py", "test_workflow_compcse.py",
              "test_workflow_paradigm.py", "test_workflow_infocse.py", "test_distributed.py", "test_workflow_export.py",
              "test_resume.py", "test_sweep_workflow.py", "test_workflow_new_method.py", "test_beir_shared.py",
              "test_plugins.py", "test_mlflow_server.py", "test_evaluation_kinds.py", "test_span_shards.py",
              "test_spans.py", "test_export.py", "test_cost_plan.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # xdist present: keep the order below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _torch_threads_kept():
    """A test leaves torch at the worker's share of threads: one that raised them (numba's
    OpenMP pool did) would run every later test of its worker on both cores, beside the other
    worker (the GPU acceptance test: 151 s instead of 15)."""
    yield
    torch = sys.modules.get("torch")
    if _WORKERS > 1 and torch is not None and torch.get_num_threads() != int(_SHARE):
        threads = torch.get_num_threads()
        torch.set_num_threads(int(_SHARE))
        pytest.fail(f"the test left torch at {threads} threads (the worker's share: {_SHARE})")


_FROZEN_AT: list = [None]  # the module whose first test last froze the worker's objects


def pytest_runtest_setup(item):
    """Each test module's first test freezes what the worker holds (``gc.freeze``): its imports
    (torch, transformers, Snakemake, MLflow: millions of objects) and what earlier modules kept are
    then no longer traversed by every full collection. Six unit files, one process: 13.9 -> 6.3
    CPU seconds in the collector. Objects still alive are only moved out of the collector's sight;
    reference counting frees them as before."""
    import gc

    if item.module is not _FROZEN_AT[0]:
        _FROZEN_AT[0] = item.module
        gc.freeze()


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """Path of a tiny random BERT checkpoint built from a config (no download)."""
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_encoder(tiny_bert):
    from cselab.models.encoder import load_encoder

    return load_encoder(tiny_bert)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Make sure loopback requests never go through an environment proxy."""
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")


@pytest.fixture
def server():
    s = LoopbackServer()
    yield s
    s.close()
