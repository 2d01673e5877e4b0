"""What the workflow reads of a training method, importable without torch: its name, roles,
options (a dataclass, each field's type, choices and range checked), former option names, the
training settings it reads and the upstream artifacts it requires.

A method's implementation (:mod:`cselab.training.methods`, an ``nn.Module``) inherits its
declaration from here (``class SimCSE(SimCSEConfig, Method)``), so Snakemake plans (validates
the config, names the experiments, links the pretraining stages) without importing torch. A
method declared in its own module only (a ``Method`` subclass with its own ``name``,
``Options``, ...) works as well: looking it up imports the methods, and torch with them.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import field
from typing import Any, ClassVar

from cselab.errors import ConfigError, check_schema
from cselab.models.heads import HEADS
from cselab.settings.spec import Component, ExperimentSpec

_CONFIGS: dict[str, type["MethodConfig"]] = {}
#: (declaration, repr of an options dict) -> its checked ``Options`` (see MethodConfig.check_options)
_CHECKED: dict[tuple[type, str], Any] = {}


def option(default: Any = None, **schema) -> Any:
    """A method option: its default and its JSON-schema constraints beyond the type (``enum``,
    ``minimum``, ``exclusiveMaximum``, ...), declared once and checked by :meth:`MethodConfig.check_options`."""
    return field(default=default, metadata={"schema": schema})


#: the bounds of a share of tokens (``option(0.15, **RATIO)``) and of a count of at least one
RATIO = {"exclusiveMinimum": 0, "exclusiveMaximum": 1}
POSITIVE = {"minimum": 1}

_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "None": "null"}


def _json_type(annotation: str) -> dict:
    """An option's JSON type from its annotation (``int | None`` -> integer or null)."""
    names = [part.strip() for part in str(annotation).split("|")]
    types = [_JSON_TYPES[n] for n in names if n in _JSON_TYPES]
    return {"type": types[0] if len(types) == 1 else types} if len(types) == len(names) else {}


class MethodConfig:
    """A method's declaration (see the module docstring). ``Options`` is a dataclass of its config
    options; a subclass with a ``name`` registers itself."""

    name: ClassVar[str] = ""
    #: whether it can be an experiment's primary method, an auxiliary objective, or both
    roles: ClassVar[tuple[str, ...]] = ("primary",)

    @dataclasses.dataclass
    class Options:
        pass

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            _CONFIGS[cls.name] = cls

    #: former option names still accepted: alias -> the option (one concept, one name; the same experiment)
    aliases: ClassVar[dict[str, str]] = {}

    @classmethod
    def canonical_options(cls, options: dict, where: str = "options") -> dict:
        """``options`` under their current names (an alias renamed; both given is an error)."""
        out: dict = {}
        for key, value in options.items():
            name = cls.aliases.get(key, key)
            if name in out:
                raise ConfigError(f"config key '{where}.{key}': {key!r} is the former name of {name!r}, which is "
                                  f"set too; keep {name!r}")
            out[name] = value
        return out

    @classmethod
    def options_schema(cls) -> dict:
        """``Options`` as a JSON schema: each field's type from its annotation plus what its
        :func:`option` declares (enum, bounds); no other keys."""
        return {"type": "object", "additionalProperties": False,
                "properties": {f.name: {**_json_type(f.type), **f.metadata.get("schema", {})}
                               for f in dataclasses.fields(cls.Options)}}

    @classmethod
    def check_options(cls, options: dict, where: str = "options"):
        """Build ``Options`` from a dict, checked against :meth:`options_schema` and then
        :meth:`validate_options` (rules across options); a problem raises ConfigError naming the key.
        A dict that passed is remembered (a plan checks the same options thousands of times): each
        call gets its own copy of its ``Options``."""
        given = repr(options)
        known = _CHECKED.get((cls, given))
        if known is not None:
            return copy.deepcopy(known)
        options = cls.canonical_options(options, where)
        check_schema(options, cls.options_schema(), where=where, context=f"method {cls.name!r}")
        opts = cls.Options(**options)
        problem = cls.validate_options(opts)
        if problem:
            key, msg = problem
            raise ConfigError(f"config key '{where}.{key}': {msg}")
        _CHECKED[(cls, given)] = copy.deepcopy(opts)
        return opts

    @classmethod
    def validate_options(cls, options) -> tuple[str, str] | None:
        """Rules across options (one option's type and range are declared with :func:`option`):
        return (key, message) for a violation, or None."""
        return None

    #: training settings the method reads (besides the loop's own): its spec holds them; a
    #: method that encodes sentences through the encoder's pooled forward reads pooler and unpadded
    training_keys: ClassVar[tuple[str, ...]] = ("pooler", "unpadded")

    @classmethod
    def used_training_keys(cls, options) -> tuple[str, ...]:
        """:attr:`training_keys`, plus ``batchnorm_stats`` when the method's head has BatchNorm."""
        return cls.training_keys + (("batchnorm_stats",) if getattr(options, "head", None) == "batchnorm" else ())

    @classmethod
    def requires(cls, options) -> dict[str, str]:
        """Upstream artifacts: role -> name of a ``pretraining:`` entry (built per PLM)."""
        return {}

    @classmethod
    def implementation(cls) -> type | None:
        """The ``Method`` that trains a declaration made outside ``cselab/training/methods`` (a
        plugin's): it imports torch and defines (or imports) its ``Method`` subclass here, called
        when a job first builds the method, never when the workflow plans. None: the
        implementation is in ``cselab/training/methods`` (the folder is scanned)."""
        return None


def find_config(name: str) -> type[MethodConfig] | None:
    """Method ``name``'s declaration (see :func:`method_config`), or None for no such method."""
    if name in _CONFIGS:
        return _CONFIGS[name]
    from cselab.training.methods import registry

    return registry().get(name)


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered method's, without importing torch: a declaration (the
    built-in ones and the plugins'), or an implementation when the methods are imported already."""
    import sys

    if name in _CONFIGS:
        return True
    methods = sys.modules.get("cselab.training.methods")
    return methods is not None and name in methods.registry()


def method_names() -> list[str]:
    """Every registered method's name: the declarations and the implementations (torch imported)."""
    from cselab.training.methods import registry

    return sorted(set(_CONFIGS) | set(registry()))


def method_config(name: str, where: str = "objective") -> type[MethodConfig]:
    """Method ``name``'s declaration: from here, else from its implementation (a method declared
    in its own module only: the methods are imported); an unknown name raises ConfigError."""
    if name in _CONFIGS:
        return _CONFIGS[name]
    from cselab.training.methods import method_class

    return method_class(name, where)


def spec_components(spec) -> tuple[Component, ...]:
    """A spec's methods (an :class:`~cselab.settings.spec.ExperimentSpec` or its dict): the
    primary first, then the auxiliaries in order."""
    return ExperimentSpec.of(spec).components()


def required_artifacts(spec) -> dict[str, str]:
    """role -> ``pretraining:`` entry name, over all of an experiment's methods."""
    out: dict[str, str] = {}
    for entry in spec_components(spec):
        cls = method_config(entry.method)
        out.update(cls.requires(cls.check_options(entry.options)))
    return out


# -- the methods' declarations (their implementations: cselab/training/methods/<module>.py) -----


class SimCSEConfig(MethodConfig):
    """:class:`cselab.training.methods.simcse.SimCSE`'s declaration."""

    name = "simcse"
    training_keys = ("temperature", "pooler", "unpadded")

    @dataclasses.dataclass
    class Options:
        head: str = option("mlp", enum=list(HEADS))


AGGREGATIONS = ("sum", "avg", "concat_halves", "concat_project", "concat_absdiff_project")
COMPOSE = ("z+", "z", "both")
#: where the training head runs: on the aggregate (the paper and the authors' code) or on each
#: part before aggregating (this project's first implementation, kept for comparison)
HEAD_PLACEMENT = ("after_aggregation", "per_part")
#: the unit the partition cuts: subword tokens of the tokenised sentence ("split the tokens of
#: x_i in half", section 3), or whitespace words of the text, each part tokenised on its own
PARTITION_UNITS = ("subword", "word")


class CompCSEConfig(MethodConfig):
    """:class:`cselab.training.methods.compcse.CompCSE`'s declaration."""

    name = "compcse"
    training_keys = ("temperature", "pooler", "unpadded")

    @dataclasses.dataclass
    class Options:
        partitions: int = option(2, minimum=2, maximum=4)
        aggregation: str = option("avg", enum=list(AGGREGATIONS))
        compose: str = option("z+", enum=list(COMPOSE))
        d0: int | None = option(None, minimum=1)
        head: str = option("mlp", enum=list(HEADS))
        head_placement: str = option("after_aggregation", enum=list(HEAD_PLACEMENT))
        partition_unit: str = option("subword", enum=list(PARTITION_UNITS))

    @classmethod
    def validate_options(cls, o):
        if o.aggregation == "concat_absdiff_project" and o.partitions != 2:
            return "aggregation", "concat_absdiff_project is defined for partitions = 2 only"
        return None


AUGMENTS = ("replace", "insert", "delete", "all")


@dataclasses.dataclass
class EditOptions:
    """Options of the objectives that edit with a generator."""

    mask_ratio: float = option(0.30, **RATIO)
    generator: str | None = None
    generator_stage: str = "infocse-pretrain"
    augment: str = option("replace", enum=list(AUGMENTS))
    edit_ratio: float = option(0.15, **RATIO)
    views: int = option(2, **POSITIVE)


class ConditionedConfig(MethodConfig):
    """:class:`cselab.training.methods.diffcse.Conditioned`'s declaration."""

    roles = ("auxiliary",)
    training_keys = ()  # reads the primary's views


class EditingConfig(ConditionedConfig):
    """:class:`cselab.training.methods.diffcse.Editing`'s declaration."""

    Options = EditOptions

    @classmethod
    def requires(cls, options):
        return {} if options.generator else {"generator": options.generator_stage}


class RTDConfig(EditingConfig):
    """:class:`cselab.training.methods.diffcse.RTD`'s declaration."""

    name = "rtd"


class ConditionalMLMConfig(ConditionedConfig):
    """:class:`cselab.training.methods.diffcse.ConditionalMLM`'s declaration."""

    name = "cmlm"

    @dataclasses.dataclass
    class Options:
        mask_ratio: float = option(0.30, **RATIO)
        views: int = option(2, **POSITIVE)


class CorrectiveLMConfig(EditingConfig):
    """:class:`cselab.training.methods.diffcse.CorrectiveLM`'s declaration."""

    name = "corrective_lm"

    @classmethod
    def validate_options(cls, o):
        if o.augment != "replace":
            return "augment", "the corrective LM recovers replaced tokens: only 'replace'"
        return None


USES = ("positive", "negative")


class SimCSEEditsConfig(MethodConfig):
    """:class:`cselab.training.methods.edits.SimCSEEdits`'s declaration."""

    name = "simcse_edits"
    training_keys = ("temperature", "pooler", "unpadded")

    @dataclasses.dataclass
    class Options:
        use: str = option("negative", enum=list(USES))
        augment: str = option("replace", enum=list(AUGMENTS[:3]))
        mask_ratio: float = option(0.15, **RATIO)
        edit_ratio: float = option(0.15, **RATIO)
        generator: str | None = None
        generator_stage: str = "infocse-pretrain"
        head: str = option("mlp", enum=list(HEADS))

    @classmethod
    def requires(cls, options):
        return {} if options.generator else {"generator": options.generator_stage}


ARTIFACT = "aux_network"      # the role under which InfoCSE's stage 2 receives stage 1's export


class InfoCSEPretrainConfig(MethodConfig):
    """:class:`cselab.training.methods.infocse.InfoCSEPretrain`'s declaration."""

    name = "infocse_pretrain"
    aliases = {"mask_rate": "mask_ratio"}  # the name before DiffCSE's and InfoCSE's were one
    training_keys = ()  # the backbone's own forward only

    @dataclasses.dataclass
    class Options:
        mask_ratio: float = option(0.15, **RATIO)
        whole_word: bool = True
        lower_layers: int | None = option(None, **POSITIVE)  # null: half the backbone
        extra_layers: int = option(2, **POSITIVE)
        mlm_weight: float = option(1.0, minimum=0)


class InfoCSEMLMConfig(MethodConfig):
    """:class:`cselab.training.methods.infocse.InfoCSEMLM`'s declaration."""

    name = "infocse_mlm"
    aliases = {"mask_rate": "mask_ratio"}  # the name before DiffCSE's and InfoCSE's were one
    roles = ("auxiliary",)
    training_keys = ()  # reads the primary's views

    @dataclasses.dataclass
    class Options:
        mask_ratio: float = option(0.4, **RATIO)
        detach: bool = True
        lower_dropout: bool = False
        pretrained: bool = True
        stage: str = "infocse-pretrain"
        lower_layers: int | None = option(None, **POSITIVE)  # null: half the backbone
        extra_layers: int = option(2, **POSITIVE)
        extra_init: str = option("top", enum=["top", "random"])
        views: int = option(2, **POSITIVE)

    @classmethod
    def validate_options(cls, o):
        if o.lower_dropout and not o.detach:
            return "lower_dropout", "applies to the frozen copy (detach: true); without detach the copy trains"
        return None

    @classmethod
    def requires(cls, options):
        return {ARTIFACT: options.stage} if options.pretrained else {}


CONTRASTIVE = ("infonce", "arccon", "mpt", "met", "mat")
NON_CONTRASTIVE = ("barlowtwins", "vicreg", "mhe", "mhs")
LOSSES = (*CONTRASTIVE, "paradigm", *NON_CONTRASTIVE)
GD_REFERENCES = ("same_view", "positive")
POSITIVES = ("both", "anchor")


class ParadigmConfig(MethodConfig):
    """:class:`cselab.training.methods.paradigm.Paradigm`'s declaration."""

    name = "paradigm"
    training_keys = ("temperature", "pooler", "unpadded")

    @dataclasses.dataclass
    class Options:
        loss: str = option("paradigm", enum=list(LOSSES))
        margin: float | None = option(None, minimum=0)
        gd: bool | None = None
        w: bool = False
        r: bool = False
        m: float = option(0.30, minimum=0)
        tau: float = option(0.05, exclusiveMinimum=0)  # the weight temperature
        power: int | None = option(None, minimum=0)
        ratio: float = option(1.0, exclusiveMinimum=0)  # R scales the pull towards the positive
        lam: float | None = option(None, minimum=0)
        gd_reference: str = option("same_view", enum=list(GD_REFERENCES))
        positive: str = option("both", enum=list(POSITIVES))
        head: str = option("linear", enum=list(HEADS))
        head_std: float = option(6e-3, exclusiveMinimum=0)
        freeze_embeddings: bool = False

        def __post_init__(self):
            if self.gd is None:  # the paradigm's own loss is defined with gradient dissipation
                self.gd = self.loss == "paradigm"

    @classmethod
    def validate_options(cls, o):
        if o.loss in CONTRASTIVE and (o.gd or o.w or o.r):
            return "loss", (f"{o.loss} is an effective loss: gd / w / r modify the paradigm loss and the "
                            f"non-contrastive losses ({', '.join(NON_CONTRASTIVE)}) only")
        return None
