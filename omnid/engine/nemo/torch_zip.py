"""PyTorch's zip checkpoint format (``torch.save``), read without torch and without trusting the pickle.

A ``.nemo`` file's ``model_weights.ckpt`` is a zip holding ``<dir>/data.pkl`` (the state dict as a pickle) and one
file per storage (``<dir>/data/<key>``). The pickle may name only what a state dict of plain tensors needs: an
``OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and the typed storage classes. Anything else (a callable that
would run code) is refused, so a hostile checkpoint cannot execute anything at load.
"""

from __future__ import annotations

import math
import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
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


# Bounds when the caller gives none: far above any speech model's state dict, far below what a lie would cost.
MAX_BYTES = 8 << 30
# A state dict's pickle names its tensors and their shapes: kilobytes, not megabytes.
MAX_PICKLE_BYTES = 16 << 20


class _StorageType:
    def __init__(self, name: str):
        self.name = name


class _Storage:
    """A storage's bytes as a flat numpy array of its dtype (loaded once, shared by every tensor viewing it)."""

    def __init__(self, name: str, data: np.ndarray):
        self.name = name
        self.data = data


@dataclass(frozen=True)
class _Tensor:
    """A tensor as the pickle describes it, built only once its name is known and its claims are checked."""

    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor_v2(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                       requires_grad: bool = False, hooks: Any = None, metadata: Any = None) -> _Tensor:
    if not (isinstance(storage, _Storage) and isinstance(offset, int) and isinstance(size, tuple)
            and isinstance(stride, tuple) and len(size) == len(stride)
            and all(isinstance(n, int) for n in size + stride)):
        raise pickle.UnpicklingError("malformed tensor record")
    return _Tensor(storage, offset, size, stride)


def _build(label: str, name: str, t: _Tensor) -> np.ndarray:
    """The tensor's own copy, after checking that it claims no more than its storage holds: a tensor's elements
    are at most its storage's (a stride-0 tensor of 10^14 elements over one float would otherwise be allocated)."""
    data = t.storage.data
    if any(n < 0 for n in t.size) or any(s < 0 for s in t.stride) or t.offset < 0:
        raise CheckpointError(f"{label}: tensor {name}: negative size, stride or offset")
    count = math.prod(t.size)
    if count > data.size:
        raise CheckpointError(f"{label}: tensor {name}: claims {count} elements, its storage holds {data.size}")
    span = 1 + sum((n - 1) * s for n, s in zip(t.size, t.stride)) if count else 0
    if t.offset + span > data.size:
        raise CheckpointError(f"{label}: tensor {name}: reaches past its storage")
    view = np.lib.stride_tricks.as_strided(data[t.offset:], shape=t.size,
                                           strides=tuple(s * data.itemsize for s in t.stride))
    out = np.array(view)  # own the memory, contiguous
    if t.storage.name == "BFloat16Storage":
        out = (out.astype(np.uint32) << 16).view(np.float32)
    return out


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], archive: zipfile.ZipFile, prefix: str, label: str, max_bytes: int):
        super().__init__(file)
        self.archive = archive
        self.prefix = prefix
        self.label = label
        self.max_bytes = max_bytes
        self.stored = 0
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
                info = self.archive.getinfo(f"{self.prefix}data/{key}")
            except KeyError:
                raise pickle.UnpicklingError(f"storage {key} is missing from the archive") from None
            self.stored += info.file_size
            if self.stored > self.max_bytes:
                raise CheckpointError(f"{self.label}: its storages hold more than the {self.max_bytes} bytes the "
                                      "model needs")
            raw = self.archive.read(info)  # never more than the size checked: zipfile stops there
            dtype = np.dtype(STORAGE_DTYPES[kind]).newbyteorder("<")
            if len(raw) % dtype.itemsize:
                raise pickle.UnpicklingError(f"storage {key} is not a whole number of {kind} items")
            self.storages[key] = _Storage(kind, np.frombuffer(raw, dtype))
        return self.storages[key]


# Training tools save the state dict under one of these keys (funasr's load_pretrained_model unwraps them: Fun-ASR-Nano's
# model.pt is {"state_dict": {...}}).
WRAPPERS = ("state_dict", "model")


def _unwrapped(state: object) -> object:
    """A state dict saved inside a one-key dict (``{"state_dict": {...}}``), as it is; anything else unchanged."""
    if isinstance(state, dict) and len(state) == 1:
        (key, inner), = state.items()
        if key in WRAPPERS and isinstance(inner, dict):
            return inner
    return state


def read_state_dict(source: Path | IO[bytes], name: str = "", max_bytes: int = MAX_BYTES) -> dict[str, np.ndarray]:
    """The tensors of a torch zip checkpoint, by name, as numpy arrays (little-endian, as torch writes them). At most
    ``max_bytes`` of storages are read (a caller that knows the model's size passes a bound from it), and every
    tensor is checked against its storage before it is built: memory stays within a small multiple of the file's."""
    label = name or str(source)
    try:
        with zipfile.ZipFile(source) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if len(pickles) != 1:
                raise CheckpointError(f"{label}: not a PyTorch zip checkpoint (no single data.pkl)")
            if archive.getinfo(pickles[0]).file_size > MAX_PICKLE_BYTES:
                raise CheckpointError(f"{label}: its data.pkl is over {MAX_PICKLE_BYTES} bytes: not a state dict")
            prefix = pickles[0][: -len("data.pkl")]
            with archive.open(pickles[0]) as f:
                state = _Unpickler(f, archive, prefix, label, max_bytes).load()
            state = _unwrapped(state)
            if not isinstance(state, dict) or not all(isinstance(v, _Tensor) for v in state.values()):
                raise CheckpointError(f"{label}: expected a state dict of tensors")
            # each storage freed once its tensor is built (nothing else holds it): one copy of the weights held
            return {str(k): _build(label, str(k), state.pop(k)) for k in list(state)}
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, RecursionError, MemoryError, OverflowError) as exc:
        raise CheckpointError(f"{label}: corrupt or unreadable tensor file: {type(exc).__name__}: {exc}") from exc
