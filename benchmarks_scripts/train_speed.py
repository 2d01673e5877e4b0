"""Training throughput of the shared loop (SimCSE vs CompCSE) on a BERT built from a config.

Builds a randomly initialised BERT of the paper's sizes (base: 12 x 768, large: 24 x 1024; the
speed does not depend on the weights) with a WordPiece tokenizer taken from ``--tokenizer``
(default: the all-MiniLM-L6-v2 checkpoint's, which is bert-base-uncased's vocabulary), then runs
``cselab.training.loop.train`` for ``--steps`` steps per objective at the paper's settings (batch 64,
max_len 32, bf16 autocast on CUDA) on the first lines of ``--corpus``. STS-B dev is replaced by
a constant, so the figure is the optimizer-step rate. Prints one JSON line per objective.

    python benchmarks_scripts/train_speed.py --corpus ../shared/data/wiki1m_for_simcse.txt --size base
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_settings as settings  # noqa: E402

SIZES = {"tiny": (2, 128, 2), "base": (12, 768, 12), "large": (24, 1024, 16)}


def build_model(out: Path, size: str, tokenizer: str | None) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    if tokenizer is None:
        from cselab.models.checkpoints import resolve_model

        tokenizer = str(resolve_model("all-MiniLM-L6-v2"))
    layers, hidden, heads = SIZES[size]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=512)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--size", default="base", choices=sorted(SIZES))
    ap.add_argument("--tokenizer", default=None, help="a folder with a WordPiece tokenizer")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--objectives", default="simcse,compcse")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    args = ap.parse_args()

    import torch

    from cselab.training.loop import train

    tmp = Path(tempfile.mkdtemp())
    model = build_model(tmp / "model", args.size, args.tokenizer)
    lines = [ln for ln in Path(args.corpus).read_text(encoding="utf-8").splitlines() if ln.strip()]
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(lines[: args.steps * args.batch_size]) + "\n", encoding="utf-8")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for objective in args.objectives.split(","):
        options = {"partitions": 2, "aggregation": "avg", "compose": "z+", "d0": None} if objective == "compcse" else {}
        spec = {"id": f"{objective}-{args.size}-s42", "name": objective, "plm": args.size, "model": str(model),
                "method": objective, "objective": objective, "weight": 1.0, "options": options,
                "auxiliaries": {}, "signature": objective, "seed": 42,
                "training": settings.training(batch_size=args.batch_size, max_len=32, epochs=1, max_steps=args.steps,
                                              eval_steps=10 ** 9, log_steps=10, precision=args.precision)}
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        tic = time.perf_counter()
        res = train(spec, corpus, lambda encoder: 0.0, tmp / objective, device=device)
        wall = time.perf_counter() - tic
        steady = [r["sentences_per_s"] for r in res.curve if r.get("sentences_per_s")][1:]
        print(json.dumps({
            "objective": objective, "size": args.size, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__, "steps": res.steps, "batch_size": args.batch_size, "precision": args.precision,
            "sentences_per_s": round(res.sentences_per_s, 1),
            "steady_sentences_per_s": round(sum(steady) / len(steady), 1) if steady else None,
            "wall_seconds": round(wall, 1), "final_loss": [r["loss"] for r in res.curve if r.get("loss") is not None][-1],
            "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2 ** 20) if device == "cuda" else None}), flush=True)


if __name__ == "__main__":
    main()
