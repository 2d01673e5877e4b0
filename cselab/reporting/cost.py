"""The cost plan's arithmetic (``results/cost_plan.csv`` / ``.md``; docs/cost.md).

A device's **rates table** (``cselab/reporting/rates/<device>.csv``, one row a rate: quantity,
value, unit, measured / estimated, the model and batch it was taken at, date, the command that
measured it, a note) turns a job's size into seconds; :class:`Pricing` looks rates up for one
job, records which rows it used (the plan's ``basis``) and collects the rows missing for a rule,
reported together in one message. :func:`schedule` places the priced jobs on one node (GPUs,
cores, memory; dependencies first), :func:`rule_rows` sums them per rule and
:func:`write_plan` writes the CSV and the Markdown report.

The sizes a rule's jobs are priced from (training steps, sentences encoded, BEIR documents and
queries, corpus lines) come from the config and the data's published sizes
(:mod:`cselab.pipeline.cost`); the constants here are the sizes that do not depend on the config.
"""

from __future__ import annotations

import csv
import heapq
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from cselab.errors import ConfigError, CselabError
from cselab.io import markdown_table, write_text

RATES_DIR = Path(__file__).with_name("rates")
RATE_COLUMNS = ("quantity", "value", "unit", "basis", "model", "batch_size", "date", "command", "note")
#: how a row was had: ``definition`` is exact by construction (the reference factor, 1) and counts as
#: neither measured nor estimated in a plan's basis
BASES = ("measured", "estimated", "definition")
GB = 1e3  # Snakemake's mem_mb / 1000 = its "mem" in GB; disk likewise in decimal units

#: Tokens of a text of ``w`` words: WordPiece / BPE pieces a word, plus [CLS] and [SEP]
TOKENS_PER_WORD = 1.3
SPECIAL_TOKENS = 2
#: Evaluation sets: unique sentences encoded and their mean words. STS (the 7 tasks) as the
#: embedding cache holds them (26,289 rows, results/cache/embeddings/*/sts.npy); STS-B dev and
#: test and the transfer tasks counted from SentEval's files (../shared/data/senteval).
EVAL_SETS = {"sts": (26_289, 13.3), "stsb_dev": (2_909, 13.3), "stsb_test": (2_551, 11.4)}
#: Transfer tasks: per split (items, sentences an item); their sentences have 12.75 words
TRANSFER_SPLITS = {"MR": [(10_662, 1)], "CR": [(3_775, 1)], "SUBJ": [(10_000, 1)], "MPQA": [(10_606, 1)],
                   "SST2": [(67_349, 1), (872, 1), (1_821, 1)], "TREC": [(5_452, 1), (500, 1)],
                   "MRPC": [(4_076, 2), (1_725, 2)]}
TRANSFER_WORDS = 12.75
#: Mean query length in words (Thakur et al., 2021, Table 1), beside cselab.data.beir.BEIR_SIZES
BEIR_QUERY_WORDS = {"msmarco": 5.96, "trec-covid": 10.60, "nfcorpus": 3.30, "nq": 9.16, "hotpotqa": 17.61,
                    "fiqa": 10.77, "arguana": 192.98, "webis-touche2020": 6.55, "cqadupstack": 8.59,
                    "quora": 9.53, "dbpedia-entity": 5.39, "scidocs": 9.38, "fever": 8.13,
                    "climate-fever": 20.13, "scifact": 12.37}
#: A BEIR zip against its extracted corpus (estimated: JSON lines of English text deflate ~2.5x)
BEIR_ZIP_RATIO = 0.4
#: wiki1m: lines, bytes a line (wiki1m_for_simcse.txt: 1,000,000 sentences, 121 MB)
WIKI1M_LINES = 1_000_000
CORPUS_BYTES_PER_LINE = 121.0
#: measured on the first 2,000 wiki1m lines (cselab.data.spans / cselab.data.subsample,
#: 2026-11-26): spans.jsonl bytes a corpus line, and each strategy's lines a corpus line
SPANS_BYTES_PER_LINE = 166.0
SUBSAMPLE_LINES = {"adjacent": 1.3475, "overlapping": 1.6285, "subsuming": 2.703}
#: the token cache (results/cache/tokens): bytes a corpus line (156 kB for 1,600 lines here)
TOKEN_CACHE_BYTES_PER_LINE = 100.0
SENTEVAL_MB = 15.0  # the SentEval tree (../shared/data/senteval: 15 MB)
#: MLflow (results/mlflow.db + mlartifacts): a run's parameters, tags and small artifacts, and a
#: logged training step's metrics (about 10 metrics of about 100 bytes)
MLFLOW_MB_PER_RUN = 0.05
MLFLOW_MB_PER_LOGGED_STEP = 1e-3


# -- models: parameters, embedding size ------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """A BERT-style encoder's size: what its FLOPs (non-embedding parameters), its checkpoint
    (parameters) and its embeddings (hidden) scale with."""

    layers: int
    hidden: int
    intermediate: int
    vocab: int
    positions: int

    @property
    def nonembedding(self) -> int:
        return self.layers * (4 * self.hidden ** 2 + 2 * self.hidden * self.intermediate)

    @property
    def parameters(self) -> int:
        h, i = self.hidden, self.intermediate
        layer = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h
        return (self.vocab + self.positions + 2) * h + 2 * h + self.layers * layer + h * h + h


#: The PLMs the configs name (their config.json): layers, hidden, intermediate, vocabulary, positions
KNOWN_SHAPES = {
    "bert-base-uncased": ModelShape(12, 768, 3072, 30522, 512),
    "bert-base-cased": ModelShape(12, 768, 3072, 28996, 512),
    "bert-large-uncased": ModelShape(24, 1024, 4096, 30522, 512),
    "bert-large-cased": ModelShape(24, 1024, 4096, 28996, 512),
    "roberta-base": ModelShape(12, 768, 3072, 50265, 514),
    "roberta-large": ModelShape(24, 1024, 4096, 50265, 514),
    "all-MiniLM-L6-v2": ModelShape(6, 384, 1536, 30522, 512),
    "distilbert-base-uncased": ModelShape(6, 768, 3072, 30522, 512),
}


def model_shape(model: str) -> ModelShape:
    """The size of ``model``: a name of :data:`KNOWN_SHAPES` (or ``<org>/<name>`` of one), or a
    local directory with a Hugging Face ``config.json``."""
    name = str(model)
    if name in KNOWN_SHAPES or name.rsplit("/", 1)[-1] in KNOWN_SHAPES:
        return KNOWN_SHAPES.get(name) or KNOWN_SHAPES[name.rsplit("/", 1)[-1]]
    config = Path(name).expanduser() / "config.json"
    if config.is_file():
        c = json.loads(config.read_text())
        hidden = c.get("hidden_size", c.get("dim"))
        return ModelShape(c.get("num_hidden_layers", c.get("n_layers")), hidden,
                          c.get("intermediate_size", c.get("hidden_dim", 4 * hidden)), c["vocab_size"],
                          c.get("max_position_embeddings", 512))
    raise ConfigError(f"cost plan: the size of model {name!r} is unknown; add it to KNOWN_SHAPES in "
                      f"{Path(__file__).name} or name a local model directory (with config.json)")


def text_tokens(items: float, words: float, max_len: int | None = None) -> float:
    """Tokens of ``items`` texts of ``words`` words each, cut at ``max_len``."""
    per = words * TOKENS_PER_WORD + SPECIAL_TOKENS
    return items * (min(per, max_len) if max_len else per)


def transfer_items(max_items: int | None) -> tuple[int, int]:
    """(items, sentences) of the 7 transfer tasks, each split cut at ``max_items``."""
    items = sentences = 0
    for splits in TRANSFER_SPLITS.values():
        for n, per in splits:
            n = min(n, max_items) if max_items else n
            items, sentences = items + n, sentences + n * per
    return items, sentences


# -- rates tables -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    """One row of a rates table."""

    quantity: str
    value: float
    unit: str
    basis: str
    model: str = ""
    batch_size: int | None = None
    date: str = ""
    command: str = ""
    note: str = ""

    @property
    def label(self) -> str:
        """How the plan names the row: ``quantity`` or ``quantity[model]``."""
        return f"{self.quantity}[{self.model}]" if self.model else self.quantity


def rates_file(device: str) -> Path:
    """The rates table of ``device`` (``h100``, ``cpu-2core``: ``rates/<device>.csv``) or a CSV path."""
    if device.endswith(".csv"):
        path = Path(device)
        if not path.is_file():
            raise ConfigError(f"config key 'cost_plan.device': no rates table {device}")
        return path.resolve()
    path = RATES_DIR / f"{device}.csv"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in RATES_DIR.glob("*.csv")))
        raise ConfigError(f"config key 'cost_plan.device': no rates table for {device!r}; known: {known} "
                          f"(or a path to a CSV file with the columns {', '.join(RATE_COLUMNS)})")
    return path


def load_rates(path: str | Path) -> "RateBook":
    """Read a rates table; a bad row is one error naming the file, the line and the column."""
    path = Path(path)
    rows: dict[str, list[Rate]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(line for line in fh if not line.startswith("#"))
        missing = [c for c in RATE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"rates table {path}: missing column(s) {', '.join(missing)}; "
                              f"expected {','.join(RATE_COLUMNS)}")
        for n, row in enumerate(reader, start=2):
            rate = _rate(row, f"rates table {path}, row {n}")
            if any(r.model == rate.model for r in rows.get(rate.quantity, [])):
                raise ConfigError(f"rates table {path}, row {n}: a second row for {rate.label}")
            rows.setdefault(rate.quantity, []).append(rate)
    return RateBook(path, rows)


def _rate(row: dict, where: str) -> Rate:
    """One CSV row as a :class:`Rate`, checked."""
    try:
        value = float(row["value"])
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: value {row['value']!r} of {row['quantity']!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: value {row['value']!r} of {row['quantity']!r} must be finite and >= 0")
    if row["basis"] not in BASES:
        raise ConfigError(f"{where}: basis {row['basis']!r} of {row['quantity']!r} must be one of {', '.join(BASES)}")
    if not (row["quantity"] or "").strip():
        raise ConfigError(f"{where}: empty quantity")
    if row["model"]:
        model_shape(row["model"])
    batch = row["batch_size"].strip() if row["batch_size"] else ""
    return Rate(row["quantity"].strip(), value, row["unit"], row["basis"], row["model"].strip(),
                int(batch) if batch else None, row["date"], row["command"], row["note"])


@dataclass
class RateBook:
    """A device's rates by quantity (several rows of one quantity: one per reference model);
    ``missing`` collects the (rule, quantity) pairs a plan asked for and did not find."""

    path: Path
    rows: dict[str, list[Rate]]
    missing: dict[tuple[str, str], None] = field(default_factory=dict)

    def find(self, rule: str, quantity: str, shape: ModelShape | None = None) -> Rate | None:
        """The row of ``quantity``: for a model, the row taken on the nearest model size."""
        rows = self.rows.get(quantity)
        if not rows:
            self.missing[(rule, quantity)] = None
            return None
        if shape is None or len(rows) == 1:
            return rows[0]
        return min(rows, key=lambda r: abs(math.log(model_shape(r.model).nonembedding / shape.nonembedding))
                   if r.model else math.inf)

    def check_complete(self) -> None:
        """One error naming every rule whose rates are missing, and the file to add them to."""
        if not self.missing:
            return
        by_rule: dict[str, list[str]] = {}
        for rule, quantity in self.missing:
            by_rule.setdefault(rule, []).append(quantity)
        listed = "; ".join(f"rule {rule}: {', '.join(qs)}" for rule, qs in by_rule.items())
        raise ConfigError(f"cost plan: the rates table {self.path} has no row for {listed}. Add a row "
                          f"({','.join(RATE_COLUMNS)}) per missing quantity; a rule without a size model "
                          "is priced by 'job_s:<rule>', its seconds a job (docs/cost.md)")

    def node(self) -> dict[str, float]:
        """The node the table assumes (``node_gpus``, ``node_cores``, ``node_mem_gb`` rows)."""
        out = {}
        for key in ("gpus", "cores", "mem_gb"):
            rate = self.find("node", f"node_{key}")
            out[key] = rate.value if rate else math.nan
        return out


class Pricing:
    """The rates one job uses: values scaled to its model, each row recorded for its basis."""

    def __init__(self, book: RateBook, rule: str):
        self.book, self.rule = book, rule
        self.used: dict[str, Rate] = {}

    def rate(self, quantity: str, shape: ModelShape | None = None) -> Rate | None:
        rate = self.book.find(self.rule, quantity, shape)
        if rate is not None:
            self.used[rate.label] = rate
        return rate

    def value(self, quantity: str) -> float:
        """A plain value (seconds, a factor); NaN when missing (the plan then stops with the list)."""
        rate = self.rate(quantity)
        return rate.value if rate else math.nan

    def seconds(self, amount: float, quantity: str, shape: ModelShape | None = None, by: str = "flops") -> float:
        """``amount`` of work at the rate ``quantity`` (per second); with a model, the row's rate
        scaled from its reference model by non-embedding parameters (``by="flops"``) or by
        embedding size (``by="dim"``)."""
        rate = self.rate(quantity, shape)
        if rate is None:
            return math.nan
        if rate.value <= 0:
            raise ConfigError(f"rates table {self.book.path}: {rate.label} is a rate and must be > 0")
        return amount * self.scale(rate, shape, by) / rate.value

    @staticmethod
    def scale(rate: Rate, shape: ModelShape | None, by: str = "flops") -> float:
        """How much more work a unit is on ``shape`` than on the rate's reference model."""
        if shape is None or not rate.model:
            return 1.0
        ref = model_shape(rate.model)
        return shape.hidden / ref.hidden if by == "dim" else shape.nonembedding / ref.nonembedding

    def basis(self) -> str:
        return basis_text(self.used)


def basis_text(used: dict[str, Rate]) -> str:
    """``measured: a, b; estimated: c``: the rate rows used, by basis."""
    parts = []
    for kind in BASES[:2]:
        labels = sorted(label for label, r in used.items() if r.basis == kind)
        if labels:
            parts.append(f"{kind}: {', '.join(labels)}")
    return "; ".join(parts) or "no work"


# -- jobs, the node, the schedule -------------------------------------------------------------


@dataclass
class JobCost:
    """One priced job: its wall seconds, what it holds while it runs, the disk it leaves."""

    rule: str
    name: str
    seconds: float
    threads: int = 1
    gpus: int = 0
    mem_mb: float = 0.0
    disk_mb: float = 0.0
    basis: str = ""
    used: dict[str, Rate] = field(default_factory=dict)
    deps: list[int] = field(default_factory=list)


def _fit(job: JobCost, node: dict) -> tuple[int, int, float]:
    """What ``job`` takes of the node: threads, GPUs, memory, each at most the node's."""
    return (max(1, min(job.threads, int(node["cores"]))), min(job.gpus, int(node["gpus"])),
            min(job.mem_mb, node["mem_gb"] * GB))


def _bottom_levels(jobs: list[JobCost]) -> list[float]:
    """Each job's seconds plus the longest chain of jobs that wait for it (the critical path)."""
    children: list[list[int]] = [[] for _ in jobs]
    for i, job in enumerate(jobs):
        for d in job.deps:
            children[d].append(i)
    level = [0.0] * len(jobs)
    for i in reversed(_topological(jobs)):
        level[i] = jobs[i].seconds + max((level[c] for c in children[i]), default=0.0)
    return level


def _topological(jobs: list[JobCost]) -> list[int]:
    """Job indices, each after the jobs it depends on."""
    order, state = [], [0] * len(jobs)
    for root in range(len(jobs)):
        stack = [(root, iter(jobs[root].deps))]
        if state[root]:
            continue
        state[root] = 1
        while stack:
            node, deps = stack[-1]
            nxt = next((d for d in deps if not state[d]), None)
            if nxt is None:
                stack.pop()
                state[node] = 2
                order.append(node)
            else:
                state[nxt] = 1
                stack.append((nxt, iter(jobs[nxt].deps)))
    return order


def schedule(jobs: list[JobCost], node: dict) -> tuple[list[float], list[float], float]:
    """Start and end seconds of every job on one node (a greedy list schedule: of the jobs whose
    inputs are done, the one with the longest critical path first, whenever its threads, GPUs
    and memory are free); returns (starts, ends, the critical path's seconds)."""
    level = _bottom_levels(jobs)
    waiting = [len(set(j.deps)) for j in jobs]
    children: list[list[int]] = [[] for _ in jobs]
    for i, job in enumerate(jobs):
        for d in set(job.deps):
            children[d].append(i)
    ready = sorted((i for i, w in enumerate(waiting) if w == 0), key=lambda i: -level[i])
    free = [int(node["cores"]), int(node["gpus"]), node["mem_gb"] * GB]
    running: list[tuple[float, int]] = []
    starts, ends = [0.0] * len(jobs), [0.0] * len(jobs)
    now = 0.0
    while ready or running:
        for i in list(ready):
            need = _fit(jobs[i], node)
            if all(n <= f for n, f in zip(need, free)):
                ready.remove(i)
                free = [f - n for f, n in zip(free, need)]
                starts[i], ends[i] = now, now + jobs[i].seconds
                heapq.heappush(running, (ends[i], i))
        now, done = heapq.heappop(running)
        free = [f + n for f, n in zip(free, _fit(jobs[done], node))]
        for c in children[done]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
        ready.sort(key=lambda i: -level[i])
    return starts, ends, max(level, default=0.0)


# -- the plan: rows per rule, totals, files ---------------------------------------------------

PLAN_COLUMNS = ["rule", "jobs", "job_hours", "gpu_hours", "cpu_hours", "peak_ram_gb", "disk_gb",
                "node_start_h", "node_end_h", "basis"]


def rule_rows(jobs: list[JobCost], starts: list[float], ends: list[float]) -> list[dict]:
    """One row per rule (in the order rules first start on the node) and a ``TOTAL`` row."""
    by_rule: dict[str, list[int]] = {}
    for i in sorted(range(len(jobs)), key=lambda i: (starts[i], i)):
        by_rule.setdefault(jobs[i].rule, []).append(i)
    rows = [_row(rule, [jobs[i] for i in idx], [starts[i] for i in idx], [ends[i] for i in idx])
            for rule, idx in by_rule.items()]
    total = _row("TOTAL", jobs, starts, ends)
    total["node_start_h"] = 0.0
    return rows + [total]


def _row(rule: str, jobs: list[JobCost], starts: list[float], ends: list[float]) -> dict:
    """The totals of some jobs: counts, hours, the largest memory, disk, when they run, basis."""
    used: dict[str, Rate] = {}
    for job in jobs:
        used.update(job.used)
    return {"rule": rule, "jobs": len(jobs),
            "job_hours": round(sum(j.seconds for j in jobs) / 3600, 3),
            "gpu_hours": round(sum(j.seconds * j.gpus for j in jobs) / 3600, 3),
            "cpu_hours": round(sum(j.seconds * j.threads for j in jobs) / 3600, 3),
            "peak_ram_gb": round(max((j.mem_mb for j in jobs), default=0.0) / GB, 1),
            "disk_gb": round(sum(j.disk_mb for j in jobs) / GB, 3),
            "node_start_h": round(min(starts, default=0.0) / 3600, 2),
            "node_end_h": round(max(ends, default=0.0) / 3600, 2),
            "basis": basis_text(used)}


def write_plan(rows: list[dict], meta: dict, csv_path: str | Path, md_path: str | Path) -> None:
    """The plan as CSV (one row per rule and a TOTAL row) and as a Markdown report that states
    the targets, the node, the wall time, the assumptions and every rate row used."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=PLAN_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(csv_path, buffer.getvalue())
    write_text(md_path, plan_markdown(rows, meta))


def plan_markdown(rows: list[dict], meta: dict) -> str:
    """The Markdown report of a plan (see :func:`write_plan`)."""
    total, node = rows[-1], meta["node"]
    out = [f"# Cost plan: {', '.join(meta['targets'])} on {meta['device']}\n\n",
           f"{total['jobs']} jobs ({meta['scope']}; counted by Snakemake's dry run: `{meta['command']}`) need "
           f"**{total['gpu_hours']:,.1f} GPU-hours**, {total['cpu_hours']:,.1f} CPU-hours and "
           f"**{total['disk_gb'] / GB:,.2f} TB** of disk ({total['disk_gb']:,.0f} GB); the largest job reserves "
           f"{total['peak_ram_gb']:,.0f} GB of RAM. On one node of {node['gpus']:g} GPUs, {node['cores']:g} cores "
           f"and {node['mem_gb']:g} GB they take about **{meta['wall_hours']:,.1f} hours** of wall time (a greedy "
           f"schedule, the longest chain of dependent jobs first; that chain alone: {meta['critical_hours']:,.1f} h)."
           "\n\n",
           markdown_table([c.replace("_", " ") for c in PLAN_COLUMNS],
                          [[r[c] for c in PLAN_COLUMNS] for r in rows]),
           "\n## How the figures are made\n\n",
           *[f"- {line}\n" for line in meta["assumptions"]],
           f"\n## Rates used ({meta['rates']})\n\n",
           "Rows marked *estimated* are to be replaced by measurements (docs/cost.md).\n\n",
           markdown_table(["quantity", "model", "batch", "value", "unit", "basis", "date", "command", "note"],
                          [[r.quantity, r.model, r.batch_size or "", f"{r.value:g}", r.unit, r.basis, r.date,
                            f"`{r.command}`" if r.command else "", r.note]
                           for r in sorted(meta["used"].values(), key=lambda r: r.label)])]
    return "".join(out)


def require_finite(jobs: list[JobCost]) -> None:
    """Every job priced (a missing rate leaves NaN): otherwise a clear error, never a NaN plan."""
    bad = sorted({j.rule for j in jobs if not math.isfinite(j.seconds)})
    if bad:
        raise CselabError(f"cost plan: no time for the jobs of rule(s) {', '.join(bad)}")
