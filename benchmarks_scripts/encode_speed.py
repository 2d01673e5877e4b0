"""Encoding throughput on this CPU: cselab's inference path against a plain loop.

cselab: length-sorted batches, dynamic padding, torch.inference_mode (SentenceEncoder.encode).
plain:  input order, every batch padded to max_length, torch.no_grad.
Both encode the same sentences (the unique STS-B dev + test sentences) with all-MiniLM-L6-v2.

    python benchmarks_scripts/encode_speed.py [SENTEVAL_DIR]
"""

import sys
import time
from pathlib import Path

import numpy as np
import torch

from cselab.data import tasks as sts
from cselab.models.encoder import load_encoder
from cselab.models.checkpoints import resolve_model


def main(root: Path, batch_size: int = 128, max_len: int = 128) -> None:
    sents = []
    for split in ("dev", "test"):
        s = sts.load_stsb(root, split)
        sents += s.sent1 + s.sent2
    sents = list(dict.fromkeys(sents))
    enc = load_encoder(resolve_model("all-MiniLM-L6-v2"), pooler="cls").eval()
    torch.set_num_threads(2)

    tic = time.perf_counter()
    fast = enc.encode(sents, batch_size=batch_size, max_len=max_len)
    t_fast = time.perf_counter() - tic

    tic = time.perf_counter()
    plain = np.empty_like(fast)
    with torch.no_grad():
        for i in range(0, len(sents), batch_size):
            batch = enc.tokenizer(sents[i:i + batch_size], padding="max_length", truncation=True,
                                  max_length=max_len, return_tensors="pt")
            plain[i:i + batch_size] = enc.backbone(**batch).last_hidden_state[:, 0].numpy()
    t_plain = time.perf_counter() - tic
    print(f"{len(sents)} sentences, batch {batch_size}, max_len {max_len}")
    print(f"cselab encode: {t_fast:.1f} s = {len(sents) / t_fast:.0f} sentences/s")
    print(f"plain loop:    {t_plain:.1f} s = {len(sents) / t_plain:.0f} sentences/s")
    print(f"speed-up {t_plain / t_fast:.2f}x; max |difference| {np.abs(fast - plain).max():.2e}")


if __name__ == "__main__":
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "senteval"
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else shared)
