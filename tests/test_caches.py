"""Every cache heals itself: a token cache entry, an embedding cache entry, a downloaded BEIR zip
and a compile-cache file broken each way a file breaks (cut short, zero bytes, one byte flipped,
garbage) is removed with one warning naming it and built again; nothing fails on it."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from cselab.data.tokens import tokenize_corpus
from cselab.evaluation.encoding import EmbeddingCache
from cselab.training import compiled

DAMAGES = ["cut", "empty", "flipped", "garbage"]


def damage(path: Path, how: str, at: int | None = None) -> None:
    """Break ``path`` as a disk or a person would: cut to half, emptied, one byte flipped (at
    ``at``, default its middle) or overwritten with garbage of its own size."""
    data = path.read_bytes()
    if how == "cut":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "flipped":
        i = len(data) // 2 if at is None else at
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    else:
        path.write_bytes(bytes((7 * i + 13) % 256 for i in range(len(data))))


def member_data_offset(path: Path, member: str) -> int:
    """Where a stored zip member's data starts (a byte flipped there is caught by its CRC alone)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset + 26)
        name_len, extra_len = int.from_bytes(fh.read(2), "little"), int.from_bytes(fh.read(2), "little")
    return info.header_offset + 30 + name_len + extra_len + info.compress_size // 2


def warnings_naming(caplog, path: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and str(path) in r.getMessage()]


@pytest.mark.parametrize("how", DAMAGES)
def test_token_cache_entry_broken_any_way_is_rebuilt_with_one_warning(tiny_encoder, tmp_path, caplog, how):
    tok = tiny_encoder.tokenizer
    texts = [f"sentence number {i} of the corpus" for i in range(40)]
    first = tokenize_corpus(texts, tok, 16, tmp_path)
    (entry,) = tmp_path.glob("*.npz")
    damage(entry, how, member_data_offset(entry, "ids.npy") if how == "flipped" else None)
    with caplog.at_level(logging.WARNING):
        again = tokenize_corpus(texts, tok, 16, tmp_path)
    assert torch.equal(again.ids, first.ids) and torch.equal(again.offsets, first.offsets)
    (warned,) = warnings_naming(caplog, entry)
    assert "token cache" in warned and "is damaged" in warned and "tokenising again" in warned
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # mended: a hit, nothing said
        assert torch.equal(tokenize_corpus(texts, tok, 16, tmp_path).ids, first.ids)
    assert not warnings_naming(caplog, entry)


@pytest.mark.parametrize("part", ["array", "record"])
@pytest.mark.parametrize("how", DAMAGES)
def test_embedding_cache_entry_broken_any_way_is_encoded_again_with_one_warning(tmp_path, caplog, how, part):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    rows = np.arange(48, dtype=np.float32).reshape(4, 12)
    calls = []

    def encode(s):
        calls.append(len(s))
        return rows

    sentences = ["a", "b", "c", "d"]
    cache = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"})
    cache.get("toy", sentences, encode)
    broken = cache.dir / ("toy.npy" if part == "array" else "toy.json")
    damage(broken, how)
    with caplog.at_level(logging.WARNING):
        got = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"}).get("toy", sentences, encode)
    np.testing.assert_array_equal(got, rows)
    assert calls == [4, 4]
    (warned,) = [m for m in (r.getMessage() for r in caplog.records) if "embedding cache" in m]
    assert "toy.npy is damaged" in warned and "encoding again" in warned
    again = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"}).get("toy", sentences, encode)
    np.testing.assert_array_equal(again, rows)
    assert calls == [4, 4]  # mended: a hit


def test_embedding_cache_entry_rewritten_in_place_with_its_size_is_caught_by_its_sha256(tmp_path, caplog):
    """The same number of bytes and a valid array (another one): its mtime moved, its sha256 tells."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    rows = np.ones((3, 4), dtype=np.float32)
    cache = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"})
    cache.get("toy", ["a", "b", "c"], lambda s: rows)
    np.save(cache.dir / "toy.npy", rows * 2)
    with caplog.at_level(logging.WARNING):
        got = EmbeddingCache(tmp_path / "cache", model, {"pooler": "cls"}).get("toy", ["a", "b", "c"], lambda s: rows)
    np.testing.assert_array_equal(got, rows)
    assert "its bytes changed since it was written" in caplog.text


def test_an_evaluation_whose_datasets_are_all_cached_loads_no_model(tiny_bert, tmp_path, monkeypatch):
    """The encoder is loaded at the first sentence the cache lacks: a second evaluation of the
    same checkpoint (a changed scoring setting, a new table) reads the cache and never loads it."""
    from cselab.evaluation.encoding import ModelEncoder
    from cselab.models import encoder as encoder_module

    settings = {"pooler": "cls", "max_len": 16, "batch_size": 8}
    first = ModelEncoder(tiny_bert, settings, tmp_path / "cache")
    rows = first.encode_fn("toy")(["a cat", "a dog", "a cat"])
    assert first.stats()["model_loaded"] and first.stats()["cache_misses"] == 1

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded although every sentence is cached")

    monkeypatch.setattr(encoder_module, "load_encoder", no_load)
    again = ModelEncoder(tiny_bert, settings, tmp_path / "cache")
    np.testing.assert_array_equal(again.encode_fn("toy")(["a cat", "a dog", "a cat"]), rows)
    assert again.stats() | {"model_dir": None} == {**again.stats(), "model_dir": None, "model_loaded": False,
                                                   "cache_hits": 1, "cache_misses": 0, "encoded_sentences": 0}
    code = ("import sys; from pathlib import Path; from cselab.evaluation.encoding import ModelEncoder; "
            "m = ModelEncoder(Path(sys.argv[1]), {'pooler': 'cls', 'max_len': 16, 'batch_size': 8}, Path(sys.argv[2])); "
            "assert m.encode_fn('toy')(['a cat', 'a dog', 'a cat']).shape[0] == 3; "
            "assert 'torch' not in sys.modules, 'torch imported'")  # an STS re-scoring's job imports no torch
    subprocess.run([sys.executable, "-c", code, str(tiny_bert), str(tmp_path / "cache")], check=True,
                   cwd=Path(__file__).parents[1])
    with pytest.raises(AssertionError, match="was loaded"):  # a sentence it lacks: the model is needed
        again.encode_fn("toy")(["a bird"])


@pytest.mark.parametrize("how", DAMAGES)
def test_downloaded_beir_zip_broken_any_way_is_downloaded_again(tmp_path, caplog, how):
    """A BEIR zip kept in the download folder (no sha256 pinned, as BEIR's URLs are used) broken
    after it was fetched: the next preparation downloads it again instead of failing on it."""
    from cselab.data.beir import prepare_beir
    from tests.helpers import make_beir

    src = make_beir(tmp_path / "src" / "scifact")
    zip_path = tmp_path / "served" / "scifact.zip"
    zip_path.parent.mkdir()
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_STORED) as zf:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                zf.write(f, f"scifact/{f.relative_to(src)}")
    kwargs = dict(url=zip_path.as_uri(), out_dir=tmp_path / "data", manifest=tmp_path / "manifest.json",
                  download_dir=tmp_path / "downloads")
    first = prepare_beir("scifact", **kwargs)
    cached = tmp_path / "downloads" / "scifact.zip"
    damage(cached, how, member_data_offset(cached, "scifact/corpus.jsonl") if how == "flipped" else None)
    with caplog.at_level(logging.WARNING):
        again = prepare_beir("scifact", **kwargs)
    assert again["files"] == first["files"] and cached.read_bytes() == zip_path.read_bytes()
    (warned,) = warnings_naming(caplog, cached)
    assert "downloaded file" in warned and "is damaged" in warned and "downloading" in warned


def real_library() -> Path:
    """A small ELF shared library of this Python (a stand-in for an inductor-built one)."""
    folder = Path(sysconfig.get_paths()["platlib"]).parent / "lib-dynload"
    candidates = sorted(folder.glob("*.so"), key=lambda p: p.stat().st_size) or \
        sorted(Path(sys.base_prefix, "lib").glob(f"python{sys.version_info.major}.{sys.version_info.minor}"
                                                  "/lib-dynload/*.so"), key=lambda p: p.stat().st_size)
    if not candidates:
        pytest.skip("no ELF library of this Python found")
    return candidates[0]


@pytest.mark.parametrize("suffix", [".so", ".py", ".json"])
@pytest.mark.parametrize("how", DAMAGES)
def test_compile_cache_file_broken_any_way_is_removed_with_one_warning(tmp_path, caplog, suffix, how):
    """Inductor and Triton load these back; broken, every compiled step would fail. A flipped byte
    of a library is caught where it breaks the ELF header (a byte of its code is not)."""
    (tmp_path / "ab").mkdir()
    whole = {".so": real_library().read_bytes(), ".py": b"def kernel(x):\n    return (x * 2 +\n" + b"            1 +\n" * 40 + b"            0)\n",
             ".json": b'{"num_warps": 4, "num_stages": 2, "shared": 0, "name": "triton_poi_fused"}'}[suffix]
    path, kept = tmp_path / "ab" / f"ckey.main{suffix}", tmp_path / "ab" / f"cother.main{suffix}"
    for p in (path, kept):
        p.write_bytes(whole)
    at = {".so": 1, ".py": 12, ".json": 0}[suffix]  # the ELF magic, a colon, the opening brace
    damage(path, how, at)
    if how == "garbage" and suffix == ".py" and compiled.cache_file_problem(path) is None:
        pytest.skip("this garbage happens to be valid Python")
    with caplog.at_level(logging.WARNING, logger="cselab"):
        assert compiled.drop_partial_files(tmp_path) == [path]
    assert not path.exists() and kept.read_bytes() == whole
    (warned,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "removed 1 unreadable file(s)" in warned and "ab/ckey.main" in warned
    assert compiled.drop_partial_files(tmp_path) == []


def test_a_whole_elf_library_is_kept(tmp_path):
    lib = tmp_path / "k.so"
    shutil.copyfile(real_library(), lib)
    assert compiled.cache_file_problem(lib) is None and compiled.drop_partial_files(tmp_path) == []
