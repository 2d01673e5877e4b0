"""The warm job host (cselab/pipeline/jobhost.py): a job runs as a fork of the invocation's host
with its client's streams, folder, environment and umask; its status, a signal sent to the client
and a client killed outright all reach the job as they would its own process; without a host
the job runs in its own process; the host leaves after its invocation. Real processes
throughout, no Snakemake: the clients are what a rule's ``script:`` runs."""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from cselab.pipeline import jobhost

ROOT = Path(__file__).resolve().parents[1]

CLIENT = """
import sys
from types import SimpleNamespace
sys.path.insert(0, {root!r})
from cselab.pipeline.jobs import main
from tests import jobhost_jobs
smk = SimpleNamespace(rule="toy", threads=1, log=[{log!r}], params={{"report": {report!r}}}, config={{}},
                      wildcards={{}})
main(smk, getattr(jobhost_jobs, {name!r}))
"""


@pytest.fixture(scope="module")
def invocation():
    """An invocation's process (a sleeper) and its host's address; the host is started by the
    first job and must leave once the sleeper has ended."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    addr = jobhost.address(f"test-{uuid.uuid4().hex}", sleeper.pid, ROOT)
    yield sleeper, addr
    sleeper.kill()
    sleeper.wait()


def start(tmp_path: Path, invocation, name: str, **env) -> subprocess.Popen:
    sleeper, addr = invocation
    code = CLIENT.format(root=str(ROOT), log=str(tmp_path / "job.log"), report=str(tmp_path / "report.json"),
                         name=name)
    inherited = {k: v for k, v in os.environ.items()  # a host of its own, unless a test names a template
                 if k not in (jobhost.IN_HOST_ENV, jobhost.TEMPLATE_ENV)}
    full = {**inherited, jobhost.ADDRESS_ENV: addr, jobhost.INVOCATION_PID_ENV: str(sleeper.pid),
            "JOBHOST_TEST_MARKER": "seen", **env}
    return subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=full, umask=0o027,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def report(tmp_path: Path, timeout: float = 60) -> dict:
    path = tmp_path / "report.json"
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, "the job never reported"
        time.sleep(0.05)
    return json.loads(path.read_text())


def hosts(addr: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(addr in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_a_job_runs_as_a_fork_with_the_clients_streams_folder_and_environment(tmp_path, invocation):
    client = start(tmp_path, invocation, "echo")
    out, err = client.communicate(timeout=120)
    assert client.returncode == 0, err
    seen = report(tmp_path)
    assert seen["ran"] == "torch not imported; a fork of the warm job host" and seen["pid"] != client.pid
    assert seen["cwd"] == str(tmp_path) and seen["marker"] == "seen" and seen["umask"] == 0o027
    assert "to stdout from the job" in out and "to stderr from the job" in err
    assert "a fork of the warm job host" in (tmp_path / "job.log").read_text().splitlines()[-1]
    assert len(hosts(invocation[1])) == 1


def test_the_jobs_status_and_fatal_signal_reach_the_client(tmp_path, invocation):
    client = start(tmp_path, invocation, "fail")
    _, err = client.communicate(timeout=120)
    assert client.returncode == 1 and "Traceback" not in err
    assert "the toy job's input is bad" in (tmp_path / "job.log").read_text()  # the console quotes it from there
    (tmp_path / "crash").mkdir()
    client = start(tmp_path / "crash", invocation, "crash")
    client.communicate(timeout=120)
    assert client.returncode == -signal.SIGSEGV


def test_a_signal_to_the_client_reaches_the_job(tmp_path, invocation):
    client = start(tmp_path, invocation, "wait_for_term")
    report(tmp_path)
    client.terminate()
    client.communicate(timeout=60)
    assert client.returncode == 3 and (tmp_path / "terminated").read_text() == "SIGTERM"


def test_a_client_killed_outright_takes_its_job_with_it(tmp_path, invocation):
    client = start(tmp_path, invocation, "sleep")
    job = report(tmp_path)["pid"]
    client.kill()
    client.wait()
    deadline = time.monotonic() + 10
    while alive(job):
        assert time.monotonic() < deadline, "the job outlived its killed client"
        time.sleep(0.05)


def alive(pid):
    """Whether pid runs and is not a zombie; a process that ends while we look is not alive."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_host_killed_during_a_job_loses_nothing(tmp_path):
    """The job goes on, and the status it gave as it left reaches its client."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    own = (sleeper, jobhost.address(f"test-{uuid.uuid4().hex}", sleeper.pid, ROOT))
    try:
        client = start(tmp_path, own, "nap")
        job = report(tmp_path)["pid"]
        for host in hosts(own[1]):  # the job is a fork of the host: the same command line
            if host.pid != job:
                host.kill()
        _, err = client.communicate(timeout=120)
        assert client.returncode == 0, err
        assert (tmp_path / "done").read_text() == "yes"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_malformed_request_leaves_the_host_serving(tmp_path, invocation):
    """A connection that sends a partial or damaged request (a short head without descriptors, a
    payload cut short, one that does not unpickle) is dropped with the descriptors it passed; the
    same host serves the next job."""
    addr = invocation[1]
    client = start(tmp_path, invocation, "echo")  # the host is up
    client.communicate(timeout=120)
    assert client.returncode == 0
    host = hosts(addr)[0]
    descriptors = host.num_fds()
    malformed = ((b"abc", [], b""),  # a short head, no descriptors
                 (struct.pack("!Q", 1000), [0, 1, 2], b"cut"),  # less payload than the head announced
                 (struct.pack("!Q", 3), [0, 1, 2], b"bad"))  # a payload that does not unpickle
    for head, fds, payload in malformed:
        conn = jobhost._try_connect(jobhost._for_this_python(addr))
        assert conn is not None
        socket.send_fds(conn, [head], fds)
        conn.sendall(payload)
        conn.close()
    (tmp_path / "report.json").unlink()
    client = start(tmp_path, invocation, "echo")
    _, err = client.communicate(timeout=120)
    assert client.returncode == 0, err
    assert report(tmp_path)["ran"] == "torch not imported; a fork of the warm job host"
    assert hosts(addr) == [host]
    deadline = time.monotonic() + 10  # the host closes a job's connection once it has reported its end
    while host.num_fds() != descriptors:  # it keeps none of the malformed requests' descriptors
        assert time.monotonic() < deadline, (host.num_fds(), descriptors)
        time.sleep(0.05)


def test_without_a_host_the_job_runs_in_its_own_process(tmp_path, invocation):
    client = start(tmp_path, invocation, "echo", **{jobhost.SWITCH_ENV: "0"})
    _, err = client.communicate(timeout=120)
    assert client.returncode == 0, err
    seen = report(tmp_path)
    assert seen["ran"] == "torch not imported; its own process" and seen["pid"] == client.pid
    unreachable = start(tmp_path, invocation, "echo", **{jobhost.INVOCATION_PID_ENV: "999999999",
                                                          jobhost.ADDRESS_ENV: "cselab-jobhost-none"})
    (tmp_path / "report.json").unlink()
    _, err = unreachable.communicate(timeout=120)
    assert unreachable.returncode == 0, err  # a host that leaves at once: the job runs itself
    assert report(tmp_path)["ran"].endswith("its own process")


@pytest.mark.parametrize("torch_in_host", ["1", "0"])
def test_the_host_holds_torch_for_model_jobs_except_where_a_gpu_is_visible(tmp_path, torch_in_host):
    """A training job finds torch imported by the host; where a GPU is visible (``CSELAB_JOB_HOST_TORCH=0``,
    set by the invocation) the host never imports it and the job does."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    own = (sleeper, jobhost.address(f"test-{uuid.uuid4().hex}", sleeper.pid, ROOT))
    try:
        client = start(tmp_path, own, "train", **{jobhost.TORCH_ENV: torch_in_host})
        _, err = client.communicate(timeout=300)
        assert client.returncode == 0, err
        held = "torch held by the host" if torch_in_host == "1" else "torch imported"
        seen = report(tmp_path)
        assert seen["ran"] == f"{held}; a fork of the warm job host"
        assert seen["conversion_rules_built"] == (torch_in_host == "1")  # the host built them once
    finally:
        sleeper.kill()
        sleeper.wait()


def test_two_first_jobs_share_one_host_that_leaves_after_its_invocation(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    own = (sleeper, jobhost.address(f"test-{uuid.uuid4().hex}", sleeper.pid, ROOT))
    try:
        folders = [tmp_path / "a", tmp_path / "b"]
        for folder in folders:
            folder.mkdir()
        clients = [start(folder, own, "echo") for folder in folders]
        for client in clients:
            _, err = client.communicate(timeout=120)
            assert client.returncode == 0, err
        assert {report(f)["ran"] for f in folders} == {"torch not imported; a fork of the warm job host"}
        deadline = time.monotonic() + 10
        while len(hosts(own[1])) != 1:  # a second host that lost the race leaves
            assert time.monotonic() < deadline, hosts(own[1])
            time.sleep(0.1)
        host = hosts(own[1])[0]
    finally:
        sleeper.kill()
        sleeper.wait()
    host.wait(timeout=15)  # the invocation has ended: so does its host


def test_only_jobs_an_invocation_runs_itself_use_a_host(monkeypatch):
    from cselab.pipeline import invocation

    for name in (jobhost.SWITCH_ENV, jobhost.ADDRESS_ENV, jobhost.INVOCATION_PID_ENV, jobhost.TORCH_ENV):
        monkeypatch.setenv(name, "")  # restored after the test, whatever the invocation sets
        monkeypatch.delenv(name)
    monkeypatch.setenv(invocation.INVOCATION_ENV, "test-invocation")
    monkeypatch.delenv(invocation.GPUS_ENV, raising=False)
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)
    for args, expected in ((["--cores", "2"], True), (["--profile", "profiles/slurm"], False),
                           (["--executor", "slurm", "-j", "4"], False)):
        monkeypatch.delenv(jobhost.ADDRESS_ENV, raising=False)
        invocation._warm_job_host(invocation.Invocation.of(args, main=True))
        assert (jobhost.ADDRESS_ENV in os.environ) == expected, args
    monkeypatch.setenv(jobhost.SWITCH_ENV, "0")
    invocation._warm_job_host(invocation.Invocation.of(["--cores", "2"], main=True))
    assert jobhost.ADDRESS_ENV not in os.environ


def test_the_summary_counts_a_hosted_jobs_own_cpu_seconds(tmp_path):
    from cselab.pipeline.console import hosted_job_cpu_seconds

    log = tmp_path / "job.log"
    log.write_text("2026-11-27 12:00:00,000 cselab INFO rule train done in 3.0 s (this process; torch held by the host; "
                   "a fork of the warm job host; cpu 2.5 s, peak 500 MiB)\n")
    assert hosted_job_cpu_seconds([str(log)]) == 2.5
    log.write_text("2026-11-27 12:00:00,000 cselab INFO rule train done in 3.0 s (this process; torch held by the host; "
                   "its own process; cpu 9.5 s, peak 500 MiB)\n")
    assert hosted_job_cpu_seconds([str(log)]) == 0.0  # its benchmark file counted it


def test_a_host_forked_from_a_template_serves_like_a_started_one(tmp_path):
    """With ``CSELAB_JOB_HOST_TEMPLATE`` naming a live template of this checkout, an invocation's
    host is a fork of it (no imports paid: torch is already held), runs jobs as a started host
    does and leaves after its invocation; a template is not asked where a GPU is visible, one of
    another name (or checkout) is not found, and one whose imports read other values of the
    environment (Hugging Face's offline mode) refuses: each of those invocations starts its own."""
    name = f"test-{uuid.uuid4().hex}"
    template = jobhost.start_template(name)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    own = (sleeper, jobhost.address(f"test-{uuid.uuid4().hex}", sleeper.pid, ROOT))
    try:
        deadline = time.monotonic() + 120
        while jobhost._try_connect(jobhost.template_address(name)) is None:  # it binds, then imports
            assert time.monotonic() < deadline and template.poll() is None, "the template did not start"
            time.sleep(0.1)
        as_snakemake_runs_jobs = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3",
                                  "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
        client = start(tmp_path, own, "echo", **{jobhost.TEMPLATE_ENV: name, **as_snakemake_runs_jobs})
        out, err = client.communicate(timeout=120)
        assert client.returncode == 0, err
        assert out == "to stdout from the job\n" and err.endswith("to stderr from the job\n"), (out, err)
        seen = report(tmp_path)
        assert seen["ran"] == "torch held by the host; a fork of the warm job host"
        assert seen["cwd"] == str(tmp_path) and seen["marker"] == "seen" and seen["umask"] == 0o027
        host = psutil.Process(seen["parent"])  # the job's host: a fork of the template, in a session of its own
        assert host.ppid() == template.pid and host.pid == os.getsid(host.pid)
        refused = ({jobhost.TORCH_ENV: "0"}, {jobhost.TEMPLATE_ENV: name + "-other"},
                   {"HF_HUB_OFFLINE": "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"})  # read at import
        for gpu_or_other_name in refused:
            (tmp_path / "report.json").unlink()
            other = (sleeper, jobhost.address(f"test-{uuid.uuid4().hex}", sleeper.pid, ROOT))
            client = start(tmp_path, other, "echo", **{jobhost.TEMPLATE_ENV: name, **gpu_or_other_name})
            _, err = client.communicate(timeout=120)
            assert client.returncode == 0, err
            assert report(tmp_path)["ran"] == "torch not imported; a fork of the warm job host"
    finally:
        sleeper.kill()
        sleeper.wait()
    host.wait(timeout=15)  # the invocation has ended: so does its host
    template.terminate()
    assert template.wait(timeout=30) == 0  # a terminated template leaves as a returning one does


#: what a hosted job's client must not import before it hands the job to the host: each is the
#: host's to hold (``jobhost.LIGHT``, ``TORCH``), and pandas alone cost a train client 0.45 s
HEAVY = ("torch", "transformers", "mlflow", "pandas", "scipy", "sklearn", "matplotlib", "sqlalchemy")


def test_a_rule_scripts_client_imports_nothing_the_host_holds():
    """Each ``workflow_scripts/`` script's imports (all its client runs before it hands the job to
    the host), in one fresh interpreter, script after script: the first that imports a heavy
    module is named."""
    code = f"""
import ast, sys
from pathlib import Path
scripts = Path({str(ROOT / "workflow_scripts")!r})
sys.path.insert(0, str(scripts))
for path in sorted(scripts.glob("*.py")):
    imports = [n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    exec(compile(ast.Module(imports, []), str(path), "exec"), {{}})
    heavy = [m for m in {HEAVY!r} if m in sys.modules]
    if heavy:
        sys.exit(f"{{path.name}} imports {{heavy}}")
print("light")
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "light", proc.stderr[-2000:]
