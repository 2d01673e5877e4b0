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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_settings as settings  # noqa: E402

SIZES = {"tiny": (2, 64, 2), "base": (12, 768, 12), "large": (24, 1024, 16)}


def build_model(out: Path, size: str, tokenizer: str | None) -> Path:
    """A randomly initialised BERT of ``size`` with ``tokenizer``'s WordPiece vocabulary (default:
    all-MiniLM-L6-v2's)."""
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


def kept_tokens(folder: Path, texts: list[str]) -> list[int]:
    """The ids of the special tokens (0-103 in BERT's vocabulary: [PAD], [UNK], [CLS], [SEP] and
    [MASK] keep their ids), every single character and ``##`` character, and the pieces ``texts``
    tokenize into. Over these, ``texts`` tokenize exactly as before (greedy longest match over a
    subset that holds every piece it chose), any other text into more pieces."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    used = {i for ids in tok(list(texts), add_special_tokens=False)["input_ids"] for i in ids}
    return sorted(i for t, i in tok.get_vocab().items()
                  if i <= tok.mask_token_id or i in used or len(t.removeprefix("##")) == 1)


def cut_vocabulary(folder: Path, kept: list[int]) -> None:
    """Keep only the token ids ``kept`` in the model folder: the tokenizer's vocabulary, renumbered
    in order, and every weight indexed by token (embeddings, MLM decoder and bias), row for row, so
    the kept tokens and the other layers have the weights the full model was drawn with. A tiny
    model on the CPU spends most of a step on its vocabulary; nothing at that size measures it."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((folder / "config.json").read_text())
    doc = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = {i: t for t, i in doc["model"]["vocab"].items()}
    doc["model"]["vocab"] = {by_id[i]: new for new, i in enumerate(kept)}
    (folder / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    if (folder / "vocab.txt").exists():
        (folder / "vocab.txt").write_text("".join(by_id[i] + "\n" for i in kept), encoding="utf-8")
    index = torch.tensor(kept, dtype=torch.long)
    tensors = load_file(folder / "model.safetensors")
    cut = {k: v[index].contiguous() if v.dim() and v.size(0) == config["vocab_size"] else v for k, v in tensors.items()}
    save_file(cut, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": len(kept)}, indent=2))


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

    from cselab.io import process_folder
    from cselab.training.loop import train

    tmp = process_folder("cselab-train-speed-")  # its model and corpus: gone with the process
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
