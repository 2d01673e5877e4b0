"""SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC) with scikit-learn.

``root`` is always the SentEval ``downstream/`` directory (the one holding ``MR/``, ``CR/``,
``SUBJ/``, ``MPQA/``, ``SST/binary/``, ``TREC/`` and ``MRPC/``). Every task trains a logistic
regression on *frozen* sentence embeddings, exactly as SentEval's ``usepytorch=False`` path
(``senteval/tools/validation.py``) does it:

- **MR, CR, SUBJ, MPQA** (``InnerKFoldClassifier``): outer ``StratifiedKFold(k, shuffle=True,
  random_state=seed)``; on each outer training part the L2 strength is chosen from
  ``C in [2**-2 .. 2**3]`` by an inner ``StratifiedKFold`` with the same ``k`` and seed; the
  model refitted with that C on the outer training part is scored on the held-out fold. The
  reported accuracy is the mean over the outer folds.
- **SST-2** (``SplitClassifier``): C from ``[2**-2 .. 2**3]`` chosen on the dev split, accuracy
  of that model on the test split.
- **TREC, MRPC** (``KFoldClassifier``): C from ``[2**-1 .. 2**5]`` (SentEval's grid for this
  classifier is *not* the one above) chosen by ``StratifiedKFold(k)`` cross-validation on the
  train split, then one model fitted on all of train with that C, accuracy on the standard test
  split (MRPC also reports F1 of the positive class).

As in SentEval, features are *not* standardised or normalised; the mean fold score of every C is
rounded to 2 decimals before the arg-max (first best on ties); per-fold and test accuracies are
rounded to 2 decimals and the binary tasks report the rounded mean of the rounded fold scores.
Samples are put in SentEval's order before the folds are drawn (SentEval sorts each set by
(number of tokens, label), MRPC by (tokens of A, tokens of B, label), to reduce padding, and the
shuffled folds are drawn on that order), so the folds are SentEval's folds.

MRPC features: SentEval's ``mrpc.py`` (also the copy shipped with SimCSE, which every paper
here evaluates with) builds ``[|u - v|; u * v]``; that is the default (``mrpc_features=
"senteval"``). ``mrpc_features="full"`` gives ``[u; v; |u - v|; u * v]`` (InferSent/SNLI style).

Modes (SimCSE's ``evaluation.py``): ``"test"`` uses ``kfold=10`` and ``"fast"`` (SimCSE's
``fasttest``/``dev``) ``kfold=5``. SentEval's other settings of those modes (Adam vs RMSprop,
batch size 64/128, tenacity 5/3, epoch size 4/2) belong to its PyTorch classifier
(``usepytorch=True``, the one SimCSE's script turns on, with the grid ``l2reg in 1e-5..1e-2``);
they have no meaning for scikit-learn's LogisticRegression and are not used here. So our numbers
are SentEval's sklearn-path numbers, not the PyTorch-path numbers the papers print: compare with
a tolerance, not digit for digit.
The solver is L-BFGS (scikit-learn's default; SentEval's 2018 scikit-learn defaulted to
liblinear one-vs-rest, whose optimum is the same up to the intercept being penalised), multinomial
for TREC, with ``max_iter`` raised so that it converges on raw BERT-size features; fits that still
stop early are counted in each task's ``not_converged``.

Sentences are what SentEval passes to the batcher, re-joined on single spaces (SimCSE's batcher
does ``' '.join(tokens)``):

- MR/CR/SUBJ/MPQA: the file decoded as **latin-1**, ``str.splitlines()``, each line
  ``str.split()``. Blank lines are *kept* (SentEval keeps them: CR has 4 and MPQA 3, including
  the empty last line of files that end in two newlines) and become the empty sentence ``""``
  with the file's label. Labels: MR/CR/MPQA ``pos`` = 1, ``neg`` = 0; SUBJ ``objective`` = 1,
  ``subjective`` = 0 (SentEval passes the objective file as its "pos").
- SST-2 (``SST/binary/sentiment-{train,dev,test}``): UTF-8, each line ``strip()``, split on TAB,
  sentence = field 0 split on whitespace, label = ``int(field 1)``.
- TREC: **latin-1** (``train_5500.label`` is not valid UTF-8: one byte 0xF0 reads as "ð"); the
  coarse label is the text before the first ``:``; the fine label is the first word after it and
  is dropped; the question is the rest, split on whitespace. Labels ABBR=0, DESC=1, ENTY=2,
  HUM=3, LOC=4, NUM=5.
- MRPC: UTF-8, first line (the header) skipped, each line ``strip()``, split on TAB: label
  field 0, sentences fields 3 and 4, split on whitespace.

Any missing file, or a line SentEval would choke on, raises :class:`DataError` naming the file
(and line) and the fix.
"""

from __future__ import annotations

import io
import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from cselab.errors import ConfigError, DataError

log = logging.getLogger(__name__)

Encoder = Callable[[list[str]], np.ndarray]

#: Task names, in the order the papers print their transfer table.
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]
BINARY_TASKS = ("MR", "CR", "SUBJ", "MPQA")
#: SentEval's two parameter sets; only ``kfold`` applies to a scikit-learn classifier.
MODES = {"test": {"kfold": 10}, "fast": {"kfold": 5}}
#: C grid of SentEval's InnerKFoldClassifier (MR/CR/SUBJ/MPQA) and SplitClassifier (SST-2).
C_GRID = [2.0 ** t for t in range(-2, 4, 1)]
#: C grid of SentEval's KFoldClassifier (TREC, MRPC).
C_GRID_KFOLD = [2.0 ** t for t in range(-1, 6, 1)]
#: (folder, file labelled 1, file labelled 0) as SentEval's binary.py passes them.
BINARY_FILES = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
TREC_LABELS = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
SST_SPLITS = ("train", "dev", "test")
MRPC_FEATURES = ("senteval", "full")
#: L-BFGS iteration cap: converges on MiniLM/BERT-base features at C <= 32 (checked).
MAX_ITER = 3000
#: Feature dtype given to the classifier. float32 is what SentEval's batcher hands over; with
#: it scikit-learn's L-BFGS runs in float32, 2-3x faster than float64 (memory bound here) at
#: the same accuracies.
FEATURE_DTYPE = np.float32

_FIX = ("re-run the SentEval download rule, or point the config at a complete SentEval "
        "`downstream/` directory (with MR/, CR/, SUBJ/, MPQA/, SST/binary/, TREC/ and MRPC/)")


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

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


def load_task(root: str | Path, task: str):
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


def senteval_order(sentences: Sequence[str], labels: Sequence[int]) -> np.ndarray:
    """Permutation SentEval applies before drawing folds: stable sort by (tokens, label)."""
    return np.array(sorted(range(len(labels)), key=lambda i: (len(sentences[i].split()), int(labels[i]))),
                    dtype=np.int64)


def senteval_pair_order(sent1: Sequence[str], sent2: Sequence[str], labels: Sequence[int]) -> np.ndarray:
    """MRPC's order: stable sort by (tokens of A, tokens of B, label)."""
    return np.array(sorted(range(len(labels)), key=lambda i: (len(sent1[i].split()), len(sent2[i].split()),
                                                               int(labels[i]))), dtype=np.int64)


def mrpc_features(u: np.ndarray, v: np.ndarray, kind: str = "senteval") -> np.ndarray:
    """Pair features: ``"senteval"`` = ``[|u-v|; u*v]`` (SentEval's mrpc.py), ``"full"`` =
    ``[u; v; |u-v|; u*v]``."""
    if kind == "senteval":
        return np.concatenate([np.abs(u - v), u * v], axis=1)
    if kind == "full":
        return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)
    raise ConfigError(f"unknown MRPC feature set {kind!r}; choose from {list(MRPC_FEATURES)}")


# --------------------------------------------------------------------------------------------
# Classifier protocol
# --------------------------------------------------------------------------------------------

def default_n_jobs() -> int:
    """Parallel fits: one process per available core, at most 8 (the fits are independent and
    single-threaded; they are memory-bandwidth bound, so more processes gain little)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def stratified_folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """SentEval's ``StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)`` splits."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(y)
    _, counts = np.unique(y, return_counts=True)
    if len(counts) < 2:
        raise DataError(f"only one class in {len(y)} training samples: the task's files are truncated "
                        f"or corrupt; {_FIX}")
    if counts.min() < k:
        # StratifiedKFold only warns; a class with fewer members than folds leaves folds without it.
        log.warning("a class has only %d member(s), fewer than the %d folds", counts.min(), k)
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The least populated class", category=UserWarning)
        return [(tr, te) for tr, te in skf.split(np.zeros(len(y)), y)]


def _new_clf(C: float, seed: int, max_iter: int):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, solver="lbfgs", max_iter=max_iter, random_state=seed)


def _fit(X: np.ndarray, y: np.ndarray, C: float, seed: int, max_iter: int):
    """Fit one model; return (model, converged)."""
    from sklearn.exceptions import ConvergenceWarning

    clf = _new_clf(C, seed, max_iter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(X, y)
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return clf, converged


def _fit_score(X: np.ndarray, y: np.ndarray, train_idx: np.ndarray, eval_idx: np.ndarray,
               C: float, seed: int, max_iter: int) -> tuple[float, bool]:
    """Accuracy (fraction) on ``eval_idx`` of a model fitted on ``train_idx``, and convergence."""
    clf, converged = _fit(X[train_idx], y[train_idx], C, seed, max_iter)
    return float(clf.score(X[eval_idx], y[eval_idx])), converged


def _fit_score_splits(X: np.ndarray, y: np.ndarray, train_idx: np.ndarray, eval_idx: tuple,
                      C: float, seed: int, max_iter: int) -> tuple[list[float], bool]:
    """Like :func:`_fit_score` with several evaluation index sets: one fit, a score for each."""
    clf, converged = _fit(X[train_idx], y[train_idx], C, seed, max_iter)
    return [float(clf.score(X[ix], y[ix])) for ix in eval_idx], converged


def _run(jobs: list[tuple], X: np.ndarray, y: np.ndarray, seed: int, max_iter: int,
         n_jobs: int, fn: Callable = _fit_score) -> list[tuple]:
    """Run ``(train_idx, eval_idx, C)`` fits, in ``n_jobs`` processes when ``n_jobs > 1``.

    Every fit runs with single-threaded BLAS/OpenMP, so results do not depend on ``n_jobs``
    (and on small machines a 2-thread BLAS matrix-vector product is slower than one thread).
    """
    from threadpoolctl import threadpool_limits

    if n_jobs <= 1 or len(jobs) <= 1:
        with threadpool_limits(limits=1):
            return [fn(X, y, tr, ev, C, seed, max_iter) for tr, ev, C in jobs]
    from joblib import Parallel, delayed, parallel_config

    # loky worker processes; X is memory-mapped once per call, not copied per job.
    with parallel_config(backend="loky", inner_max_num_threads=1):
        return Parallel(n_jobs=n_jobs)(
            delayed(fn)(X, y, tr, ev, C, seed, max_iter) for tr, ev, C in jobs)


def _select(grid: Sequence[float], fold_scores: np.ndarray) -> tuple[int, list[float]]:
    """SentEval's choice: mean over folds x100 rounded to 2 decimals, first arg-max."""
    means = [round(100 * float(np.mean(s)), 2) for s in fold_scores]
    return int(np.argmax(means)), means


def inner_kfold_cv(X: np.ndarray, y: np.ndarray, kfold: int = 10, seed: int = 1111,
                   grid: Sequence[float] = C_GRID, max_iter: int = MAX_ITER,
                   n_jobs: int | None = None) -> dict:
    """SentEval's InnerKFoldClassifier (MR/CR/SUBJ/MPQA): nested k-fold cross-validation.

    Returns ``{"acc": mean outer test accuracy (%), "dev_acc": mean best inner score, "C": chosen C
    per outer fold, "fold_acc": per-fold accuracy, "kfold", "not_converged": fits that hit
    max_iter}``. ``X``/``y`` must already be in SentEval's order for SentEval's folds.
    """
    X, y = np.asarray(X, dtype=FEATURE_DTYPE), np.asarray(y)
    n_jobs = default_n_jobs() if n_jobs is None else n_jobs
    outer = stratified_folds(y, kfold, seed)
    inner = [stratified_folds(y[tr], kfold, seed) for tr, _ in outer]
    jobs = [(tr[itr], tr[ite], C) for (tr, _), folds in zip(outer, inner) for C in grid for itr, ite in folds]
    res = _run(jobs, X, y, seed, max_iter, n_jobs)
    scores = np.array([r[0] for r in res]).reshape(len(outer), len(grid), kfold)
    not_converged = sum(not r[1] for r in res)
    chosen, dev = [], []
    for f in range(len(outer)):
        best, means = _select(grid, scores[f])
        chosen.append(grid[best])
        dev.append(means[best])
    final = _run([(tr, te, C) for (tr, te), C in zip(outer, chosen)], X, y, seed, max_iter, n_jobs)
    not_converged += sum(not r[1] for r in final)
    fold_acc = [round(100 * r[0], 2) for r in final]
    return {"acc": round(float(np.mean(fold_acc)), 2), "dev_acc": round(float(np.mean(dev)), 2),
            "C": chosen, "fold_acc": fold_acc, "kfold": kfold, "not_converged": not_converged}


def kfold_then_test(X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
                    kfold: int = 10, seed: int = 1111, grid: Sequence[float] = C_GRID_KFOLD,
                    max_iter: int = MAX_ITER, n_jobs: int | None = None) -> dict:
    """SentEval's KFoldClassifier (TREC, MRPC): C by k-fold CV on train, accuracy on test.

    Returns ``{"acc", "dev_acc", "C", "cv": {C: mean CV accuracy}, "kfold", "not_converged",
    "y_pred"}`` (accuracies in percent).
    """
    X_train, y_train = np.asarray(X_train, dtype=FEATURE_DTYPE), np.asarray(y_train)
    X_test, y_test = np.asarray(X_test, dtype=FEATURE_DTYPE), np.asarray(y_test)
    n_jobs = default_n_jobs() if n_jobs is None else n_jobs
    folds = stratified_folds(y_train, kfold, seed)
    res = _run([(tr, te, C) for C in grid for tr, te in folds], X_train, y_train, seed, max_iter, n_jobs)
    best, means = _select(grid, np.array([r[0] for r in res]).reshape(len(grid), kfold))
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        clf, converged = _fit(X_train, y_train, grid[best], seed, max_iter)
        y_pred = clf.predict(X_test)
    return {"acc": round(100 * float(np.mean(y_pred == y_test)), 2), "dev_acc": means[best],
            "C": grid[best], "cv": dict(zip(grid, means)), "kfold": kfold,
            "not_converged": sum(not r[1] for r in res) + (not converged), "y_pred": y_pred}


def split_select(X_train: np.ndarray, y_train: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray,
                 X_test: np.ndarray, y_test: np.ndarray, seed: int = 1111,
                 grid: Sequence[float] = C_GRID, max_iter: int = MAX_ITER,
                 n_jobs: int | None = None) -> dict:
    """SentEval's SplitClassifier (SST-2): C chosen on dev, accuracy on test."""
    X_train, y_train = np.asarray(X_train, dtype=FEATURE_DTYPE), np.asarray(y_train)
    X_dev, X_test = np.asarray(X_dev, dtype=FEATURE_DTYPE), np.asarray(X_test, dtype=FEATURE_DTYPE)
    n_jobs = default_n_jobs() if n_jobs is None else n_jobs
    if len(np.unique(y_train)) < 2:
        raise DataError(f"only one class in {len(y_train)} training samples: the task's files are "
                        f"truncated or corrupt; {_FIX}")
    # One fit per C scored on dev and test: the refit SentEval does with the chosen C on the same
    # data is the same deterministic fit, so its test score is reused.
    X_all = np.concatenate([X_train, X_dev, X_test])
    y_all = np.concatenate([y_train, np.asarray(y_dev), np.asarray(y_test)])
    tr = np.arange(len(y_train))
    dv = np.arange(len(y_train), len(y_train) + len(y_dev))
    te = np.arange(len(y_train) + len(y_dev), len(y_all))
    res = _run([(tr, (dv, te), C) for C in grid], X_all, y_all, seed, max_iter, n_jobs,
               fn=_fit_score_splits)
    best, means = _select(grid, np.array([[r[0][0]] for r in res]))
    return {"acc": round(100 * res[best][0][1], 2), "dev_acc": means[best], "C": grid[best],
            "dev": dict(zip(grid, means)), "not_converged": sum(not r[1] for r in res)}


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------

def _encode_unique(encode: Encoder, sentences: Iterable[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Call ``encode`` exactly once on the unique sentences (first-seen order); raw embeddings
    (SentEval does not normalise them) as ``FEATURE_DTYPE`` and a sentence -> row index."""
    unique = list(dict.fromkeys(sentences))
    emb = np.asarray(encode(unique), dtype=FEATURE_DTYPE)
    if emb.ndim != 2 or emb.shape[0] != len(unique):
        raise ValueError(f"encode returned shape {emb.shape} for {len(unique)} sentences; "
                         "expected (n_sentences, dim)")
    if not np.all(np.isfinite(emb)):
        raise ValueError("encode returned NaN or infinite values")
    return emb, {s: i for i, s in enumerate(unique)}


def _rows(emb: np.ndarray, index: dict[str, int], sentences: Sequence[str]) -> np.ndarray:
    return emb[[index[s] for s in sentences]]


def _check_mode(mode: str) -> int:
    if mode not in MODES:
        raise ConfigError(f"unknown transfer mode {mode!r}; choose from {list(MODES)} "
                          f"(test: 10-fold, fast: 5-fold)")
    return MODES[mode]["kfold"]


def evaluate_task(task: str, data, emb: np.ndarray, index: dict[str, int], kfold: int, seed: int = 1111,
                  mrpc: str = "senteval", max_iter: int = MAX_ITER, n_jobs: int | None = None) -> dict:
    """Score one task's loaded ``data`` given the embeddings of its sentences."""
    if task in BINARY_TASKS:
        order = senteval_order(data.sentences, data.labels)
        X = _rows(emb, index, [data.sentences[i] for i in order])
        out = inner_kfold_cv(X, data.labels[order], kfold, seed, C_GRID, max_iter, n_jobs)
        out["n"] = len(data)
        return out
    if task == "SST2":
        parts = []
        for part in (data.train, data.dev, data.test):
            order = senteval_order(part.sentences, part.labels)
            parts += [_rows(emb, index, [part.sentences[i] for i in order]), part.labels[order]]
        out = split_select(*parts, seed=seed, grid=C_GRID, max_iter=max_iter, n_jobs=n_jobs)
        out.update(n=len(data.test), n_train=len(data.train), n_dev=len(data.dev))
        return out
    if task == "TREC":
        parts = []
        for part in (data.train, data.test):
            order = senteval_order(part.sentences, part.labels)
            parts += [_rows(emb, index, [part.sentences[i] for i in order]), part.labels[order]]
        out = kfold_then_test(*parts, kfold=kfold, seed=seed, grid=C_GRID_KFOLD, max_iter=max_iter,
                              n_jobs=n_jobs)
        out.pop("y_pred")
        out.update(n=len(data.test), n_train=len(data.train))
        return out
    if task == "MRPC":
        from sklearn.metrics import f1_score

        parts = []
        for part in (data.train, data.test):
            order = senteval_pair_order(part.sent1, part.sent2, part.labels)
            u = _rows(emb, index, [part.sent1[i] for i in order])
            v = _rows(emb, index, [part.sent2[i] for i in order])
            parts += [mrpc_features(u, v, mrpc), part.labels[order]]
        out = kfold_then_test(*parts, kfold=kfold, seed=seed, grid=C_GRID_KFOLD, max_iter=max_iter,
                              n_jobs=n_jobs)
        out["f1"] = round(100 * float(f1_score(parts[3], out.pop("y_pred"))), 2)
        out.update(n=len(data.test), n_train=len(data.train), features=mrpc)
        return out
    raise ConfigError(f"unknown transfer task {task!r}; choose from {TRANSFER_TASKS}")


def evaluate_transfer(encode: Encoder, root: str | Path, tasks: Sequence[str] = TRANSFER_TASKS,
                      mode: str = "test", seed: int = 1111, mrpc_features: str = "senteval",
                      max_iter: int = MAX_ITER, n_jobs: int | None = None) -> dict:
    """Score ``encode`` (list[str] -> (n, dim) array) on the transfer tasks.

    All unique sentences of the requested tasks are encoded with one ``encode`` call. ``mode``
    "test" = 10-fold, "fast" = 5-fold (see the module docstring for what else the modes mean in
    SentEval and why it does not apply). Returns ``{"tasks": {task: {"acc", "n", "C", "dev_acc",
    ... , MRPC "f1"}}, "scores": {task: acc}, "avg": mean acc, "mode", "kfold", "seed",
    "n_sentences", "mrpc_features", "seconds": {"encode": s, "classify": {task: s}}}``
    (accuracies in percent). ``C`` is the chosen C (binary tasks: one per outer fold).
    """
    tasks = list(tasks)
    if not tasks:
        raise ConfigError(f"no transfer tasks requested; choose from {TRANSFER_TASKS}")
    unknown = [t for t in tasks if t not in TRANSFER_TASKS]
    if unknown:
        raise ConfigError(f"unknown transfer task {unknown[0]!r}; choose from {TRANSFER_TASKS}")
    kfold = _check_mode(mode)
    if mrpc_features not in MRPC_FEATURES:
        raise ConfigError(f"unknown MRPC feature set {mrpc_features!r}; choose from {list(MRPC_FEATURES)}")
    data = {task: load_task(root, task) for task in tasks}
    t0 = time.perf_counter()
    emb, index = _encode_unique(encode, (s for d in data.values() for s in task_sentences(d)))
    seconds = {"encode": time.perf_counter() - t0, "classify": {}}
    out = {}
    for task in tasks:
        t0 = time.perf_counter()
        out[task] = evaluate_task(task, data[task], emb, index, kfold, seed, mrpc_features, max_iter, n_jobs)
        seconds["classify"][task] = time.perf_counter() - t0
        if out[task]["not_converged"]:
            log.warning("%s: %d logistic-regression fit(s) stopped at max_iter=%d before converging",
                        task, out[task]["not_converged"], max_iter)
        log.info("%s: acc %.2f (C %s)", task, out[task]["acc"], out[task]["C"])
    scores = {t: out[t]["acc"] for t in tasks}
    return {"tasks": out, "scores": scores, "avg": float(np.mean(list(scores.values()))), "mode": mode,
            "kfold": kfold, "seed": seed, "n_sentences": len(index), "mrpc_features": mrpc_features,
            "seconds": seconds}
