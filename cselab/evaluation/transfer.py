"""SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC; Conneau & Kiela, 2018): a
logistic regression on frozen sentence embeddings, with SentEval's protocols and either of its
classifiers: ``senteval`` (its PyTorch logistic regression, :class:`SentEvalLogReg`, which the
papers ran through SimCSE's evaluation script; the default) or ``sklearn`` (its
``usepytorch=False`` path, :class:`SklearnLogReg`).

Protocols: MR/CR/SUBJ/MPQA nested stratified k-fold (:func:`inner_kfold_cv`), SST-2 strength on
dev (:func:`split_select`), TREC/MRPC k-fold on train then test (:func:`kfold_then_test`). Items
are put in SentEval's order before the folds are drawn, so the folds are SentEval's. Results carry
per-item predictions (``pairs``) for the paired bootstrap.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from cselab.data.senteval import TRANSFER_TASKS
from cselab.data.tasks import cap_items, load_transfer_task, task_sentences
from cselab.errors import ConfigError, DataError
from cselab.evaluation.encoding import Embeddings, encode_unique

log = logging.getLogger(__name__)

Encoder = Callable[[list[str]], np.ndarray]

BINARY_TASKS = ("MR", "CR", "SUBJ", "MPQA")
CLASSIFIERS = ("senteval", "sklearn")
MRPC_FEATURES = ("senteval", "full")
#: SentEval's two parameter sets as SimCSE's evaluation script sets them ("test"; "fasttest"/"dev").
MODES = {"test": {"kfold": 10, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4},
         "fast": {"kfold": 5, "optim": "rmsprop", "batch_size": 128, "tenacity": 3, "epoch_size": 2}}
#: SentEval's L2 grid for its PyTorch classifier (every protocol).
L2_GRID = [1e-5, 1e-4, 1e-3, 1e-2]
#: scikit-learn C grid of SentEval's InnerKFoldClassifier (MR/CR/SUBJ/MPQA) and SplitClassifier (SST-2).
C_GRID = [2.0 ** t for t in range(-2, 4, 1)]
#: scikit-learn C grid of SentEval's KFoldClassifier (TREC, MRPC).
C_GRID_KFOLD = [2.0 ** t for t in range(-1, 6, 1)]
#: L-BFGS iteration cap: converges on MiniLM/BERT-base features at C <= 32 (checked).
MAX_ITER = 3000
#: Feature dtype: float32 is what SentEval's batcher hands over.
FEATURE_DTYPE = np.float32

_FIX = ("re-run the SentEval download rule, or point the config at a complete SentEval "
        "`downstream/` directory (with MR/, CR/, SUBJ/, MPQA/, SST/binary/, TREC/ and MRPC/)")


def senteval_order(sentences: Sequence[str], labels: Sequence[int]) -> np.ndarray:
    """Permutation SentEval applies before drawing folds: stable sort by (tokens, label)."""
    return np.array(sorted(range(len(labels)), key=lambda i: (len(sentences[i].split()), int(labels[i]))),
                    dtype=np.int64)


def senteval_pair_order(sent1: Sequence[str], sent2: Sequence[str], labels: Sequence[int]) -> np.ndarray:
    """MRPC's order: stable sort by (tokens of A, tokens of B, label)."""
    return np.array(sorted(range(len(labels)), key=lambda i: (len(sent1[i].split()), len(sent2[i].split()),
                                                               int(labels[i]))), dtype=np.int64)


def mrpc_features(u: np.ndarray, v: np.ndarray, kind: str = "senteval") -> np.ndarray:
    """Pair features: ``"senteval"`` = ``[|u-v|; u*v]`` (SentEval's MRPC task), ``"full"`` =
    ``[u; v; |u-v|; u*v]`` (InferSent-style)."""
    if kind == "senteval":
        return np.concatenate([np.abs(u - v), u * v], axis=1)
    if kind == "full":
        return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)
    raise ConfigError(f"unknown MRPC feature set {kind!r}; choose from {list(MRPC_FEATURES)}")


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


# --------------------------------------------------------------------------------------------
# Classifiers: fit one model per L2 strength on ``train``, return predictions on ``evals``
# --------------------------------------------------------------------------------------------

@dataclass
class SentEvalLogReg:
    """SentEval's PyTorch classifier with ``nhid=0`` (its ``MLP`` class), on the CPU.

    One ``Linear(d, n_classes)`` (PyTorch's default init after seeding numpy and torch with
    ``seed``), mean cross-entropy, ``optim`` with torch's defaults (Adam lr 1e-3, RMSprop lr 1e-2)
    and the L2 strength as coupled weight decay on weights and biases. Training runs in calls
    of ``epoch_size`` passes (each a fresh numpy permutation, mini-batches of ``batch_size``),
    scores the dev part after each call, keeps the best model, and stops at the
    ``tenacity + 1``-th non-improving score (SentEval's counter is never reset) or past
    ``max_epoch`` passes. Without a dev part, a random 5% of the training part is held out.

    All strengths of one fit run together as one batched model: SentEval reseeds for each, so
    they share the initial weights and every permutation, and training them side by side is
    the same computation as training them one after another.
    """

    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    seed: int = 1111
    validation_split: float = 0.05

    def grid(self, protocol: str) -> list[float]:
        return list(L2_GRID)

    def fit_predict(self, X: np.ndarray, y: np.ndarray, regs: Sequence[float], train: np.ndarray,
                    dev: np.ndarray | None, evals: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Train one model per strength on ``train`` (early stopping on ``dev``, or on a 5%
        split of ``train``); return (dev accuracies [R], predictions [R, len(e)] per ``evals``)."""
        import torch

        np.random.seed(self.seed)
        torch.manual_seed(self.seed)
        n_classes = int(y.max()) + 1
        init = torch.nn.Linear(X.shape[1], n_classes)
        if dev is None:
            perm = np.random.permutation(len(train))
            n_dev = int(self.validation_split * len(train))
            dev, train = train[perm[:n_dev]], train[perm[n_dev:]]
        Xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
        yt = torch.from_numpy(np.asarray(y, dtype=np.int64))
        R = len(regs)
        with torch.no_grad():
            W = init.weight.detach().expand(R, -1, -1).clone()   # [R, C, d]
            b = init.bias.detach().expand(R, -1).clone()         # [R, C]
        wd = torch.tensor(regs, dtype=torch.float32)
        state = [torch.zeros_like(W), torch.zeros_like(b), torch.zeros_like(W), torch.zeros_like(b)]
        steps = 0
        best_acc = np.full(R, -1.0)
        best_W, best_b = W.clone(), b.clone()
        stopped, count = np.zeros(R, dtype=bool), np.zeros(R, dtype=int)
        Xtr, ytr, Xdv, ydv = Xt[train], yt[train], Xt[dev], yt[dev]
        nepoch = 0
        while not stopped.all() and nepoch <= self.max_epoch:
            for _ in range(self.epoch_size):
                perm = torch.from_numpy(np.random.permutation(len(train)))
                for start in range(0, len(train), self.batch_size):
                    idx = perm[start:start + self.batch_size]
                    steps += 1
                    self._step(W, b, wd, state, steps, Xtr[idx], ytr[idx])
            nepoch += self.epoch_size
            acc = (self._logits(W, b, Xdv).argmax(-1) == ydv).float().mean(-1).numpy()
            for r in range(R):
                if stopped[r]:
                    continue
                if acc[r] > best_acc[r]:
                    best_acc[r] = acc[r]
                    best_W[r], best_b[r] = W[r], b[r]
                else:
                    stopped[r] = count[r] >= self.tenacity
                    count[r] += 1
        preds = [self._logits(best_W, best_b, Xt[e]).argmax(-1).numpy() for e in evals]
        return best_acc, preds

    @staticmethod
    def _logits(W, b, X):
        return (X @ W.transpose(1, 2)) + b[:, None, :]  # [R, n, C]

    def _step(self, W, b, wd, state, t, Xb, yb) -> None:
        """One mini-batch for every strength: the gradient of the mean cross-entropy, then Adam or
        RMSprop with torch's defaults and L2 added to the gradient (as ``weight_decay`` does)."""
        import torch

        p = torch.softmax(self._logits(W, b, Xb), dim=-1)
        p[:, torch.arange(len(yb)), yb] -= 1
        p /= len(yb)
        gW = p.transpose(1, 2) @ Xb + wd[:, None, None] * W
        gb = p.sum(1) + wd[:, None] * b
        if self.optim == "adam":
            lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
            for param, grad, m, v in ((W, gW, state[0], state[2]), (b, gb, state[1], state[3])):
                m.mul_(b1).add_(grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                denom = (v.sqrt() / (1 - b2 ** t) ** 0.5).add_(eps)
                param.addcdiv_(m, denom, value=-lr / (1 - b1 ** t))
        elif self.optim == "rmsprop":
            lr, alpha, eps = 1e-2, 0.99, 1e-8
            for param, grad, sq in ((W, gW, state[2]), (b, gb, state[3])):
                sq.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                param.addcdiv_(grad, sq.sqrt().add_(eps), value=-lr)
        else:
            raise ConfigError(f"unknown SentEval optimizer {self.optim!r}; choose adam or rmsprop")


@dataclass
class SklearnLogReg:
    """scikit-learn's L-BFGS ``LogisticRegression`` (SentEval's ``usepytorch=False`` path; its
    2018 scikit-learn defaulted to liblinear one-vs-rest, whose optimum is the same up to the
    intercept being penalised), multinomial for TREC, ``max_iter`` raised so it converges on raw
    BERT-size features. Fits run in ``n_jobs`` processes, each single-threaded."""

    seed: int = 1111
    max_iter: int = MAX_ITER
    n_jobs: int | None = None

    def grid(self, protocol: str) -> list[float]:
        return list(C_GRID_KFOLD if protocol == "kfold" else C_GRID)

    def fit_predict(self, X, y, regs, train, dev, evals):
        jobs = [(train, C) for C in regs]
        evals = ([dev] if dev is not None else []) + list(evals)
        res = _run_sklearn(jobs, X, y, evals, self.seed, self.max_iter, self.n_jobs)
        self.not_converged = getattr(self, "not_converged", 0) + sum(not ok for _, ok in res)
        preds = [[p[i] for p, _ in res] for i in range(len(evals))]
        dev_acc = (np.array([np.mean(p == y[dev]) for p in preds[0]]) if dev is not None else None)
        return dev_acc, [np.stack(p) for p in preds[1 if dev is not None else 0:]]


def default_n_jobs() -> int:
    """Parallel fits: one process per thread the process may use (in a job, its rule's threads;
    :func:`cselab.io.thread_budget`), at most 8 (the fits are independent and single-threaded;
    they are memory-bandwidth bound, so more processes gain little)."""
    from cselab.io import thread_budget

    return min(thread_budget(), 8)


def _fit_sklearn(X, y, train, evals, C, seed, max_iter):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=C, solver="lbfgs", max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(X[train], y[train])
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return [clf.predict(X[e]) for e in evals], converged


def _run_sklearn(jobs, X, y, evals, seed, max_iter, n_jobs):
    """``(train_idx, C)`` fits, in ``n_jobs`` processes when ``n_jobs > 1``. Every fit runs with
    single-threaded BLAS/OpenMP, so results do not depend on ``n_jobs``."""
    from threadpoolctl import threadpool_limits

    n_jobs = default_n_jobs() if n_jobs is None else n_jobs
    if n_jobs <= 1 or len(jobs) <= 1:
        with threadpool_limits(limits=1):
            return [_fit_sklearn(X, y, tr, evals, C, seed, max_iter) for tr, C in jobs]
    from joblib import Parallel, delayed, parallel_config

    with parallel_config(backend="loky", inner_max_num_threads=1):  # X memory-mapped once per call
        return Parallel(n_jobs=n_jobs)(delayed(_fit_sklearn)(X, y, tr, evals, C, seed, max_iter) for tr, C in jobs)


def make_classifier(name: str, mode: str, seed: int = 1111, n_jobs: int | None = None):
    if name == "senteval":
        m = MODES[mode]
        return SentEvalLogReg(optim=m["optim"], batch_size=m["batch_size"], tenacity=m["tenacity"],
                              epoch_size=m["epoch_size"], seed=seed)
    if name == "sklearn":
        return SklearnLogReg(seed=seed, n_jobs=n_jobs)
    raise ConfigError(f"unknown transfer classifier {name!r}; choose from {list(CLASSIFIERS)}")


# --------------------------------------------------------------------------------------------
# Protocols
# --------------------------------------------------------------------------------------------

def _select(grid: Sequence[float], fold_scores: np.ndarray) -> tuple[int, list[float]]:
    """SentEval's choice: mean over folds x100 rounded to 2 decimals, first arg-max."""
    means = [round(100 * float(np.mean(s)), 2) for s in fold_scores]
    return int(np.argmax(means)), means


def _cv_scores(clf, X, y, folds, grid) -> np.ndarray:
    """[len(grid), len(folds)] accuracies: per fold, every strength trained on the fold's train part
    and scored on its held-out part (SentEval's PyTorch path also early-stops on that part)."""
    scores = []
    for tr, te in folds:
        if isinstance(clf, SentEvalLogReg):
            acc, _ = clf.fit_predict(X, y, grid, tr, te, [])
        else:
            _, (pred,) = clf.fit_predict(X, y, grid, tr, None, [te])
            acc = (pred == y[te]).mean(axis=1)
        scores.append(acc)
    return np.array(scores).T


def inner_kfold_cv(X: np.ndarray, y: np.ndarray, kfold: int = 10, seed: int = 1111, classifier=None) -> dict:
    """SentEval's InnerKFoldClassifier (MR/CR/SUBJ/MPQA): nested k-fold cross-validation.

    Outer ``StratifiedKFold(k, shuffle=True, random_state=seed)``; on each outer training part the
    L2 strength is chosen by an inner stratified k-fold (mean fold accuracy x100 rounded to 2
    decimals, first best on ties), and the final model of that strength is scored on the held-out
    part; the reported accuracy is the mean of the rounded fold accuracies.

    Returns ``{"acc": mean outer test accuracy (%), "dev_acc": mean best inner score, "reg": chosen
    strength per outer fold, "fold_acc", "kfold", "y_pred": held-out predictions of every item}``.
    ``X``/``y`` must already be in SentEval's order for SentEval's folds.
    """
    clf = classifier or SklearnLogReg(seed=seed)
    X, y = np.asarray(X, dtype=FEATURE_DTYPE), np.asarray(y)
    grid = clf.grid("inner")
    y_pred = np.zeros_like(y)
    chosen, dev, fold_acc = [], [], []
    for tr, te in stratified_folds(y, kfold, seed):
        inner = [(tr[a], tr[b]) for a, b in stratified_folds(y[tr], kfold, seed)]
        best, means = _select(grid, _cv_scores(clf, X, y, inner, grid))
        chosen.append(grid[best])
        dev.append(means[best])
        _, (pred,) = clf.fit_predict(X, y, [grid[best]], tr, None, [te])
        y_pred[te] = pred[0]
        fold_acc.append(round(100 * float(np.mean(pred[0] == y[te])), 2))
    return {"acc": round(float(np.mean(fold_acc)), 2), "dev_acc": round(float(np.mean(dev)), 2),
            "reg": chosen, "fold_acc": fold_acc, "kfold": kfold, "y_pred": y_pred}


def kfold_then_test(X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
                    kfold: int = 10, seed: int = 1111, classifier=None) -> dict:
    """SentEval's KFoldClassifier (TREC, MRPC): strength by k-fold CV on train, accuracy on test.

    Returns ``{"acc", "dev_acc", "reg", "cv": {reg: mean CV accuracy}, "kfold", "y_pred"}``.
    """
    clf = classifier or SklearnLogReg(seed=seed)
    X = np.concatenate([np.asarray(X_train, dtype=FEATURE_DTYPE), np.asarray(X_test, dtype=FEATURE_DTYPE)])
    y = np.concatenate([np.asarray(y_train), np.asarray(y_test)])
    train, test = np.arange(len(y_train)), np.arange(len(y_train), len(y))
    grid = clf.grid("kfold")
    best, means = _select(grid, _cv_scores(clf, X, y, stratified_folds(y[train], kfold, seed), grid))
    _, (pred,) = clf.fit_predict(X, y, [grid[best]], train, None, [test])
    return {"acc": round(100 * float(np.mean(pred[0] == y[test])), 2), "dev_acc": means[best],
            "reg": grid[best], "cv": dict(zip(grid, means)), "kfold": kfold, "y_pred": pred[0]}


def split_select(X_train: np.ndarray, y_train: np.ndarray, X_dev: np.ndarray, y_dev: np.ndarray,
                 X_test: np.ndarray, y_test: np.ndarray, seed: int = 1111, classifier=None) -> dict:
    """SentEval's SplitClassifier (SST-2): strength chosen on dev, accuracy on test.

    The refit SentEval does with the chosen strength on the same data is the same deterministic
    fit, so the search's own test predictions are used.
    """
    clf = classifier or SklearnLogReg(seed=seed)
    if len(np.unique(y_train)) < 2:
        raise DataError(f"only one class in {len(y_train)} training samples: the task's files are "
                        f"truncated or corrupt; {_FIX}")
    X = np.concatenate([np.asarray(a, dtype=FEATURE_DTYPE) for a in (X_train, X_dev, X_test)])
    y = np.concatenate([np.asarray(a) for a in (y_train, y_dev, y_test)])
    n_tr, n_dv = len(y_train), len(y_dev)
    train, dev, test = np.arange(n_tr), np.arange(n_tr, n_tr + n_dv), np.arange(n_tr + n_dv, len(y))
    grid = clf.grid("split")
    dev_acc, (pred,) = clf.fit_predict(X, y, grid, train, dev, [test])
    best, means = _select(grid, np.asarray(dev_acc)[:, None])
    return {"acc": round(100 * float(np.mean(pred[best] == y[test])), 2), "dev_acc": means[best],
            "reg": grid[best], "dev": dict(zip(grid, means)), "y_pred": pred[best]}


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------

def evaluate_task(task: str, data, embedded: Embeddings, kfold: int, seed: int = 1111,
                  mrpc: str = "senteval", classifier=None) -> dict:
    """Score one task's loaded ``data`` given the embeddings of its sentences; the result's
    ``gold``/``y_pred`` are the scored items' labels and predictions."""
    if task in BINARY_TASKS:
        order = senteval_order(data.sentences, data.labels)
        y = data.labels[order]
        out = inner_kfold_cv(embedded([data.sentences[i] for i in order]), y, kfold, seed, classifier)
        return {**out, "n": len(data), "gold": y}
    parts = []
    if task in ("SST2", "TREC"):
        splits = (data.train, data.dev, data.test) if task == "SST2" else (data.train, data.test)
        for part in splits:
            order = senteval_order(part.sentences, part.labels)
            parts += [embedded([part.sentences[i] for i in order]), part.labels[order]]
    elif task == "MRPC":
        for part in (data.train, data.test):
            order = senteval_pair_order(part.sent1, part.sent2, part.labels)
            u, v = embedded([part.sent1[i] for i in order]), embedded([part.sent2[i] for i in order])
            parts += [mrpc_features(u, v, mrpc), part.labels[order]]
    else:
        raise ConfigError(f"unknown transfer task {task!r}; choose from {TRANSFER_TASKS}")
    if task == "SST2":
        out = split_select(*parts, seed=seed, classifier=classifier)
        out.update(n_dev=len(data.dev))
    else:
        out = kfold_then_test(*parts, kfold=kfold, seed=seed, classifier=classifier)
    out.update(n=len(data.test), n_train=len(data.train), gold=parts[-1])
    if task == "MRPC":
        from sklearn.metrics import f1_score

        out.update(f1=round(100 * float(f1_score(parts[-1], out["y_pred"])), 2), features=mrpc)
    return out


def evaluate_transfer(encode: Encoder, root: str | Path, tasks: Sequence[str] = TRANSFER_TASKS,
                      mode: str = "test", seed: int = 1111, mrpc_features: str = "senteval",
                      classifier: str = "senteval", n_jobs: int | None = None,
                      max_items: int | None = None) -> dict:
    """Score ``encode`` (list[str] -> (n, dim) array) on the transfer tasks.

    All unique sentences of the requested tasks are encoded with one ``encode`` call. ``mode``
    "test" or "fast" (SentEval's parameter sets), ``classifier`` "senteval" or "sklearn";
    ``max_items`` bounds every split of every task (:func:`cap_items`; None: all items). Returns
    ``{"tasks": {task: {"acc", "n", "reg", "dev_acc", ..., MRPC "f1"}}, "scores": {task: acc},
    "avg", "mode", "classifier", "kfold", "seed", "n_sentences", "mrpc_features", "max_items", "seconds",
    "pairs": {task: (gold, pred)}}`` (accuracies in percent).
    """
    tasks = list(tasks)
    if not tasks:
        raise ConfigError(f"no transfer tasks requested; choose from {TRANSFER_TASKS}")
    unknown = [t for t in tasks if t not in TRANSFER_TASKS]
    if unknown:
        raise ConfigError(f"unknown transfer task {unknown[0]!r}; choose from {TRANSFER_TASKS}")
    if mode not in MODES:
        raise ConfigError(f"unknown transfer mode {mode!r}; choose from {list(MODES)} (test: 10-fold, fast: 5-fold)")
    if mrpc_features not in MRPC_FEATURES:
        raise ConfigError(f"unknown MRPC feature set {mrpc_features!r}; choose from {list(MRPC_FEATURES)}")
    clf = make_classifier(classifier, mode, seed, n_jobs)
    kfold = MODES[mode]["kfold"]
    data = {task: cap_items(load_transfer_task(root, task), max_items, seed) for task in tasks}
    t0 = time.perf_counter()
    embedded = encode_unique(encode, (s for d in data.values() for s in task_sentences(d)), dtype=FEATURE_DTYPE)
    seconds = {"encode": time.perf_counter() - t0, "classify": {}}
    out, pairs = {}, {}
    for task in tasks:
        t0 = time.perf_counter()
        res = evaluate_task(task, data[task], embedded, kfold, seed, mrpc_features, clf)
        pairs[task] = (res.pop("gold"), res.pop("y_pred"))
        out[task] = res
        seconds["classify"][task] = time.perf_counter() - t0
        log.info("%s: acc %.2f (reg %s, %.1fs)", task, res["acc"], res["reg"], seconds["classify"][task])
    if getattr(clf, "not_converged", 0):
        log.warning("%d logistic-regression fit(s) stopped at max_iter=%d before converging", clf.not_converged,
                    MAX_ITER)
    scores = {t: out[t]["acc"] for t in tasks}
    return {"tasks": out, "scores": scores, "avg": float(np.mean(list(scores.values()))), "mode": mode,
            "classifier": classifier, "kfold": kfold, "seed": seed, "n_sentences": len(embedded),
            "mrpc_features": mrpc_features, "max_items": max_items, "not_converged": getattr(clf, "not_converged", 0),
            "seconds": seconds, "pairs": pairs}


#: the protocol of the papers' transfer development numbers: SimCSE's and DiffCSE's ``--mode dev``,
#: SentEval's fast parameters, each task's development accuracy ("devacc")
DEV_MODE = "fast"
DEV_AVERAGE = "transfer avg (dev)"


def dev_scores(result: dict) -> dict[str, float]:
    """``{"<task> (dev)": dev accuracy, "transfer avg (dev)": their mean}`` from an
    :func:`evaluate_transfer` result (accuracies in percent): what DiffCSE's ablation tables
    report as "Avg. transfer" (the average of the 7 tasks' development sets)."""
    dev = {f"{task} (dev)": float(res["dev_acc"]) for task, res in result["tasks"].items()}
    return {**dev, DEV_AVERAGE: round(float(np.mean(list(dev.values()))), 2)}
