"""Where a corpus is: a folder holding ``manifest.jsonl`` (one clip a line, its audio path relative to the folder)
and, optionally, ``reference/<system>.jsonl`` (another system's outputs). The repository carries a small one for
its own tests (``tests/corpus``); ``OMNID_CORPUS`` names a larger one for ``omnid eval`` and the benches. Nothing
is looked for beside the checkout: a corpus is used only where it is named."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ENVIRONMENT_VARIABLE = "OMNID_CORPUS"
MANIFEST = "manifest.jsonl"


class NoCorpus(Exception):
    """No corpus was named, or the one named has no manifest; the message says how to give one."""


def manifest_path(given: Path | None, environ: Mapping[str, str] = os.environ) -> Path:
    """The manifest to read: ``given`` (a manifest file or a corpus folder), else ``$OMNID_CORPUS``'s."""
    if given is not None:
        return _manifest_in(given, "--manifest")
    if environ.get(ENVIRONMENT_VARIABLE):
        return _manifest_in(Path(environ[ENVIRONMENT_VARIABLE]), ENVIRONMENT_VARIABLE)
    raise NoCorpus(f"no corpus: give --manifest PATH/{MANIFEST} or set {ENVIRONMENT_VARIABLE} to a corpus folder "
                   f"(the repository's tests/corpus is a small one)")


def corpus_folder(default: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """For the benches: ``$OMNID_CORPUS`` if set, else ``default`` (the repository's small corpus)."""
    if environ.get(ENVIRONMENT_VARIABLE):
        return _manifest_in(Path(environ[ENVIRONMENT_VARIABLE]), ENVIRONMENT_VARIABLE).parent
    return _manifest_in(default, "the default corpus").parent


def _manifest_in(source: Path, named: str) -> Path:
    path = source.expanduser()
    path = path / MANIFEST if path.is_dir() else path
    if not path.is_file():
        raise NoCorpus(f"no corpus manifest at {path} (from {named})")
    return path
