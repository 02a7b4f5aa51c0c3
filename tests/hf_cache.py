"""A Hugging Face cache built as ``huggingface_hub`` writes it, and the real ``omnid`` command run against it.

``models--org--name/blobs/<sha256>`` holds each file's bytes, ``snapshots/<commit>/<file>`` are relative links to
those blobs, ``refs/<branch or tag>`` holds a commit (no newline), and ``trees/<commit>.json`` is the tree listing a
download records. Shared by tests/test_hub_cache.py and tests/test_cli_revision.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
NEW = "fedcba9876543210fedcba9876543210fedcba98"


def put_snapshot(cache: Path, repo_id: str, commit: str, files: dict[str, bytes], main: bool = True,
                 tree: bool = True, refs: tuple[str, ...] = ()) -> Path:
    """One revision of a model repo, written as huggingface_hub's downloads write it; ``main`` (and each of
    ``refs``, a branch or tag) pointing at it."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    listing = {}
    for name, data in files.items():
        sha = hashlib.sha256(data).hexdigest()
        blob = repo / "blobs" / sha
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
        listing[name] = {"size": len(data), "blob_id": hashlib.sha1(data).hexdigest(), "lfs_sha256": sha,
                         "lfs_size": len(data)}
    if tree:
        (repo / "trees").mkdir(exist_ok=True)
        (repo / "trees" / f"{commit}.json").write_text(json.dumps({"format_version": 1, "files": listing}))
    for ref in ("main",) * main + refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def omnid(cache: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m omnid ARGS`` as a user runs it, with HF_HUB_CACHE pointing at ``cache`` (huggingface_hub reads
    it when imported) and no other Hugging Face variable of this environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "omnid", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env=env)
