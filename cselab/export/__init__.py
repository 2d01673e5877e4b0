"""Sharing: what a trained experiment becomes in the field's formats.

- :mod:`.mteb_results`: the evaluation results as MTEB result files (MTEB's task names, splits
  and score keys), which MTEB's own loader reads;
- :mod:`.mteb_check`: MTEB's evaluator run offline on the local SentEval STS files, beside ours;
- :mod:`.card`: the Hugging Face / sentence-transformers model card of an export;
- :mod:`.onnx`: the encoder as ONNX, checked against PyTorch with onnxruntime;
- :mod:`.hub`: pushing an export to a Hugging Face Hub repository.
"""
