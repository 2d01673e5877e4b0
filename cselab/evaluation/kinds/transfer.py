"""Transfer kinds: the 7 SentEval transfer tasks' test accuracies, and their development
accuracies under SentEval's dev protocol (:mod:`cselab.evaluation.transfer`)."""

from __future__ import annotations

from cselab.evaluation.kinds import config_section, evaluation


def _transfer_settings(cfg: dict) -> dict:
    return config_section(cfg, "transfer")


@evaluation("transfer", results={"transfer": "transfer.json", "transfer_pairs": "transfer_pairs.npz"},
            params={"transfer": _transfer_settings}, resources={"mem_mb": 16000, "runtime": 120}, senteval=["transfer"])
def transfer(smk):
    from cselab.data.integrity import verify_senteval_inputs
    from cselab.evaluation import transfer

    root, opts = verify_senteval_inputs(smk.input), smk.params.transfer
    return (lambda m: transfer.evaluate_transfer(m.encode_fn("transfer"), root, **opts)), {"transfer": opts}


# the transfer tasks' development accuracies under SentEval's dev protocol ("fast" parameters)
@evaluation("transfer_dev", results={"transfer_dev": "transfer_dev.json"}, params={"transfer": _transfer_settings},
            resources={"mem_mb": 16000, "runtime": 120}, senteval=["transfer"])
def transfer_dev(smk):
    """The transfer tasks' development accuracies under SentEval's dev protocol (the "fast"
    parameters SimCSE's and DiffCSE's ``--mode dev`` use): DiffCSE Tables 3-6 and 15's
    "Avg. transfer". The embeddings are the test-mode evaluation's cached ones."""
    from cselab.data.integrity import verify_senteval_inputs
    from cselab.evaluation import transfer

    root, opts = verify_senteval_inputs(smk.input), {**smk.params.transfer, "mode": transfer.DEV_MODE}

    def compute(m):
        result = transfer.evaluate_transfer(m.encode_fn("transfer"), root, **opts)
        result.pop("pairs")
        return {**result, "scores": transfer.dev_scores(result), "avg": None}

    return compute, {"transfer": opts}
