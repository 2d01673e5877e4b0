"""The SentEval STS protocol as used by SimCSE and its follow-up papers (METHODS.md section 6).

``root`` is always the SentEval ``downstream/`` directory (the one holding ``STS/`` and
``SICK/``). Every task is scored the same way: cosine similarity of the two sentence
embeddings, Spearman correlation with the gold scores, x100. For STS12-16 the reported number
is SentEval's "all" setting (one Spearman over the concatenation of a year's subsets); STS-B
and SICK-R are scored unsupervised on their test split (no regressor). Sentences are what
SentEval + SimCSE feed the encoder: the file text re-joined on single spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr

from cselab.errors import ConfigError, DataError

Encoder = Callable[[list[str]], np.ndarray]

#: Internal task names, in the order papers print their STS table.
STS_TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
#: Internal name -> column name used in result tables.
COLUMN_NAMES = {
    "STS12": "STS12", "STS13": "STS13", "STS14": "STS14", "STS15": "STS15", "STS16": "STS16",
    "STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R",
}
#: SentEval's subsets per STS year (STS13 has no SMT input: licence).
STS_SUBSETS = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
STSB_SPLITS = ("train", "dev", "test")
SICK_SPLITS = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}

_FIX = ("re-run the SentEval download rule, or point the config at a complete SentEval "
        "`downstream/` directory (with STS/ and SICK/)")


@dataclass
class Subset:
    """One scored set of sentence pairs (an STS year's subset, or a STS-B / SICK split)."""

    name: str
    sent1: list[str]
    sent2: list[str]
    gold: np.ndarray

    def __len__(self) -> int:
        return len(self.gold)


def _norm(sentence: str) -> str:
    """SentEval splits on whitespace, SimCSE re-joins with single spaces."""
    return " ".join(sentence.split())


def _read_lines(path: Path) -> list[str]:
    """All lines of a UTF-8 file (``\\n`` separated, ``\\r`` stripped, final newline dropped).

    Every file of the real tree is valid UTF-8 (the few mojibake characters in STS15 belief and
    the U+FFFD in STS12 SMTnews are already in the file), so decoding is strict: a file that is
    not UTF-8 is corrupt and raises :class:`DataError`.
    """
    if not path.is_file():
        raise DataError(f"missing SentEval file {path}: {_FIX}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not valid UTF-8 (byte {e.start}): the file is corrupt; {_FIX}") from e
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise DataError(f"SentEval file {path} is empty: {_FIX}")
    return lines


def _float(value: str, path: Path, lineno: int) -> float:
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}, line {lineno}: score {value!r} is not a number; the file is "
                        f"corrupt: {_FIX}") from None


def load_sts_year(root: str | Path, task: str) -> list[Subset]:
    """STS12-16: ``STS.input.<sub>.txt`` ("s1<TAB>s2") + ``STS.gs.<sub>.txt`` (one score a line).

    As in SentEval, a pair whose gold line is blank has no score and is skipped.
    """
    if task not in STS_SUBSETS:
        raise ConfigError(f"unknown STS year {task!r}; choose from {sorted(STS_SUBSETS)}")
    folder = Path(root) / "STS" / f"{task}-en-test"
    subsets = []
    for sub in STS_SUBSETS[task]:
        inp, gs = folder / f"STS.input.{sub}.txt", folder / f"STS.gs.{sub}.txt"
        pairs, scores = _read_lines(inp), _read_lines(gs)
        if len(pairs) != len(scores):
            raise DataError(f"{inp} has {len(pairs)} lines but {gs} has {len(scores)}: one of them "
                            f"is truncated; {_FIX}")
        s1, s2, gold = [], [], []
        for lineno, (pair, score) in enumerate(zip(pairs, scores), start=1):
            if not score.strip():
                continue
            fields = pair.split("\t")
            if len(fields) != 2:
                raise DataError(f"{inp}, line {lineno}: expected 2 tab-separated sentences, found "
                                f"{len(fields)} field(s); the file is corrupt: {_FIX}")
            s1.append(_norm(fields[0]))
            s2.append(_norm(fields[1]))
            gold.append(_float(score.strip(), gs, lineno))
        subsets.append(Subset(sub, s1, s2, np.asarray(gold, dtype=np.float64)))
    return subsets


def _load_columns(path: Path, cols: tuple[int, int, int], skip_header: str | None) -> Subset:
    """Tab-separated pairs file: (score, sentence A, sentence B) at 0-based ``cols``; extra
    trailing columns (some STS-B releases carry source info) are ignored."""
    lines = _read_lines(path)
    start = 0
    if skip_header is not None:
        if skip_header not in lines[0].split("\t"):
            raise DataError(f"{path}, line 1: expected a header with column {skip_header!r}; the "
                            f"file is not the SentEval release: {_FIX}")
        start = 1
    ci, ca, cb = cols
    s1, s2, gold = [], [], []
    for lineno, line in enumerate(lines[start:], start=start + 1):
        fields = line.strip().split("\t")
        if len(fields) <= max(cols):
            raise DataError(f"{path}, line {lineno}: expected at least {max(cols) + 1} "
                            f"tab-separated columns, found {len(fields)}; the file is corrupt: {_FIX}")
        gold.append(_float(fields[ci], path, lineno))
        s1.append(_norm(fields[ca]))
        s2.append(_norm(fields[cb]))
    return Subset(path.stem, s1, s2, np.asarray(gold, dtype=np.float64))


def load_stsb(root: str | Path, split: str = "test") -> Subset:
    """STS-B ``sts-<split>.csv``: score column 4, sentences 5 and 6 (0-based), no header."""
    if split not in STSB_SPLITS:
        raise ConfigError(f"unknown STS-B split {split!r}; choose from {list(STSB_SPLITS)}")
    return _load_columns(Path(root) / "STS" / "STSBenchmark" / f"sts-{split}.csv", (4, 5, 6), None)


def load_sick(root: str | Path, split: str = "test") -> Subset:
    """SICK-R: header line, sentence_A column 1, sentence_B 2, relatedness_score 3."""
    if split not in SICK_SPLITS:
        raise ConfigError(f"unknown SICK split {split!r}; choose from {list(SICK_SPLITS)}")
    return _load_columns(Path(root) / "SICK" / SICK_SPLITS[split], (3, 1, 2), "sentence_A")


def load_task(root: str | Path, task: str) -> list[Subset]:
    """The evaluated subsets of one task (STS-B and SICK-R: their test split only)."""
    if task == "STSBenchmark":
        return [load_stsb(root, "test")]
    if task == "SICKRelatedness":
        return [load_sick(root, "test")]
    if task in STS_SUBSETS:
        return load_sts_year(root, task)
    raise ConfigError(f"unknown STS task {task!r}; choose from {STS_TASKS}")


def stsb_dev(root: str | Path) -> Subset:
    """STS-B dev (1500 pairs), the checkpoint-selection set used during training."""
    return load_stsb(root, "dev")


def _encode_unique(encode: Encoder, sentences: Iterable[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Call ``encode`` exactly once on the unique sentences (first-seen order); return
    (L2-normalised embeddings, sentence -> row index)."""
    unique = list(dict.fromkeys(sentences))
    emb = np.asarray(encode(unique), dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] != len(unique):
        raise ValueError(f"encode returned shape {emb.shape} for {len(unique)} sentences; "
                         "expected (n_sentences, dim)")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    return emb / np.maximum(norms, 1e-12), {s: i for i, s in enumerate(unique)}


def _cosines(emb: np.ndarray, index: dict[str, int], subset: Subset) -> np.ndarray:
    """Cosine similarity of each pair (rows of ``emb`` are unit vectors)."""
    a = emb[[index[s] for s in subset.sent1]]
    b = emb[[index[s] for s in subset.sent2]]
    return np.einsum("ij,ij->i", a, b)


def _corr(pred: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(Spearman, Pearson) x100."""
    return 100 * float(spearmanr(pred, gold)[0]), 100 * float(pearsonr(pred, gold)[0])


def evaluate_sts(encode: Encoder, root: str | Path, tasks: Sequence[str] = STS_TASKS) -> dict:
    """Score ``encode`` on the STS tasks with one ``encode`` call over all unique sentences.

    Per task the reported number is SentEval's "all" Spearman: predictions and gold of all
    subsets concatenated, one Spearman over the concatenation (x100); per-subset Spearman and
    Pearson, their unweighted "mean" and size-weighted "wmean" are kept for the record.
    Returns ``{"tasks": {task: {...}}, "scores": {column: spearman_all}, "avg": mean of the
    scores, "n_sentences": number of unique sentences encoded, "pairs": {column: (gold, pred)}}``;
    ``pairs`` (numpy arrays in the "all" concatenation order) feed the paired bootstrap.
    """
    tasks = list(tasks)
    if not tasks:
        raise ConfigError(f"no STS tasks requested; choose from {STS_TASKS}")
    data = {task: load_task(root, task) for task in tasks}
    emb, index = _encode_unique(
        encode, (s for subs in data.values() for sub in subs for s in (*sub.sent1, *sub.sent2)))
    out, pairs = {}, {}
    for task, subs in data.items():
        preds = [_cosines(emb, index, sub) for sub in subs]
        pairs[COLUMN_NAMES[task]] = (np.concatenate([s.gold for s in subs]), np.concatenate(preds))
        per = {}
        for sub, pred in zip(subs, preds):
            sp, pe = _corr(pred, sub.gold)
            per[sub.name] = {"spearman": sp, "pearson": pe, "n_pairs": len(sub)}
        sp_all, pe_all = _corr(np.concatenate(preds), np.concatenate([s.gold for s in subs]))
        sizes = np.array([len(s) for s in subs], dtype=np.float64)
        sps = np.array([v["spearman"] for v in per.values()])
        out[task] = {
            "spearman_all": sp_all,
            "pearson_all": pe_all,
            "mean_spearman": float(sps.mean()),
            "wmean_spearman": float((sps * sizes).sum() / sizes.sum()),
            "n_pairs": int(sizes.sum()),
            "subsets": per,
        }
    scores = {COLUMN_NAMES[t]: out[t]["spearman_all"] for t in tasks}
    return {"tasks": out, "scores": scores, "avg": float(np.mean(list(scores.values()))),
            "n_sentences": len(index), "pairs": pairs}


def predict_subset(encode: Encoder, subset: Subset) -> np.ndarray:
    """Cosine similarity of every pair of ``subset`` (unique sentences encoded once)."""
    emb, index = _encode_unique(encode, [*subset.sent1, *subset.sent2])
    return _cosines(emb, index, subset)


def spearman_on_subset(encode: Encoder, subset: Subset) -> float:
    """Cosine Spearman x100 on one subset (the STS-B dev metric), encoding its unique
    sentences once."""
    return _corr(predict_subset(encode, subset), subset.gold)[0]
