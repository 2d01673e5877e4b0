"""A training method's declaration, the part every method shares, importable without torch.

A method is one class, a subclass of :class:`MethodConfig` with a ``name`` (it registers itself):
what the workflow reads of it when it plans (its roles, options: a dataclass, each field's type,
choices and range checked; former option names; the training settings it reads; the upstream
artifacts it requires) and, in the same class, its training code (``__init__``, ``prepare``,
``forward``, ...), whose bodies import torch when a job runs them. Its module imports no torch,
so Snakemake plans (validates the config, names the experiments, links the pretraining stages)
without it; a job builds the ``nn.Module`` from the class (:func:`cselab.training.objective.method_class`).
The built-in methods are the modules of :mod:`cselab.training.methods` (found by scanning the
folder, where the lookups by name live); a plugin's is a module named under ``plugins:``.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import inspect
import sys
from dataclasses import field
from typing import Any, ClassVar

from cselab.errors import ConfigError, check_schema

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

class MethodConfig:
    """A method (see the module docstring). ``Options`` is a dataclass of its config options; a
    subclass with a ``name`` registers itself."""

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
        from cselab.settings.base import schema_of

        return schema_of(cls.Options)

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

    #: the training settings the method's code reads (``ctx.training.<key>``; the loop's own, such
    #: as ``lr`` or ``batch_size``, need no declaration): its ``ctx.training`` holds exactly these, and
    #: its experiments' specs hold them (an operational one, such as ``pad_to_multiple_of``, excepted)
    training_keys: ClassVar[tuple[str, ...]] = ()
    #: whether the method runs the encoder's pooled forward (``ctx.encode``): its specs then hold
    #: the encoder's ``pooler`` and ``unpadded`` (a method that reads the primary's views, or runs
    #: the backbone's own forward, says False)
    encodes: ClassVar[bool] = True

    @classmethod
    def used_training_keys(cls, options) -> tuple[str, ...]:
        """:attr:`training_keys`, ``pooler`` and ``unpadded`` when it :attr:`encodes`, and
        ``batchnorm_stats`` when its head has BatchNorm."""
        keys = (*cls.training_keys, *(("pooler", "unpadded") if cls.encodes else ()),
                *(("batchnorm_stats",) if getattr(options, "head", None) == "batchnorm" else ()))
        return tuple(dict.fromkeys(keys))

    @classmethod
    def requires(cls, options) -> dict[str, str]:
        """Upstream artifacts: role -> name of a ``pretraining:`` entry (built per PLM)."""
        return {}

    #: the loss is a sum over sentences (a mean over its units, :meth:`loss_units`): no in-batch
    #: negatives, no batch statistics; an objective all of whose methods declare it runs a batch
    #: too large for the device as accumulated micro-batches (cselab/training/memory.py)
    per_sentence: ClassVar[bool] = False

    @classmethod
    def per_sentence_problem(cls, options) -> str | None:
        """Why this method, with these options, is not per sentence (None: it is)."""
        if not cls.per_sentence:
            return "its loss is not a sum over sentences (in-batch terms)"
        if getattr(options, "head", None) == "batchnorm":
            return "its BatchNorm head normalises over the batch"
        return None

    @classmethod
    def footprint(cls, options, layers: int):
        """What a sentence costs the step's memory (:class:`cselab.training.memory.Footprint`) for an
        encoder of ``layers`` layers: by default two views through the encoder."""
        from cselab.training.memory import Footprint

        return Footprint(layers=2 * layers)

    def loss_units(self, batch: dict):
        """What a per-sentence method's loss terms average over in ``batch`` (a count, a tensor on the
        batch's device): micro-batches are weighted by their share of it, so that their gradients sum
        to the whole batch's. Default: the batch's sentences."""
        return batch["input_ids"].size(0)

    @classmethod
    def training_reads(cls) -> frozenset[str]:
        """The training settings the method's code reads (see :meth:`training_read_sites`)."""
        return frozenset(cls.training_read_sites())

    @classmethod
    def training_read_sites(cls) -> dict[str, str]:
        """The training settings the method's code reads, found without running it, each with
        where (``file, line N``): reads of ``ctx.training`` (``ctx.training.<key>``,
        ``self.ctx.training.<key>``, ``getattr(..., "<key>")``, ``[...]["<key>"]``, and the same
        through a name bound to it) in the source of each class the method is made of and of the
        functions of their modules they call. A class whose source cannot be read (one defined
        interactively) reads none here; a read by a computed name is found when a job builds it."""
        sites: dict[str, str] = {}
        for k in reversed(cls.__mro__):
            if issubclass(k, MethodConfig) and k is not MethodConfig:
                sites.update(_reads_of_class(k))
        return sites

    @classmethod
    def implementation(cls) -> type | None:
        """The ``Method`` (an ``nn.Module``) that trains this declaration, when it is written apart
        from it: it imports torch and defines (or imports) the ``Method`` subclass here, called
        when a job first builds the method, never when the workflow plans. None (the default):
        the class holds its training code itself, and the job makes it a ``Method``."""
        return None


def declared(name: str) -> type[MethodConfig] | None:
    """The method registered under ``name`` so far (a module that declares it was imported), or None;
    :func:`cselab.training.methods.find_config` looks in the built-in methods' folder too."""
    return _CONFIGS.get(name)


def declared_names() -> list[str]:
    """The names of the methods registered so far (see :func:`declared`)."""
    return sorted(_CONFIGS)


# -- torch classes written without importing torch --------------------------------------------------


@functools.cache
def behind(cls: type, base: type) -> type:
    """``cls`` with ``base`` behind it, built once: ``type(cls.__name__, (cls, base), {})``. What
    ``cls`` defines comes first and its ``super()`` calls reach ``base``: how a method's class
    becomes an ``nn.Module`` when a job builds it (``base``: ``Method``), and a :class:`TorchModule`."""
    return type(cls.__name__, (cls, base), {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                            "__doc__": cls.__doc__})


class TorchModule:
    """A ``torch.nn.Module`` written in a module that imports no torch (a method's own network):
    the class gets ``nn.Module`` behind it (:func:`behind`) when it is first instantiated, so its
    ``__init__`` and ``forward`` read as an ``nn.Module``'s; their bodies import torch."""

    def __new__(cls, *args, **kwargs):
        from torch import nn

        return object.__new__(cls if issubclass(cls, nn.Module) else behind(cls, nn.Module))

# -- the training settings a method's code reads (MethodConfig.training_reads) -------------------


@functools.cache
def _reads_of_class(cls: type) -> dict[str, str]:
    """The training settings the source of ``cls`` (and the functions of its module it calls) reads,
    each with the file and line of its first read."""
    tree = _module_tree(cls.__module__)
    node = _definition(tree, cls.__qualname__) if tree else None
    if node is None:  # no source: a class typed into a prompt
        return {}
    where = inspect.getsourcefile(sys.modules[cls.__module__]) or cls.__module__
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo, seen, keys = [node], set(), {}
    while todo:
        node = todo.pop()
        for key, line in _training_reads(node).items():
            keys.setdefault(key, f"{where}, line {line}")
        called = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & functions.keys()
        todo += [functions[name] for name in called - seen]
        seen |= called
    return keys


@functools.cache
def _module_tree(name: str) -> ast.Module | None:
    """The syntax tree of module ``name``'s source (parsed once), or None without one."""
    try:
        return ast.parse(inspect.getsource(sys.modules[name]))
    except (KeyError, OSError, TypeError):
        return None


def _definition(tree: ast.AST, qualname: str) -> ast.AST | None:
    """The class (or function) ``qualname`` (``A.B``, ``f.<locals>.C``) defines in ``tree``: the last one of that name."""
    node = tree
    for part in qualname.split("."):
        if part != "<locals>":
            found = [n for n in ast.iter_child_nodes(node) if getattr(n, "name", None) == part
                     and isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
            if not found:
                return None
            node = found[-1]
    return node


def _training_reads(tree: ast.AST) -> dict[str, int]:
    """Keys read of ``ctx.training`` (or of ``<x>.ctx.training``, or of a name bound to either) in
    ``tree``, each with the line of its first read."""
    aliases = {ast.unparse(target) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and _is_training(node.value, set()) for target in node.targets}
    keys: dict[str, int] = {}
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Attribute) and _is_training(node.value, aliases):
            key = node.attr
        elif isinstance(node, ast.Subscript) and _is_training(node.value, aliases):
            key = _constant(node.slice)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and _is_training(node.args[0], aliases)):
            key = _constant(node.args[1])
        if key is not None and (key not in keys or node.lineno < keys[key]):
            keys[key] = node.lineno
    return keys


def _is_training(node: ast.AST, aliases: set[str]) -> bool:
    """Whether ``node`` is ``ctx.training``, ``<x>.ctx.training`` or one of ``aliases``."""
    if isinstance(node, ast.Attribute) and node.attr == "training":
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "ctx") or (isinstance(owner, ast.Attribute)
                                                                   and owner.attr == "ctx"):
            return True
    return bool(aliases) and isinstance(node, (ast.Name, ast.Attribute)) and ast.unparse(node) in aliases


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
