"""Tests for cselab.data (download, corpus, senteval): downloads over a real loopback HTTP
server, corpus and SentEval prep.

Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import socket
import tarfile
from pathlib import Path

import pytest

from cselab.data.corpus import prepare_corpus
from cselab.data.download import fetch
from cselab.data.senteval import EXPECTED_COUNTS, KNOWN_TASKS, prepare_senteval, verify_senteval
from cselab.errors import DataError
from tests.helpers import STS_SUBSETS, find_shared_data, make_senteval

# --------------------------------------------------------------------------- loopback server




def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# --------------------------------------------------------------------------- fetch


def test_fetch_happy_path_with_sha(server, tmp_path):
    body = b"hello\nworld\n" * 1000
    server.files["/f.txt"] = body
    dest = tmp_path / "dl" / "f.txt"
    got = fetch(server.url("/f.txt"), dest, sha256=_sha(body), timeout=5)
    assert got == {"source": server.url("/f.txt"), "path": str(dest), "bytes": len(body), "sha256": _sha(body)}
    assert dest.read_bytes() == body
    assert sorted(p.name for p in dest.parent.iterdir()) == ["f.txt"]  # no temporary left
    # Second call: present and matching, so no new request.
    fetch(server.url("/f.txt"), dest, sha256=_sha(body), timeout=5)
    assert server.hits["/f.txt"] == 1


def test_fetch_file_url(tmp_path):
    src = tmp_path / "src.txt"
    src.write_bytes(b"abc\n")
    got = fetch(src.as_uri(), tmp_path / "out.txt")
    assert got["bytes"] == 4 and (tmp_path / "out.txt").read_bytes() == b"abc\n"


def test_fetch_sha_mismatch(server, tmp_path):
    server.files["/f.txt"] = b"data\n"
    dest = tmp_path / "f.txt"
    with pytest.raises(DataError, match="sha256") as e:
        fetch(server.url("/f.txt"), dest, sha256="0" * 64, timeout=5)
    assert "0" * 64 in str(e.value)
    assert not dest.exists() and not list(dest.parent.glob(".f.txt*"))


def test_fetch_truncated(server, tmp_path):
    server.truncated["/t.txt"] = b"x" * 5000
    dest = tmp_path / "t.txt"
    with pytest.raises(DataError, match="truncated") as e:
        fetch(server.url("/t.txt"), dest, timeout=5)
    assert server.url("/t.txt") in str(e.value)
    assert not dest.exists() and not list(dest.parent.glob(".t.txt*"))


def test_fetch_404(server, tmp_path):
    with pytest.raises(DataError, match="404") as e:
        fetch(server.url("/missing.txt"), tmp_path / "m.txt", timeout=5)
    assert server.url("/missing.txt") in str(e.value)
    assert not (tmp_path / "m.txt").exists()


def test_fetch_unreachable(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/x.txt"
    with pytest.raises(DataError, match="Cannot reach") as e:
        fetch(url, tmp_path / "x.txt", timeout=5)
    assert url in str(e.value)


def test_fetch_empty_body(server, tmp_path):
    server.files["/empty.txt"] = b""
    with pytest.raises(DataError, match="empty"):
        fetch(server.url("/empty.txt"), tmp_path / "empty.txt", timeout=5)


def test_fetch_rejects_other_schemes(tmp_path):
    with pytest.raises(DataError, match="ftp://"):
        fetch("ftp://127.0.0.1/x", tmp_path / "x")


# --------------------------------------------------------------------------- corpus


CORPUS = b"first sentence .\n\n   \nsecond one\r\nthird\nfourth\n"


def test_prepare_corpus_http_max_lines(server, tmp_path):
    server.files["/corpus.txt"] = CORPUS
    out, man = tmp_path / "c.txt", tmp_path / "c.json"
    got = prepare_corpus(url=server.url("/corpus.txt"), path=None, out_txt=out, manifest=man,
                         max_lines=3, download_dir=tmp_path / "dl", sha256=_sha(CORPUS))
    assert out.read_text() == "first sentence .\nsecond one\nthird\n"
    assert json.loads(man.read_text()) == got
    assert got["source"] == server.url("/corpus.txt")
    assert got["source_sha256"] == _sha(CORPUS)
    assert got["source_lines"] == 6 and got["out_lines"] == 3 and got["max_lines"] == 3
    assert got["out_sha256"] == _sha(out.read_bytes())
    assert (tmp_path / "dl" / "corpus.txt").read_bytes() == CORPUS


def test_prepare_corpus_local_path_wins(tmp_path):
    src = tmp_path / "local.txt"
    src.write_bytes(CORPUS)
    got = prepare_corpus(url="http://127.0.0.1:9/never-used.txt", path=str(src), out_txt=tmp_path / "o.txt",
                         manifest=tmp_path / "m.json", download_dir=tmp_path / "dl")
    assert got["source"] == str(src.resolve())
    assert got["out_lines"] == 4 and got["max_lines"] is None
    assert (tmp_path / "o.txt").read_text().splitlines() == ["first sentence .", "second one", "third", "fourth"]
    assert not (tmp_path / "dl").exists()


def test_prepare_corpus_full_corpus_line_check(server, tmp_path):
    server.files["/wiki1m_for_simcse.txt"] = b"only\nthree\nlines\n"
    with pytest.raises(DataError, match="truncated or corrupt download, delete"):
        prepare_corpus(url=server.url("/wiki1m_for_simcse.txt"), path=None, out_txt=tmp_path / "o.txt",
                       manifest=tmp_path / "m.json", download_dir=tmp_path / "dl")
    assert not (tmp_path / "o.txt").exists()
    # With a cap the line-count check does not apply.
    got = prepare_corpus(url=server.url("/wiki1m_for_simcse.txt"), path=None, out_txt=tmp_path / "o.txt",
                         manifest=tmp_path / "m.json", download_dir=tmp_path / "dl", max_lines=2)
    assert got["out_lines"] == 2


def test_prepare_corpus_empty_file(tmp_path):
    src = tmp_path / "empty.txt"
    src.write_bytes(b"")
    with pytest.raises(DataError, match="empty") as e:
        prepare_corpus(url=None, path=str(src), out_txt=tmp_path / "o.txt", manifest=tmp_path / "m.json",
                       download_dir=tmp_path)
    assert str(src) in str(e.value)


def test_prepare_corpus_blank_only_file(tmp_path):
    src = tmp_path / "blank.txt"
    src.write_bytes(b"\n  \n\n")
    with pytest.raises(DataError, match="no non-empty lines") as e:
        prepare_corpus(url=None, path=str(src), out_txt=tmp_path / "o.txt", manifest=tmp_path / "m.json",
                       download_dir=tmp_path)
    assert str(src) in str(e.value)


def test_prepare_corpus_missing_file(tmp_path):
    src = tmp_path / "nope.txt"
    with pytest.raises(DataError, match="does not exist") as e:
        prepare_corpus(url=None, path=str(src), out_txt=tmp_path / "o.txt", manifest=tmp_path / "m.json",
                       download_dir=tmp_path)
    assert "nope.txt" in str(e.value)


def test_prepare_corpus_not_utf8(tmp_path):
    src = tmp_path / "latin.txt"
    src.write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(DataError, match="UTF-8.*line 2"):
        prepare_corpus(url=None, path=str(src), out_txt=tmp_path / "o.txt", manifest=tmp_path / "m.json",
                       download_dir=tmp_path)


def test_prepare_corpus_download_error_names_fix(server, tmp_path):
    with pytest.raises(DataError, match="data.corpus.path"):
        prepare_corpus(url=server.url("/gone.txt"), path=None, out_txt=tmp_path / "o.txt",
                       manifest=tmp_path / "m.json", download_dir=tmp_path / "dl")


def test_prepare_corpus_real_head(tmp_path):
    shared = find_shared_data()
    if shared is None or not (shared / "wiki1m_head.txt").is_file():
        pytest.skip("shared/data/wiki1m_head.txt not found ($CSELAB_SHARED_DATA or ../shared/data beside the checkout)")
    got = prepare_corpus(url=None, path=str(shared / "wiki1m_head.txt"), out_txt=tmp_path / "o.txt",
                         manifest=tmp_path / "m.json", max_lines=6400, download_dir=tmp_path / "dl")
    assert got["source_sha256"] == "626175d8bf7d77e323f6d74bed023563abe2123b1b7990ccfcd958880ea71f5b"
    assert got["source_lines"] == 11913 and got["out_lines"] == 6400


# --------------------------------------------------------------------------- SentEval


def _tar_bytes(src: Path, arcname: str = "downstream") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=arcname)
    return buf.getvalue()


def test_prepare_senteval_over_http(server, tmp_path):
    tree = make_senteval(tmp_path / "src")
    server.files["/senteval.tar"] = _tar_bytes(tree)
    man = tmp_path / "senteval.json"
    got = prepare_senteval(url=server.url("/senteval.tar"), path=None, extract_dir=tmp_path / "extract",
                           manifest=man, strict_counts=False, download_dir=tmp_path / "dl")
    assert json.loads(man.read_text()) == got
    assert got["root"] == str((tmp_path / "extract" / "downstream").resolve())
    assert got["source"] == server.url("/senteval.tar")
    assert got["archive"]["sha256"] == _sha(server.files["/senteval.tar"])
    assert list(got["tasks"]) == ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
    files = got["tasks"]["STS12"]["files"]
    assert files["STS/STS12-en-test/STS.gs.MSRpar.txt"]["rows"] == 2
    assert files["STS/STS12-en-test/STS.input.MSRpar.txt"]["rows"] == 3
    assert len(files) == 10
    assert got["tasks"]["STSBenchmark"]["files"]["STS/STSBenchmark/sts-dev.csv"]["rows"] == 2
    assert got["tasks"]["SICKRelatedness"]["files"]["SICK/SICK_train.txt"]["rows"] == 2
    sha = files["STS/STS12-en-test/STS.gs.MSRpar.txt"]["sha256"]
    assert sha == _sha((tree / "STS/STS12-en-test/STS.gs.MSRpar.txt").read_bytes())

    # Re-run: the tar is not downloaded again and the extraction is reused.
    again = prepare_senteval(url=server.url("/senteval.tar"), path=None, extract_dir=tmp_path / "extract",
                             manifest=man, strict_counts=False, download_dir=tmp_path / "dl")
    assert again == got and server.hits["/senteval.tar"] == 1

    # strict counts: the tiny tree does not match the published sizes.
    with pytest.raises(DataError, match=r"STS\.input\.MSRpar\.txt.*3 rows, expected 750.*strict_counts: false"):
        prepare_senteval(url=server.url("/senteval.tar"), path=None, extract_dir=tmp_path / "extract",
                         manifest=tmp_path / "strict.json", strict_counts=True, download_dir=tmp_path / "dl")
    assert not (tmp_path / "strict.json").exists()


def test_prepare_senteval_corrupt_tar(server, tmp_path):
    server.files["/senteval.tar"] = random.Random(0).randbytes(20000)
    with pytest.raises(DataError, match="corrupt.*delete it and re-run") as e:
        prepare_senteval(url=server.url("/senteval.tar"), path=None, extract_dir=tmp_path / "extract",
                         manifest=tmp_path / "m.json", strict_counts=False, download_dir=tmp_path / "dl")
    assert str(tmp_path / "dl" / "senteval.tar") in str(e.value)
    assert not (tmp_path / "extract").exists()


def test_prepare_senteval_rejects_unsafe_tar(server, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../evil.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    server.files["/senteval.tar"] = buf.getvalue()
    with pytest.raises(DataError, match="unsafe member"):
        prepare_senteval(url=server.url("/senteval.tar"), path=None, extract_dir=tmp_path / "x" / "extract",
                         manifest=tmp_path / "m.json", strict_counts=False, download_dir=tmp_path / "dl")
    assert not (tmp_path / "x" / "evil.txt").exists()


def test_prepare_senteval_tar_without_downstream(server, tmp_path):
    tree = make_senteval(tmp_path / "src")
    server.files["/senteval.tar"] = _tar_bytes(tree, arcname="something-else")
    with pytest.raises(DataError, match="no 'downstream' folder"):
        prepare_senteval(url=server.url("/senteval.tar"), path=None, extract_dir=tmp_path / "extract",
                         manifest=tmp_path / "m.json", strict_counts=False, download_dir=tmp_path / "dl")


@pytest.mark.parametrize("layout", ["flat", "downstream"])
def test_prepare_senteval_local_dir(tmp_path, layout):
    base = tmp_path / "se"
    tree = make_senteval(base / "downstream" if layout == "downstream" else base)
    got = prepare_senteval(url="http://127.0.0.1:9/never-used.tar", path=str(base),
                           extract_dir=tmp_path / "extract", manifest=tmp_path / "m.json",
                           strict_counts=False, download_dir=tmp_path / "dl")
    assert got["root"] == str(tree.resolve()) and got["archive"] is None
    assert not (tmp_path / "extract").exists() and not (tmp_path / "dl").exists()  # not copied


def test_prepare_senteval_missing_sts_file(tmp_path):
    tree = make_senteval(tmp_path / "se")
    missing = tree / "STS/STS14-en-test/STS.gs.images.txt"
    missing.unlink()
    with pytest.raises(DataError, match="missing") as e:
        prepare_senteval(url=None, path=str(tree), extract_dir=tmp_path / "x", manifest=tmp_path / "m.json",
                         strict_counts=False, download_dir=tmp_path / "dl")
    assert str(missing) in str(e.value)


def test_verify_senteval_misaligned_sts(tmp_path):
    tree = make_senteval(tmp_path / "se")
    (tree / "STS/STS13-en-test/STS.gs.FNWN.txt").write_text("4.8\n\n0.4\n1.0\n")
    with pytest.raises(DataError, match="not row-aligned") as e:
        verify_senteval(tree, strict_counts=False)
    assert "STS.input.FNWN.txt" in str(e.value) and "STS.gs.FNWN.txt" in str(e.value)


def test_verify_senteval_bad_input_fields(tmp_path):
    tree = make_senteval(tmp_path / "se")
    (tree / "STS/STS15-en-test/STS.input.belief.txt").write_text("one\ttwo\nonly one field\nthree\tfour\n")
    with pytest.raises(DataError, match=r"STS\.input\.belief\.txt.*line 2 has 1 tab-separated"):
        verify_senteval(tree, strict_counts=False)


def test_verify_senteval_empty_file_and_unknown_task(tmp_path):
    tree = make_senteval(tmp_path / "se")
    (tree / "SICK/SICK_trial.txt").write_text("")
    with pytest.raises(DataError, match=r"SICK_trial\.txt is empty"):
        verify_senteval(tree, ["SICKRelatedness"], strict_counts=False)
    with pytest.raises(DataError, match="Unknown SentEval task"):
        verify_senteval(tree, ["STS17"], strict_counts=False)


def test_expected_counts_match_readme_totals():
    totals = {t: sum(n for p, n in EXPECTED_COUNTS[t].items() if "STS.input." not in p) for t in STS_SUBSETS}
    assert totals == {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}
    assert set(EXPECTED_COUNTS) == set(KNOWN_TASKS)


def test_verify_real_senteval_tree():
    shared = find_shared_data()
    if shared is None or not (shared / "senteval").is_dir():
        pytest.skip("shared/data/senteval not found ($CSELAB_SHARED_DATA or ../shared/data beside the checkout)")
    got = verify_senteval(shared / "senteval", KNOWN_TASKS, strict_counts=True)
    assert list(got["tasks"]) == KNOWN_TASKS
    for task, expected in EXPECTED_COUNTS.items():
        assert {p: f["rows"] for p, f in got["tasks"][task]["files"].items()} == expected


@pytest.mark.parametrize("score", ["nan", "inf", "1.5"])
def test_a_qrels_score_that_is_no_finite_integer_is_refused_at_preparation(tmp_path, score):
    """BEIR's relevance labels are integers: ``nan``, ``inf`` (which float() would read) and a
    fraction are refused when the dataset is prepared, naming the file and the line."""
    from cselab.data.beir import prepare_beir
    from tests.helpers import make_beir

    root = make_beir(tmp_path / "toy")
    qrels = root / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines()
    lines[2] = "\t".join(lines[2].split("\t")[:2] + [score])
    qrels.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        prepare_beir("toy", path=root, out_dir=tmp_path / "out", manifest=tmp_path / "m.json",
                     download_dir=tmp_path / "dl")
    assert f"BEIR qrels file {qrels}, line 3: score {score!r} is not an integer" in str(err.value)


@pytest.mark.parametrize("where", ["gold", "stsb", "sick"])
def test_a_score_that_is_no_finite_number_is_refused_at_preparation(tmp_path, where):
    """float() reads "nan" and "inf": a SentEval gold score of either is refused when the tree
    is prepared, naming the file and the line, before any evaluation averages it."""
    from tests.helpers import make_senteval, make_transfer

    tree = make_transfer(make_senteval(tmp_path / "senteval"))
    path, col = {"gold": (tree / "STS" / "STS12-en-test" / "STS.gs.MSRpar.txt", 0),
                 "stsb": (tree / "STS" / "STSBenchmark" / "sts-dev.csv", 4),
                 "sick": (tree / "SICK" / "SICK_test_annotated.txt", 3)}[where]
    lines = path.read_text().splitlines()
    fields = lines[1].split("\t")
    fields[col] = "nan"
    lines[1] = "\t".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        verify_senteval(tree, KNOWN_TASKS, strict_counts=False)
    assert f"SentEval file {path} is malformed: line 2: column {col + 1} is 'nan', not a finite score" in str(err.value)
