"""The named entries of the config: ``plms.<p>``, ``methods.<m>``, ``pretraining.<s>``,
``experiments.<e>``, ``sweeps.<s>``, ``figures.<f>`` and ``tables.<t>``. Their ``training`` overrides the
global settings key by key (``Overrides(Training)``); what an entry leaves out falls back as
the code decides (e.g. an experiment's ``weight`` to its method's), so nothing is filled in."""

from typing import Any, ClassVar, Literal

from cselab.settings.base import Overrides, setting, settings
from cselab.settings.training import Training

NAME = {"pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$"}
#: a map of entries keyed by name
NAMED = {"propertyNames": {"type": "string", **NAME}}


@settings
class Plm:
    model: str = setting(required=True, minLength=1, doc="a Hugging Face hub id, a local folder or all-MiniLM-L6-v2")
    training: Overrides(Training) = setting({}, fill=False, doc="overrides of the global training settings")


@settings
class Auxiliary:
    weight: float = setting(1.0, fill=False, minimum=0, doc="the auxiliary's loss weight (default 1)")
    options: dict[str, Any] = setting({}, fill=False, doc="the auxiliary method's options")


#: auxiliary objectives: method name -> weight and options (null drops one)
AUXILIARIES = dict(fill=False, **NAMED,
                   doc="auxiliary objectives trained together with the primary method: method name -> weight and "
                       "options (null drops one that a method lists)")


@settings
class Method:
    objective: str = setting(None, fill=False,
                             doc="the primary method: a registered method's name; implied when the entry is named "
                                 "after one (methods.simcse trains simcse), given when it is a variant or a "
                                 "composition (methods.diffcse: objective simcse plus its auxiliaries)")
    options: dict[str, Any] = setting({}, fill=False, doc="the method's options (its Options dataclass)")
    training: Overrides(Training) = setting({}, fill=False, doc="overrides of the global training settings")
    weight: float = setting(1.0, fill=False, minimum=0, doc="weight of the primary method's loss terms (default 1)")
    auxiliaries: dict[str, Auxiliary | None] = setting({}, **AUXILIARIES)


@settings
class Stage:
    method: str = setting(required=True, doc="the stage's method: a module in cselab/training/methods with an export")
    options: dict[str, Any] = setting({}, fill=False, doc="the method's options")
    training: Overrides(Training) = setting({}, fill=False, doc="overrides of the global training settings")
    seed: int = setting(None, fill=False, minimum=0,
                        doc="the stage's seed (one run per PLM; default: the first of seeds)")
    title: str = setting(None, fill=False)


@settings
class Experiment:
    plm: str = setting(required=True, doc="a PLM under plms")
    method: str = setting(required=True, doc="a method under methods, or untrained")
    options: dict[str, Any] = setting({}, fill=False, doc="overrides of the method's options")
    training: Overrides(Training) = setting({}, fill=False, doc="overrides of the training settings")
    seeds: list[int] = setting(None, fill=False, minItems=1, items={"minimum": 0}, doc="default: seeds")
    weight: float = setting(None, fill=False, minimum=0, doc="default: the method's")
    auxiliaries: dict[str, Auxiliary | None] = setting({}, **AUXILIARIES)


@settings
class Sweep:
    DOC: ClassVar[str] = ("a sweep: every point of its grid (the product of its value lists, in order) is an experiment "
                          "<base>@<key>=<value>+<key>=<value>, or the name names keeps for it "
                          "(cselab/pipeline/sweeps.py, docs/experiments.md), trained for each seed and compared on its "
                          "metric; not part of the default target")

    base: str = setting(None, fill=False, **NAME, doc="the experiment whose settings each point changes (or: plm and "
                                                      "method)")
    plm: str = setting(None, fill=False, doc="with method, instead of base: a PLM under plms")
    method: str = setting(None, fill=False, doc="with plm, instead of base: a method under methods")
    grid: dict[str, list[Any]] = setting(
        required=True,
        doc="setting -> its values: training.<key>, options.<option>, weight, auxiliaries.<aux>.weight or "
            "auxiliaries.<aux>.options.<option>")
    seeds: list[int] = setting(None, fill=False, minItems=1, uniqueItems=True, items={"minimum": 0},
                               doc="default: the base experiment's seeds (plm and method: seeds)")
    metric: str = setting("stsb_dev", fill=False,
                          doc="the result the points are compared on: an evaluation kind's result (default: STS-B dev)")
    tables: list[str] = setting([], fill=False, uniqueItems=True,
                                doc="tables that show the winner as their last row (or list sweep:<name> among a "
                                    "table's experiments, at the row it takes)")
    names: dict[str, str] = setting(
        {}, fill=False, propertyNames={"type": "string", "minLength": 1},
        additionalProperties={"type": "string", **NAME},
        doc="point -> the experiment name it keeps instead of <base>@<point>, the point written as in its name "
            "(d0=192, lr=1e-05+batch_size=16): a name given before the sweep existed, which tables and figures may "
            "list")
    #: filled in by the workflow (cselab/pipeline/sweeps.py), never written in a config
    points: list[dict[str, Any]] = setting(None, fill=False, schema={"not": {}},
                                           doc="resolved: [{experiment, values}] per grid point, in grid order")
    rows: dict[str, int] = setting(None, fill=False, schema={"not": {}},
                                   doc="resolved: table -> the index in its experiments where sweep:<name> stood")


@settings
class Figure:
    DOC: ClassVar[str] = ("a figure: its kind, title and experiments; the kind's own options (and their defaults) are "
                          "declared with the kind (cselab/reporting/figures/) and checked against it")
    #: the kind's options join these keys (checked against the kind's declaration)
    EXTRA_KEYS: ClassVar[bool] = True

    kind: str = setting(required=True, schema={},
                        doc="a figure kind of cselab.reporting.figures (the loaded schema enumerates them)")
    title: str = setting(None, fill=False)
    experiments: dict[str, str | None] = setting({}, fill=False, minProperties=1,
                                                 doc="legend label -> experiment name (its first seed is drawn); null "
                                                     "drops a label an earlier config file set")
    table: str = setting(None, fill=False, **NAME,
                         doc="draw every trained experiment of this table (labelled by name), besides any under "
                             "experiments")


@settings
class Table:
    kind: str = setting(required=True, schema={},
                        doc="a table kind of cselab.reporting.tables.TABLE_KINDS (the loaded schema enumerates them)")
    title: str = setting(None, fill=False)
    sources: list[list[str]] = setting([], fill=False, items={"minItems": 2, "maxItems": 2},
                                       doc="the papers' numbers shown beside ours: [paper, table] of "
                                           "cselab/reporting/published/")
    experiments: list[str] = setting(None, fill=False, minItems=1, doc="its rows (a methods table: built)")
    plm: str = setting(None, fill=False, doc="a methods table: the PLM every method is trained on")
    methods: list[str] = setting(None, fill=False, minItems=1,
                                 doc="a methods table: the methods to compare (default: every configured method)")
    training: Overrides(Training) = setting({}, fill=False, doc="a methods table: the shared training budget")
    notes: list[str] = setting([], fill=False, doc="printed under the table")
    extra_columns: list[Literal["STS-B dev", "transfer avg (dev)"]] = setting(
        [], fill=False, uniqueItems=True,
        doc="columns shown after the kind's own (and its average): STS-B dev Spearman, or the average of the 7 "
            "transfer tasks' development accuracies (SentEval's dev protocol)")
