"""A full, read-only or over-quota disk is named: the OSError under whatever a writer raised
(torch's checkpoint writer wraps it in a RuntimeError) becomes one StorageError naming the path,
the cause and the space needed; a checkpoint that cannot be written leaves nothing partial and the
one before it whole."""

from __future__ import annotations

import errno
import json

import pytest
import torch

from cselab.errors import StorageError, named_storage_errors, storage_error
from cselab.training.checkpoints import Checkpoints, damaged, state_bytes


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "no space left on the device"),
                                        (errno.EDQUOT, "the disk quota is exceeded"),
                                        (errno.EROFS, "the file system is read-only")])
def test_a_storage_oserror_under_another_error_is_named(tmp_path, code, words):
    def torch_like():
        try:
            raise OSError(code, "os words", str(tmp_path / "resume" / "state.pt"))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 91514560 vs 91514452")

    with pytest.raises(StorageError) as err:
        with named_storage_errors(tmp_path, need=12_000_000):
            torch_like()
    text = str(err.value)
    assert text.startswith(f"cannot write {tmp_path / 'resume' / 'state.pt'}: {words}")
    assert ("MB free there, about 12.0 MB needed" in text) == (code != errno.EROFS)
    assert "the last good checkpoint" in text and "enforce fail" not in text


def test_a_writer_that_keeps_only_its_own_message_is_named_by_the_space_left(tmp_path):
    """No OSError in the chain, but less free space than the write needs: the disk is full."""
    with pytest.raises(StorageError, match="no space left on the device"):
        with named_storage_errors(tmp_path, need=lambda: 10 ** 18):
            raise RuntimeError("unexpected pos 91514560 vs 91514452")
    with pytest.raises(RuntimeError):  # enough space: not the disk, left as it was
        with named_storage_errors(tmp_path, need=1):
            raise RuntimeError("unexpected pos")
    assert storage_error(ValueError("not a disk")) is None and storage_error(FileNotFoundError(2, "gone")) is None


def test_a_checkpoint_the_disk_cannot_take_leaves_the_last_good_one(tmp_path, monkeypatch):
    ckpts = Checkpoints(tmp_path / "resume", "fp")
    model = torch.nn.Linear(64, 64)
    ckpts.save({"step": 80, "model": model.state_dict()}, None)
    first = tmp_path / "resume" / "step-00000080"
    assert damaged(first) is None
    real_save = torch.save

    def full_disk(obj, fh, *a, **k):
        real_save(obj, fh, *a, **k)
        fh.truncate(100)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from \
            OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(StorageError) as err:
        ckpts.save({"step": 160, "model": model.state_dict()}, None)
    assert str(err.value).startswith(f"cannot write {tmp_path / 'resume'}: no space left on the device")
    assert f"about {state_bytes(model.state_dict()) / 1e6:,.1f} MB needed" in str(err.value)
    assert sorted(p.name for p in (tmp_path / "resume").iterdir()) == ["step-00000080"]  # nothing partial
    assert damaged(first) is None and json.loads((first / "meta.json").read_text())["step"] == 80
