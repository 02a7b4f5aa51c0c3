"""The daemon's metrics in Prometheus form: counters and histograms fed as work happens, gauges read at scrape
time. One registry per daemon (not prometheus_client's global one), so several servers in a process never mix."""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Callable

import mlx.core as mx
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def resident_bytes() -> int:
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # macOS: bytes; no current RSS without psutil
    return peak if sys.platform == "darwin" else peak * 1024


def _mlx_memory(name: str) -> int:
    fn = getattr(mx, name, None) or getattr(mx.metal, name)
    return int(fn())


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("omnid_http_requests", "HTTP requests by route, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.audio = Counter("omnid_audio_seconds", "Seconds of audio processed by each model",
                             ["model"], registry=self.registry)
        self.rtf = Histogram("omnid_realtime_factor", "Compute seconds per second of audio, per job",
                             ["model"], buckets=RTF_BUCKETS, registry=self.registry)
        self.compute = Counter("omnid_compute_seconds", "Seconds each model's jobs ran (jobs run together each count "
                               "the whole time)", ["model"], registry=self.registry)
        self.queue_wait = Histogram("omnid_queue_wait_seconds", "Seconds a job waited in its engine's queue",
                                    ["model"], buckets=WAIT_BUCKETS, registry=self.registry)
        self._gauges: list[Callable[[], list[GaugeMetricFamily]]] = []
        self.registry.register(_Scraped(self._gauges))

    def observe_job(self, model: str, wait_s: float, run_s: float, audio_s: float | None) -> None:
        self.queue_wait.labels(model).observe(wait_s)
        self.compute.labels(model).inc(run_s)
        if audio_s:
            self.audio.labels(model).inc(audio_s)
            self.rtf.labels(model).observe(run_s / audio_s)

    def observe_request(self, route: str, method: str, status: int) -> None:
        self.requests.labels(route, method, str(status)).inc()

    def add_gauges(self, read: Callable[[], list[GaugeMetricFamily]]) -> None:
        """``read`` is called at every scrape."""
        self._gauges.append(read)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Scraped:
    def __init__(self, readers: list[Callable[[], list[GaugeMetricFamily]]]):
        self.readers = readers

    def describe(self):
        return []

    def collect(self):
        yield gauge("omnid_resident_memory_bytes", "Resident memory of the daemon", resident_bytes())
        yield gauge("omnid_mlx_active_memory_bytes", "Memory held by live MLX arrays", _mlx_memory("get_active_memory"))
        yield gauge("omnid_mlx_cache_memory_bytes", "Memory in MLX's buffer cache", _mlx_memory("get_cache_memory"))
        for read in self.readers:
            yield from read()


def gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family
