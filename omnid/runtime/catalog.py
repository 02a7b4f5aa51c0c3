"""Which model a request means, the same on every route (HTTP and realtime) and on the command line: a configured
model id, one of its configured aliases, or a well-known OpenAI name (served by the default model); nothing given
means the default. (Which language: request_rules.language.)"""

from __future__ import annotations

from dataclasses import dataclass

from omnid.config import Config, ModelConfig
from omnid.engine import kinds
from omnid.engine.kind import Role

# What OpenAI clients ask for; omnid serves them with the default transcription model.
OPENAI_NAMES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")


class UnknownModel(LookupError):
    """No model answers to this name."""


class NotTranscription(ValueError):
    """The name is a model of another kind (the VAD, a diarizer)."""


@dataclass(frozen=True)
class ModelCatalog:
    default: str
    names: dict[str, str]  # every accepted name (ids, aliases, OpenAI names) -> model id
    kinds: dict[str, str]  # model id -> kind
    vad_id: str
    diarizers: frozenset[str] = frozenset()  # ids and aliases of diarization models
    aligners: frozenset[str] = frozenset()  # ids and aliases of forced aligners

    @classmethod
    def from_config(cls, config: Config) -> ModelCatalog:
        names = {name: config.transcription.default_model for name in OPENAI_NAMES}
        transcribers = _of_role(config, "transcription")
        for model in transcribers:
            names |= {alias: model.id for alias in model.aliases}
        names |= {model.id: model.id for model in transcribers}
        diarizers = frozenset(n for m in _of_role(config, "diarization") for n in (m.id, *m.aliases))
        aligners = frozenset(n for m in _of_role(config, "alignment") for n in (m.id, *m.aliases))
        return cls(config.transcription.default_model, names, {m.id: m.kind for m in config.models}, config.vad.id,
                   diarizers, aligners)

    def resolve(self, name: str | None) -> str:
        """The transcription model a request names (blank: the default)."""
        key = (name or "").strip()
        if not key:
            return self.default
        if key in self.names:
            return self.names[key]
        if key == self.vad_id:
            raise NotTranscription(f"model {key!r} is a voice activity detector, not a transcription model")
        if key in self.diarizers:
            raise NotTranscription(f"model {key!r} is a speaker diarization model, not a transcription model")
        if key in self.aligners:
            raise NotTranscription(f"model {key!r} is a forced aligner (it times a Qwen3-ASR model's transcripts), "
                                   "not a transcription model")
        raise UnknownModel(key)


def _of_role(config: Config, role: Role) -> list[ModelConfig]:
    return [m for m in config.models if kinds.named(m.kind).role == role]
