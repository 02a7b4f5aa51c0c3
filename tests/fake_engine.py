"""A stand-in Whisper engine for the realtime protocol's own logic (errors, bounds, cancellation, gating), where a
test needs to control time or failure. Every feature it covers is also tested against the real engine."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from omnid.config import Config
from omnid.engine.interface import Capabilities
from omnid.runtime.registry import Services
from omnid.runtime.scheduler import EngineRuntime

SAMPLE_RATE = 16000


@dataclass
class FakeResult:
    text: str


class FakeWhisper:
    """Answers '<n> samples' after ``delay`` seconds, calling ``check`` as it goes; a prompt of 'FAIL' raises."""

    languages = ("en",)
    kind = "whisper"
    model_id = "fake"

    def __init__(self, delay: float = 0.0, capabilities: Capabilities | None = None):
        self.delay = delay
        self.capabilities = capabilities or Capabilities(
            languages=("en",), prompt=True, word_timestamps=True, timestamps=True, max_new_tokens=448,
            streaming="forced_prefix")
        self.calls = 0
        self.cancelled = 0
        self.lock = threading.Lock()

    def _work(self, audio, opts, check) -> str:
        with self.lock:
            self.calls += 1
        deadline = time.monotonic() + self.delay
        try:
            while time.monotonic() < deadline:
                check()
                time.sleep(0.005)
            check()
        except Exception:
            with self.lock:
                self.cancelled += 1
            raise
        if opts.prompt == "FAIL":
            raise RuntimeError("the fake engine was told to fail")
        return f"{len(audio)} samples"

    def prompt_tokens(self, prompt):
        return tuple(ord(c) for c in (prompt or ""))

    def transcribe(self, audio, opts, check=lambda: None, **_):
        return FakeResult(self._work(audio, opts, check))

    def preview(self, audio, opts, prefix="", check=lambda: None):
        text = self._work(audio, opts, check)
        return f"{prefix} {text}".strip()


def fake_services(delay: float = 0.0, capabilities: Capabilities | None = None):
    """A Services factory for ServerThread: real Silero VAD, the fake Whisper under the default model's id."""

    def build(config: Config) -> Services:
        services = Services.create(config)
        model = config.transcription.default_model
        fake = FakeWhisper(delay, capabilities)
        services.transcribers[model] = EngineRuntime(model, lambda: fake, config.engine.max_queue,
                                                     final_reserve=config.realtime.max_sessions)
        services.fake = fake  # type: ignore[attr-defined]
        return services

    return build
