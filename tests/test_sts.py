"""Tests for cselab.evaluation.sts and the STS loaders of cselab.data.tasks: SentEval-format
loaders, the "all" Spearman protocol, one encode call, and the outside check against MTEB's
published all-MiniLM-L6-v2 numbers."""

import zlib

import numpy as np
import pytest
from scipy.stats import spearmanr

from cselab.data import tasks
from cselab.evaluation import sts
from cselab.models.encoder import load_encoder
from cselab.errors import DataError
from cselab.models.checkpoints import resolve_model
from tests.helpers import find_shared_data

WORDS = "alpha beta gamma delta epsilon zeta".split()
DIM = 4096


def fake_encode(sentences):
    """Deterministic bag-of-words: each word hashed (crc32) into one of DIM buckets."""
    out = np.zeros((len(sentences), DIM))
    for i, s in enumerate(sentences):
        for w in s.split():
            out[i, zlib.crc32(w.encode()) % DIM] += 1.0
    return out


def rows(tag, offset=0.0, pad=0, n=4):
    """n pairs whose word overlap (hence cosine) falls with j while gold falls with j too, so the
    subset's own Spearman is 100; ``offset`` shifts the gold of the whole subset. ``pad`` shared
    words make the cosines of different subsets distinct (no float-rounding-dependent ties)."""
    base = [tag] + [f"{tag}p{i}" for i in range(pad)] + WORDS
    out = []
    for j in range(1, n + 1):
        s2 = base[: len(base) - j] + [f"{tag}{i}" for i in range(j)]
        out.append((" ".join(base), " ".join(s2), f"{offset + n - j:.2f}"))
    return out


def write(path, lines, newline="\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))


@pytest.fixture
def tree(tmp_path):
    """A complete synthetic SentEval downstream/ tree (all 7 STS tasks)."""
    root = tmp_path / "senteval"
    for year, subs in tasks.STS_SUBSETS.items():
        folder = root / "STS" / f"{year}-en-test"
        for k, sub in enumerate(subs):
            # later subsets get higher gold offsets: every subset is perfectly ranked on its own,
            # the concatenation is not ("all" != "wmean")
            r = rows(f"{year}{k}", offset=1.0 + 2 * k, pad=2 * k)
            if year == "STS12" and k == 0:
                r.append(("the  cat sat ", " a dog\u00a0ran", "0.00"))  # whitespace to normalise
            if year == "STS15" and k == 0:
                r.append(("unscored pair one", "unscored pair two", ""))  # blank gold: skipped
            write(folder / f"STS.input.{sub}.txt", [f"{a}\t{b}" for a, b, _ in r])
            write(folder / f"STS.gs.{sub}.txt", [g for _, _, g in r])
        if year == "STS13":
            write(folder / "STS.gs.SMT.txt", ["1.0"])  # gold without input, as in the release
    shared = "a sentence shared by sts-b and sick"
    for split in tasks.STSB_SPLITS:
        r = rows(f"stsb{split}")
        lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{g}\t{a}\t{b}" for i, (a, b, g) in enumerate(r)]
        lines[1] += "\tsource-a\tsource-b"  # extra trailing columns are ignored
        lines.append(f"main-news\theadlines\t2015\t0099\t1.0\t{shared}\t{r[0][0]}")
        write(root / "STS" / "STSBenchmark" / f"sts-{split}.csv", lines)
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
    for split, name in tasks.SICK_SPLITS.items():
        r = rows(f"sick{split}") + [(shared, "sick other", "2.5")]
        lines = [header] + [f"{i}\t{a}\t{b}\t{g}\tNEUTRAL" for i, (a, b, g) in enumerate(r)]
        write(root / "SICK" / name, lines, newline="\r\n" if split == "test" else "\n")
    return root


def test_loaders(tree):
    sts12 = tasks.load_sts_year(tree, "STS12")
    assert [s.name for s in sts12] == tasks.STS_SUBSETS["STS12"]
    assert sts12[0].sent1[-1] == "the cat sat" and sts12[0].sent2[-1] == "a dog ran"
    assert sts12[0].gold.tolist() == [4.0, 3.0, 2.0, 1.0, 0.0]
    sts15 = tasks.load_sts_year(tree, "STS15")
    assert len(sts15[0]) == 4 and "unscored pair one" not in sts15[0].sent1  # blank gold skipped
    assert [s.name for s in tasks.load_sts_year(tree, "STS13")] == ["FNWN", "headlines", "OnWN"]
    stsb = tasks.load_stsb(tree)
    assert stsb.name == "sts-test" and len(stsb) == 5 and stsb.gold[0] == 3.0
    assert stsb.sent1[1].startswith("stsbtest") and "source-a" not in stsb.sent2[1]
    assert len(tasks.stsb_dev(tree)) == 5 and tasks.stsb_dev(tree).sent1[0].startswith("stsbdev")
    sick = tasks.load_sick(tree)  # CRLF file with a header
    assert len(sick) == 5 and sick.gold[-1] == 2.5 and sick.sent2[-1] == "sick other"
    assert tasks.load_sick(tree, "trial").sent1[0].startswith("sicktrial")


def test_evaluate_all_vs_wmean_and_one_encode_call(tree):
    calls = []

    def encode(sentences):
        calls.append(list(sentences))
        return fake_encode(sentences)

    res = sts.evaluate_sts(encode, tree)
    assert len(calls) == 1
    sent = calls[0]
    assert len(sent) == len(set(sent)) == res["n_sentences"]
    loaded = {t: tasks.load_sts_task(tree, t) for t in sts.STS_TASKS}
    assert set(sent) == {s for subs in loaded.values() for sub in subs for s in sub.sent1 + sub.sent2}

    for task, subs in loaded.items():
        # independent reference: cosine from the raw vectors, Spearman over the concatenation
        cos = [np.array([np.dot(u, v) / np.linalg.norm(u) / np.linalg.norm(v)
                         for u, v in zip(fake_encode(s.sent1), fake_encode(s.sent2))]) for s in subs]
        expected = 100 * spearmanr(np.concatenate(cos), np.concatenate([s.gold for s in subs]))[0]
        r = res["tasks"][task]
        assert r["spearman_all"] == pytest.approx(expected, abs=1e-9)
        assert res["scores"][sts.COLUMN_NAMES[task]] == r["spearman_all"]
        assert r["n_pairs"] == sum(len(s) for s in subs)
        assert set(r["subsets"]) == {s.name for s in subs}
    sts12 = res["tasks"]["STS12"]
    assert all(v["spearman"] == pytest.approx(100) for v in sts12["subsets"].values())
    assert sts12["wmean_spearman"] == pytest.approx(100)
    assert sts12["spearman_all"] < 90  # "all" is not the mean of the subsets
    assert list(res["scores"]) == ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]
    assert res["avg"] == pytest.approx(np.mean(list(res["scores"].values())))


def test_task_selection_and_dev_metric(tree):
    calls = []
    res = sts.evaluate_sts(lambda s: calls.append(s) or fake_encode(s), tree, tasks=["STSBenchmark"])
    assert list(res["scores"]) == ["STS-B"] and len(calls) == 1
    dev = tasks.stsb_dev(tree)
    calls.clear()
    val = sts.spearman_on_subset(lambda s: calls.append(s) or fake_encode(s), dev)
    assert len(calls) == 1 and len(calls[0]) == len(set(dev.sent1 + dev.sent2))
    cos = [np.dot(u, v) / np.linalg.norm(u) / np.linalg.norm(v)
           for u, v in zip(fake_encode(dev.sent1), fake_encode(dev.sent2))]
    assert val == pytest.approx(100 * spearmanr(cos, dev.gold)[0])


def test_data_errors(tree):
    missing = tree / "STS" / "STS14-en-test" / "STS.input.images.txt"
    missing.unlink()
    with pytest.raises(DataError, match="STS.input.images.txt"):
        sts.evaluate_sts(fake_encode, tree)
    (tree / "SICK" / "SICK_test_annotated.txt").unlink()
    with pytest.raises(DataError, match="SICK_test_annotated.txt"):
        tasks.load_sick(tree)
    gs = tree / "STS" / "STS12-en-test" / "STS.gs.MSRvid.txt"
    write(gs, ["1.0", "oops", "2.0", "3.0"])
    with pytest.raises(DataError, match=r"STS.gs.MSRvid.txt, line 2"):
        tasks.load_sts_year(tree, "STS12")
    write(gs, ["1.0", "2.0"])
    with pytest.raises(DataError, match="truncated"):
        tasks.load_sts_year(tree, "STS12")
    bad = tree / "STS" / "STSBenchmark" / "sts-dev.csv"
    write(bad, ["a\tb\tc\td\t1.0\tonly one sentence"])
    with pytest.raises(DataError, match=r"sts-dev.csv, line 1"):
        tasks.stsb_dev(tree)
    bad.write_bytes(b"a\tb\tc\td\t1.0\tx\xff\ty\n")
    with pytest.raises(DataError, match="not valid UTF-8"):
        tasks.stsb_dev(tree)


REAL = find_shared_data() / "senteval" if find_shared_data() else None
needs_real = pytest.mark.skipif(REAL is None, reason="real SentEval tree not found at "
                                "$CSELAB_SHARED_DATA/senteval or ../shared/data/senteval beside the checkout")


@needs_real
def test_real_tree_sizes():
    """Test-set sizes of SentEval as SimCSE (Gao et al., 2021) evaluates them (STS13 without SMT)."""
    sizes = {t: sum(len(s) for s in tasks.load_sts_task(REAL, t)) for t in sts.STS_TASKS}
    assert sizes == {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186,
                     "STSBenchmark": 1379, "SICKRelatedness": 4927}
    assert len(tasks.stsb_dev(REAL)) == 1500


@needs_real
def test_minilm_matches_mteb():
    """Outside check: all-MiniLM-L6-v2, mean pooling, must reproduce MTEB's published numbers."""
    # Our own inference path (length-sorted, dynamic padding), with mean pooling like MTEB's.
    encoder = load_encoder(resolve_model("all-MiniLM-L6-v2"), pooler="avg")

    def encode(sentences):
        return encoder.encode(sentences, batch_size=64, max_len=256)

    res = sts.evaluate_sts(encode, REAL, tasks=["STS12", "STS15", "STSBenchmark"])
    assert res["scores"]["STS12"] == pytest.approx(72.37, abs=0.1)
    assert res["scores"]["STS15"] == pytest.approx(85.39, abs=0.1)
    assert res["scores"]["STS-B"] == pytest.approx(82.03, abs=0.1)
