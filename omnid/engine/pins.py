"""SHA-256 pins for checkpoint files: a pinned file whose bytes changed fails at load, naming the file."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from omnid.engine.errors import CheckpointError

CHUNK = 1 << 20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify(files: list[Path], pins: Mapping[str, str]) -> dict[str, str]:
    """Checks every pinned file among ``files`` (keyed by file name); returns name -> status for reports."""
    report: dict[str, str] = {}
    for path in files:
        want = pins.get(path.name)
        if want is None:
            report[path.name] = "unpinned"
            continue
        got = sha256(path)
        if got != want.lower():
            raise CheckpointError(f"{path}: SHA-256 {got} does not match its pin {want}")
        report[path.name] = "ok"
    return report
