"""STS kinds: the 7 SentEval STS tasks ("all" protocol), STS-B dev, and STS-B dev through the
training head (:mod:`cselab.evaluation.sts`)."""

from __future__ import annotations

from cselab.evaluation.kinds import evaluation


@evaluation("sts", results={"sts": "sts.json", "sts_pairs": "sts_pairs.npz"},
            resources={"mem_mb": 16000, "runtime": 60}, encodes="sts", senteval=["sts"])
def sts(smk):
    from cselab.data.integrity import verify_senteval_inputs
    from cselab.evaluation import sts

    root = verify_senteval_inputs(smk.input)
    return (lambda m: sts.evaluate_sts(m.encode_fn("sts"), root)), None


@evaluation("stsb_dev", results={"stsb_dev": "stsb_dev.json", "stsb_dev_pairs": "stsb_dev_pairs.npz"},
            resources={"mem_mb": 8000, "runtime": 30}, encodes="stsb_dev", senteval=["stsb-dev"])
def stsb_dev(smk):
    from cselab.data.integrity import verify_senteval_inputs
    from cselab.evaluation import sts

    root = verify_senteval_inputs(smk.input)
    return (lambda m: sts.evaluate_stsb_dev(m.encode_fn("stsb-dev"), root)), None


# after the raw STS-B dev evaluation (``raw``): its cached embeddings are what the head reads
@evaluation("stsb_dev_head", results={"stsb_dev_head": "stsb_dev_head.json"},
            inputs={"model": "trained_model", "senteval": "senteval", "raw": "result:stsb_dev"}, threads=2,
            resources={"mem_mb": 8000, "runtime": 30}, senteval=["stsb-dev"])
def stsb_dev_head(smk):
    """STS-B dev through the method's training head (SimCSE's "cls" pooler, InfoCSE Table 9), on
    the cached raw [CLS] embeddings: nothing is encoded twice."""
    from cselab.data.integrity import verify_senteval_inputs
    from cselab.evaluation import sts
    from cselab.models.checkpoints import model_path
    from cselab.models.heads import load_head

    root = verify_senteval_inputs(smk.input)
    head = load_head(model_path(smk.input.model))

    def compute(m):
        raw = m.encode_fn("stsb-dev")
        result = sts.evaluate_stsb_dev(lambda sentences: head(raw(sentences)), root)
        result["scores"] = {"cls": result["scores"]["STS-B dev"]}
        result.pop("pairs", None)
        return result

    return compute, None
