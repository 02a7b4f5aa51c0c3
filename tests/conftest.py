"""Shared fixtures: the real tiny.en checkpoint, the shared corpus, and one engine runtime for the session."""

from __future__ import annotations

from pathlib import Path

import pytest

import omnid  # noqa: F401  (preloads OpenBLAS before any test imports mlx)
from omnid.config import load_config, model_folder
from tests.helpers import CORPUS


@pytest.fixture(scope="session")
def corpus() -> Path:
    assert (CORPUS / "manifest.jsonl").exists(), f"the shared corpus is missing at {CORPUS}"
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
