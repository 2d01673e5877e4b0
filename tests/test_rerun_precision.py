"""Rerun precision, as a property of the whole config: a job's params (its spec,
:mod:`cselab.pipeline.jobspecs`) change exactly when a setting it can be affected by changes.

Over every leaf setting of the smoke config (``config.yaml`` + ``configs/smoke.yaml``, defaults
filled in) and over adding or removing one element of each list the tables are made of (BEIR
datasets, seeds, transfer tasks, a table's experiments, a sweep's grid, the experiments
themselves), every job Snakemake plans for every target (its own dry run, once) has its params
computed before and after: the jobs whose params change must be jobs the setting may affect
(``tests/rerun_oracle.py``, declared independently), and an operational setting
(:mod:`cselab.settings.operational`) changes no job's params.
"""

from __future__ import annotations

import copy
import json
import sys
from collections import defaultdict

import pytest

from cselab.errors import CselabError
from cselab.pipeline import jobspecs
from cselab.pipeline.config import load_schema, validate
from cselab.settings import fill_config_defaults
from cselab.settings.operational import is_operational
from tests import rerun_oracle as oracle
from tests.helpers import ROOT, make_corpus, make_senteval, make_transfer, read_yaml


def _merged(*files: str) -> dict:
    from snakemake.utils import update_config

    cfg: dict = {}
    for f in files:
        update_config(cfg, read_yaml(ROOT / f))
    return cfg


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """The smoke config and every job Snakemake plans for every target of it: (rule, wildcards)."""
    from cselab.pipeline.cost import dry_run

    raw = _merged("config.yaml", "configs/smoke.yaml")
    cfg = validate(raw)
    targets = ["all", "exports", "results/cost_plan.csv", *(f"results/sweep_{s}.csv" for s in cfg["sweeps"])]
    jobs = dry_run([sys.executable, "-m", "snakemake"], str(ROOT / "Snakefile"), raw, targets, cores=8,
                   workdir=tmp_path_factory.mktemp("plan"))
    return raw, [(j.rule, dict(j.wildcards)) for j in jobs]


def specs(raw: dict, jobs: list, cfg: dict | None = None) -> tuple[dict, dict]:
    """Every job's serialized params on ``raw`` (validated here, unless ``cfg`` is what
    :func:`validate` returned for it), and the validated config; a job the changed config no
    longer has (an experiment a sweep's point stops reusing) is left out."""
    cfg = validate(raw) if cfg is None else cfg
    out = {}
    for rule, wc in jobs:
        try:
            out[(rule, json.dumps(wc, sort_keys=True))] = jobspecs.serialized(jobspecs.job_params(cfg, rule, wc))
        except (CselabError, KeyError):
            continue
    return out, cfg


def changed_jobs(before: dict, after: dict) -> list[tuple[str, dict]]:
    return [(rule, json.loads(wc)) for (rule, wc), spec in before.items()
            if (rule, wc) in after and after[(rule, wc)] != spec]


def mutations(raw: dict):
    """(path, a config with that one setting changed to another valid value, that config
    validated) for every leaf setting (lists are the list tests' own); and the paths no valid
    other value was found for."""
    full = fill_config_defaults(copy.deepcopy(raw))
    schema = load_schema()
    siblings = defaultdict(list)
    for path, value in oracle.leaves(full):
        siblings[path[-1]].append(value)
    skipped = []
    for path, value in representatives(full):
        if isinstance(value, (list, dict)) or path == ("data_dir",) or oracle.in_collection(schema, path):
            continue
        options = oracle.options_schema(full, path)
        own = (options or {}).get("properties", {}).get(path[-1]) if options else oracle.schema_at(schema, path)
        section = REFERS.get(path[-1])
        # the smoke config's own entries (written last) first
        pool = [*reversed(list(full.get(section) or {} if section else [])), *reversed(siblings[path[-1]])]
        for candidate in oracle.candidates(value, own or {}, pool):
            mutated = oracle.set_path(raw, path, candidate)
            try:
                checked = validate(mutated)
            except CselabError:
                continue
            yield ".".join(map(str, path)), mutated, checked
            break
        else:
            skipped.append(".".join(map(str, path)))
    yield None, skipped, None


#: sections of named entries: one entry stands for the others (each of its settings is changed)
NAMED = ("experiments", "methods", "plms", "tables", "figures", "sweeps", "pretraining")


def representatives(full: dict) -> list[tuple[tuple, object]]:
    """Every leaf setting, except that of the same setting in several entries of a named section
    (``experiments.<e>.training.lr``) only the last entry's (the smoke config's own, written last)."""
    chosen: dict[tuple, tuple[tuple, object]] = {}
    for path, value in oracle.leaves(full):
        pattern = (path[0], "*", *path[2:]) if path[0] in NAMED and len(path) > 2 else path
        chosen[pattern] = (path, value)
    return list(chosen.values())


#: a setting naming an entry: the section its other values come from
REFERS = {"table": "tables", "baseline": "experiments", "base": "experiments", "plm": "plms", "method": "methods",
          "generator_stage": "pretraining"}

#: settings with no other valid value alone, each refused by a check across settings (its own test)
UNMUTABLE = {
    "data.corpus.sha256",  # must be the corpus's
    "training.holdout", "training.subsampling",  # a held-out split and subsampling cannot be combined (paper runs)
    "experiments.gp-heldout-nogd-minilm.training.holdout",  # the held-out figure reads its runs at one fraction
    "figures.paradigm_figure5_7.holdout",  # ... and its runs' fraction
    "figures.paradigm_figure5_7.kind",  # another kind takes other options
    "methods.compcse.options.partitions",  # a sweep's point aggregates concat_absdiff_project: 2 parts only
    "methods.infocse.auxiliaries.infocse_mlm.options.detach",  # a named experiment would then equal it
    "pretraining.mlm-short.method",  # the one method with a stage's export (infocse_pretrain)
}


def test_each_setting_reruns_only_the_jobs_it_can_affect(plan):
    raw, jobs = plan
    before, _ = specs(raw, jobs)
    wrong, unused, tried = [], [], 0
    for path, mutated, checked in mutations(raw):
        if path is None:
            skipped = set(mutated)
            break
        tried += 1
        after, cfg = specs(mutated, jobs, checked)
        changed = changed_jobs(before, after)
        if is_operational(path):
            wrong += [f"{path} (operational) changes {rule} {wc}" for rule, wc in changed if rule != "cost_plan"]
            continue
        wrong += [f"{path} changes {rule} {wc}" for rule, wc in changed
                  if not oracle.job_allowed(path, rule, wc, cfg)]
        if not changed:
            unused.append(path)
    assert not wrong, f"{len(wrong)} jobs rerun by settings that cannot change them:\n" + "\n".join(wrong[:40])
    print(f"{tried} settings changed; unused by any job here: {unused}; no other valid value: {sorted(skipped)}")
    assert tried > 180, tried
    assert skipped == UNMUTABLE, (sorted(skipped - UNMUTABLE), sorted(UNMUTABLE - skipped))
    assert set(unused) == {p for p in unused if p.startswith("hub.")}, unused  # the Hub's: push jobs only


def _jobs_changed_by(raw, jobs, mutate):
    before, _ = specs(raw, jobs)
    mutated = copy.deepcopy(raw)
    mutate(mutated)
    after, cfg = specs(mutated, jobs)
    return {rule for rule, _ in changed_jobs(before, after)}, cfg


@pytest.mark.parametrize("case, mutate, allowed", [
    ("a BEIR dataset added", lambda c: c["evaluation"]["beir"]["datasets"].append("nfcorpus"),
     {"table", "leakage_audit", "cost_plan"}),
    ("a BEIR dataset removed", lambda c: c["evaluation"]["beir"].update(datasets=[]),
     {"table", "leakage_audit", "cost_plan"}),
    ("a seed added", lambda c: c["seeds"].append(7), {"table", "seed_power", "protocol_table", "figure", "sweep",
                                                      "mteb_check", "cost_plan"}),
    ("a transfer task removed", lambda c: c["evaluation"]["transfer"]["tasks"].remove("TREC"),
     {"evaluate_transfer", "evaluate_transfer_dev", "senteval_reads", "table", "cost_plan"}),
    ("an experiment added to a table", lambda c: c["tables"]["table1"]["experiments"].append("diffcse-minilm"),
     {"table", "seed_power", "protocol_table", "figure", "mteb_check", "cost_plan"}),
    ("a value added to a sweep's grid", lambda c: c["sweeps"]["smoke-lr-batch"]["grid"]["training.lr"].append(5e-5),
     {"sweep", "table", "cost_plan"}),
    ("an experiment added", lambda c: c["experiments"].update({"simcse-extra-minilm": {"plm": "minilm",
                                                                                       "method": "simcse"}}),
     {"cost_plan"}),
])
def test_adding_or_removing_an_element_reruns_only_what_lists_it(plan, case, mutate, allowed):
    """No job of the element's neighbours reruns: a BEIR dataset's, a seed's, a task's, a grid
    value's own jobs are new jobs; only the reports that list the elements change their params."""
    raw, jobs = plan
    changed, _ = _jobs_changed_by(raw, jobs, mutate)
    assert changed <= allowed, (case, sorted(changed - allowed))


# -- data files: a job's data inputs are the files it reads ------------------------------------------

@pytest.fixture(scope="module")
def local_plan(tmp_path_factory):
    """The smoke config on a local SentEval tree and corpus (synthetic, named relative to the
    folder, as a user's data_dir or data.*.path): every job Snakemake plans for its tables and
    exports, with its inputs and outputs."""
    from cselab.pipeline.cost import dry_run

    folder = tmp_path_factory.mktemp("local-plan")
    make_transfer(make_senteval(folder / "data" / "senteval"))
    make_corpus(folder / "data" / "corpus.txt", 50)
    raw = _merged("config.yaml", "configs/smoke.yaml")
    raw["data"]["senteval"]["path"], raw["data"]["corpus"]["path"] = "data/senteval", "data/corpus.txt"
    return folder, dry_run([sys.executable, "-m", "snakemake"], str(ROOT / "Snakefile"), raw, ["all", "exports"],
                           cores=8, workdir=folder)


def rebuilt_by(jobs, path: str) -> tuple[set[str], set[str]]:
    """(the rules of the jobs that take ``path`` as an input, the rules of every job rebuilt after
    them: Snakemake's own propagation over the planned inputs and outputs)."""
    readers = [j for j in jobs if path in j.inputs]
    made, seen = {o for j in readers for o in j.outputs}, set(map(id, readers))
    queue = list(readers)
    while queue:
        queue.pop()  # "made" grows to the fixpoint: which job is taken does not matter
        for other in jobs:
            if id(other) not in seen and made & set(other.inputs):
                seen.add(id(other))
                queue.append(other)
                made |= set(other.outputs)
    readers_rules = {j.rule for j in readers}
    return readers_rules, {j.rule for j in jobs if id(j) in seen}


def test_each_senteval_file_reruns_only_the_jobs_that_read_it(local_plan):
    """Every SentEval file is an input of the jobs that prepare it alone (rule senteval_reads, rule
    prepare_senteval); the jobs built from those records are the jobs that may read the file
    (tests/rerun_oracle.py); no training is rebuilt after a file other than STS-B dev's changes."""
    folder, jobs = local_plan
    tree = folder / "data" / "senteval"
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    wrong, planned = [], {j.rule for j in jobs}
    for rel in files:
        path = f"data/senteval/{rel}"
        readers, rebuilt = rebuilt_by(jobs, path)
        direct = {j.rule for j in jobs if set(j.inputs) & {o for r in jobs if path in r.inputs for o in r.outputs}}
        if not readers <= {"senteval_reads", "prepare_senteval"}:
            wrong.append(f"{rel} is read by {sorted(readers)} (not through its record)")
        if not direct <= oracle.data_readers(rel):
            wrong.append(f"{rel}'s records are read by {sorted(direct - oracle.data_readers(rel))}")
        trains = rebuilt & {"train", "pretrain"}
        if (rel == oracle.TRAINING_READS) != bool(trains):
            wrong.append(f"{rel} rebuilds {sorted(trains) or 'no training'}")
    assert not wrong, "\n".join(wrong)
    assert {"train", "evaluate_sts", "senteval_reads", "evaluate_transfer"} <= planned
