"""What one request asks of a transcription engine, whatever its kind: the same type for every engine, built by
HTTP handlers, realtime sessions, `omnid transcribe` and `omnid eval` (runtime/models.py's transcribe_options).

How a model decodes whatever the request (Whisper's temperature schedule and thresholds, Qwen3-ASR's chunks and
budgets, Parakeet's decoder) is that model's own options, set from the configuration when its engine is built
(see each kind's kind.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TranscribeOptions:
    language: str | None = None
    prompt: str | None = None
    # The prompt already tokenized (engine.prompt_tokens(prompt)): a realtime session tokenizes once, not per decode.
    prompt_tokens: tuple[int, ...] | None = None
    temperature: float = 0.0
    # A decode that looks failed may be tried again, as the model's own rule says (Whisper: at higher temperatures);
    # a live preview is never worth a retry, and the reference systems `omnid eval` compares with made none.
    fallback: bool = True
    max_new_tokens: int | None = None
    word_timestamps: bool = False
    # The transcript will be timed by the model's forced aligner (Qwen3-ASR): its chunks are cut no longer than
    # the aligner takes, as the official timed transcription cuts them.
    timed: bool = False
    # How a model with a fixed input window (Whisper's 30 s) encodes a shorter input, chosen per job (a live
    # preview or a final under load may take the cheaper one): "full" padded to the whole window as it was trained
    # (parity with the reference systems); "content" at about its own length, much cheaper on a CPU.
    window: str = "full"
    # A model with a punctuation switch (Capabilities.punctuation): True or False as the request asks; None: the
    # model's configured default. Other models never see anything but None (the request rules refuse it).
    punctuation: bool | None = None
    # A model with inverse text normalisation (Capabilities.itn: SenseVoice's use_itn): True or False as the request
    # asks; None: the model's configured default.
    itn: bool | None = None
