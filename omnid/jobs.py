"""A job on an engine's runtime as whoever submits one sees it: its priority class and the submitting interface.

runtime/scheduler.py's EngineRuntime is the one implementation. This module lies below every layer so that those
below the runtime which submit their own jobs (the VAD batcher) need not import the runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Protocol, TypeVar

T = TypeVar("T")
E_co = TypeVar("E_co", covariant=True)
Check = Callable[[], None]  # raises once the job is cancelled; a job calls it between units of its work


class Priority(IntEnum):
    """Realtime finals before previews before file jobs (smaller runs first)."""

    FINAL = 0
    PREVIEW = 1
    FILE = 2


class JobRunner(Protocol[E_co]):
    """Runs plain jobs on one engine, on the thread that owns it."""

    @property
    def engine(self) -> E_co: ...

    async def submit(self, fn: Callable[[Check], T], priority: Priority = Priority.FILE,
                     audio_s: float | None = None) -> T: ...
