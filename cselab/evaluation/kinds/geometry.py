"""Alignment and uniformity on STS-B (:mod:`cselab.evaluation.geometry`; DiffCSE Table 11)."""

from __future__ import annotations

from cselab.evaluation.kinds import evaluation


@evaluation("geometry", results={"geometry": "geometry.json"},
            params={"geometry": lambda cfg: cfg["evaluation"]["geometry"]},
            encodes=lambda cfg: f"stsb_{cfg['evaluation']['geometry']['split']}")
def geometry(smk):
    from cselab.data.integrity import verify_senteval
    from cselab.data.tasks import load_stsb
    from cselab.evaluation.geometry import align_uniform

    root, opts = verify_senteval(smk.input.senteval), smk.params.geometry

    def compute(m) -> dict:
        res = align_uniform(m.encode_fn(f"stsb-{opts['split']}"), load_stsb(root, split=opts["split"]),
                            threshold=opts["threshold"])
        return {**res, "scores": {"alignment": res["alignment"], "uniformity": res["uniformity"]}}

    return compute, {"geometry": opts}
