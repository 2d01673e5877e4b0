"""Check that sentence-transformers' ONNX backend loads an export folder (docs/sharing.md).

Run ``onnx`` mode in an environment with ``optimum-onnx[onnxruntime]`` (it pins
transformers < 4.58, so not this project's), then ``torch`` mode in this project's environment:

    <venv>/bin/python tools/st_onnx_backend.py onnx results/export/<exp> ../shared/data
    python tools/st_onnx_backend.py torch results/export/<exp> ../shared/data
"""
import sys
from pathlib import Path

import numpy as np

N = 300
OUT = Path("/tmp/st_onnx_embeddings.npy")


def sentences(data: Path) -> list[str]:
    """The first STS-B dev first sentences (SentEval's tab-separated file)."""
    path = data / "senteval" / "STS" / "STSBenchmark" / "sts-dev.csv"
    return [line.split("\t")[5] for line in path.read_text(encoding="utf-8").splitlines()[:N]]


def main(mode: str, folder: str, data: str) -> None:
    sents = sentences(Path(data))
    if mode == "onnx":
        import sentence_transformers
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(folder, backend="onnx", device="cpu")
        print("sentence-transformers", sentence_transformers.__version__, type(model[0].auto_model).__name__)
        np.save(OUT, model.encode(sents, batch_size=64))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cselab.models.encoder import load_encoder

    ours = load_encoder(Path(folder), pooler="cls").encode(sents)
    print(f"{len(sents)} sentences, max |ONNX backend - cselab| = {np.abs(ours - np.load(OUT)).max():.2e}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
