"""Sweeps: a grid of settings around one experiment, each point an ordinary experiment.

``sweeps.<name>`` names a ``base`` experiment (or a ``plm`` and a ``method``), a ``grid`` (setting
-> its values; the points are the product of the value lists, in the grid's order), ``seeds`` and
the ``metric`` the points are compared on. SimCSE's own grid is one (Gao et al., 2021, Appendix A:
batch size {64, 128, 256, 512} x learning rate {1e-5, 3e-5, 5e-5}, chosen on STS-B dev; the
authors' repository princeton-nlp/SimCSE, issue 190). :func:`expand_sweeps` adds each point to
``experiments`` as ``<base>@<key>=<value>+<key>=<value>`` (the short key: the setting's last part,
``lr``; longer where two grid keys end alike, ``rtd.weight``); a point whose merged settings equal
an experiment's that the config defines reuses that experiment. A point's name depends only on its
own values, so adding a value or a seed never renames nor changes another point. ``names`` keeps
a name given before the sweep existed: point (as its name writes it after ``@``: ``d0=192``) ->
experiment name (``comp-d0-192-bert-base``); :func:`name_points` adds those points to
``experiments`` before the tables and figures that list them are checked.

Why ``+`` between the pairs, not ``,``: a cluster job re-plans its one job from ``--target-jobs
train:exp=<id>`` (snakemake_interface_executor_plugins' encoder), which Snakemake splits at every
comma (``snakemake.target_jobs``), quoted or not; ``@``, ``=`` and ``+`` pass it, the SLURM
plugin's ``--comment`` and log folder (shell-quoted) and a shell word unquoted.

After :func:`cselab.pipeline.config.validate`, ``cfg["sweeps"][name]`` is the resolved sweep:
``points`` (``[{"experiment": <name>, "values": {<grid key>: value}}]``, in grid order),
``seeds``, ``metric``, ``grid``, ``tables`` (the tables that show the winner: the sweep's own
``tables`` and those listing ``sweep:<name>``) and ``rows`` (table -> the index in its
``experiments`` where ``sweep:<name>`` stood; the entry itself is taken out of the list, which
holds experiments only). Every point's runs: :func:`sweep_experiment_ids`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import json
import re
from importlib import resources

from cselab.errors import ConfigError, check_schema
from cselab.pipeline import checks
from cselab.pipeline.experiments import TABLE_ENTRY, UNTRAINED, entry_sweep, _comparable, merge_experiment, seeds_of

#: a value as it appears in a point's name (a wildcard of rules/common.smk's ``exp``)
_VALUE = re.compile(r"^[A-Za-z0-9._-]+$")
#: the parts of a grid key that a point's short key leaves out
_SECTIONS = ("training", "options", "auxiliaries")


def sweep_experiment_ids(cfg: dict, name: str) -> list[str]:
    """The runs of every point of sweep ``name``, ``<experiment>-s<seed>``: point by point, seed by seed."""
    sweep = cfg["sweeps"][name]
    return [f"{p['experiment']}-s{seed}" for p in sweep["points"] for seed in sweep["seeds"]]


def format_value(value, where: str) -> str:
    """A grid value as its point's name shows it, the same for the same number (``3.0e-5`` and
    ``0.00003``: ``3e-05``, the shortest repr; an integral float as an integer: ``16.0``: ``16``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str) and _VALUE.match(value):
        return value
    raise ConfigError(f"config key '{where}': {value!r} cannot name a point; a grid value is a number, a boolean, "
                      f"null or a word of letters, digits and ._-")


def short_keys(grid: list[str]) -> dict[str, str]:
    """Each grid key's short form: its last part, or as many last parts as make it unique
    (``training.lr`` -> ``lr``; ``auxiliaries.rtd.options.mask_ratio`` -> ``mask_ratio``, or
    ``rtd.mask_ratio`` beside ``options.mask_ratio``); the whole key where none does."""
    parts = {k: [p for p in k.split(".") if p not in _SECTIONS] or [k] for k in grid}
    out = {}
    for key in grid:
        for n in range(1, max(map(len, parts.values())) + 1):
            short = ".".join(parts[key][-n:])
            if all(".".join(parts[o][-n:]) != short for o in grid if o != key):
                out[key] = short
                break
        else:
            out[key] = key
    taken = list(out.values())
    return {k: s if taken.count(s) == 1 else k for k, s in out.items()}


@functools.cache
def _experiment_schema() -> dict:
    schema = json.loads(resources.files("cselab").joinpath("schema/config.schema.json").read_text())
    return {**schema["properties"]["experiments"]["additionalProperties"], "$defs": schema["$defs"]}


def take_table_entries(cfg: dict) -> None:
    """Each table's ``sweep:<name>`` entries name a sweep; each is taken out of the table's
    experiments and recorded in the sweep (``rows``: table -> its index), whose report resolves it."""
    sweeps = cfg.get("sweeps", {})
    for sweep in sweeps.values():
        sweep["rows"] = {}
    _list_in_tables(cfg, sweeps)
    for tname, table in cfg["tables"].items():
        if table["kind"] == "methods" or not table.get("experiments"):
            continue
        for i, entry in enumerate(table["experiments"]):
            name = entry_sweep(entry)
            if name is not None:
                if name not in sweeps:
                    raise ConfigError(f"config key 'tables.{tname}.experiments[{i}]': unknown sweep {name!r}; "
                                      f"defined under 'sweeps': {', '.join(sorted(sweeps)) or 'none'}")
                sweeps[name]["rows"][tname] = i
        table["experiments"] = [e for e in table["experiments"] if entry_sweep(e) is None]


def _list_in_tables(cfg: dict, sweeps: dict) -> None:
    """A sweep's ``tables``: each shows the winner as its last row (``sweep:<name>`` appended to its
    experiments, unless the table lists it already)."""
    for name, sweep in sweeps.items():
        for i, tname in enumerate(sweep.get("tables") or []):
            table = cfg["tables"].get(tname)
            if table is None or table["kind"] == "methods":
                why = "a methods table names no experiments" if table else "unknown table"
                raise ConfigError(f"config key 'sweeps.{name}.tables[{i}]': {why} {tname!r}; tables with "
                                  f"experiments: {', '.join(sorted(t for t, e in cfg['tables'].items() if e['kind'] != 'methods'))}")
            entries = table.setdefault("experiments", [])
            if f"{TABLE_ENTRY}{name}" not in entries:
                entries.append(f"{TABLE_ENTRY}{name}")


def name_points(cfg: dict) -> None:
    """Add each sweep's named points (``sweeps.<s>.names``: a point, as its name writes it after
    ``<base>@``, -> the experiment name it keeps) to ``experiments``, as if written there, before
    the tables and figures that list them are checked; :func:`expand_sweeps` adds the others.
    Each name is refused (one message naming the sweep and the point) when no point of the grid
    is written so, when two points would share it, or when it is an experiment with other settings.
    As an entry written by hand, a named point is its own experiment even where its settings equal
    another's (a method's default changed to its value), which an unnamed point would reuse."""
    named = {name: sweep for name, sweep in (cfg.get("sweeps") or {}).items() if sweep.get("names")}
    if not named:
        return
    # the shared settings' problems named where they are written
    checks.check_training(cfg["training"], "training", trains=False)
    defined = {n: _comparable(cfg, n) for n, e in cfg["experiments"].items() if e["method"] != UNTRAINED}
    for name, sweep in named.items():
        if "base" in sweep and sweep["base"] in cfg["experiments"]:  # its own problems named as its own
            checks.check_training(merge_experiment(cfg, sweep["base"])["training"],
                                  f"experiments.{sweep['base']}.training")
        base, entry, _, grid = _resolve(cfg, name, sweep)
        own = cfg["experiments"][sweep["base"]].get("seeds") if "base" in sweep else None  # as written by hand
        points = dict(_point_names(name, grid))
        where = f"sweeps.{name}.names"
        taken: dict[str, str] = {}
        for suffix, kept in sweep["names"].items():
            if suffix not in points:
                raise ConfigError(f"config key '{where}.{suffix}': no point of the grid is written {suffix!r}; "
                                  f"its points: {', '.join(points)}")
            if kept in taken:
                raise ConfigError(f"config key '{where}.{suffix}': {kept!r} names point {taken[kept]!r} too; "
                                  f"give each point its own name")
            taken[kept] = suffix
        for suffix, kept in sweep["names"].items():
            _add_named_point(cfg, f"{where}.{suffix}", kept, entry, points[suffix], own, defined)


def _add_named_point(cfg: dict, where: str, kept: str, base: dict, values: dict, seeds: list[int] | None,
                     defined: dict) -> None:
    """Add one named point as experiment ``kept``, the base's entry with the point's values and
    the base's own ``seeds`` (the sweep runs its seeds of it, as of an experiment a point reuses);
    checked as an experiment, each problem named by ``where``. An experiment ``kept`` with the same
    settings stays as it is."""
    entry = copy.deepcopy(base)
    for key, value in values.items():
        _set(entry, key, value, cfg["methods"][base["method"]]["objective"])
    check_schema(entry, _experiment_schema(), where=where, context=f"point {kept!r}")
    existing = cfg["experiments"].get(kept)
    cfg["experiments"][kept] = {**entry, **({"seeds": list(seeds)} if seeds else {})}
    try:
        spec = merge_experiment(cfg, kept)
        checks.check_components(cfg, spec, where, primary_key=None)
        checks.check_training(spec["training"], f"{where}.training")
        wanted = _comparable(cfg, kept)
    finally:
        if existing is not None:
            cfg["experiments"][kept] = existing
    if existing is not None:
        if defined.get(kept) != wanted:
            raise ConfigError(f"config key '{where}': {kept!r} is an experiment with other settings already "
                              f"(under 'experiments' or another sweep's names); give the point another name")
        return
    defined[kept] = wanted


def expand_sweeps(cfg: dict) -> None:
    """Every sweep's points as experiments (after the configured experiments and the methods
    tables' ones, which a point may reuse; a named point is the experiment :func:`name_points`
    added), and the resolved sweep (see the module docstring)."""
    sweeps = cfg.setdefault("sweeps", {})
    defined = {n: _comparable(cfg, n) for n, e in cfg["experiments"].items() if e["method"] != UNTRAINED} \
        if sweeps else {}
    made: dict[str, tuple[str, dict, str]] = {}  # point -> (its first sweep, its settings, its experiment)
    for name, sweep in sweeps.items():
        base, entry, seeds, grid = _resolve(cfg, name, sweep)
        _check_metric(name, sweep.get("metric", "stsb_dev"))
        names = sweep.get("names") or {}
        points = []
        for suffix, point_values in _point_names(name, grid):
            experiment = names.get(suffix) or _add_point(cfg, name, f"{base}@{suffix}", entry, point_values, seeds,
                                                         defined, made)
            points.append({"experiment": experiment, "values": point_values})
        rows = sweep.get("rows", {})
        sweep.update(points=points, seeds=seeds, metric=sweep.get("metric", "stsb_dev"), grid=dict(grid),
                     tables=list(dict.fromkeys([*sweep.get("tables", []), *rows])), rows=rows)


def _resolve(cfg: dict, name: str, sweep: dict) -> tuple[str, dict, list[int], dict]:
    """The sweep's base name, base entry, seeds and checked grid."""
    base, entry = _base(cfg, name, sweep)
    seeds = list(sweep.get("seeds") or (seeds_of(cfg, sweep["base"]) if "base" in sweep else cfg["seeds"]))
    return base, entry, seeds, _check_grid(cfg, name, sweep.get("grid") or {}, entry, base)


def _point_names(name: str, grid: dict) -> list[tuple[str, dict]]:
    """Each point of ``grid``, in order: its name after ``<base>@`` (``lr=1e-05+batch_size=16``) and values."""
    short = short_keys(list(grid))
    out = []
    for values in itertools.product(*grid.values()):
        point_values = dict(zip(grid, values))
        out.append(("+".join(f"{short[k]}={format_value(v, f'sweeps.{name}.grid.{k}')}"
                             for k, v in point_values.items()), point_values))
    return out


def _base(cfg: dict, name: str, sweep: dict) -> tuple[str, dict]:
    """The sweep's base: its name in the points' names and the experiment entry each point changes."""
    where = f"sweeps.{name}"
    if "base" in sweep:
        if "plm" in sweep or "method" in sweep:
            raise ConfigError(f"config key '{where}.base': give base, or plm and method, not both")
        if sweep["base"] not in cfg["experiments"]:
            raise ConfigError(f"config key '{where}.base': unknown experiment {sweep['base']!r}; defined under "
                              f"'experiments': {', '.join(sorted(cfg['experiments']))}")
        entry = copy.deepcopy(cfg["experiments"][sweep["base"]])
        entry.pop("seeds", None)
        base = sweep["base"]
    elif "plm" in sweep and "method" in sweep:
        entry, base = {"plm": sweep["plm"], "method": sweep["method"]}, f"{sweep['method']}-{sweep['plm']}"
        if sweep["plm"] not in cfg["plms"]:
            raise ConfigError(f"config key '{where}.plm': unknown PLM {sweep['plm']!r}; defined under 'plms': "
                              f"{', '.join(sorted(cfg['plms']))}")
        if sweep["method"] not in cfg["methods"]:
            raise ConfigError(f"config key '{where}.method': unknown method {sweep['method']!r}; defined under "
                              f"'methods': {', '.join(sorted(cfg['methods']))}")
    else:
        raise ConfigError(f"config key '{where}' is missing a required entry: 'base' (an experiment), or 'plm' and "
                          f"'method'")
    if entry["method"] == UNTRAINED:
        raise ConfigError(f"config key '{where}.base': {base!r} is untrained; a sweep trains its points")
    return base, entry


def _check_metric(name: str, metric: str) -> None:
    """The metric is a result an evaluation kind writes, one JSON file per run."""
    from cselab.evaluation.kinds import result_files

    valid = sorted(r for r, f in result_files().items() if f.endswith(".json") and "{dataset}" not in f)
    if metric not in valid:
        raise ConfigError(f"config key 'sweeps.{name}.metric': no evaluation produces {metric!r}; valid: "
                          f"{', '.join(valid)}")


def _check_grid(cfg: dict, name: str, grid: dict, entry: dict, base: str) -> dict:
    """The grid's keys are settings of the base experiment (its training settings, its method's
    options, its weight, its auxiliaries' weights and options), each with at least one value."""
    from cselab.settings.training import Training
    from cselab.training.methods import method_config

    where = f"sweeps.{name}.grid"
    if not grid:
        raise ConfigError(f"config key '{where}': the grid is empty; give setting -> values, e.g. training.lr: "
                          f"[1.0e-5, 3.0e-5]")
    cfg["experiments"][f"{base}@"] = entry  # (a name no experiment has) its merged settings
    try:
        merged = merge_experiment(cfg, f"{base}@")
    finally:
        del cfg["experiments"][f"{base}@"]
    out, seen = {}, {}
    for key, values in grid.items():
        parts = key.split(".")
        if parts[0] == "training" and len(parts) == 2:
            known = {f.name for f in dataclasses.fields(Training)}
            problem = None if parts[1] in known else "is no training setting"
        elif parts[0] == "options" and len(parts) == 2:
            cls = method_config(merged["objective"])
            parts[1] = cls.aliases.get(parts[1], parts[1])
            known = {f.name for f in dataclasses.fields(cls.Options)}
            problem = None if parts[1] in known else f"is no option of method {merged['objective']!r}"
        elif parts[0] == "auxiliaries" and len(parts) >= 3 and parts[1] not in merged["auxiliaries"]:
            known, problem = set(merged["auxiliaries"]), f"names no auxiliary objective of {base!r}"
        elif parts[0] == "auxiliaries" and (parts[2:] == ["weight"] or (len(parts) == 4 and parts[2] == "options")):
            cls = method_config(parts[1])
            known = {f.name for f in dataclasses.fields(cls.Options)} if parts[2] == "options" else {"weight"}
            if parts[2] == "options":
                parts[3] = cls.aliases.get(parts[3], parts[3])
            problem = None if parts[-1] in known else f"is no option of auxiliary {parts[1]!r}"
        elif parts == ["weight"]:
            known, problem = {"weight"}, None
        else:
            known, problem = set(), ("is no setting a sweep changes; valid: training.<key>, options.<option>, weight, "
                                     "auxiliaries.<aux>.weight, auxiliaries.<aux>.options.<option>")
        if problem:
            hint = f"; valid: {', '.join(sorted(known))}" if known else ""
            raise ConfigError(f"config key '{where}.{key}': {key!r} {problem}{hint}")
        canonical = ".".join(parts)
        if canonical in seen:
            raise ConfigError(f"config key '{where}.{key}': the same setting as {seen[canonical]!r}; keep one")
        seen[canonical] = key
        if not isinstance(values, list) or not values:
            raise ConfigError(f"config key '{where}.{key}': {values!r} is no list of values; give at least one value")
        out[key] = values
    return out


def _set(entry: dict, key: str, value, objective: str) -> None:
    """``entry`` (an experiment entry of primary method ``objective``) with grid ``key`` set to ``value``."""
    from cselab.training.methods import find_config

    *path, last = key.split(".")
    node = entry
    for part in path:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
    if path and path[-1] == "options":  # a former option name is the same setting: keep one spelling
        cls = find_config(path[1] if path[0] == "auxiliaries" else objective)
        aliases = cls.aliases if cls else {}
        last = aliases.get(last, last)
        for old in [k for k in node if aliases.get(k, k) == last]:
            del node[old]
    node[last] = value


def _add_point(cfg: dict, name: str, point: str, base: dict, values: dict, seeds: list[int],
               defined: dict, made: dict) -> str:
    """Add one point (checked as an experiment, each problem named by its grid key); return the
    experiment it is: a configured one with the same settings, or the point itself."""
    entry = copy.deepcopy(base)
    for key, value in values.items():
        _set(entry, key, value, cfg["methods"][base["method"]]["objective"])
    where = f"sweeps.{name}.grid"
    check_schema(entry, _experiment_schema(), where=where, context=f"point {point!r}")
    existing = cfg["experiments"].get(point)
    cfg["experiments"][point] = {**entry, "seeds": seeds}
    spec = merge_experiment(cfg, point)
    checks.check_components(cfg, spec, where, primary_key=None)
    checks.check_training(spec["training"], f"{where}.training")
    wanted = _comparable(cfg, point)
    if point in made:  # another sweep's point too
        first, settings, experiment = made[point]
        if settings != wanted:
            raise ConfigError(f"config key '{where}': its point {point!r} is a point of sweep {first!r} too, with "
                              f"other settings; give one of the sweeps another base (an experiment of its own)")
        if experiment == point:  # its runs: both sweeps' seeds
            cfg["experiments"][point] = {**existing, "seeds": list(dict.fromkeys([*existing["seeds"], *seeds]))}
        else:
            del cfg["experiments"][point]
        return experiment
    same = [n for n, settings in defined.items() if settings == wanted]
    if same:  # a configured experiment: trained once, named as configured
        del cfg["experiments"][point]
    made[point] = (name, wanted, same[0] if same else point)
    return made[point][2]
