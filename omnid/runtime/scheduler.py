"""The engine runtime: one worker thread per loaded model, the only thread that touches its MLX arrays.

asyncio code submits jobs and awaits them. Jobs wait in a priority queue (realtime finals before previews before
file jobs, first come first served within a class), capped in length; a cancelled job is dropped while queued and
stopped at its next check while running. Once the queue has been empty for ``idle_clear_s``, the MLX buffer cache
is released so an idle daemon holds only its weights.

A job is either a plain callable taking a ``check`` function, run alone, or a *program* for an engine that
batches (``engine.batch()``, see engine/programs.py): programs run together, up to ``max_batch`` of them,
joining the batch between its steps as they are queued (finals first) and leaving it as they end. A running
preview yields to a queued final at its next check: a plain one is cancelled; in a batch the final joins at the
next step, a full batch gives it the place of its newest preview, and an encode of previews alone stops at its
next layer. So a final never waits for more than one check interval of preview work.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Protocol, TypeVar

import mlx.core as mx
import structlog

from omnid.jobs import Check, Priority
from omnid.runtime.errors import JobCancelledError, QueueFullError

log = structlog.get_logger(__name__)

T = TypeVar("T")
E = TypeVar("E")


@dataclass(order=True)
class _Job:
    priority: int
    seq: int
    fn: Callable[[Check], Any] | None = field(compare=False)  # a plain job; None for a program
    future: asyncio.Future = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    cancelled: threading.Event = field(compare=False, default_factory=threading.Event)
    enqueued: float = field(compare=False, default_factory=time.monotonic)
    audio_s: float | None = field(compare=False, default=None)  # for the realtime factor, when known
    program: Callable[[Any], Any] | None = field(compare=False, default=None)  # engine -> its program
    started: float = field(compare=False, default=0.0)

    @property
    def key(self) -> tuple[int, int]:
        """Its place in a batch: smaller keys are encoded first."""
        return self.priority, self.seq

    def check(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelledError("job cancelled")


class Preempted(JobCancelledError):
    """A preview stopped so that a final queued behind it runs now."""


class Batch(Protocol):
    """What a batching engine's ``batch()`` returns (engine/programs.py has the one implementation)."""

    def __len__(self) -> int: ...

    def add(self, key: Any, program: Any) -> None: ...

    def drop(self, keys: Collection[Any]) -> None: ...

    def step(self, drop: Callable[[list[Any], bool], Collection[Any]]
             ) -> list[tuple[Any, Any, BaseException | None]]: ...


def clear_mlx_cache() -> None:
    clear = getattr(mx, "clear_cache", None) or mx.metal.clear_cache
    clear()


class EngineRuntime(Generic[E]):
    """Owns one engine, built by ``factory`` on the worker thread, and runs jobs on it: plain ones one at a time,
    programs up to ``max_batch`` together."""

    def __init__(self, name: str, factory: Callable[[], E], max_queue: int, final_reserve: int = 0,
                 max_batch: int = 1, idle_clear_s: float = 1.0):
        if max_queue < 1 or final_reserve < 0 or max_batch < 1:
            raise ValueError("max_queue and max_batch must be at least 1 and final_reserve not negative")
        self.name = name
        self.max_queue = max_queue
        self.max_batch = max_batch
        # Realtime finals may queue past max_queue by this many (one per session at most), so a burst of file
        # jobs or previews never costs a session its final.
        self.final_reserve = final_reserve
        # The MLX buffer cache (one per process, shared by every engine) is released once this runtime has had
        # nothing to do for this long. Not at once: a VAD runtime goes idle between every two batches, many times a
        # second under load, and each release made the next batch (and the other engines) allocate afresh.
        self.idle_clear_s = idle_clear_s
        self.on_idle: Callable[[], None] = clear_mlx_cache
        self._dirty = False  # work ran since the cache was last released
        self._factory = factory
        self._engine: E | None = None
        self._heap: list[_Job] = []
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._queued = 0
        self._running = 0
        self._closing = False
        self._current: _Job | None = None
        self._batched: dict[tuple[int, int], _Job] = {}  # the jobs of the running batch
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"engine-{name}", daemon=True)
        # A transcription model's forced aligner, whose runtime times its transcripts (runtime/transcription.py).
        self.aligner: EngineRuntime | None = None
        # Told of every job that ran to completion: (engine name, queue wait s, run s, audio s or None).
        # Called on the worker thread.
        self.observer: Callable[[str, float, float, float | None], None] | None = None
        # Told of each job's life, in order: (event, priority, job number) with event one of "queued", "started",
        # "finished", "cancelled", "preempted", and "check" before each unit of a batch's work the job takes part
        # in (an encoder layer, a decode step). Called with the queue's lock held; for tests and tracing.
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
            for job in self._batched.values():
                job.cancelled.set()
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

    def in_flight(self, priority: Priority) -> int:
        """Jobs of this priority queued or running."""
        with self._cv:
            jobs = [*self._heap, *self._batched.values(), *([self._current] if self._current else [])]
            return sum(1 for job in jobs if job.priority == priority and not job.cancelled.is_set())

    @property
    def batching(self) -> bool:
        """Its engine runs programs together (submit_program)."""
        return callable(getattr(self._engine, "batch", None))

    async def submit(self, fn: Callable[[Check], T], priority: Priority = Priority.FILE,
                     audio_s: float | None = None) -> T:
        """Runs ``fn(check)`` on the worker thread. Raises QueueFullError at once when the queue is full;
        cancelling the awaiting task cancels the job. ``audio_s``: the audio the job covers, for metrics."""
        return await self._submit(_Job(int(priority), next(self._seq), fn, *self._future(), audio_s=audio_s))

    async def submit_program(self, program: Callable[[Any], Any], priority: Priority = Priority.FILE,
                             audio_s: float | None = None) -> Any:
        """Runs ``program(engine)``, a program of a batching engine, in the engine's batch; otherwise as submit."""
        if not self.batching:
            raise TypeError(f"engine {self.name} does not run programs")
        job = _Job(int(priority), next(self._seq), None, *self._future(), audio_s=audio_s, program=program)
        return await self._submit(job)

    @staticmethod
    def _future() -> tuple[asyncio.Future, asyncio.AbstractEventLoop]:
        loop = asyncio.get_running_loop()
        return loop.create_future(), loop

    async def _submit(self, job: _Job) -> Any:
        priority = job.priority
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
                    if not self._dirty:
                        self._cv.wait()
                    elif not self._cv.wait(self.idle_clear_s) and not self._heap:
                        self._dirty = False
                        self.on_idle()
                if self._closing:
                    return
                self._dirty = True
                job = heapq.heappop(self._heap)
                self._queued -= 1
                self._running += 1
                if job.program is None:
                    self._current = job
                else:
                    self._batched[job.key] = job
                self._trace("started", job)
            if job.program is not None:
                self._serve_batch(job)
                continue
            outcome = self._run(job)
            with self._cv:
                self._current = None
                self._running -= 1
                self._trace("cancelled" if outcome is None or isinstance(outcome[1], JobCancelledError)
                            else "finished", job)
            # The count drops before the caller hears back, so an answered request is never seen as running.
            if outcome is not None:
                _post(job, *outcome)

    def _run(self, job: _Job) -> tuple[Any, BaseException | None] | None:
        if job.cancelled.is_set():
            return None
        job.started = time.monotonic()
        assert job.fn is not None
        try:
            outcome: tuple[Any, BaseException | None] = job.fn(lambda: self._check(job)), None
        except Exception as exc:  # the job's own failure (or cancellation) belongs to its caller
            outcome = None, exc
        self._report(job, outcome[1])
        return outcome

    def _report(self, job: _Job, error: BaseException | None) -> None:
        """Logs how a job that ran ended, and tells the observer of one that completed."""
        ran = time.monotonic() - job.started
        if error is None:
            if self.observer is not None:
                self.observer(self.name, job.started - job.enqueued, ran, job.audio_s)
        elif isinstance(error, JobCancelledError):
            log.info("job_preempted" if isinstance(error, Preempted) else "job_cancelled", engine=self.name,
                     ran_s=round(ran, 3))
        else:
            log.error("job_failed", engine=self.name, exc_info=error)

    # --- batches of programs ------------------------------------------------------------------------------

    def _serve_batch(self, first: _Job) -> None:
        """Runs programs together, admitting queued ones before every step, until none is left."""
        batch: Batch = self._new_batch()
        admitted = [first]
        while True:
            with self._cv:
                if self._closing:
                    for job in list(self._batched.values()):
                        self._end(job, None, JobCancelledError("runtime closed"))
                    return
                admitted += self._admit(batch)
                if not self._batched:
                    break
            stopped: list[tuple[_Job, BaseException]] = []
            for job in admitted:
                job.started = time.monotonic()
                try:
                    assert job.program is not None
                    batch.add(job.key, job.program(self._engine))
                except Exception as exc:
                    stopped.append((job, exc))
            admitted = []
            try:
                outcomes = batch.step(lambda keys, encoding: self._drop(keys, encoding, stopped))
            except Exception as exc:  # a failure of the batch itself ends every job in it
                log.exception("batch_failed", engine=self.name, jobs=len(self._batched))
                outcomes = [(key, None, exc) for key in self._batched]
                batch = self._new_batch()
            for key, result, error in outcomes:
                self._end(self._batched[key], result, error)
            for job, error in stopped:
                batch.drop([job.key])
                self._end(job, None, error)

    def _new_batch(self) -> Batch:
        # One decode lane per priority: a preview's rows never slow down the finals' decode steps.
        return self.engine.batch(lane=_priority)  # type: ignore[attr-defined]

    def _admit(self, batch: Batch) -> list[_Job]:
        """Queued programs that join the batch now, finals first; a final finding it full takes the place of its
        newest preview. Called with the lock held."""
        admitted: list[_Job] = []
        while self._heap and self._heap[0].program is not None:
            if len(self._batched) >= self.max_batch:
                previews = [j for j in self._batched.values() if j.priority == Priority.PREVIEW]
                if self._heap[0].priority != Priority.FINAL or not previews:
                    break
                victim = max(previews, key=lambda j: j.seq)
                self._trace("preempted", victim)
                batch.drop([victim.key])
                self._end(victim, None, Preempted("a final needed its place in the batch"))
            job = heapq.heappop(self._heap)
            self._queued -= 1
            self._running += 1
            self._batched[job.key] = job
            self._trace("started", job)
            admitted.append(job)
        return admitted

    def _drop(self, keys: list[tuple[int, int]], encoding: bool, stopped: list[tuple[_Job, BaseException]]
              ) -> list[tuple[int, int]]:
        """The batch asks which of ``keys`` to stop before their next unit of work: the cancelled ones, and, when
        a final is queued during an encode of previews alone, those previews."""
        jobs = [self._batched[k] for k in keys if k in self._batched]
        if self.trace is not None:
            with self._cv:
                for job in jobs:
                    self._trace("check", job)
        gone = [j for j in jobs if j.cancelled.is_set()]
        stopped.extend((j, JobCancelledError("job cancelled")) for j in gone)
        rest = [j for j in jobs if not j.cancelled.is_set()]
        if encoding and rest and all(j.priority == Priority.PREVIEW for j in rest) and self._final_waiting():
            with self._cv:
                for job in rest:
                    job.cancelled.set()
                    self._trace("preempted", job)
                    stopped.append((job, Preempted("a final is waiting")))
            gone += rest
        return [j.key for j in gone]

    def _final_waiting(self) -> bool:
        return bool(self._heap) and self._heap[0].priority == Priority.FINAL

    def _end(self, job: _Job, result: Any, error: BaseException | None) -> None:
        with self._cv:
            if self._batched.pop(job.key, None) is None:
                return
            self._running -= 1
            self._trace("cancelled" if isinstance(error, JobCancelledError) else "finished", job)
        self._report(job, error)
        _post(job, result, error)

    def _check(self, job: _Job) -> None:
        job.check()
        if job.priority == Priority.PREVIEW and self._final_waiting():
            with self._cv:
                if self._heap and self._heap[0].priority == Priority.FINAL:
                    job.cancelled.set()
                    self._trace("preempted", job)
                    raise Preempted("a final is waiting")

    def _trace(self, event: str, job: _Job) -> None:
        if self.trace is not None:
            self.trace(event, Priority(job.priority), job.seq)


def _priority(key: tuple[int, int]) -> int:
    return key[0]


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
