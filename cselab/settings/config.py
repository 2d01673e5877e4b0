"""The whole config: every section, the schema's top level."""

from typing import ClassVar

from cselab.settings.base import setting, settings
from cselab.settings.entries import NAMED, Experiment, Figure, Method, Plm, Stage, Sweep, Table
from cselab.settings.evaluation import Evaluation
from cselab.settings.sections import CostPlan, Data, Export, Hub, Mlflow, Spans
from cselab.settings.training import Training


@settings
class Config:
    SCHEMA: ClassVar[dict] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                              "title": "cselab workflow configuration"}

    data_dir: str | None = setting(None, minLength=1,
                                   doc="a folder holding the corpus, senteval/ and optionally beir/<dataset>/ (used "
                                       "where data.*.path is null)")
    plugins: list[str] = setting(
        [], fill=False,
        doc="modules imported before the config is checked (dotted names, or .py paths relative to the working "
            "directory): the methods, evaluations, table and figure kinds they register join the workflow")
    data: Data = setting(Data)
    mlflow: Mlflow = setting(Mlflow)
    plms: dict[str, Plm] = setting(required=True, minProperties=1, **NAMED,
                                   doc="pretrained language models: name -> hub id and training overrides")
    training: Training = setting(Training, doc="the defaults of every experiment; plms / methods / experiments / "
                                               "pretraining override any of them")
    evaluation: Evaluation = setting(Evaluation)
    methods: dict[str, Method] = setting(required=True, **NAMED, doc="methods: name -> objective, options, "
                                                                     "auxiliaries")
    pretraining: dict[str, Stage] = setting({}, fill=False, **NAMED,
                                            doc="pretraining stages, built once per PLM that an experiment's methods "
                                                "need them for (resources/pretrained/<stage>/<plm>/)")
    seeds: list[int] = setting(required=True, minItems=1, uniqueItems=True, items={"minimum": 0},
                               doc="the seeds of every trained experiment")
    experiments: dict[str, Experiment] = setting(required=True, **NAMED, doc="experiments: PLM + method + overrides")
    sweeps: dict[str, Sweep] = setting({}, fill=False, **NAMED,
                                       doc="sweeps: name -> base experiment, grid, seeds, metric (their points are "
                                           "experiments; not in the default target)")
    spans: Spans = setting(Spans)
    figures: dict[str, Figure] = setting({}, fill=False, **NAMED, doc="figures: name -> kind, experiments, options")
    tables: dict[str, Table] = setting(required=True, **NAMED, doc="tables: name -> kind and experiments")
    export: Export = setting(Export)
    hub: Hub = setting(Hub)
    cost_plan: CostPlan = setting(CostPlan)
