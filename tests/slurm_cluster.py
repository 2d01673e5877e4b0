"""A private one-node SLURM cluster on localhost, for tests that submit through real sbatch.

    with slurm_cluster() as cluster:
        subprocess.run(["sbatch", "--wrap", "hostname"], env=cluster.env)

Starts its own munged (own key and socket), slurmctld and slurmd from Debian's `slurm-wlm` and
`munge`, all configured from a temporary directory: private ports, state, spool, logs and pid
files, `AuthInfo=socket=` pointing slurm at the private munged. Nothing under /etc or /run is
read or written, so it never touches (or collides with) a real cluster on the machine; client
commands find it through `SLURM_CONF` in `cluster.env`.

The node (the short hostname, at 127.0.0.1) is in two partitions, `cpu` (default) and `gpu`,
and carries one fake GPU (`gres.conf`: `Name=gpu Type=fake File=/dev/null`), so `--gpus=1`
and `--gres=gpu:1` are scheduled and accounted like on a real GPU node. There is no accounting
storage (no slurmdbd): `sacct` answers "accounting storage is disabled", so job status comes
from `squeue`, which keeps finished jobs for `MinJobAge` (600 s here).

Where the cluster cannot be had (not root, a binary missing, a daemon not coming up), entering
the context raises `ClusterUnavailable` with a precise reason, including the tail of the
daemon's log.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
MIN_CPUS = 4  # declared CPUs (SlurmdParameters=config_overrides): three 1-CPU jobs at once on 2 cores
MIN_MEMORY_MB = 8000
CRED_EXPIRE_S = 15


class ClusterUnavailable(RuntimeError):
    """The localhost cluster could not be started; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Cluster:
    root: Path
    conf: Path
    node: str
    env: dict[str, str]
    partitions: tuple[str, ...] = ("cpu", "gpu")
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A client command (sbatch, squeue, scontrol, ...) against this cluster."""
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, check=check,
                              timeout=timeout)

    def log_tail(self, name: str, lines: int = 12) -> str:
        """The last lines of a daemon's log (munged, slurmctld, slurmd), else of its stdout."""
        for path in (self.root / "log" / f"{name}.log", self.root / "log" / f"{name}.out"):
            text = path.read_text(errors="replace").strip() if path.is_file() else ""
            if text:
                return f"--- {name} ({path.name}):\n" + "\n".join(text.splitlines()[-lines:])
        return f"--- {name}: no log"

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (Partition, TresPerJob, JobState, ...)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        fields = {}
        for token in out.split():
            key, sep, value = token.partition("=")
            if sep:
                fields[key] = value
        return fields


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def _check_prerequisites() -> dict[str, str]:
    if os.name != "posix" or not hasattr(os, "geteuid"):
        raise ClusterUnavailable("not a POSIX system")
    if os.geteuid() != 0:
        raise ClusterUnavailable(f"must run as root (slurmd launches jobs as their user); euid is {os.geteuid()}")
    found, missing = {}, []
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])
    for name in DAEMONS + CLIENTS:
        path = shutil.which(name, path=search)
        if path:
            found[name] = path
        else:
            missing.append(name)
    if missing:
        raise ClusterUnavailable(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    return found


def _slurm_conf(root: Path, node: str, cpus: int, memory_mb: int, ctld_port: int, slurmd_port: int) -> str:
    return f"""\
# Private one-node test cluster (tests/slurm_cluster.py); nothing here is shared with the system.
ClusterName=cselabtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
# cred_expire: a job step's credential lifetime, which is also how long SLURM holds a requeued
# job before it may start again (120 s by default); localhost launches take well under a second.
AuthInfo=socket={root}/munge/munge.socket,cred_expire={CRED_EXPIRE_S}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups, no accounting daemon: processes tracked via /proc, memory requests are
# scheduled (CR_Core_Memory) but not enforced.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
ReturnToService=2
MinJobAge=600
KillWait=5
MailProg=/bin/true
InactiveLimit=0
# Declared sizes are trusted even where they exceed the hardware (a test node, not a real one).
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={node} CPUs={cpus} RealMemory={memory_mb} Gres=gpu:fake:1 State=UNKNOWN
PartitionName=cpu Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={node} Default=NO MaxTime=INFINITE State=UP
"""


def _answers(cluster: Cluster, *cmd: str) -> str:
    """A client command's output where it succeeds, else ""."""
    try:
        proc = cluster.run(*cmd, check=False, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def _stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass


@contextmanager
def slurm_cluster(timeout: float = 60, keep: bool = False) -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd on localhost; yield a `Cluster`; stop and clean up.

    ``timeout``: seconds for each daemon to come up (the node to be idle). ``keep``: leave the
    temporary directory (configs, logs) behind for inspection.
    """
    bins = _check_prerequisites()
    # /tmp, not pytest's 0700 tmp_path: munged wants a socket directory every user may enter,
    # and a unix socket path must stay under 108 characters.
    root = Path(tempfile.mkdtemp(prefix="cselab-slurm-", dir="/tmp"))
    os.chmod(root, 0o755)
    for sub in ("munge", "state", "spool", "log", "run", "bin"):
        (root / sub).mkdir()
    os.chmod(root / "munge", 0o755)
    node = socket.gethostname().split(".")[0] or "localhost"
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, node, max(os.cpu_count() or 1, MIN_CPUS),
                                max(_memory_mb() - 1000, MIN_MEMORY_MB), _free_port(), _free_port()))
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu Type=fake File=/dev/null\n")
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(128))
    os.chmod(key, 0o600)
    # snakemake-executor-plugin-slurm-jobstep (0.6.1) drops every SLURM_* variable, SLURM_CONF
    # included, before its nested `srun` in the job; a real cluster's config sits at the
    # compiled-in /etc/slurm/slurm.conf, this one does not. An `srun` first on PATH restores it.
    wrapper = root / "bin" / "srun"
    wrapper.write_text(f'#!/bin/sh\n: "${{SLURM_CONF:={conf}}}"\nexport SLURM_CONF\nexec {bins["srun"]} "$@"\n')
    wrapper.chmod(0o755)

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    env["SLURM_CONF"] = str(conf)
    env["PATH"] = os.pathsep.join([str(root / "bin"), env.get("PATH", ""), "/usr/sbin"])
    cluster = Cluster(root=root, conf=conf, node=node, env=env)

    def start(name: str, *args: str) -> None:
        with open(root / "log" / f"{name}.out", "wb") as out:
            try:
                cluster.procs[name] = subprocess.Popen([bins[name], *args], env=env, stdout=out,
                                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            except OSError as e:
                raise ClusterUnavailable(f"cannot start {name}: {e}") from e

    def wait_for(ready, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for daemon, proc in cluster.procs.items():
                if proc.poll() is not None:
                    raise ClusterUnavailable(f"{daemon} exited with code {proc.returncode} while waiting for "
                                             f"{what}:\n{cluster.log_tail(daemon)}")
            if ready():
                return
            time.sleep(0.5)
        try:
            out = cluster.run("sinfo", "-h", "-N", "-o", "%N %T %E", check=False, timeout=10).stdout
            state = "; ".join(dict.fromkeys(out.strip().splitlines()))  # one line per partition
        except (OSError, subprocess.SubprocessError):
            state = ""
        logs = "\n".join(cluster.log_tail(d) for d in cluster.procs)
        raise ClusterUnavailable(f"{what} not within {timeout:.0f} s (sinfo: {state or 'no answer'}):\n{logs}")

    def node_state() -> str:
        return _answers(cluster, "sinfo", "-h", "-N", "-n", node, "-o", "%T").strip().lower()

    try:
        start("munged", "--foreground", f"--socket={root}/munge/munge.socket", f"--key-file={key}",
              f"--pid-file={root}/run/munged.pid", f"--log-file={root}/log/munged.log",
              f"--seed-file={root}/munge/munged.seed")
        wait_for((root / "munge" / "munge.socket").exists, "munged's socket")
        start("slurmctld", "-D", "-f", str(conf))
        wait_for(lambda: _answers(cluster, "scontrol", "ping"), "slurmctld answering `scontrol ping`")
        start("slurmd", "-D", "-f", str(conf), "-N", node)
        wait_for(lambda: node_state().startswith("idle"), f"node {node} idle in sinfo")
    except BaseException as e:
        _teardown(cluster, keep=keep)
        if isinstance(e, (OSError, subprocess.SubprocessError)):
            raise ClusterUnavailable(f"{type(e).__name__}: {e}") from e
        raise
    try:
        yield cluster
    finally:
        _teardown(cluster, keep=keep)


def _teardown(cluster: Cluster, keep: bool) -> None:
    """Cancel this cluster's jobs, stop its daemons (by pid), remove its directory."""
    if "slurmctld" in cluster.procs and cluster.procs["slurmctld"].poll() is None:
        try:
            ids = cluster.run("squeue", "-h", "-o", "%i", check=False, timeout=10).stdout.split()
            if ids:
                cluster.run("scancel", *ids, check=False, timeout=10)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and cluster.run(
                        "squeue", "-h", "-o", "%i", "-t", "PD,R,CG", check=False, timeout=10).stdout.strip():
                    time.sleep(0.5)
        except (OSError, subprocess.SubprocessError):
            pass
    for name in ("slurmd", "slurmctld", "munged"):
        if name in cluster.procs:
            _stop(cluster.procs[name])
    if not keep:
        shutil.rmtree(cluster.root, ignore_errors=True)


if __name__ == "__main__":  # a manual check: python -m tests.slurm_cluster
    try:
        with slurm_cluster() as c:
            print(c.run("sinfo").stdout)
            out = c.root / "job.out"
            job = c.run("sbatch", "--parsable", "-p", "gpu", "--gpus=1", "--output", str(out), "--wrap",
                        "hostname; echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES").stdout.strip()
            while c.job(job).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED"):
                time.sleep(0.5)
            print(job, {k: c.job(job)[k] for k in ("JobState", "Partition", "TresPerJob")})
            print(out.read_text())
    except ClusterUnavailable as e:
        raise SystemExit(f"cluster unavailable: {e.reason}") from None
