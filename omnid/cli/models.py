"""``omnid models``: the checkpoints of the local Hugging Face cache (omnid/engine/hub.py), one line each: those
omnid can serve with their repo id, kind, layout, dtype or bits and size, and for each one it cannot, why. The kinds
are asked (their ``recognises`` and ``layout``), never listed. What the daemon serves is its configuration's
[[models]] (/v1/models): a cached checkpoint is served once a [[models]] entry's path names its repo id."""

from __future__ import annotations

import json
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from omnid.engine import hub, kinds
from omnid.engine.errors import CheckpointError

# safetensors' dtype names as MLX and numpy spell them.
_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "U32": "uint32",
           "I32": "int32", "U8": "uint8", "I8": "int8", "I64": "int64"}
_HEADER_MAX = 100 << 20  # a safetensors header larger than this is no header worth reading here


def models_command() -> int:
    try:
        found = hub.cached()
    except hub.NotCached as exc:
        print(f"omnid: {exc}", file=sys.stderr)
        return 1
    print(f"# the Hugging Face cache {hub.cache_dir()}: repo id, kind, layout, dtype or bits, size")
    for entry in found:
        print(line(entry))
    return 0


def line(entry: hub.Cached) -> str:
    """One repo of the cache: what serves it, or why nothing does."""
    if entry.problem or entry.folder is None:
        return f"{entry.repo_id}  cannot serve: {entry.problem}"
    kind = kinds.recognise(entry.folder)
    if kind is None:
        titles = kinds.spoken([k.title for k in kinds.KINDS if k.recognises is not None])
        return f"{entry.repo_id}  cannot serve: its files are no {titles} checkpoint ({_files(entry.folder)})"
    try:
        layout = kind.layout(entry.folder)
    except CheckpointError as exc:
        return f"{entry.repo_id}  cannot serve: {exc}"
    return f"{entry.repo_id}  {kind.name}  {layout}  {precision(entry.folder)}  {_size(entry.size)}"


def precision(folder: Path) -> str:
    """The weights' bits where a quantization block in config.json says them, else the dtype most of the tensors
    of its safetensors file have (read from the header alone); "?" where neither is cheap to tell."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict):
        for key in ("quantization", "quantization_config"):
            block = config.get(key)
            if isinstance(block, dict) and isinstance(block.get("bits"), int):
                mode = block.get("mode")
                return f"{block['bits']}-bit" + (f" {mode}" if isinstance(mode, str) and mode != "affine" else "")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        return "?"
    dtypes: Counter[str] = Counter()
    for path in weights[:1]:  # one shard tells the dtype of a sharded checkpoint
        header = _safetensors_header(path)
        dtypes.update(v["dtype"] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
                      and isinstance(v.get("dtype"), str))
    if not dtypes:
        return "?"
    name = dtypes.most_common(1)[0][0]
    return _DTYPES.get(name, name.lower())


def _safetensors_header(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > _HEADER_MAX:
                return {}
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error):
        return {}
    return header if isinstance(header, dict) else {}


def _files(folder: Path) -> str:
    names = sorted(p.name for p in folder.iterdir())
    return ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "") if names else "empty"


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
