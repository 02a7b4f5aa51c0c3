"""Checkpoints named by a Hugging Face repo id (``org/name``), found offline in the local Hugging Face cache (the
folder ``huggingface_hub`` downloads into: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
~/.cache/huggingface/hub). Everything is read through ``huggingface_hub``'s own cache functions, never with a
download: a repo's `main` snapshot or a given revision (``snapshot_download(local_files_only=True)``), the files a
snapshot should hold (its cached tree listing, else its own files) and whether each is there
(``try_to_load_from_cache``), and every repo in the cache (``scan_cache_dir``). ``huggingface_hub`` is imported
only when one of these functions runs: the configuration reads this module."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from omnid.engine.errors import CheckpointError

# What a repo id looks like (one slash; Hugging Face's own rules are checked too), as opposed to a path: a path
# that exists on disk wins over a repo id of the same spelling.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# A model repo's folder in the cache, as a message of huggingface_hub's names it: models--org--name.
_REPO_FOLDER = re.compile(r"models--([^/\\\s)]+)")


class NotCached(CheckpointError):
    """A repo id, or its revision, that the local cache does not hold; or a snapshot missing some of its files."""


def is_repo_id(value: str) -> bool:
    if not _REPO_ID.fullmatch(value) or ".." in value:
        return False
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def cache_dir() -> Path:
    """The cache ``huggingface_hub`` reads and writes, as its environment variables set it."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def snapshot(repo_id: str, revision: str = "", cache: Path | None = None) -> Path:
    """The folder of a repo's snapshot in the cache: its `main` ref's, or ``revision``'s (a branch, tag or commit
    the cache holds). NotCached (one line, naming the id and the cache, or the missing file) where there is none or
    its files are incomplete."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    cache = Path(cache or cache_dir())
    try:
        folder = Path(snapshot_download(repo_id, revision=revision or None, cache_dir=cache, local_files_only=True))
    except IncompleteSnapshotError as exc:  # its cached tree listing names files the snapshot lacks
        folder = Path(exc.snapshot_path)
    except LocalEntryNotFoundError:
        raise NotCached(_absent(repo_id, revision, cache)) from None
    problem = incomplete(repo_id, folder, cache)
    if problem:
        raise NotCached(problem)
    return folder


def _absent(repo_id: str, revision: str, cache: Path) -> str:
    from huggingface_hub.file_download import repo_folder_name

    fetch = f"omnid never downloads: `hf download {repo_id}` fetches it, or set HF_HUB_CACHE"
    if revision and (cache / repo_folder_name(repo_id=repo_id, repo_type="model")).is_dir():
        return f"{repo_id}: revision {revision!r} is not in the Hugging Face cache {cache} ({fetch})"
    return f"{repo_id}: not in the Hugging Face cache {cache} ({fetch})"


def incomplete(repo_id: str, folder: Path, cache: Path) -> str:
    """Why a cached snapshot cannot be read whole, naming its first missing file; "" when every file is there. Its
    files are those of its cached tree listing (what the download meant to fetch) where there is one, else those
    the snapshot links; a file is there when ``huggingface_hub`` finds it in the cache (a link to a blob that is
    gone is not)."""
    from huggingface_hub import get_cached_repo_tree, try_to_load_from_cache
    from huggingface_hub.errors import CachedRepoTreeNotFoundError

    commit = folder.name
    try:
        names = [f.path for f in get_cached_repo_tree(repo_id, revision=commit, cache_dir=cache)]
    except CachedRepoTreeNotFoundError:
        names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_symlink() or p.is_file())
    for name in names:
        if isinstance(try_to_load_from_cache(repo_id, name, cache_dir=cache, revision=commit), str):
            continue
        path = folder / name
        why = (f"its blob {os.path.normpath(path.parent / path.readlink())} is missing (a broken link)" if path.is_symlink()
               else "it was never downloaded")
        return f"{path}: {repo_id}'s cached snapshot {commit} is incomplete: {why}"
    return ""


@dataclass(frozen=True)
class Cached:
    """A model repo in the cache, at the snapshot a `path` naming it would take (its `main` ref's, else the newest
    one's); ``problem`` says why it cannot be read ("" when it can)."""

    repo_id: str
    folder: Path | None
    size: int  # bytes of that snapshot's files
    problem: str = ""


def cached(cache: Path | None = None) -> list[Cached]:
    """Every model repo of the cache, by repo id. NotCached where the cache does not exist."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    cache = Path(cache or cache_dir())
    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        raise NotCached(f"no Hugging Face cache at {cache} (set HF_HUB_CACHE or HF_HOME)") from None
    found = []
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        revisions = sorted(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
        if not revisions:
            found.append(Cached(repo.repo_id, None, 0, "no snapshot in the cache"))
            continue
        newest = revisions[-1]
        found.append(Cached(repo.repo_id, newest.snapshot_path, newest.size_on_disk,
                            incomplete(repo.repo_id, newest.snapshot_path, cache)))
    for warning in info.warnings:  # a repo the scan could not read (its message names a path in it)
        if (named := _REPO_FOLDER.search(str(warning))) is not None:
            repo_id = named.group(1).replace("--", "/")
            try:  # the snapshot a path would take names its missing file, where the scan names a blob
                snapshot(repo_id, cache=cache)
                problem = str(warning)
            except NotCached as exc:
                problem = str(exc)
            found.append(Cached(repo_id, None, 0, problem))
    return sorted(found, key=lambda c: c.repo_id.lower())
