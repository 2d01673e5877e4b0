"""SentEval transfer tasks: loaders on trimmed copies of the real files, the protocols with both
classifiers on synthetic features, SentEval's PyTorch classifier against a direct port of its
training loop, MRPC features, and end-to-end runs with a counting encoder."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

import torch

from cselab.data import tasks as D
from cselab.errors import ConfigError, DataError
from cselab.evaluation import transfer as T
from tests.helpers import find_shared_data

TASK_FILES = {
    "MR": ["rt-polarity.pos", "rt-polarity.neg"],
    "CR": ["custrev.pos", "custrev.neg"],
    "SUBJ": ["subj.objective", "subj.subjective"],
    "MPQA": ["mpqa.pos", "mpqa.neg"],
    "SST/binary": ["sentiment-train", "sentiment-dev", "sentiment-test"],
    "TREC": ["train_5500.label", "TREC_10.label"],
    "MRPC": ["msr_paraphrase_train.txt", "msr_paraphrase_test.txt"],
}
N_LINES = 40
#: TREC train keeps 70 lines so the copy holds line 66, the one byte that is not UTF-8.
N_LINES_SPECIAL = {"train_5500.label": 70}


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory) -> Path:
    """The first lines of every real transfer-task file, same folder layout (bytes copied)."""
    shared = find_shared_data()
    if shared is None or not (shared / "senteval" / "MR").is_dir():
        pytest.skip("shared SentEval data (../shared/data/senteval) not available")
    root = tmp_path_factory.mktemp("downstream")
    for folder, names in TASK_FILES.items():
        (root / folder).mkdir(parents=True)
        for name in names:
            lines = (shared / "senteval" / folder / name).read_bytes().split(b"\n")
            n = N_LINES_SPECIAL.get(name, N_LINES)
            (root / folder / name).write_bytes(b"\n".join(lines[:n]) + b"\n")
    return root


def hash_encode(sentences: list[str], dim: int = 32) -> np.ndarray:
    """A deterministic bag-of-hashed-words encoder (no model needed)."""
    out = np.zeros((len(sentences), dim), dtype=np.float32)
    for i, s in enumerate(sentences):
        for w in s.split():
            out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % dim] += 1.0
    return out


# ------------------------------------------------------------------------------- loaders

@pytest.mark.parametrize("task", ["MR", "CR", "SUBJ", "MPQA"])
def test_binary_loader(trimmed, task):
    data = D.load_binary(trimmed, task)
    assert len(data) == 2 * N_LINES and len(data.sentences) == len(data.labels)
    assert data.labels.dtype.kind == "i"
    assert np.bincount(data.labels).tolist() == [N_LINES, N_LINES]
    assert data.labels[:N_LINES].tolist() == [1] * N_LINES  # label-1 file first
    assert all(isinstance(s, str) and s == " ".join(s.split()) for s in data.sentences)
    assert data.sentences[0]  # first line of the real files is not blank


def test_subj_objective_is_label_one(trimmed):
    data = D.load_binary(trimmed, "SUBJ")
    first = (trimmed / "SUBJ" / "subj.objective").read_text(encoding="latin-1").splitlines()[0]
    assert data.sentences[0] == " ".join(first.split()) and data.labels[0] == 1


def test_binary_blank_lines_kept_as_in_senteval(tmp_path):
    (tmp_path / "CR").mkdir()
    (tmp_path / "CR" / "custrev.pos").write_text("good  one .\n\nfine\n\n")
    (tmp_path / "CR" / "custrev.neg").write_bytes(b"bad caf\xe9 \n")
    data = D.load_binary(tmp_path, "CR")
    # splitlines() keeps the inner blank line and the empty last line; latin-1 decoding.
    assert data.sentences == ["good one .", "", "fine", "", "bad café"]
    assert data.labels.tolist() == [1, 1, 1, 1, 0]


def test_sst2_loader(trimmed):
    data = D.load_sst2(trimmed)
    for part in (data.train, data.dev, data.test):
        assert len(part) == N_LINES
        assert set(part.labels.tolist()) == {0, 1}
        assert all("\t" not in s and s == " ".join(s.split()) for s in part.sentences)
    assert data.train.sentences[0] == "hide new secretions from the parental units"
    assert data.train.labels[0] == 0


def test_trec_loader_coarse_labels_latin1(trimmed):
    data = D.load_trec(trimmed)
    assert len(data.train) == 70 and len(data.test) == N_LINES
    assert set(data.train.labels.tolist()) <= set(range(6))
    assert data.test.sentences[0] == "How far is it from Denver to Aspen ?"  # "NUM:dist" dropped
    assert data.test.labels[0] == D.TREC_LABELS["NUM"]
    assert data.train.sentences[0] == "How did serfdom develop in and then leave Russia ?"
    assert data.train.labels[0] == D.TREC_LABELS["DESC"]
    assert any("sister\u00f0city" in s for s in data.train.sentences)  # byte 0xF0 read as latin-1
    assert not any(":" in s.split()[0] for s in data.train.sentences)


def test_mrpc_loader(trimmed):
    data = D.load_mrpc(trimmed)
    for part in (data.train, data.test):
        assert len(part) == N_LINES - 1  # header skipped
        assert len(part.sent1) == len(part.sent2) == len(part.labels)
        assert set(part.labels.tolist()) <= {0, 1} and part.labels.dtype.kind == "i"
    assert data.train.sent1[0].startswith("Amrozi accused his brother")
    assert data.train.sent2[0].startswith("Referring to him as only")
    assert data.train.labels[:2].tolist() == [1, 0]


@pytest.mark.parametrize("task, missing", [
    ("MR", "MR/rt-polarity.neg"), ("SUBJ", "SUBJ/subj.objective"), ("SST2", "SST/binary/sentiment-dev"),
    ("TREC", "TREC/TREC_10.label"), ("MRPC", "MRPC/msr_paraphrase_train.txt"),
])
def test_missing_file_names_it(trimmed, tmp_path, task, missing):
    root = tmp_path / "downstream"
    shutil.copytree(trimmed, root)
    (root / missing).unlink()
    with pytest.raises(DataError, match=missing.split("/")[-1]) as e:
        D.load_transfer_task(root, task)
    assert "download" in str(e.value)


def test_corrupt_lines_name_file_and_line(tmp_path):
    (tmp_path / "SST" / "binary").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (tmp_path / "SST" / "binary" / f"sentiment-{split}").write_text("good .\t1\nbad .\t0\n")
    (tmp_path / "SST" / "binary" / "sentiment-dev").write_text("good .\t1\nbad .\tneg\n")
    with pytest.raises(DataError, match=r"sentiment-dev, line 2"):
        D.load_sst2(tmp_path)
    (tmp_path / "TREC").mkdir()
    (tmp_path / "TREC" / "train_5500.label").write_text("NUM:dist How far ?\nFOO:bar What ?\n")
    (tmp_path / "TREC" / "TREC_10.label").write_text("NUM:dist How far ?\n")
    with pytest.raises(DataError, match=r"train_5500.label, line 2.*'FOO'"):
        D.load_trec(tmp_path)
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "msr_paraphrase_train.txt").write_text("1\t1\t2\ta b\tc d\n")
    with pytest.raises(DataError, match=r"msr_paraphrase_train.txt, line 1: expected the MRPC header"):
        D.load_mrpc(tmp_path)


def test_unknown_task_and_mode():
    with pytest.raises(ConfigError, match="SST5"):
        T.evaluate_transfer(hash_encode, "/nonexistent", tasks=["SST5"])
    with pytest.raises(ConfigError, match="mode"):
        T.evaluate_transfer(hash_encode, "/nonexistent", tasks=["MR"], mode="dev")


# ------------------------------------------------------------------------------- protocol

def separable(n: int = 200, seed: int = 0, classes: int = 2):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = np.eye(classes)[y] + 0.05 * rng.normal(size=(n, classes))
    return X, y


def test_stratified_folds_deterministic_and_stratified():
    y = np.array([0] * 70 + [1] * 30)
    a, b = T.stratified_folds(y, 10, 1111), T.stratified_folds(y, 10, 1111)
    assert len(a) == 10
    assert all(np.array_equal(x[1], z[1]) for x, z in zip(a, b))
    assert not all(np.array_equal(x[1], z[1]) for x, z in zip(a, T.stratified_folds(y, 10, 7)))
    test_idx = np.concatenate([te for _, te in a])
    assert sorted(test_idx.tolist()) == list(range(100))  # a partition
    for tr, te in a:
        assert np.bincount(y[te]).tolist() == [7, 3]
        assert len(np.intersect1d(tr, te)) == 0


def test_inner_kfold_separable_and_random():
    X, y = separable()
    clf = T.SklearnLogReg(n_jobs=1)
    out = T.inner_kfold_cv(X, y, kfold=5, seed=1111, classifier=clf)
    assert out["acc"] >= 99 and len(out["fold_acc"]) == 5 and out["kfold"] == 5
    assert len(out["reg"]) == 5 and set(out["reg"]) <= set(T.C_GRID)
    assert clf.not_converged == 0 and (out["y_pred"] == y).mean() >= 0.99
    rng = np.random.default_rng(1)
    Xr, yr = rng.normal(size=(300, 20)), rng.integers(0, 2, 300)
    rand = T.inner_kfold_cv(Xr, yr, kfold=5, seed=1111, classifier=clf)
    assert 35 <= rand["acc"] <= 65
    assert set(rand["reg"]) <= set(T.C_GRID)


def test_inner_kfold_same_result_in_parallel():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 8))
    y = (X[:, 0] + 0.5 * rng.normal(size=120) > 0).astype(int)
    a = T.inner_kfold_cv(X, y, 3, 1111, classifier=T.SklearnLogReg(n_jobs=1))
    b = T.inner_kfold_cv(X, y, 3, 1111, classifier=T.SklearnLogReg(n_jobs=2))
    assert a.pop("y_pred").tolist() == b.pop("y_pred").tolist() and a == b


def test_parallel_fits_stay_within_the_jobs_threads(monkeypatch):
    """A job's fits use its rule's threads (OMP_NUM_THREADS, set for each job), never more cores
    than the process may run on, and at most 8."""
    import os

    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert T.default_n_jobs() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "64")
    assert T.default_n_jobs() == min(cores, 8)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert T.default_n_jobs() == min(cores, 8)


SKLEARN = T.SklearnLogReg(n_jobs=1)


def test_kfold_then_test_and_split_select():
    X, y = separable(240, classes=6)
    out = T.kfold_then_test(X[:180], y[:180], X[180:], y[180:], kfold=10, seed=1111, classifier=SKLEARN)
    assert out["acc"] >= 99 and out["reg"] in T.C_GRID_KFOLD and len(out["cv"]) == len(T.C_GRID_KFOLD)
    assert len(out["y_pred"]) == 60
    rng = np.random.default_rng(3)
    Xr, yr = rng.normal(size=(400, 10)), rng.integers(0, 2, 400)
    rand = T.split_select(Xr[:200], yr[:200], Xr[200:300], yr[200:300], Xr[300:], yr[300:], classifier=SKLEARN)
    assert 35 <= rand["acc"] <= 65 and rand["reg"] in T.C_GRID
    Xs, ys = separable(300)
    sep = T.split_select(Xs[:200], ys[:200], Xs[200:250], ys[200:250], Xs[250:], ys[250:], classifier=SKLEARN)
    assert sep["acc"] >= 99 and sep["reg"] == T.C_GRID[0]  # ties go to the first (as SentEval)


def senteval_reference(X, y, train, dev, reg, optim="adam", batch_size=64, tenacity=5, epoch_size=4,
                       max_epoch=200, seed=1111):
    """SentEval's MLP(nhid=0).fit, step by step, for one L2 strength (tools/classifier.py)."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Linear(X.shape[1], int(y.max()) + 1)
    opt = (torch.optim.Adam if optim == "adam" else torch.optim.RMSprop)(model.parameters(), weight_decay=reg)
    loss_fn = torch.nn.CrossEntropyLoss()
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    if dev is None:
        perm = np.random.permutation(len(train))
        n_dev = int(0.05 * len(train))
        dev, train = train[perm[:n_dev]], train[perm[n_dev:]]
    best, best_state, count, stop, nepoch = -1, None, 0, False, 0
    while not stop and nepoch <= max_epoch:
        for _ in range(epoch_size):
            perm = np.random.permutation(len(train))
            for i in range(0, len(train), batch_size):
                idx = torch.from_numpy(train[perm[i:i + batch_size]])
                loss = loss_fn(model(Xt[idx]), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += epoch_size
        with torch.no_grad():
            acc = (model(Xt[dev]).argmax(-1) == yt[dev]).float().mean().item()
        if acc > best:
            best, best_state = acc, {k: v.clone() for k, v in model.state_dict().items()}
        else:
            stop = count >= tenacity
            count += 1
    model.load_state_dict(best_state)
    return best, model


@pytest.mark.parametrize("mode", ["test", "fast"])
def test_senteval_classifier_is_senteval_step_by_step(mode):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 12)).astype(np.float32)
    y = ((X[:, 0] + X[:, 1] ** 2 + rng.normal(size=300)) > 1).astype(np.int64) + (X[:, 2] > 1.2)
    clf = T.make_classifier("senteval", mode)
    train, dev, test = np.arange(200), np.arange(200, 250), np.arange(250, 300)
    for dev_part in (dev, None):
        accs, (preds,) = clf.fit_predict(X, y, T.L2_GRID, train, dev_part, [test])
        for r, reg in enumerate(T.L2_GRID):
            m = T.MODES[mode]
            best, model = senteval_reference(X, y, train, dev_part, reg, m["optim"], m["batch_size"], m["tenacity"],
                                             m["epoch_size"])
            assert accs[r] == pytest.approx(best, abs=1e-6)
            with torch.no_grad():
                ref = model(torch.tensor(X[test])).argmax(-1).numpy()
            assert (preds[r] == ref).mean() >= 0.98  # identical up to float rounding of near-ties


def test_protocols_with_the_senteval_classifier():
    X, y = separable(200)
    clf = T.make_classifier("senteval", "fast")
    out = T.inner_kfold_cv(X, y, kfold=5, classifier=clf)
    assert out["acc"] >= 99 and set(out["reg"]) <= set(T.L2_GRID)
    X6, y6 = separable(240, classes=6)
    out = T.kfold_then_test(X6[:180], y6[:180], X6[180:], y6[180:], kfold=5, classifier=clf)
    assert out["acc"] >= 99 and out["reg"] in T.L2_GRID and len(out["y_pred"]) == 60
    sep = T.split_select(X[:150], y[:150], X[150:175], y[150:175], X[175:], y[175:], classifier=clf)
    assert sep["acc"] >= 99 and sep["reg"] == T.L2_GRID[0]


def test_senteval_order_sorts_by_tokens_then_label_stably():
    sents = ["a b c", "a", "b c", "d", "e f"]
    labels = [0, 1, 1, 0, 1]
    assert T.senteval_order(sents, labels).tolist() == [3, 1, 2, 4, 0]
    assert T.senteval_pair_order(["a b", "a", "a"], ["x", "y z", "y"], [0, 1, 0]).tolist() == [2, 1, 0]


def test_mrpc_features():
    u = np.array([[1.0, 2.0], [0.0, -1.0]])
    v = np.array([[3.0, -1.0], [2.0, 2.0]])
    np.testing.assert_array_equal(T.mrpc_features(u, v, "full"),
                                  [[1, 2, 3, -1, 2, 3, 3, -2], [0, -1, 2, 2, 2, 3, 0, -2]])
    np.testing.assert_array_equal(T.mrpc_features(u, v), [[2, 3, 3, -2], [2, 3, 0, -2]])  # SentEval's
    with pytest.raises(ConfigError):
        T.mrpc_features(u, v, "concat")


# ------------------------------------------------------------------------------- end to end

@pytest.mark.parametrize("mode, k", [("fast", 5), ("test", 10)])
def test_evaluate_transfer_end_to_end(trimmed, mode, k):
    calls = []

    def encode(sentences):
        calls.append(list(sentences))
        return hash_encode(sentences)

    tasks = T.TRANSFER_TASKS if mode == "fast" else ["MR", "MRPC"]
    out = T.evaluate_transfer(encode, trimmed, tasks=tasks, mode=mode, classifier="sklearn", n_jobs=1)
    assert len(calls) == 1 and len(calls[0]) == len(set(calls[0])) == out["n_sentences"]
    assert out["mode"] == mode and out["kfold"] == k
    assert list(out["scores"]) == tasks
    assert out["avg"] == pytest.approx(np.mean(list(out["scores"].values())))
    for task in tasks:
        res = out["tasks"][task]
        assert 0 <= res["acc"] <= 100 and res["n"] > 0 and "reg" in res
        gold, pred = out["pairs"][task]
        assert len(gold) == len(pred) and round(100 * float(np.mean(gold == pred)), 1) == pytest.approx(
            res["acc"], abs=1.0)  # binary tasks: the mean of fold accuracies
    assert len(out["tasks"]["MR"]["reg"]) == k and len(out["tasks"]["MR"]["fold_acc"]) == k
    assert out["tasks"]["MR"]["n"] == 2 * N_LINES
    assert out["tasks"]["MRPC"]["n"] == N_LINES - 1 and 0 <= out["tasks"]["MRPC"]["f1"] <= 100
    assert out["tasks"]["MRPC"]["reg"] in T.C_GRID_KFOLD
    if mode == "fast":
        assert out["tasks"]["SST2"]["n"] == N_LINES and out["tasks"]["SST2"]["reg"] in T.C_GRID
        assert out["tasks"]["TREC"]["n"] == N_LINES
        # deterministic with the seed
        again = T.evaluate_transfer(hash_encode, trimmed, tasks=["MR"], mode=mode, classifier="sklearn",
                                    n_jobs=1)
        assert again["tasks"]["MR"]["fold_acc"] == out["tasks"]["MR"]["fold_acc"]


def test_encode_shape_is_checked(trimmed):
    with pytest.raises(ValueError, match="shape"):
        T.evaluate_transfer(lambda s: np.zeros((len(s) - 1, 4)), trimmed, tasks=["CR"], mode="fast")


def test_evaluate_transfer_with_senteval_classifier(trimmed):
    out = T.evaluate_transfer(hash_encode, trimmed, tasks=["CR", "SST2", "TREC"], mode="fast")
    assert out["classifier"] == "senteval"
    for task in ("CR", "SST2", "TREC"):
        assert 0 <= out["scores"][task] <= 100 and out["tasks"][task]["reg"] is not None
    assert set(out["tasks"]["CR"]["reg"]) <= set(T.L2_GRID)
    again = T.evaluate_transfer(hash_encode, trimmed, tasks=["CR"], mode="fast")
    assert again["scores"]["CR"] == out["scores"]["CR"]  # seeded: deterministic
    with pytest.raises(ConfigError, match="classifier 'liblinear'"):
        T.evaluate_transfer(hash_encode, trimmed, tasks=["CR"], classifier="liblinear")


def test_cap_items_bounds_every_split_reproducibly(trimmed):
    sst = D.load_transfer_task(trimmed, "SST2")
    capped = D.cap_items(sst, 25, seed=3)
    for split in ("train", "dev", "test"):
        full, part = getattr(sst, split), getattr(capped, split)
        assert len(part) == min(25, len(full))
        idx = [full.sentences.index(s) for s in part.sentences]
        assert idx == sorted(idx)  # file order kept
        np.testing.assert_array_equal(part.labels, full.labels[idx])
    again = D.cap_items(sst, 25, seed=3)
    assert again.train.sentences == capped.train.sentences
    assert D.cap_items(sst, 25, seed=4).train.sentences != capped.train.sentences
    mrpc = D.cap_items(D.load_transfer_task(trimmed, "MRPC"), 10, seed=0)
    assert len(mrpc.train) == len(mrpc.train.sent1) == len(mrpc.train.sent2) == 10
    assert D.cap_items(sst, None) is sst


def test_evaluate_transfer_max_items(trimmed):
    seen = []

    def encode(sentences):
        seen.extend(sentences)
        return hash_encode(sentences)

    out = T.evaluate_transfer(encode, trimmed, tasks=["MR", "TREC"], mode="fast", classifier="sklearn",
                              n_jobs=1, max_items=30)
    assert out["max_items"] == 30
    assert out["tasks"]["MR"]["n"] == 30 and out["tasks"]["TREC"]["n_train"] == 30
    assert len(seen) <= 30 + 30 + min(30, N_LINES)
    full = T.evaluate_transfer(hash_encode, trimmed, tasks=["MR"], mode="fast", classifier="sklearn", n_jobs=1)
    assert full["max_items"] is None and full["tasks"]["MR"]["n"] == 2 * N_LINES
