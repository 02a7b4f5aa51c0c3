"""PyTorch's zip checkpoint format (``torch.save``), read without torch and without trusting the pickle.

A ``.nemo`` file's ``model_weights.ckpt`` is a zip holding ``<dir>/data.pkl`` (the state dict as a pickle) and one
file per storage (``<dir>/data/<key>``). The pickle may name only what a state dict of plain tensors needs: an
``OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and the typed storage classes. Anything else (a callable that
would run code) is refused, so a hostile checkpoint cannot execute anything at load.
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

import numpy as np

from omnid.engine.errors import CheckpointError

STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "DoubleStorage": np.float64,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
    # bfloat16 has no numpy dtype: read as its raw 16 bits, widened to float32 below.
    "BFloat16Storage": np.uint16,
}


class _StorageType:
    def __init__(self, name: str):
        self.name = name


class _Storage:
    """A storage's bytes as a flat numpy array of its dtype (loaded once, shared by every tensor viewing it)."""

    def __init__(self, name: str, data: np.ndarray):
        self.name = name
        self.data = data


def _rebuild_tensor_v2(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                       requires_grad: bool = False, hooks: Any = None, metadata: Any = None) -> np.ndarray:
    itemsize = storage.data.itemsize
    if any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise pickle.UnpicklingError("negative tensor size or stride")
    span = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    if offset < 0 or offset + span > storage.data.size:
        raise pickle.UnpicklingError("tensor reaches past its storage")
    view = np.lib.stride_tricks.as_strided(storage.data[offset:], shape=tuple(size),
                                           strides=tuple(s * itemsize for s in stride))
    out = np.array(view)  # own the memory, contiguous
    if storage.name == "BFloat16Storage":
        out = (out.astype(np.uint32) << 16).view(np.float32)
    return out


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], archive: zipfile.ZipFile, prefix: str):
        super().__init__(file)
        self.archive = archive
        self.prefix = prefix
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a weights file holds only tensors")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r:.80}")
        kind, key = pid[1].name, str(pid[2])
        if key not in self.storages:
            try:
                raw = self.archive.read(f"{self.prefix}data/{key}")
            except KeyError:
                raise pickle.UnpicklingError(f"storage {key} is missing from the archive") from None
            dtype = np.dtype(STORAGE_DTYPES[kind]).newbyteorder("<")
            if len(raw) % dtype.itemsize:
                raise pickle.UnpicklingError(f"storage {key} is not a whole number of {kind} items")
            self.storages[key] = _Storage(kind, np.frombuffer(raw, dtype))
        return self.storages[key]


def read_state_dict(source: Path | IO[bytes], name: str = "") -> dict[str, np.ndarray]:
    """The tensors of a torch zip checkpoint, by name, as numpy arrays (little-endian, as torch writes them)."""
    label = name or str(source)
    try:
        with zipfile.ZipFile(source) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if len(pickles) != 1:
                raise CheckpointError(f"{label}: not a PyTorch zip checkpoint (no single data.pkl)")
            prefix = pickles[0][: -len("data.pkl")]
            with archive.open(pickles[0]) as f:
                state = _Unpickler(f, archive, prefix).load()
    except CheckpointError:
        raise
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{label}: corrupt or unreadable tensor file: {exc}") from exc
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise CheckpointError(f"{label}: expected a state dict of tensors")
    return {str(k): v for k, v in state.items()}
