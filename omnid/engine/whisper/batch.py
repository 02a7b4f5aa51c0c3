"""Many Whisper jobs on one model at once: windows encoded together, decoders stepped together.

A job is a *program*: a generator that yields the model work it needs (an ``Encode`` of a window, a ``Decode`` of
one sequence) and is sent the result; everything else (language detection, word alignment, the fallback over
temperatures, cutting a window into segments) runs inside it, between its requests. A ``WhisperBatch`` drives any
number of programs. Each ``step`` does the work of the smallest key first: either it encodes the windows waiting
(one encoder call for all windows of that key's length) or it advances every live sequence by one token (one
decoder call for all, each row with its own KV cache, logit rules and stopping point). Programs join at any step
and leave when they end, so the runtime can feed it jobs as they come. A program alone in its batch runs exactly
the solo computation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import mlx.core as mx
import numpy as np

from omnid.engine.cpu_math import mlx_blas_single_threaded
from omnid.engine.whisper.cpu_decoder import CpuDecodeBatch
from omnid.engine.whisper.decoding import DecodeOptions, Decoding, WindowDecoder
from omnid.engine.whisper.model import KVCache, Whisper

T = TypeVar("T")
Key = Any  # hashable and ordered: the smallest waiting key is encoded first


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
Outcome = tuple[Key, Any, BaseException | None]
# Told the keys about to get model work, and whether it is an encode (checked between its layers); answers those
# to stop now (cancelled, or preempted).
Drop = Callable[[list[Key], bool], Collection[Key]]

NEG_INF = mx.array(-mx.inf, mx.float32)
ZERO = mx.array(0.0, mx.float32)


class _Abandoned(Exception):
    """Every window of an encoder call was dropped."""


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

    def join(self, key: Key, sequence: Decoding, self_kv: list[KVCache], cross: list) -> None:
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


class WhisperBatch:
    """Drives programs (see the module docstring). ``step`` does one unit of model work and returns the programs
    that ended: (key, result, None) or (key, None, error). Keys order the work: the smallest key's goes first,
    so a runtime that keys jobs by (priority, arrival) serves finals first.

    ``lane`` puts each key's decoding in a lane: sequences step together only with those of their own lane, and
    the lane holding the smallest key steps first. A runtime that gives each priority its own lane keeps previews
    out of the finals' decode steps, where every extra row makes each of the finals' tokens slower."""

    def __init__(self, model: Whisper, decoder: WindowDecoder, lane: Callable[[Key], Any] | None = None):
        self.model = model
        self.decoder = decoder
        self.lane: Callable[[Key], Any] = lane or (lambda key: 0)
        self.programs: dict[Key, Program] = {}
        self.waiting: dict[Key, Encode] = {}  # programs waiting for an encoded window
        self.lanes: dict[Any, DecodeBatch | CpuDecodeBatch] = {}  # live sequences by lane
        self._ended: list[Outcome] = []

    def __len__(self) -> int:
        return len(self.programs)

    def add(self, key: Key, program: Program) -> None:
        self.programs[key] = program
        with _blas_for_steps():
            self._resume(key, None)

    def drop(self, keys: Collection[Key]) -> None:
        """Stops these programs where they are; nothing is reported for them."""
        for key in keys:
            program = self.programs.pop(key, None)
            if program is not None:
                program.close()
            self.waiting.pop(key, None)
        for decodes in self.lanes.values():
            decodes.leave(keys)

    @property
    def decoding(self) -> int:
        """Sequences decoding, all lanes together."""
        return sum(len(d) for d in self.lanes.values())

    def step(self, drop: Drop) -> list[Outcome]:
        # The smallest key's work goes first: a final's decode is not held up by previews' encodes, nor a final's
        # encode by previews' decoding.
        lanes = [d for d in self.lanes.values() if d]
        decodes = min(lanes, key=lambda d: min(d.keys)) if lanes else None
        with _blas_for_steps():
            if self.waiting and (decodes is None or min(self.waiting) < min(decodes.keys)):
                self._encode(drop)
            elif decodes is not None:
                self._decode(decodes, drop)
        ended, self._ended = self._ended, []
        return ended

    # --- model work -------------------------------------------------------------------------------------

    def _encode(self, drop: Drop) -> None:
        shape = self.waiting[min(self.waiting)].mel.shape
        keys = sorted(k for k, r in self.waiting.items() if r.mel.shape == shape)

        def between_layers() -> None:
            gone = [k for k in drop(keys, True) if k in self.programs]
            if gone:
                self.drop(gone)
            if not any(k in self.waiting for k in keys):
                raise _Abandoned

        try:
            between_layers()
            keys[:] = [k for k in keys if k in self.waiting]
            mels = [self.waiting[k].mel for k in keys]
            batch = mels[0][None] if len(mels) == 1 else mx.stack(mels)
            features = self.model.encoder(batch, between_layers=between_layers)
            mx.eval(features)
        except _Abandoned:
            return
        except Exception as exc:
            for k in keys:
                if k in self.waiting:
                    self._fail(k, exc)
            return
        for i, key in enumerate(keys):
            if self.waiting.pop(key, None) is not None:
                self._resume(key, features if len(keys) == 1 else features[i : i + 1])

    def _decode(self, decodes: DecodeBatch | CpuDecodeBatch, drop: Drop) -> None:
        gone = [k for k in drop(list(decodes.keys), False) if k in self.programs]
        if gone:
            self.drop(gone)
        if not decodes:
            return
        logits = decodes.step()
        ended = [(k, s) for k, s, row in zip(decodes.keys, decodes.sequences, logits) if s.choose(row)]
        if ended:
            decodes.leave({k for k, _ in ended})
        for key, sequence in ended:
            self._resume(key, sequence.result(self.decoder.tok))

    # --- programs ---------------------------------------------------------------------------------------

    def _resume(self, key: Key, value: Any) -> None:
        """Sends a program what it asked for and runs it to its next request (or its end)."""
        while True:
            try:
                request = self.programs[key].send(value)
            except StopIteration as stop:
                del self.programs[key]
                self._ended.append((key, stop.value, None))
                return
            except Exception as exc:  # the program's own failure belongs to its job alone
                self._fail(key, exc)
                return
            if isinstance(request, Encode):
                self.waiting[key] = request
                return
            try:
                sequence, self_kv, logits = self.decoder.begin(request.cross, request.prompt, request.opts,
                                                               request.prefix)
            except Exception as exc:
                self._fail(key, exc)
                return
            if not sequence.choose(logits):
                lane = self.lane(key)
                if lane not in self.lanes:
                    self.lanes[lane] = self._decode_batch()
                self.lanes[lane].join(key, sequence, self_kv, request.cross)
                return
            value = sequence.result(self.decoder.tok)  # done at its first token: straight back to the program

    def _decode_batch(self) -> DecodeBatch | CpuDecodeBatch:
        """On MLX's CPU device the steps run in numpy (cpu_decoder.py: a few times faster there); elsewhere in MLX."""
        if mx.default_device() == mx.cpu:
            return CpuDecodeBatch(self.model.decoder.cpu_step)
        return DecodeBatch(self.model)

    def _fail(self, key: Key, error: BaseException) -> None:
        program = self.programs.pop(key, None)
        if program is not None:
            program.close()
        self.waiting.pop(key, None)
        self._ended.append((key, None, error))


def _blas_for_steps() -> AbstractContextManager[None]:
    """On MLX's CPU device the layers run in numpy (cpu_encoder.py, cpu_decoder.py); MLX's BLAS, left the small
    products, runs them on one thread (cpu_math.mlx_blas_single_threaded)."""
    return mlx_blas_single_threaded() if mx.default_device() == mx.cpu else nullcontext()


def run_alone(batch: WhisperBatch, program: Program[T], check: Callable[[], None]) -> T:
    """One program on its own: ``check`` before every unit of model work; what it raises stops the program and
    is raised here."""
    stopped: list[BaseException] = []

    def drop(keys: list[Key], encoding: bool) -> Collection[Key]:
        try:
            check()
        except BaseException as exc:
            stopped.append(exc)
            return keys
        return ()

    batch.add(0, program)
    while True:
        ended = batch.step(drop)
        if stopped:
            raise stopped[0]
        for _, result, error in ended:
            if error is not None:
                raise error
            return result

