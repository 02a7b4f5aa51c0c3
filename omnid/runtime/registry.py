"""The daemon's engines: one runtime per configured model plus Silero VAD, started together."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import cached_property

import structlog

from omnid.config import Config
from omnid.engine import kinds
from omnid.engine.alignment import AlignerEngine
from omnid.engine.diarization import DiarizationEngine
from omnid.engine.interface import TranscriptionEngine
from omnid.metrics import Metrics
from omnid.runtime.allocator import HeapTrimmer, limit_arenas
from omnid.runtime.catalog import ModelCatalog
from omnid.runtime.models import aligner_runtime, diarizer_runtime, model_runtime, vad_runtime
from omnid.runtime.scheduler import EngineRuntime
from omnid.vad.batcher import VadBatcher
from omnid.vad.silero import SileroVAD

log = structlog.get_logger(__name__)


@dataclass
class Services:
    config: Config
    transcribers: dict[str, EngineRuntime[TranscriptionEngine]] = field(default_factory=dict)
    diarizers: dict[str, EngineRuntime[DiarizationEngine]] = field(default_factory=dict)
    aligners: dict[str, EngineRuntime[AlignerEngine]] = field(default_factory=dict)
    vad: EngineRuntime[SileroVAD] | None = None
    vad_batcher: VadBatcher | None = None
    ready: bool = False
    leaving: bool = False  # told to stop: /health says so (a load balancer's cue), work is still served
    draining: bool = False  # shutting down: no new work
    failure: str | None = None
    metrics: Metrics = field(default_factory=Metrics)
    heap: HeapTrimmer = field(init=False)

    def __post_init__(self) -> None:
        self.heap = HeapTrimmer(self.config.engine.idle_clear_s)

    @classmethod
    def create(cls, config: Config) -> "Services":
        limit_arenas()  # before any engine's thread allocates (allocator.py)
        services = cls(config)
        for model in config.models:  # each model's runtime as its kind's role wants it
            role = kinds.named(model.kind).role
            if role == "diarization":
                services.diarizers[model.id] = diarizer_runtime(model, config)
            elif role == "alignment":
                services.aligners[model.id] = aligner_runtime(model, config)
            else:
                services.transcribers[model.id] = model_runtime(model, config)
        for model in config.models:  # one aligner runtime, however many models it times
            if model.aligner:
                services.transcribers[model.id].aligner = services.aligners[model.aligner]
        services.vad = vad_runtime(config)
        services.vad_batcher = VadBatcher(services.vad)
        return services

    def observe(self) -> None:
        """Every engine reports its jobs to the metrics (queue wait, audio, realtime factor)."""
        for runtime in self.runtimes():
            runtime.observer = self.metrics.observe_job

    @cached_property
    def catalog(self) -> ModelCatalog:
        """Which model each name means, for every route."""
        return ModelCatalog.from_config(self.config)

    @property
    def diarizer(self) -> EngineRuntime[DiarizationEngine] | None:
        """The diarization model every diarization route uses (the first configured), or None."""
        return next(iter(self.diarizers.values()), None)

    def kind(self, name: str) -> str:
        """A model's kind as /v1/models and /health name it."""
        if self.vad is not None and name == self.vad.name:
            return SileroVAD.kind
        return self.catalog.kinds[name]

    def runtimes(self) -> list[EngineRuntime]:
        return [*self.transcribers.values(), *self.aligners.values(), *self.diarizers.values(),
                *([self.vad] if self.vad else [])]

    async def start(self) -> None:
        """Loads every engine on its own thread; raises the first load failure."""
        self.observe()
        for runtime in self.runtimes():
            runtime.start()
        try:
            await asyncio.gather(*(r.wait_loaded() for r in self.runtimes()))
        except Exception as exc:
            self.failure = str(exc)
            raise
        self.ready = True
        log.info("engines_ready", models=[r.name for r in self.runtimes()])

    async def idle(self, timeout: float) -> bool:
        """Waits until no engine has work (or ``timeout`` passes); True when idle."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.request_states():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def close(self) -> None:
        self.heap.close()
        for runtime in self.runtimes():
            runtime.close()

    def request_states(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for runtime in self.runtimes():
            for state, n in runtime.request_states.items():
                total[state] = total.get(state, 0) + n
        return total
