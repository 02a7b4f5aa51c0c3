"""MOSS-Transcribe-Diarize's request, as transformers 5.23's processor builds it (``processing_moss_transcribe_
diarize.py``: ``replace_audio_token``, ``apply_transcription_request``) with the chat template the checkpoint ships
(its text as transformers' processor test expects it).

The user turn holds the audio, ``<|audio_start|>`` and ``<|audio_end|>`` around its ``<|audio_pad|>`` slots (12.5 a
second), with the elapsed second count written as plain digits every ``MARKER_EVERY_S`` seconds of slots (the model
was trained to ground its timestamps on them; audio past the last whole interval gets none); then, on the next
line, a request's own prompt (``补充信息：...``) and keywords (``热词列表：[...]``), each followed by a blank line, and
always the default instruction: transcribe, open each segment with its start time and speaker number ([S01],
[S02], ...), close it with its end time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

SYSTEM = "You are a helpful assistant."
INSTRUCTION = ("请将音频转写为文本，每一段需以起始时间戳和说话人编号（[S01]、[S02]、[S03]…）开头，正文为对应的语音内容，"
               "并在段末标注结束时间戳，以清晰标明该段语音范围。")
AUDIO_PAD, AUDIO_START, AUDIO_END = "<|audio_pad|>", "<|audio_start|>", "<|audio_end|>"
TOKENS_PER_SECOND = 12.5
MARKER_EVERY_S = 5  # the released checkpoint's processor setting (transformers' own default is 2)


class Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


def audio_span(tokens: int, every: int = MARKER_EVERY_S) -> str:
    """``tokens`` audio slots with the second markers between them (replace_audio_token)."""
    per_marker = int(TOKENS_PER_SECOND * every)
    duration = tokens / TOKENS_PER_SECOND
    parts, consumed = [], 0
    for second in range(every, int(duration) + 1, every):
        position = (second // every) * per_marker
        if position > consumed:
            parts.append(AUDIO_PAD * (position - consumed))
            consumed = position
        parts.append(str(second))
    if tokens > consumed:
        parts.append(AUDIO_PAD * (tokens - consumed))
    return "".join(parts)


def user_text(prompt: str | None = None, keywords: Sequence[str] = ()) -> str:
    """What follows the audio in the user turn: the request's prompt and keywords, then the instruction."""
    text = f"补充信息：{prompt}\n\n" if prompt else ""
    if keywords:
        text += f"热词列表：[{', '.join(keywords)}]\n\n"
    return text + INSTRUCTION


def prompt_text(tokens: int, prompt: str | None = None, keywords: Sequence[str] = (),
                every: int = MARKER_EVERY_S) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{AUDIO_START}{audio_span(tokens, every)}"
            f"{AUDIO_END}\n{user_text(prompt, keywords)}<|im_end|>\n<|im_start|>assistant\n")


def prompt_ids(tokenizer: Encoder, tokens: int, prompt: str | None = None, keywords: Sequence[str] = (),
               every: int = MARKER_EVERY_S) -> list[int]:
    """The request's ids, tokenized whole as the processor does (its added tokens matched in the text)."""
    return tokenizer.encode(prompt_text(tokens, prompt, keywords, every))
