"""One training job on several processes: PyTorch's own machinery (``torch.distributed``,
DistributedDataParallel, the ``torchrun`` launcher), with a few helpers of our own on top.

- :func:`launch` runs a job's entry function on ``devices`` processes per node. One node: the
  processes are started here through torchrun's launcher API (the same elastic agent as the
  ``torchrun`` command, a c10d rendezvous on localhost). Several nodes (inside a SLURM
  allocation): ``srun`` starts one agent per node (``python -m cselab.training.distributed``),
  which rendezvous at the first node of ``SLURM_JOB_NODELIST``. A process that fails takes the
  job down (the agent stops the others) and the error names its rank.
- :func:`gather` is the all-gather of in-batch losses: every process sees the embeddings of
  the whole global batch, its own shard put back so that its gradient flows.
- :func:`global_term` marks a loss computed over the gathered batch: the same value on every
  process, gradient scaled by the world size, so that DDP's gradient *average* equals the
  gradient of the single-process loss at the same global batch.
- :func:`shard` gives each process its disjoint slice of the global batch.

Without an initialised process group every helper is the identity, so single-process training
runs the same code.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import os
import pickle
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from cselab.errors import CselabError
from cselab.io import named_function, quiet_third_party_loggers
from cselab.training.preemption import REQUEUE_EXIT, Preempted, ignoring_warning_signal

log = logging.getLogger(__name__)

class DistributedError(CselabError):
    """A process of a multi-process training job failed (the message names the rank)."""


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


# -- inside a training process -------------------------------------------------------------


def setup(timeout_s: float) -> torch.device | None:
    """Join the process group torchrun's environment describes (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``...); return this process's device, or None when not launched by torchrun.
    NCCL on CUDA (one GPU per local rank), gloo on CPU."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ or is_distributed():
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise DistributedError(f"local rank {local_rank} has no GPU: this node has {torch.cuda.device_count()}; "
                                   "set training.devices to at most the GPUs per node")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s),
                            **({"device_id": device} if backend == "nccl" else {}))
    return device


def teardown() -> None:
    if is_distributed():
        dist.destroy_process_group()


_SIZES: list[int] | None = None  # rows of the current step's global batch per process


def shard(index: torch.Tensor) -> torch.Tensor:
    """This process's contiguous slice of a global batch's sentence indices (sizes differ by at
    most one); every process slices the same shuffled order, so together they see the batch a
    single process would. Remembers the slices' sizes for :func:`gather`."""
    global _SIZES
    if not is_distributed():
        return index
    parts = torch.tensor_split(index, world_size())
    _SIZES = [len(p) for p in parts]
    return parts[rank()]


def shard_offset() -> int:
    """Where this process's slice (the last :func:`shard`) starts in the global batch."""
    return sum(_SIZES[:rank()]) if is_distributed() and _SIZES else 0


def average_gradients(params: list[torch.nn.Parameter]) -> None:
    """Average the gradients over processes, in one collective (what DistributedDataParallel
    does, for a step whose backward runs in several passes: gradient caching)."""
    if not is_distributed():
        return
    grads = [p.grad for p in params if p.grad is not None]  # the same parameters on every process
    if grads:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= world_size()
        _unflatten(flat, grads)


def _unflatten(flat: torch.Tensor, grads: list[torch.Tensor]) -> None:
    start = 0
    for g in grads:
        g.copy_(flat[start:start + g.numel()].view_as(g))
        start += g.numel()


def gather(x: torch.Tensor) -> torch.Tensor:
    """The rows of ``x`` (one per sentence of this process's shard) from every process, in rank
    order (the global batch's order), with this process's own rows being ``x`` itself so that
    gradients reach them; other shards are constants. The sizes come from :func:`shard` (no
    extra collective, no host sync); shards of different sizes are padded for the collective."""
    if not is_distributed():
        return x
    w, r = world_size(), rank()
    if _SIZES is None or x.size(0) != _SIZES[r]:
        raise DistributedError(f"gather expects one row per sentence of this process's shard ({_SIZES}), "
                               f"got {x.size(0)} rows")
    top = max(_SIZES)
    padded = x.detach()
    if x.size(0) < top:
        padded = torch.cat([padded, padded.new_zeros(top - x.size(0), *x.shape[1:])])
    parts = [torch.empty_like(padded) for _ in range(w)]
    dist.all_gather(parts, padded.contiguous())
    parts = [p[:c] for p, c in zip(parts, _SIZES)]
    parts[r] = x
    return torch.cat(parts)


def global_term(loss: torch.Tensor) -> torch.Tensor:
    """A loss computed by every process over the gathered global batch: the value is unchanged,
    the gradient is multiplied by the world size (each process back-propagates only into its own
    shard; DDP averages the shards' gradients, so the factor makes the sum)."""
    w = world_size()
    if w == 1:
        return loss
    return loss + (w - 1) * (loss - loss.detach())


def in_batch(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Decorator for a loss of two views ``fn(u, v, ...)`` over in-batch negatives: both views
    are gathered from every process and the result is a :func:`global_term`."""
    @functools.wraps(fn)
    def wrapper(u: torch.Tensor, v: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if not is_distributed():
            return fn(u, v, *args, **kwargs)
        return global_term(fn(gather(u), gather(v), *args, **kwargs))

    return wrapper


class _AllReduceSum(torch.autograd.Function):
    """Sum over processes whose backward sums the processes' gradients (the gradient of a sum)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of ``x`` over processes, differentiable: the backward sums every process's gradient
    (what makes a global-batch statistic's gradient the single-process one)."""
    return _AllReduceSum.apply(x) if is_distributed() else x


class GlobalBatchNorm(torch.nn.BatchNorm1d):
    """BatchNorm over the global batch of a multi-process job, on any backend (gloo included; the
    single-process math, unlike PyTorch's ``SyncBatchNorm``, which needs CUDA): the mean and the
    (biased) variance of every process's rows, through two differentiable all-reduces, and the
    running statistics updated with the global batch's unbiased variance. Outside training, or
    with one process, it is ``BatchNorm1d``. The state dict is ``BatchNorm1d``'s."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and is_distributed()):
            return super().forward(x)
        x32 = x.float()
        count = all_reduce_sum(x32.new_tensor([float(x32.size(0))]))
        mean = all_reduce_sum(x32.sum(0)) / count
        var = all_reduce_sum(((x32 - mean) ** 2).sum(0)) / count
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), count.detach())
        y = (x32 - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.weight + self.bias
        return y

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor) -> None:
        self.num_batches_tracked += 1
        factor = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        unbiased = var * count / (count - 1).clamp(min=1)
        self.running_mean.mul_(1 - factor).add_(factor * mean)
        self.running_var.mul_(1 - factor).add_(factor * unbiased)


def global_batchnorm(module: torch.nn.Module) -> torch.nn.Module:
    """Every ``BatchNorm1d`` of ``module`` turned into a :class:`GlobalBatchNorm` (in place: same
    parameters and buffers)."""
    for m in module.modules():
        if type(m) is torch.nn.BatchNorm1d:
            m.__class__ = GlobalBatchNorm
    return module


def any_process(flag: bool, device: torch.device) -> bool:
    """Whether ``flag`` is set on any process (one all-reduce and one read: every process must
    call it at the same point, e.g. a stop signal checked after each step)."""
    if not is_distributed():
        return flag
    value = torch.tensor([float(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def mean_over_processes(values: torch.Tensor) -> torch.Tensor:
    """The average of a tensor over processes (a logging window's sums)."""
    if not is_distributed():
        return values
    values = values.clone()
    dist.all_reduce(values)
    return values / world_size()


def all_objects(obj: Any) -> list[Any]:
    """``obj`` of every process, in rank order (e.g. each process's RNG state for a checkpoint)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every process."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# -- starting the processes ------------------------------------------------------------------


def launch(entry: str, payload: dict, devices: int, nodes: int = 1, workdir: Path | None = None, *,
           timeout_s: float, log_file: str | Path | None = None, threads: int | None = None) -> Any:
    """Run ``entry`` (``"module:function"``, called with ``payload``) on ``devices`` processes
    per node of ``nodes`` nodes and return rank 0's return value.

    ``devices * nodes == 1`` calls it here, in this process. Otherwise the payload and rank 0's
    result pass through ``workdir`` (a folder of its own on the shared filesystem, removed
    afterwards) and the processes are
    torchrun workers: on one node started from here, on several through ``srun`` in the
    current SLURM allocation. A failure raises :class:`DistributedError` naming the rank.
    Workers log to stderr (prefixed with their rank) and rank 0 also to ``log_file``; each
    uses ``threads / devices`` CPU threads. ``timeout_s``: the collective timeout
    (``training.dist_timeout_s``), after which a process waiting for the others fails the job.
    """
    if devices * nodes == 1:
        return _resolve(entry)(payload)
    if workdir is None:
        raise ValueError("a multi-process launch needs a workdir for the payload and result")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # the payload is unpickled in the worker after sys.path is set (its callables may live in a script)
    job = {"entry": entry, "payload": pickle.dumps(payload), "result": str(workdir / "result.pt"),
           "timeout_s": timeout_s,
           "log_file": str(log_file) if log_file else None,
           "threads": max(1, (threads or torch.get_num_threads()) // devices), "sys_path": [p for p in sys.path if p]}
    job_file = workdir / "job.pkl"
    job_file.write_bytes(pickle.dumps(job))
    Path(job["result"]).unlink(missing_ok=True)
    try:
        if nodes == 1:
            _agent(job_file, devices, nnodes=1, endpoint=f"localhost:{_free_port()}")
        else:
            _srun_agents(job_file, devices, nodes)
        return torch.load(job["result"], weights_only=False)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _resolve(entry: str) -> Callable[[dict], Any]:
    return named_function(entry)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _agent(job_file: Path, devices: int, nnodes: int, endpoint: str, run_id: str = "cselab") -> None:
    """One node's torchrun agent: start ``devices`` workers, wait, stop them all if one fails."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # the workers' error files in the launch's own folder (removed with it), not a new folder in /tmp
    logs = DefaultLogsSpecs(log_dir=str(Path(job_file).parent / "elastic"))
    config = LaunchConfig(min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=devices, run_id=run_id,
                          rdzv_backend="c10d", rdzv_endpoint=endpoint, max_restarts=0, monitor_interval=0.5,
                          logs_specs=logs)
    package_root = str(Path(__file__).resolve().parents[2])  # cselab importable even when not installed
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if package_root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, paths)])
    try:  # workers are fresh interpreters, as torchrun starts them (nothing re-imports the caller's __main__)
        with ignoring_warning_signal():
            elastic_launch(config, sys.executable)("-m", "cselab.training.distributed", "worker", str(job_file))
    except ChildFailedError as e:
        if all(f.exitcode == REQUEUE_EXIT for f in e.failures.values()):  # every worker stopped at a checkpoint
            raise Preempted(None, signal.SIGTERM) from None
        failed_rank, failure = _root_cause(e)
        raise DistributedError(f"training process rank {failed_rank} of {devices * nnodes} "
                               f"(host {socket.gethostname()}, pid {failure.pid}) failed: {_failure_text(failure)}; "
                               "the other processes were stopped") from None


def _root_cause(error) -> tuple[int, Any]:
    """The failure that took the job down: a process killed by a signal other than the agent's
    SIGTERM (its peers then fail on a broken connection, earlier by the clock), else the first."""
    killed = [(r, f) for r, f in sorted(error.failures.items())
              if f.exitcode is not None and f.exitcode < 0 and -f.exitcode != signal.SIGTERM]
    return killed[0] if killed else error.get_first_failure()


def _failure_text(failure) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", message)
    text = str(message).strip() if message else ""
    if not text or text.startswith("To enable traceback") or text.startswith("Signal "):
        if failure.exitcode is not None and failure.exitcode < 0:
            return (f"killed by {signal.Signals(-failure.exitcode).name} (out of memory? see the job's log and "
                    "the node's kernel log)")
        return f"exit code {failure.exitcode} (see the job's log for its output)"
    return text.splitlines()[-1] if "Traceback" in text else text


def _worker(job_file: str) -> None:
    """A torchrun worker: join the group, run the entry, rank 0 keeps its result."""
    from torch.distributed.elastic.multiprocessing.errors import record

    _die_with_agent()

    @record  # the exception goes to the agent's error file: the launcher's message quotes it
    def run() -> None:
        job = pickle.loads(Path(job_file).read_bytes())
        sys.path.extend(p for p in job["sys_path"] if p not in sys.path)  # e.g. a test module as entry
        _worker_logging(job.get("log_file"))
        torch.set_num_threads(job["threads"])
        setup(job["timeout_s"])
        try:
            try:
                result = _resolve(job["entry"])(pickle.loads(job["payload"]))
            except Preempted:  # checkpointed: the agent turns every worker's 75 back into Preempted
                teardown()
                sys.exit(REQUEUE_EXIT)
            if is_main():
                with open(job["result"] + ".tmp", "wb") as fh:
                    torch.save(result, fh)
                os.replace(job["result"] + ".tmp", job["result"])
        finally:
            teardown()

    run()


def _die_with_agent() -> None:
    """A worker whose agent (the rule job's process) is killed outright is killed too (Linux's
    parent-death signal), instead of waiting out the process group's timeout holding its memory
    and GPU; an agent that stops on a signal stops its workers itself first."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the agent was gone before the signal was set
        os._exit(1)


def _worker_logging(log_file: str | None) -> None:
    """A worker's logging: rank 0 at INFO, the others at WARNING; rank 0 also to the job's log
    file. Started by a rule job, a worker's stderr shows what the job's own does (its progress
    and cselab's warnings, named by the job and the rank: :func:`cselab.io.console_stream_handler`);
    elsewhere, every record."""
    from cselab.io import CONSOLE_LABEL_ENV, console_stream_handler, not_live

    rank_ = os.environ.get("RANK", "?")
    label = os.environ.get(CONSOLE_LABEL_ENV)
    handlers: list[logging.Handler] = [console_stream_handler(f"{label} rank {rank_}" if rank_ != "0" else label,
                                                              sys.stderr)
                                       if label else logging.StreamHandler(sys.stderr)]
    if log_file and rank_ == "0":
        handlers.append(logging.FileHandler(log_file, mode="a"))
        handlers[-1].addFilter(not_live)  # a terminal's updating line stays off the job's log
    logging.basicConfig(level=logging.INFO if rank_ == "0" else logging.WARNING, handlers=handlers, force=True,
                        format=f"%(asctime)s rank {rank_} %(name)s %(levelname)s %(message)s")
    quiet_third_party_loggers()


def srun_command(job_file: Path, devices: int, nodes: int, python: str = sys.executable) -> list[str]:
    """``srun`` starting one torchrun agent per node of the current allocation (``--overlap``:
    inside the job step Snakemake's SLURM executor already runs the rule in)."""
    return ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1", python, "-m", "cselab.training.distributed", "agent", str(job_file),
            str(devices), str(nodes)]


def _srun_agents(job_file: Path, devices: int, nodes: int) -> None:
    allocated = int(os.environ.get("SLURM_JOB_NUM_NODES", os.environ.get("SLURM_NNODES", "0")) or 0)
    if allocated < nodes:
        raise DistributedError(f"training.nodes is {nodes} but this job runs in "
                               + (f"a SLURM allocation of {allocated} node(s)" if allocated else
                                  "no SLURM allocation")
                               + "; request them with the rule's `nodes` resource (profiles/slurm)")
    cmd = srun_command(job_file, devices, nodes)
    log.info("starting %d torchrun agents: %s", nodes, shlex.join(cmd))
    with ignoring_warning_signal():
        proc = subprocess.run(cmd)
    if proc.returncode == REQUEUE_EXIT:
        raise Preempted(None, signal.SIGTERM)
    if proc.returncode != 0:
        raise DistributedError(f"the multi-node training job failed (srun exit code {proc.returncode}); "
                               "the failing rank is named in the job's log above")


def head_node() -> str:
    """The first host of the SLURM allocation (the rendezvous endpoint for every node)."""
    out = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0]


def main(argv: list[str] | None = None) -> int:
    """``python -m cselab.training.distributed worker JOB_FILE``: one training process (started
    by a torchrun agent); ``... agent JOB_FILE DEVICES NODES``: one node's agent in a multi-node
    job (started by :func:`srun_command`)."""
    argv = argv or sys.argv[1:]
    if argv[0] == "worker":
        _worker(argv[1])
        return 0
    job_file, devices, nodes = argv[1:4]
    port = os.environ.get("CSELAB_RDZV_PORT", "29517")
    try:
        _agent(Path(job_file), int(devices), nnodes=int(nodes), endpoint=f"{head_node()}:{port}",
               run_id=os.environ.get("SLURM_JOB_ID", "cselab"))
    except DistributedError as e:
        print(f"cselab error on node {socket.gethostname()}: {e}", file=sys.stderr)
        return 1
    except Preempted:
        return REQUEUE_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
