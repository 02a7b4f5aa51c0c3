"""Reader for CTranslate2's ``model.bin`` (format version 6), without importing ctranslate2.

Layout (little-endian): u32 version; string spec name; u32 spec revision; u32 variable count; per variable a name
string, u8 rank, u32 dims x rank, u8 dtype, u32 byte count, raw bytes; then u32 alias count and (alias, target)
string pairs. A string is a u16 length (counting a trailing NUL) followed by its bytes.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from omnid.engine.errors import CheckpointError

DTYPES: dict[int, np.dtype] = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
    # bfloat16 has no numpy dtype: read raw 16-bit words and widen in _as_array.
    5: np.dtype("<u2"),
}
BFLOAT16 = 5
SUPPORTED_VERSIONS = {5, 6}


class _Cursor:
    def __init__(self, data: memoryview, path: Path):
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int, what: str) -> memoryview:
        if self.pos + n > len(self.data):
            raise CheckpointError(
                f"{self.path}: truncated while reading {what} (needs {n} bytes at offset {self.pos}, "
                f"file has {len(self.data)})"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple[int, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def string(self, what: str) -> str:
        (n,) = self.unpack("H", what)
        raw = bytes(self.take(n, what))
        try:
            return raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"{self.path}: {what} is not valid UTF-8 at offset {self.pos - n}") from exc


def read_model_bin(path: Path) -> tuple[str, dict[str, np.ndarray]]:
    """Returns the spec name and every variable (aliases resolved) as a numpy array."""
    try:
        data = memoryview(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror}") from exc
    cur = _Cursor(data, path)
    (version,) = cur.unpack("I", "format version")
    if version not in SUPPORTED_VERSIONS:
        raise CheckpointError(f"{path}: unsupported CTranslate2 format version {version} (expected 6)")
    spec = cur.string("spec name")
    cur.unpack("I", "spec revision")
    (count,) = cur.unpack("I", "variable count")
    variables: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = cur.string("variable name")
        (rank,) = cur.unpack("B", f"rank of {name}")
        shape = cur.unpack("I" * rank, f"shape of {name}")
        (dtype_id,) = cur.unpack("B", f"dtype of {name}")
        (nbytes,) = cur.unpack("I", f"byte count of {name}")
        if dtype_id not in DTYPES:
            raise CheckpointError(f"{path}: tensor {name} has unknown dtype id {dtype_id}")
        expected = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype_id].itemsize
        if nbytes != expected:
            raise CheckpointError(f"{path}: tensor {name} declares {nbytes} bytes but shape {shape} needs {expected}")
        raw = cur.take(nbytes, f"data of tensor {name}")
        variables[name] = _as_array(raw, dtype_id, shape)
    (n_alias,) = cur.unpack("I", "alias count")
    for _ in range(n_alias):
        alias, target = cur.string("alias name"), cur.string("alias target")
        if target not in variables:
            raise CheckpointError(f"{path}: alias {alias} points to missing tensor {target}")
        variables[alias] = variables[target]
    if cur.pos != len(data):
        raise CheckpointError(f"{path}: {len(data) - cur.pos} unexpected trailing bytes after the last alias")
    return spec, variables


def _as_array(raw: memoryview, dtype_id: int, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.frombuffer(raw, dtype=DTYPES[dtype_id]).reshape(shape)
    if dtype_id == BFLOAT16:
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr
