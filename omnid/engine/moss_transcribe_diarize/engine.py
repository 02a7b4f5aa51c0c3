"""MOSS-Transcribe-Diarize as a transcription engine that names its speakers: the whole audio (up to
``max_clip_s``) in one prompt as transformers' processor builds it (model.py, prompt.py), the Qwen3 decoder greedy
to ``<|im_end|>`` (on MLX's CPU device Qwen3-ASR's numpy decoder), and its ``[start][S01]text[end]`` output read
into segments (tags.py), each with its speaker: "A", "B", ... in the order the model first names them (its S01,
S02 ...), as diarized files are labelled. Output the parser cannot read becomes one untimed segment of the whole
audio without a speaker.

Where the daemon's VAD found the speech, one decode takes everything from a clip's start to the end of the last
clip within ``max_clip_s`` of it (silences between included: the model numbers its speakers within one decode);
longer audio takes several, their times on the file's timeline, their speaker numbers their own (labels continue
across decodes by number, which the model does not promise). A request's
prompt goes in the user turn as the processor's ``补充信息``; its language is not asked of the model (it writes
what it hears). Greedy only; the budget is a request's max_new_tokens, else the section's, else the reference MLX
server's max(512, 10 a second of audio).

Synchronous and thread-confined: only the engine's worker thread calls into it (see runtime/scheduler.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path

import mlx.core as mx
import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.clips import HOP, RedecodesWhole, whole
from omnid.engine.errors import CheckpointError
from omnid.engine.interface import Capabilities
from omnid.engine.moss_transcribe_diarize.checkpoint import layout_of, load
from omnid.engine.moss_transcribe_diarize.model import MossTranscribeDiarize, windows
from omnid.engine.moss_transcribe_diarize.options import MossOptions
from omnid.engine.moss_transcribe_diarize.prompt import prompt_ids
from omnid.engine.moss_transcribe_diarize.tags import parse
from omnid.engine.options import TranscribeOptions
from omnid.engine.qwen3.cpu_decoder import NumpyDecoder, greedy_numpy
from omnid.engine.qwen3.model import greedy
from omnid.engine.transcript import Segment, Transcript

log = structlog.get_logger(__name__)
Check = Callable[[], None]
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX_TOKENS = 131072


def spans(clips: list[tuple[int, int]], step: int) -> list[tuple[int, int]]:
    """What one decode takes: from a clip's start to the end of the last clip that still ends within ``step``
    samples of it, silences between clips included (a speaker's number holds within one decode only); a clip longer
    than ``step`` is cut at it."""
    out: list[tuple[int, int]] = []
    for first, last in clips:
        for a in range(first, last, step):
            b = min(a + step, last)
            if out and b - out[-1][0] <= step and a >= out[-1][1]:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return out


class MossEngine(RedecodesWhole):
    kind = "moss_transcribe_diarize"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None,
                 options: MossOptions = MossOptions()):
        self.model_id, self.options = model_id, options
        started = time.perf_counter()
        ckpt = load(Path(path), dict(pins) if pins else None)
        self.layout = layout_of(Path(path))
        self.tokenizer, self.audio_token = ckpt.tokenizer, ckpt.audio_token_id
        self.model = MossTranscribeDiarize(ckpt.dims)
        self.text = ckpt.dims.text
        try:
            self.model.load_weights(ckpt.weights, strict=True)
        except ValueError as exc:
            raise CheckpointError(f"{path}: {exc}") from exc
        mx.eval(self.model.parameters())
        self.stop = {self.tokenizer.special("<|im_end|>"), self.tokenizer.special("<|endoftext|>")}
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=self.layout,
                 seconds=round(self.load_seconds, 3))

    @property
    def capabilities(self) -> Capabilities:
        # Greedy; segment times from the model's tags (subtitles), no word times; its own speakers.
        return Capabilities(languages=("zh", "en"), prompt=True, word_timestamps=False, timestamps=True,
                            max_new_tokens=MAX_TOKENS, streaming="redecode", temperature=False,
                            max_clip_s=self.options.max_clip_s, speakers=True)

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        return ()

    @cached_property
    def cpu_decoder(self) -> NumpyDecoder | None:
        """The decoder in numpy on the CPU backend (decided once, at the first decode); None on Metal."""
        return NumpyDecoder(self.model.language_model, self.text) if mx.default_device() == mx.cpu else None

    def budget(self, opts: TranscribeOptions, seconds: float) -> int:
        return opts.max_new_tokens or self.options.max_new_tokens or max(512, math.ceil(10 * seconds))

    def decode(self, audio: np.ndarray, prompt: str | None, budget: int, check: Check = lambda: None
               ) -> tuple[list[int], str]:
        """One decode of the whole ``audio``: the generated ids (the end token not kept) and how it ended."""
        mel, valid = windows(np.asarray(audio, np.float32))
        rows = self.model.audio_rows(mx.array(mel), valid)
        ids = prompt_ids(self.tokenizer, rows.shape[0], prompt)
        check()
        lm = self.model.language_model
        x = lm.embed(ids, self.audio_token, rows)
        if self.cpu_decoder is not None:
            return greedy_numpy(self.cpu_decoder, np.array(x[0], np.float32), self.stop, budget, check)
        return greedy(lm, x, self.stop, budget, check)

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        audio = np.asarray(audio, np.float32)
        return self.transcribe_clips(audio, whole(len(audio), self.options.max_clip_s), opts, check, on_segment,
                                     on_progress)

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]],
                         opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                         on_segment: Callable[[Segment], None] | None = None,
                         on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        duration = len(audio) / SAMPLE_RATE
        segments: list[Segment] = []
        labels: dict[int, str] = {}
        generated, finish = 0, "stop"
        for a, b in spans(clips, max(1, int(self.options.max_clip_s * SAMPLE_RATE))):
            check()
            tokens, ended = self.decode(audio[a:b], opts.prompt, self.budget(opts, (b - a) / SAMPLE_RATE), check)
            generated += len(tokens)
            finish = ended if ended != "stop" else finish
            for seg in self._segments(tokens, a, b, len(segments), labels):
                if on_segment is not None:
                    on_segment(seg)
                segments.append(seg)
            if on_progress is not None:
                on_progress(b / SAMPLE_RATE, duration)
        text = " ".join(s.text for s in segments if s.text)
        return Transcript(text, segments, opts.language or "", duration, generated, finish)

    def _segments(self, tokens: list[int], first: int, last: int, next_id: int, labels: dict[int, str]
                  ) -> list[Segment]:
        """A decode's segments on the file's timeline (the clip starts at sample ``first``), speakers labelled."""
        raw = self.tokenizer.decode(tokens)
        said = parse(raw)
        offset = first / SAMPLE_RATE
        if said is None:
            text = raw.strip()
            return [Segment(next_id, first // HOP, offset, last / SAMPLE_RATE, text, tokens, 0.0, 0.0, 0.0, 0.0)] \
                if text else []
        out: list[Segment] = []
        for s in said:
            label = labels.setdefault(s.speaker, LABELS[len(labels) % len(LABELS)])
            start, end = offset + s.start, offset + max(s.end, s.start)
            out.append(Segment(next_id + len(out), round(start * SAMPLE_RATE) // HOP, round(start, 3), round(end, 3),
                               s.text, [], 0.0, 0.0, 0.0, 0.0, speaker=label))
        return out
