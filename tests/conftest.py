import os

import pytest

from tests.helpers import LoopbackServer, make_tiny_bert

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """Path of a tiny random BERT checkpoint built from a config (no download)."""
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_encoder(tiny_bert):
    from cselab.models.encoder import load_encoder

    return load_encoder(tiny_bert)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Make sure loopback requests never go through an environment proxy."""
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")


@pytest.fixture
def server():
    s = LoopbackServer()
    yield s
    s.close()
