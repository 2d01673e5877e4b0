"""SentEval's task files read exactly as SentEval (Conneau & Kiela, 2018) and SimCSE's batcher
read them: STS pairs with gold scores, transfer-task sentences with labels.

Sentences are the file text re-joined on single spaces. STS files are strict UTF-8; MR/CR/
SUBJ/MPQA and TREC are latin-1 as SentEval opens them, blank lines of the binary tasks are kept
(SentEval keeps them). Any missing file, or a line SentEval would choke on, raises
:class:`DataError` naming the file (and line) and the fix.
"""

from __future__ import annotations

import dataclasses
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from cselab.errors import ConfigError, DataError

#: STS task names, in the order papers print their STS table.
STS_TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
#: SentEval's subsets per STS year (STS13 has no SMT input: licence).
STS_SUBSETS = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
#: Transfer tasks, in the order the papers print their transfer table.
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]

_FIX = ("re-run the SentEval download rule, or point the config at a complete SentEval "
        "`downstream/` directory (with STS/, SICK/, MR/, CR/, SUBJ/, MPQA/, SST/binary/, TREC/ and MRPC/)")

STSB_SPLITS = ("train", "dev", "test")
SICK_SPLITS = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


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
        score = float(value)
    except ValueError:
        raise DataError(f"{path}, line {lineno}: score {value!r} is not a number; the file is "
                        f"corrupt: {_FIX}") from None
    if not math.isfinite(score):  # float() reads "nan" and "inf": every score would then be NaN
        raise DataError(f"{path}, line {lineno}: score {value!r} is not a finite number; the file is "
                        f"corrupt: {_FIX}")
    return score


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


def load_sts_task(root: str | Path, task: str) -> list[Subset]:
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


BINARY_FILES = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
TREC_LABELS = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
SST_SPLITS = ("train", "dev", "test")


@dataclass
class LabelledSet:
    """Sentences (as SentEval feeds them to the batcher) and their integer labels."""

    sentences: list[str]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class PairSet:
    """Sentence pairs and their integer labels (MRPC: 1 = paraphrase)."""

    sent1: list[str]
    sent2: list[str]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class SST2Data:
    train: LabelledSet
    dev: LabelledSet
    test: LabelledSet


@dataclass
class TRECData:
    train: LabelledSet
    test: LabelledSet


@dataclass
class MRPCData:
    train: PairSet
    test: PairSet


def _join(tokens: Iterable[str]) -> str:
    return " ".join(tokens)


def _read_text(path: Path, encoding: str) -> str:
    if not path.is_file():
        raise DataError(f"missing SentEval file {path}: {_FIX}")
    data = path.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not valid {encoding} (byte {e.start}): the file is corrupt; "
                        f"{_FIX}") from e
    if not text.strip():
        raise DataError(f"SentEval file {path} is empty: {_FIX}")
    return text


def _iter_lines(text: str) -> Iterable[tuple[int, str]]:
    """(1-based line number, line) as ``for line in io.open(...)`` yields them (universal
    newlines, line ending kept)."""
    return enumerate(io.StringIO(text, newline=None), start=1)


def _read_binary_file(path: Path) -> list[str]:
    """SentEval's ``BinaryClassifierEval.loadFile``: latin-1, ``splitlines()``, ``split()``."""
    return [_join(line.split()) for line in _read_text(path, "latin-1").splitlines()]


def load_binary(root: str | Path, task: str) -> LabelledSet:
    """MR, CR, SUBJ or MPQA in file order (the label-1 file first; see module docstring)."""
    if task not in BINARY_FILES:
        raise ConfigError(f"unknown binary transfer task {task!r}; choose from {list(BINARY_FILES)}")
    folder, pos_name, neg_name = BINARY_FILES[task]
    pos = _read_binary_file(Path(root) / folder / pos_name)
    neg = _read_binary_file(Path(root) / folder / neg_name)
    labels = np.array([1] * len(pos) + [0] * len(neg), dtype=np.int64)
    return LabelledSet(pos + neg, labels)


def _load_sst_file(path: Path) -> LabelledSet:
    sentences, labels = [], []
    for lineno, line in _iter_lines(_read_text(path, "utf-8")):
        fields = line.strip().split("\t")
        if len(fields) < 2:
            raise DataError(f"{path}, line {lineno}: expected 'sentence<TAB>label', found no tab "
                            f"(a blank or truncated line); the file is corrupt: {_FIX}")
        if fields[1].strip() not in ("0", "1"):
            raise DataError(f"{path}, line {lineno}: label {fields[1]!r} is not 0 or 1; the file is "
                            f"not SentEval's binary SST: {_FIX}")
        sentences.append(_join(fields[0].split()))
        labels.append(int(fields[1]))
    return LabelledSet(sentences, np.array(labels, dtype=np.int64))


def load_sst2(root: str | Path) -> SST2Data:
    """SST-2 (``SST/binary/sentiment-{train,dev,test}``), in file order."""
    folder = Path(root) / "SST" / "binary"
    return SST2Data(*(_load_sst_file(folder / f"sentiment-{split}") for split in SST_SPLITS))


def _load_trec_file(path: Path) -> LabelledSet:
    sentences, labels = [], []
    for lineno, line in _iter_lines(_read_text(path, "latin-1")):
        target, colon, rest = line.strip().partition(":")
        if not colon:
            raise DataError(f"{path}, line {lineno}: expected 'COARSE:fine question', found no ':'; "
                            f"the file is corrupt: {_FIX}")
        if target not in TREC_LABELS:
            raise DataError(f"{path}, line {lineno}: unknown coarse label {target!r} (expected one of "
                            f"{', '.join(TREC_LABELS)}); the file is corrupt: {_FIX}")
        parts = rest.split(" ", 1)
        if len(parts) < 2:
            raise DataError(f"{path}, line {lineno}: no question after the label {target}:{rest!r}; "
                            f"the file is corrupt: {_FIX}")
        sentences.append(_join(parts[1].split()))
        labels.append(TREC_LABELS[target])
    return LabelledSet(sentences, np.array(labels, dtype=np.int64))


def load_trec(root: str | Path) -> TRECData:
    """TREC: ``train_5500.label`` (train) and ``TREC_10.label`` (test), coarse labels."""
    folder = Path(root) / "TREC"
    return TRECData(_load_trec_file(folder / "train_5500.label"), _load_trec_file(folder / "TREC_10.label"))


def _load_mrpc_file(path: Path) -> PairSet:
    lines = list(_iter_lines(_read_text(path, "utf-8")))
    header = lines[0][1].lstrip("\ufeff").strip().split("\t")
    if len(header) < 5 or header[0] != "Quality":
        raise DataError(f"{path}, line 1: expected the MRPC header 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>"
                        f"#1 String<TAB>#2 String'; the file is not the SentEval release: {_FIX}")
    s1, s2, labels = [], [], []
    for lineno, line in lines[1:]:
        fields = line.strip().split("\t")
        if len(fields) < 5:
            raise DataError(f"{path}, line {lineno}: expected 5 tab-separated columns, found "
                            f"{len(fields)}; the file is corrupt: {_FIX}")
        if fields[0] not in ("0", "1"):
            raise DataError(f"{path}, line {lineno}: label {fields[0]!r} is not 0 or 1; the file is "
                            f"corrupt: {_FIX}")
        s1.append(_join(fields[3].split()))
        s2.append(_join(fields[4].split()))
        labels.append(int(fields[0]))
    return PairSet(s1, s2, np.array(labels, dtype=np.int64))


def load_mrpc(root: str | Path) -> MRPCData:
    """MRPC ``msr_paraphrase_{train,test}.txt`` (4076 / 1725 pairs)."""
    folder = Path(root) / "MRPC"
    return MRPCData(_load_mrpc_file(folder / "msr_paraphrase_train.txt"),
                    _load_mrpc_file(folder / "msr_paraphrase_test.txt"))


def load_transfer_task(root: str | Path, task: str):
    """The data of one transfer task (its loader's dataclass)."""
    if task in BINARY_FILES:
        return load_binary(root, task)
    if task == "SST2":
        return load_sst2(root)
    if task == "TREC":
        return load_trec(root)
    if task == "MRPC":
        return load_mrpc(root)
    raise ConfigError(f"unknown transfer task {task!r}; choose from {TRANSFER_TASKS}")


def cap_items(data, max_items: int | None, seed: int = 1111):
    """``data`` (a loaded transfer task) with at most ``max_items`` items in each split, drawn
    without replacement by a ``seed``-ed generator and kept in file order: a bound on a smoke-scale
    evaluation's cost (``evaluation.transfer.max_items``). ``None`` keeps every item."""
    if max_items is None:
        return data
    if not isinstance(data, (LabelledSet, PairSet)):
        return dataclasses.replace(data, **{f.name: cap_items(getattr(data, f.name), max_items, seed)
                                            for f in dataclasses.fields(data)})
    if len(data) <= max_items:
        return data
    keep = np.sort(np.random.default_rng(seed).choice(len(data), max_items, replace=False))
    if isinstance(data, PairSet):
        return PairSet([data.sent1[i] for i in keep], [data.sent2[i] for i in keep], data.labels[keep])
    return LabelledSet([data.sentences[i] for i in keep], data.labels[keep])


def task_sentences(data) -> list[str]:
    """Every sentence a task's data will ask to be encoded (with repeats)."""
    if isinstance(data, LabelledSet):
        return list(data.sentences)
    if isinstance(data, SST2Data):
        return data.train.sentences + data.dev.sentences + data.test.sentences
    if isinstance(data, TRECData):
        return data.train.sentences + data.test.sentences
    if isinstance(data, MRPCData):
        return data.train.sent1 + data.train.sent2 + data.test.sent1 + data.test.sent2
    raise TypeError(f"not transfer-task data: {type(data).__name__}")


