"""The engine runtime: one worker thread per loaded model, the only thread that touches its MLX arrays.

asyncio code submits jobs (plain callables taking a ``check`` function) and awaits them. Jobs wait in a
priority queue (realtime finals before previews before file jobs, first come first served within a class),
capped in length; a cancelled job is dropped while queued and stopped at its next ``check`` while running. A
running preview yields to a queued final at its next ``check`` (it is cancelled: a preview is cheap and the next
one is fresher), so a final never waits for more than one check interval of preview work. When the queue drains,
the MLX buffer cache is released so an idle daemon holds only its weights.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, Generic, TypeVar

import mlx.core as mx
import structlog

from omnid.runtime.errors import JobCancelledError, QueueFullError

log = structlog.get_logger(__name__)

T = TypeVar("T")
E = TypeVar("E")
Check = Callable[[], None]


class Priority(IntEnum):
    FINAL = 0
    PREVIEW = 1
    FILE = 2


@dataclass(order=True)
class _Job:
    priority: int
    seq: int
    fn: Callable[[Check], Any] = field(compare=False)
    future: asyncio.Future = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    cancelled: threading.Event = field(compare=False, default_factory=threading.Event)
    enqueued: float = field(compare=False, default_factory=time.monotonic)
    audio_s: float | None = field(compare=False, default=None)  # for the realtime factor, when known

    def check(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelledError("job cancelled")


class Preempted(JobCancelledError):
    """A preview stopped so that a final queued behind it runs now."""


def clear_mlx_cache() -> None:
    clear = getattr(mx, "clear_cache", None) or mx.metal.clear_cache
    clear()


class EngineRuntime(Generic[E]):
    """Owns one engine, built by ``factory`` on the worker thread, and runs jobs on it one at a time."""

    def __init__(self, name: str, factory: Callable[[], E], max_queue: int, final_reserve: int = 0):
        if max_queue < 1 or final_reserve < 0:
            raise ValueError("max_queue must be at least 1 and final_reserve not negative")
        self.name = name
        self.max_queue = max_queue
        # Realtime finals may queue past max_queue by this many (one per session at most), so a burst of file
        # jobs or previews never costs a session its final.
        self.final_reserve = final_reserve
        self._factory = factory
        self._engine: E | None = None
        self._heap: list[_Job] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._queued = 0
        self._running = 0
        self._closing = False
        self._current: _Job | None = None
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"engine-{name}", daemon=True)
        # Told of every job that ran to completion: (engine name, queue wait s, run s, audio s or None).
        # Called on the worker thread.
        self.observer: Callable[[str, float, float, float | None], None] | None = None
        # Told of each job's life, in order: (event, priority, job number) with event one of "queued", "started",
        # "finished", "cancelled", "preempted". Called with the queue's lock held; for tests and tracing.
        self.trace: Callable[[str, Priority, int], None] | None = None

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    async def wait_loaded(self) -> E:
        await asyncio.get_running_loop().run_in_executor(None, self._loaded.wait)
        if self._load_error is not None:
            raise self._load_error
        assert self._engine is not None
        return self._engine

    @property
    def loaded(self) -> bool:
        """The engine is built and serving (False while loading, after a failed load, once closed)."""
        return self._engine is not None and not self._closing

    @property
    def engine(self) -> E:
        if self._engine is None:
            raise RuntimeError(f"engine {self.name} is not loaded")
        return self._engine

    def close(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._closing = True
            if self._current is not None:
                self._current.cancelled.set()  # stops at its next check
            for job in self._heap:
                job.cancelled.set()
                _post(job, None, JobCancelledError("runtime closed"))
            self._heap.clear()
            self._queued = 0
            self._cv.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # --- jobs -------------------------------------------------------------------------------------------

    @property
    def request_states(self) -> dict[str, int]:
        with self._cv:
            states = {"queued": self._queued, "running": self._running}
        return {k: v for k, v in states.items() if v}

    async def submit(self, fn: Callable[[Check], T], priority: Priority = Priority.FILE,
                     audio_s: float | None = None) -> T:
        """Runs ``fn(check)`` on the worker thread. Raises QueueFullError at once when the queue is full;
        cancelling the awaiting task cancels the job. ``audio_s``: the audio the job covers, for metrics."""
        loop = asyncio.get_running_loop()
        job = _Job(int(priority), next(self._seq), fn, loop.create_future(), loop, audio_s=audio_s)
        with self._cv:
            if self._closing:
                raise JobCancelledError("runtime is closing")
            cap = self.max_queue + (self.final_reserve if priority == Priority.FINAL else 0)
            if self._queued >= cap:
                raise QueueFullError(f"engine {self.name} queue is full ({self.max_queue} jobs)")
            heapq.heappush(self._heap, job)
            self._queued += 1
            self._trace("queued", job)
            self._cv.notify()
        try:
            return await asyncio.shield(job.future)
        except asyncio.CancelledError:
            self._cancel(job)
            raise

    def _cancel(self, job: _Job) -> None:
        with self._cv:
            job.cancelled.set()
            if job in self._heap:
                self._heap.remove(job)
                heapq.heapify(self._heap)
                self._queued -= 1
        if not job.future.done():
            job.future.cancel()

    # --- worker thread ---------------------------------------------------------------------------------

    def _main(self) -> None:
        stream = mx.new_stream(mx.default_device())
        with mx.stream(stream):
            try:
                self._engine = self._factory()
            except BaseException as exc:  # reported to whoever awaits the load
                self._load_error = exc
                self._loaded.set()
                return
            self._loaded.set()
            self._serve()

    def _serve(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._closing:
                    self._cv.wait()
                if self._closing:
                    return
                job = heapq.heappop(self._heap)
                self._queued -= 1
                self._running += 1
                self._current = job
                self._trace("started", job)
            outcome = self._run(job)
            with self._cv:
                self._current = None
                self._running -= 1
                idle = not self._heap
                self._trace("cancelled" if outcome is None or isinstance(outcome[1], JobCancelledError)
                            else "finished", job)
            # The count drops before the caller hears back, so an answered request is never seen as running.
            if outcome is not None:
                _post(job, *outcome)
            if idle:
                clear_mlx_cache()

    def _run(self, job: _Job) -> tuple[Any, BaseException | None] | None:
        if job.cancelled.is_set():
            return None
        started = time.monotonic()
        try:
            result = job.fn(lambda: self._check(job))
            if self.observer is not None:
                self.observer(self.name, started - job.enqueued, time.monotonic() - started, job.audio_s)
            return result, None
        except JobCancelledError as exc:
            event = "job_preempted" if isinstance(exc, Preempted) else "job_cancelled"
            log.info(event, engine=self.name, ran_s=round(time.monotonic() - started, 3))
            return None, exc
        except Exception as exc:  # the job's own failure belongs to its caller
            log.exception("job_failed", engine=self.name)
            return None, exc


    def _check(self, job: _Job) -> None:
        job.check()
        if job.priority == Priority.PREVIEW and self._heap and self._heap[0].priority == Priority.FINAL:
            with self._cv:
                if self._heap and self._heap[0].priority == Priority.FINAL:
                    job.cancelled.set()
                    self._trace("preempted", job)
                    raise Preempted("a final is waiting")

    def _trace(self, event: str, job: _Job) -> None:
        if self.trace is not None:
            self.trace(event, Priority(job.priority), job.seq)


def _post(job: _Job, result: Any, error: BaseException | None) -> None:
    try:
        job.loop.call_soon_threadsafe(_settle, job.future, result, error)
    except RuntimeError:
        pass  # the caller's event loop is gone; nobody is waiting


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
