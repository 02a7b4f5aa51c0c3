"""Many Whisper jobs on one model at once: windows encoded together, decoders stepped together.

A job is a program (engine/programs.py, the driver every batching engine shares) that yields an ``Encode`` of a
window or a ``Decode`` of one sequence and is sent the result; language detection, word alignment, the fallback over
temperatures and cutting a window into segments run inside it. ``WhisperBatch`` says what the work is: windows of one
length are encoded in one encoder call, and every live sequence of a lane advances by one token in one decoder call
(each row with its own KV cache, logit rules and stopping point). A program alone in its batch runs exactly the solo
computation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import mlx.core as mx
import numpy as np

from omnid.engine.cpu_math import mlx_blas_single_threaded
from omnid.engine.programs import Key, ProgramBatch, run_alone
from omnid.engine.whisper.cpu_decoder import CpuDecodeBatch
from omnid.engine.whisper.decoding import DecodeOptions, Decoding, WindowDecoder
from omnid.engine.whisper.model import KVCache, Whisper

T = TypeVar("T")
__all__ = ["Decode", "DecodeBatch", "Encode", "Program", "WhisperBatch", "run_alone"]


@dataclass(frozen=True, eq=False)
class Encode:
    """Asks for a window's encoder output (sent back as (1, positions, state))."""

    mel: mx.array  # (frames, n_mels), already padded as the window mode asks


@dataclass(frozen=True, eq=False)
class Decode:
    """Asks for one decode of a window at one temperature (sent back as a DecodeResult)."""

    cross: list  # the window's cross-attention keys and values (TextDecoder.cross_kv)
    prompt: list[int]
    opts: DecodeOptions
    prefix: tuple[int, ...] = ()


Program = Generator[Encode | Decode, Any, T]

NEG_INF = mx.array(-mx.inf, mx.float32)
ZERO = mx.array(0.0, mx.float32)


class DecodeBatch:
    """Live sequences stepping together. Their self-attention caches are left-padded to one length and their
    cross-attention caches right-padded to the longest window; masks hide both paddings. Membership changes
    (join, leave) rebuild the stacked caches; steps only append to them."""

    def __init__(self, model: Whisper):
        self.decoder = model.decoder
        self._reset()

    def _reset(self) -> None:
        self.keys: list[Key] = []
        self.sequences: list[Decoding] = []
        self.pads: list[int] = []  # leading padding of each row's self-attention cache
        self.widths: list[int] = []  # audio positions of each row's window
        self.self_kv: list[KVCache] = []
        self.cross_kv: list[KVCache] = []

    def __len__(self) -> int:
        return len(self.keys)

    def join(self, key: Key, sequence: Decoding, state: tuple[list[KVCache], list]) -> None:
        """``state``: the sequence's self-attention caches after its prompt, and its window's cross-attention."""
        self_kv, cross = state
        cross_kv = [kv for _, kv in cross]
        if not self.keys:
            self.keys, self.sequences, self.pads = [key], [sequence], [0]
            self.widths = [cross_kv[0][0].shape[2]]
            self.self_kv, self.cross_kv = list(self_kv), cross_kv
            return
        length, new_length = self.self_kv[0][0].shape[2], self_kv[0][0].shape[2]
        if new_length > length:
            self.self_kv = [_pad(kv, new_length - length, before=True) for kv in self.self_kv]
            self.pads = [p + new_length - length for p in self.pads]
        width, new_width = self.cross_kv[0][0].shape[2], cross_kv[0][0].shape[2]
        if new_width > width:
            self.cross_kv = [_pad(kv, new_width - width, before=False) for kv in self.cross_kv]
        pad = max(length - new_length, 0)
        self_kv = [_pad(kv, pad, before=True) for kv in self_kv]
        cross_kv = [_pad(kv, width - new_width, before=False) for kv in cross_kv]
        self.self_kv = [_stack(a, b) for a, b in zip(self.self_kv, self_kv)]
        self.cross_kv = [_stack(a, b) for a, b in zip(self.cross_kv, cross_kv)]
        self.keys.append(key)
        self.sequences.append(sequence)
        self.pads.append(pad)
        self.widths.append(new_width)

    def leave(self, keys: Collection[Key]) -> None:
        keep = [i for i, k in enumerate(self.keys) if k not in keys]
        if len(keep) == len(self.keys):
            return
        if not keep:
            self._reset()
            return
        rows = mx.array(keep)
        self.keys = [self.keys[i] for i in keep]
        self.sequences = [self.sequences[i] for i in keep]
        self.pads = [self.pads[i] for i in keep]
        self.widths = [self.widths[i] for i in keep]
        trim, width = min(self.pads), max(self.widths)
        self.pads = [p - trim for p in self.pads]
        self.self_kv = [(mx.contiguous(k[rows][:, :, trim:]), mx.contiguous(v[rows][:, :, trim:]))
                        for k, v in self.self_kv]
        self.cross_kv = [(mx.contiguous(k[rows][:, :, :width]), mx.contiguous(v[rows][:, :, :width]))
                         for k, v in self.cross_kv]

    def step(self) -> np.ndarray:
        """Feeds every row its last token; returns the next logits, one row per sequence."""
        decoder = self.decoder
        caches: list[Any] = list(zip(self.self_kv, self.cross_kv))
        if len(self.keys) == 1:  # the solo computation, exactly
            hidden, caches = decoder(mx.array([[self.sequences[0].sampled[-1]]]), None, kv_cache=caches)
            self.self_kv = [c[0] for c in caches]
            return np.array(decoder.logits(hidden[0, -1]), dtype=np.float32)[None]
        length, width = self.self_kv[0][0].shape[2], self.cross_kv[0][0].shape[2]
        tokens = mx.array([[s.sampled[-1]] for s in self.sequences])
        positions = mx.array([length - p for p in self.pads])
        mask = cross_mask = None
        if any(self.pads):
            mask = mx.where(mx.arange(length + 1)[None] < mx.array(self.pads)[:, None], NEG_INF, ZERO)[:, None, None]
        if min(self.widths) < width:
            cross_mask = mx.where(mx.arange(width)[None] >= mx.array(self.widths)[:, None], NEG_INF, ZERO)[:, None, None]
        hidden, caches = decoder(tokens, None, kv_cache=caches, positions=positions, mask=mask, cross_mask=cross_mask)
        self.self_kv = [c[0] for c in caches]
        return np.array(decoder.logits(hidden[:, -1]), dtype=np.float32)


def _pad(kv: KVCache, n: int, before: bool) -> KVCache:
    if n <= 0:
        return kv

    def pad(t: mx.array) -> mx.array:
        zeros = mx.zeros((t.shape[0], t.shape[1], n, t.shape[3]), t.dtype)
        return mx.concatenate([zeros, t] if before else [t, zeros], axis=2)

    return pad(kv[0]), pad(kv[1])


def _stack(a: KVCache, b: KVCache) -> KVCache:
    return mx.concatenate([a[0], b[0]]), mx.concatenate([a[1], b[1]])


class WhisperBatch(ProgramBatch):
    """Whisper's work for the shared driver (programs.py): windows of one mel shape encoded together, a lane's
    sequences stepped together (batch.py's ``DecodeBatch`` in MLX, cpu_decoder.py's ``CpuDecodeBatch`` on the CPU)."""

    def __init__(self, model: Whisper, decoder: WindowDecoder, lane: Callable[[Key], Any] | None = None):
        super().__init__(lane)
        self.model = model
        self.decoder = decoder

    def is_encode(self, request: Any) -> bool:
        return isinstance(request, Encode)

    def together(self, keys: list[Key]) -> list[Key]:
        shape = self.waiting[keys[0]].mel.shape
        return [k for k in keys if self.waiting[k].mel.shape == shape]

    def encode(self, requests: list[Any], between: Callable[[], None]) -> list[Any]:
        mels = [r.mel for r in requests]
        features = self.model.encoder(mels[0][None] if len(mels) == 1 else mx.stack(mels), between_layers=between)
        mx.eval(features)
        return [features] if len(mels) == 1 else [features[i : i + 1] for i in range(len(mels))]

    def begin(self, request: Any) -> tuple[Decoding, np.ndarray, Any]:
        sequence, self_kv, logits = self.decoder.begin(request.cross, request.prompt, request.opts, request.prefix)
        return sequence, logits, (self_kv, request.cross)

    def new_lane(self) -> Any:
        """On MLX's CPU device the steps run in numpy (cpu_decoder.py: a few times faster there); elsewhere in MLX."""
        if mx.default_device() == mx.cpu:
            return CpuDecodeBatch(self.model.decoder.cpu_step)
        return DecodeBatch(self.model)

    def around_steps(self) -> AbstractContextManager[None]:
        return _blas_for_steps()


def _blas_for_steps() -> AbstractContextManager[None]:
    """On MLX's CPU device the layers run in numpy (cpu_encoder.py, cpu_decoder.py); MLX's BLAS, left the small
    products, runs them on one thread (cpu_math.mlx_blas_single_threaded)."""
    return mlx_blas_single_threaded() if mx.default_device() == mx.cpu else nullcontext()
