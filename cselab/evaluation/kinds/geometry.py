"""Alignment and uniformity on STS-B (:mod:`cselab.evaluation.geometry`; DiffCSE Table 11)."""

from __future__ import annotations

from cselab.evaluation.kinds import config_section, evaluation, typed_section


def _geometry(cfg: dict):
    from cselab.settings.evaluation import Geometry

    return typed_section(cfg, Geometry, "geometry")


@evaluation("geometry", results={"geometry": "geometry.json"},
            params={"geometry": lambda cfg: config_section(cfg, "geometry")},
            encodes=lambda cfg: f"stsb_{_geometry(cfg).split}",
            senteval=lambda cfg: [f"stsb-{_geometry(cfg).split}"])
def geometry(smk):
    from cselab.data.integrity import verify_senteval_inputs
    from cselab.data.tasks import load_stsb
    from cselab.evaluation.geometry import align_uniform
    from cselab.settings import from_dict
    from cselab.settings.evaluation import Geometry

    root, opts = verify_senteval_inputs(smk.input), smk.params.geometry
    settings = from_dict(Geometry, opts, where="evaluation.geometry")

    def compute(m) -> dict:
        res = align_uniform(m.encode_fn(f"stsb-{settings.split}"), load_stsb(root, split=settings.split),
                            threshold=settings.threshold)
        return {**res, "scores": {"alignment": res["alignment"], "uniformity": res["uniformity"]}}

    return compute, {"geometry": opts}
