"""Multi-process scaling of one training job: tokens/s of the shared loop at 1, 2, 4, 8 processes.

Each point is a real job through :func:`cselab.training.distributed.launch` (torchrun workers,
DDP, in-batch negatives gathered from every process), the batch per process fixed
(``--per-device-batch``, weak scaling: the global batch grows with the processes) or the global
batch fixed (``--global-batch``, strong scaling). On CUDA the counts above the node's GPUs are
skipped; on CPU (gloo) the processes share the cores, so the figures there only show the
benchmark works. Every row also carries the communication volume per step and process that
the model size implies: the gradient all-reduce (ring: 2 (W-1)/W x 4 bytes x parameters) and the
embedding all-gathers (views x global batch x hidden x 4 bytes).

    python benchmarks_scripts/scaling.py --corpus ../shared/data/wiki1m_head.txt --size base \\
        --devices 1,2,4,8 --steps 30 --out results/benchmarks/scaling.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def communication_bytes(config, world: int, global_batch: int, views: int = 2) -> dict[str, float]:
    """Bytes each process sends per step: DDP's ring all-reduce of fp32 gradients, and the
    all-gather of the two views' embeddings (fp32) for the in-batch loss."""
    h, layers, inter, vocab = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    params = vocab * h + config.max_position_embeddings * h + layers * (4 * h * h + 2 * h * inter) + h * h
    allreduce = 2 * (world - 1) / world * 4 * params if world > 1 else 0.0
    gather = views * global_batch * h * 4 * (world - 1) / world if world > 1 else 0.0
    return {"params": params, "allreduce_mb": allreduce / 1e6, "gather_mb": gather / 1e6}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, type=Path)
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="a model name or folder (ignored with --size)")
    ap.add_argument("--size", choices=("tiny", "base", "large"), help="a random BERT of this size, built from a config")
    ap.add_argument("--method", default="simcse", choices=("simcse", "compcse"))
    ap.add_argument("--devices", default="1,2,4,8")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--per-device-batch", type=int, default=64)
    group.add_argument("--global-batch", type=int)
    ap.add_argument("--max-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads per job (split over its processes)")
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks/scaling.csv"))
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoConfig

    from cselab.io import process_folder
    from cselab.models.checkpoints import resolve_model
    from cselab.training import distributed
    from scaling import no_dev  # by module name, so the worker processes can unpickle it
    from throughput import spec_for
    from transformers import AutoTokenizer

    work = process_folder("cselab-scaling-")  # its models, corpora and runs: gone with the process
    if args.size:
        from train_speed import build_model

        model_dir = build_model(work / "model", args.size, None)
    else:
        model_dir = resolve_model(args.model)
    config, tokenizer = AutoConfig.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    cuda = torch.cuda.is_available()
    where = f"{torch.cuda.get_device_name()} x{torch.cuda.device_count()}" if cuda else f"cpu x{os.cpu_count()}"
    lines = [ln for ln in args.corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    rows = []
    for world in (int(d) for d in args.devices.split(",")):
        if cuda and world > torch.cuda.device_count():
            print(f"skipping {world} processes: {torch.cuda.device_count()} GPU(s)")
            continue
        batch = args.global_batch or args.per_device_batch * world
        corpus = work / f"corpus-{world}.txt"
        corpus.write_text("\n".join(lines[:batch * args.steps]) + "\n", encoding="utf-8")
        spec = spec_for(args.method, model_dir, batch, args.max_len, args.steps, False)
        kwargs = {"spec": spec, "corpus_path": corpus, "dev_score": no_dev, "out_dir": work / f"run-{world}",
                  "token_cache": work / "tokens"}
        result = distributed.launch("cselab.training.loop:train_job", kwargs, devices=world,
                                    workdir=work / f"launch-{world}", threads=args.threads,
                                    timeout_s=spec["training"]["dist_timeout_s"])
        rates = [r["sentences_per_s"] for r in result.curve if r.get("sentences_per_s")]
        steady = rates[2:] or rates
        sentences_per_s = len(steady) / sum(1 / r for r in steady)
        tokens = sum(len(ids) for ids in tokenizer(lines[:batch * args.steps], truncation=True,
                                                   max_length=args.max_len)["input_ids"]) / (batch * args.steps)
        rows.append({"processes": world, "device": where, "model": args.size or args.model, "method": args.method,
                     "global_batch": batch, "max_len": args.max_len, "sentences_per_s": round(sentences_per_s, 2),
                     "tokens_per_s": round(sentences_per_s * tokens),
                     **{k: round(v, 2) for k, v in communication_bytes(config, world, batch).items()}})
        print(rows[-1], flush=True)
    base = next((r["sentences_per_s"] / r["global_batch"] for r in rows if r["processes"] == 1), None)
    for r in rows:  # steps/s relative to one process: 1.0 is perfect weak scaling
        r["step_rate_vs_1"] = round(r["sentences_per_s"] / r["global_batch"] / base, 3) if base else ""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")
    return rows


def no_dev(encoder) -> float:
    return 0.0


if __name__ == "__main__":
    main()
