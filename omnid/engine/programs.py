"""Many jobs on one model at once: the driver every batching engine shares (Whisper's batch.py, Qwen3-ASR's
batch.py).

A job is a *program*: a generator that yields the model work it needs (an encode of its audio, a decode of one
sequence) and is sent the result; everything else (languages, fallbacks, prompts, cutting audio into segments)
runs inside it, between its requests. A ``ProgramBatch`` drives any number of programs. Each ``step`` does the work
of the smallest lane first: either it encodes what is waiting (the engine says which requests go together) or it
advances every live sequence of a lane by one token (one call for all, each row with its own cache, rules and
stopping point). Programs join at any step and leave when they end, so the runtime can feed it jobs as they come.

An engine's batch says how: ``encode`` runs a group of encode requests, ``begin`` prefills one decode request into a
sequence (its first logits, and what its lane needs to take it), ``new_lane`` makes a lane's decode batch, and a
sequence's ``choose(logits)`` takes its next token and says when it is done, ``result()`` what it gives back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Generator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
Key = Any  # hashable and ordered: the smallest waiting key's work goes first
Program = Generator[Any, Any, T]
Outcome = tuple[Key, Any, BaseException | None]
# Told the keys about to get model work, and whether it is an encode (checked between its layers); answers those
# to stop now (cancelled, or preempted).
Drop = Callable[[list[Key], bool], Collection[Key]]


class Abandoned(Exception):
    """Every request of an encode was dropped."""


class LiveSequence(Protocol):
    def choose(self, logits: Any) -> bool: ...

    def result(self) -> Any: ...


class Lane(Protocol):
    """Live sequences stepping together."""

    keys: list[Key]
    sequences: list[Any]

    def __len__(self) -> int: ...

    def join(self, key: Key, sequence: Any, state: Any) -> None: ...

    def leave(self, keys: Collection[Key]) -> None: ...

    def step(self) -> Any: ...  # the next logits, one row per sequence


class ProgramBatch(ABC):
    """Drives programs (see the module docstring). ``step`` does one unit of model work and returns the programs
    that ended: (key, result, None) or (key, None, error). Keys order the work: the smallest key's goes first, so a
    runtime that keys jobs by (priority, arrival) serves finals first.

    ``lane`` puts each key's decoding in a lane: sequences step together only with those of their own lane, and
    the lane holding the smallest key steps first. A runtime that gives each priority its own lane keeps previews
    out of the finals' decode steps, where every extra row makes each of the finals' tokens slower.

    Subclasses say what the work is: ``is_encode(request)``, ``encode(keys, requests, between)``, ``begin(request)``
    and ``new_lane()``; ``around_steps()`` is a context every unit of work runs in."""

    def __init__(self, lane: Callable[[Key], Any] | None = None):
        self.lane: Callable[[Key], Any] = lane or (lambda key: 0)
        self.programs: dict[Key, Program] = {}
        self.waiting: dict[Key, Any] = {}  # programs waiting for an encode
        self.lanes: dict[Any, Lane] = {}  # live sequences by lane
        self._ended: list[Outcome] = []

    # --- what a model's batch says ------------------------------------------------------------------------

    @abstractmethod
    def is_encode(self, request: Any) -> bool: ...

    def together(self, keys: list[Key]) -> list[Key]:
        """Of the waiting keys (sorted, the smallest first), those encoded in one call with the smallest."""
        return keys[:1]

    @abstractmethod
    def encode(self, requests: list[Any], between: Callable[[], None]) -> list[Any]:
        """Each request's encoding; ``between`` is called between units of the work (it raises Abandoned)."""

    @abstractmethod
    def begin(self, request: Any) -> tuple[LiveSequence, Any, Any]:
        """A decode request prefilled: (its sequence, its first logits, the state its lane joins it with)."""

    @abstractmethod
    def new_lane(self) -> Lane: ...

    def around_steps(self) -> AbstractContextManager[None]:
        return nullcontext()

    # --- the driver -------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.programs)

    def add(self, key: Key, program: Program) -> None:
        self.programs[key] = program
        with self.around_steps():
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
        # The smallest lane's work goes first: a final's decode is not held up by previews' encodes, nor a final's
        # encode by previews' decoding. Within a lane an encode goes first, so that its job joins the sequences
        # already decoding there rather than waiting for them all to end.
        lanes = [d for d in self.lanes.values() if d]
        decodes = min(lanes, key=lambda d: min(d.keys)) if lanes else None
        with self.around_steps():
            if self.waiting and (decodes is None or self.lane(min(self.waiting)) <= self.lane(min(decodes.keys))):
                self._encode(drop)
            elif decodes is not None:
                self._decode(decodes, drop)
        ended, self._ended = self._ended, []
        return ended

    def _encode(self, drop: Drop) -> None:
        keys = self.together(sorted(self.waiting))

        def between() -> None:
            gone = [k for k in drop(keys, True) if k in self.programs]
            if gone:
                self.drop(gone)
            if not any(k in self.waiting for k in keys):
                raise Abandoned

        try:
            between()
            keys[:] = [k for k in keys if k in self.waiting]
            outputs = self.encode([self.waiting[k] for k in keys], between)
        except Abandoned:
            return
        except Exception as exc:
            for k in keys:
                if k in self.waiting:
                    self._fail(k, exc)
            return
        for key, output in zip(keys, outputs):
            if self.waiting.pop(key, None) is not None:
                self._resume(key, output)

    def _decode(self, decodes: Lane, drop: Drop) -> None:
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
            self._resume(key, sequence.result())

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
            if self.is_encode(request):
                self.waiting[key] = request
                return
            try:
                sequence, logits, state = self.begin(request)
            except Exception as exc:
                self._fail(key, exc)
                return
            if not sequence.choose(logits):
                lane = self.lane(key)
                if lane not in self.lanes:
                    self.lanes[lane] = self.new_lane()
                self.lanes[lane].join(key, sequence, state)
                return
            value = sequence.result()  # done at its first token: straight back to the program

    def _fail(self, key: Key, error: BaseException) -> None:
        program = self.programs.pop(key, None)
        if program is not None:
            program.close()
        self.waiting.pop(key, None)
        self._ended.append((key, None, error))


def run_alone(batch: ProgramBatch, program: Program[T], check: Callable[[], None]) -> T:
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

    check()  # before any work: a program's first request may run at once (a prefill)
    batch.add(0, program)
    while True:
        ended = batch.step(drop)
        if stopped:
            raise stopped[0]
        for _, result, error in ended:
            if error is not None:
                raise error
            return result
