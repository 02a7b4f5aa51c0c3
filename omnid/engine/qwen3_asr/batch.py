"""Many Qwen3-ASR jobs on one model at once, on the shared program driver (engine/programs.py).

A job's program yields an ``Encode`` of one chunk of audio (sent back its audio embeddings) and a ``Generate`` of one
greedy decode after a prompt (sent back a ``Generation``); prompts, languages, forced prefixes, the streaming recipe
and long-audio chunks run inside it. ``QwenBatch`` encodes each job's audio on its own (clips differ in length and
the encoder windows them), prefills each decode on its own, and steps every live sequence of a lane together: one
product per weight for all rows, each row with its own keys and values, stopping rule and loop guard. On MLX's CPU
device the lane is the numpy decoder's (cpu_decoder.py); elsewhere the MLX model's, rows batched the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import numpy as np

from omnid.engine.programs import Key, ProgramBatch
from omnid.engine.qwen3.cpu_decoder import NumpyDecoder
from omnid.engine.qwen3.model import Qwen3ASR
from omnid.engine.qwen3.network import PREFILL_BLOCK
from omnid.engine.qwen3.tokenizer import QwenTokenizer


@dataclass(frozen=True, eq=False)
class Encode:
    """Asks for one chunk's audio embeddings (sent back as (audio tokens, output_dim))."""

    audio: np.ndarray


@dataclass(frozen=True, eq=False)
class Generate:
    """Asks for a greedy decode after the prompt ``ids`` (sent back as a Generation)."""

    ids: list[int]
    features: mx.array
    budget: int
    loop_guard: bool = True


Program = Generator[Encode | Generate, Any, Any]


class Engine(Protocol):
    """What a batch reads of its engine (engine.py's Qwen3AsrEngine, which imports this module: said here, not
    imported back)."""

    @property
    def model(self) -> Qwen3ASR: ...

    @property
    def tokenizer(self) -> QwenTokenizer: ...

    @property
    def cpu_decoder(self) -> NumpyDecoder | None:
        """The numpy decoder on MLX's CPU device; None where the MLX model decodes."""

    def encode(self, audio: np.ndarray, check: Callable[[], None]) -> mx.array:
        """A chunk's audio embeddings (audio tokens, output_dim)."""

    def stopped(self, tokens: list[int], loop_guard: bool) -> tuple[list[int], str] | None:
        """The tokens kept and why the decode ends ("stop", "loop"), or None while it goes on."""


@dataclass(frozen=True)
class Generation:
    tokens: list[int]
    finish: str  # "stop" (end token), "length" (budget), "loop" (loop guard)
    logprob: float  # sum over tokens


class Greedy:
    """One sequence: the greedy choice at each step, its log-probability, and the engine's stopping rules (an end
    token, a token loop, the budget)."""

    def __init__(self, engine: Engine, budget: int, loop_guard: bool):
        self.engine = engine
        self.budget = budget
        self.loop_guard = loop_guard
        self.tokens: list[int] = []
        self.total = 0.0
        self.finish = "length"

    def choose(self, logits: np.ndarray) -> bool:
        token = int(np.argmax(logits))
        peak = float(logits[token])
        self.total += peak - (peak + float(np.log(np.exp(logits - peak).sum())))
        self.tokens.append(token)
        stopped = self.engine.stopped(self.tokens, self.loop_guard)
        if stopped is not None:
            self.tokens, self.finish = stopped
            return True
        return len(self.tokens) >= self.budget

    def result(self) -> Generation:
        return Generation(self.tokens, self.finish, self.total)


class _Lane:
    """Rows stepping together, each with its own decoder state (no padding: join and leave add or drop a row)."""

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.sequences: list[Greedy] = []
        self.rows: list[Any] = []

    def __len__(self) -> int:
        return len(self.keys)

    def join(self, key: Key, sequence: Greedy, state: Any) -> None:
        self.keys.append(key)
        self.sequences.append(sequence)
        self.rows.append(state)

    def leave(self, keys: Collection[Key]) -> None:
        keep = [i for i, k in enumerate(self.keys) if k not in keys]
        self.keys = [self.keys[i] for i in keep]
        self.sequences = [self.sequences[i] for i in keep]
        self.rows = [self.rows[i] for i in keep]


class NumpyLane(_Lane):
    """The numpy decoder's rows (cpu_decoder.Row)."""

    def __init__(self, decoder: NumpyDecoder):
        super().__init__()
        self.decoder = decoder

    def step(self) -> np.ndarray:
        return self.decoder.step([s.tokens[-1] for s in self.sequences], self.rows)


class MlxLane(_Lane):
    """The MLX decoder's rows, each a list of KV caches (one per layer), the linear maps over all rows at once."""

    def __init__(self, model: Qwen3ASR):
        super().__init__()
        self.model = model

    def step(self) -> np.ndarray:
        tokens = mx.array([[s.tokens[-1]] for s in self.sequences], dtype=mx.int32)
        caches = [[row[i] for row in self.rows] for i in range(len(self.model.text.layers))]
        hidden = self.model.text(self.model.token_embeddings(tokens), caches)
        logits = self.model.logits(hidden[:, -1])
        mx.eval(logits)
        return np.array(logits, dtype=np.float32)


class QwenBatch(ProgramBatch):
    def __init__(self, engine: Engine, lane: Callable[[Key], Any] | None = None):
        super().__init__(lane)
        self.engine = engine

    def is_encode(self, request: Any) -> bool:
        return isinstance(request, Encode)

    def encode(self, requests: list[Any], between: Callable[[], None]) -> list[Any]:
        return [self.engine.encode(r.audio, between) for r in requests]

    def begin(self, request: Any) -> tuple[Greedy, np.ndarray, Any]:
        engine = self.engine
        if request.budget < 1:
            raise ValueError("a decode needs a budget of at least one token")
        x = engine.model.embed(request.ids, engine.tokenizer.ids.audio_pad, request.features)
        sequence = Greedy(engine, request.budget, request.loop_guard)
        if engine.cpu_decoder is not None:
            row, logits = engine.cpu_decoder.prefill(np.array(x[0]), request.budget, lambda: None)
            return sequence, logits, row
        caches = engine.model.new_caches()
        for start in range(0, x.shape[1], PREFILL_BLOCK):
            hidden = engine.model.text(x[:, start : start + PREFILL_BLOCK], [[c] for c in caches])
            mx.eval(hidden)
        return sequence, np.array(engine.model.logits(hidden[:, -1])[0], dtype=np.float32), caches

    def new_lane(self) -> Any:
        if self.engine.cpu_decoder is not None:
            return NumpyLane(self.engine.cpu_decoder)
        return MlxLane(self.engine.model)

