"""A loaded Qwen3-ASR model: file transcription (long audio split as the official package splits it), forced-prefix
decodes, and the official streaming recipe for live previews.

Synchronous and thread-confined: only the engine's worker thread calls into it (see runtime/scheduler.py).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.errors import CheckpointError
from omnid.engine.interface import Capabilities, Hypothesis
from omnid.engine.logmel import HOP_LENGTH
from omnid.engine.options import TranscribeOptions
from omnid.engine.programs import run_alone
from omnid.engine.qwen3.aligner_limits import MAX_SECONDS as ALIGNER_CHUNK_S
from omnid.engine.qwen3.aligner_limits import SPLIT_SEARCH_S as ALIGNER_SEARCH_S
from omnid.engine.qwen3.features import features_mel, normalized
from omnid.engine.qwen3.network import load_network, numpy_decoder
from omnid.engine.qwen3_asr.batch import Encode, Generate, Generation, Program, QwenBatch
from omnid.engine.qwen3_asr.options import QwenOptions
from omnid.engine.qwen3_asr.prompt import CODES, NAMES, parse, prompt_ids
from omnid.engine.qwen3_asr.split import split_long_audio
from omnid.engine.spacing import join_segments
from omnid.engine.transcript import Segment, Transcript

log = structlog.get_logger(__name__)
Check = Callable[[], None]


class Qwen3AsrEngine:
    kind = "qwen3_asr"

    def __init__(self, model_id: str, folder: Path, pins: Mapping[str, str] | None = None,
                 options: QwenOptions = QwenOptions(), cpu_decoder: bool | None = None):
        started = time.perf_counter()
        self.model_id = model_id
        self.folder = Path(folder)
        self.options = options
        net = load_network(self.folder, pins)
        ckpt = net.checkpoint
        if ckpt.timestamps is not None:
            raise CheckpointError(f"{self.folder / 'config.json'}: a Qwen3-ForcedAligner checkpoint, which times "
                                  "transcripts and transcribes nothing: configure it with kind = "
                                  '"qwen3_forced_aligner" and name it as a Qwen3-ASR model\'s aligner')
        self.pin_report, self.tokenizer, self.model = net.pin_report, net.tokenizer, net.model
        ids = self.tokenizer.ids
        self.eos = (ids.im_end, ids.endoftext)
        self.cpu_decoder = numpy_decoder(net, cpu_decoder)
        if ckpt.head_differs:
            log.warning("tied_head_differs", model=model_id, detail="lm_head.weight is stored but differs from the "
                        "embedding; the config ties them, so the embedding is the head")
        self.layout = ckpt.layout
        self.quantized = bool(ckpt.quantized)
        names = ckpt.languages or tuple(NAMES.values())
        self.languages = tuple(CODES[n] for n in names if n in CODES)
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=ckpt.layout, quantized=self.quantized,
                 decoder="numpy" if self.cpu_decoder else "mlx", seconds=round(self.load_seconds, 3))

    @property
    def capabilities(self) -> Capabilities:
        # Segment times are those of the long-audio chunks only, so no subtitles and no word times (refused with
        # a 400 naming the field rather than invented).
        return Capabilities(languages=self.languages, prompt=True, word_timestamps=False, timestamps=False,
                            max_new_tokens=4096, streaming="redecode", temperature=False,
                            language_names=NAMES)

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(prompt)) if prompt and prompt.strip() else ()

    # --- the model, step by step (also what the parity tests call) -------------------------------------------------

    def mel(self, audio: np.ndarray) -> mx.array:
        return features_mel(audio, self.model.audio.dims.n_mels)

    def encode(self, audio: np.ndarray, check: Check = lambda: None) -> mx.array:
        return self.model.audio(self.mel(audio), check)

    def prompt(self, context: str, n_audio: int, language: str | None = None, prefix: str = "") -> list[int]:
        return prompt_ids(self.tokenizer, context, n_audio, language, prefix)

    def prefill_logits(self, ids: list[int], audio: mx.array) -> mx.array:
        x = self.model.embed(ids, self.tokenizer.ids.audio_pad, audio)
        return self.model.logits(self.model.text(x, self.model.new_caches()))[0]

    def generate(self, ids: list[int], audio: mx.array, budget: int, check: Check = lambda: None,
                 loop_guard: bool = True) -> Generation:
        """Greedy decoding after the prompt ``ids``: stops on an end token, on a token loop, or at ``budget``."""
        return run_alone(self.batch(), _one(Generate(ids, audio, budget, loop_guard)), check)

    # --- many jobs at once ----------------------------------------------------------------------------------------

    def batch(self, lane: Callable[[Any], Any] | None = None) -> QwenBatch:
        """A batch to run many programs (``*_program``) together on this model; ``lane`` as in ProgramBatch."""
        return QwenBatch(self, lane)

    def stopped(self, tokens: list[int], loop_guard: bool) -> tuple[list[int], str] | None:
        if tokens[-1] in self.eos:
            return tokens, "stop"
        if loop_guard and self._looping(tokens):
            return self._unlooped(tokens), "loop"
        return None

    def _looping(self, tokens: list[int]) -> bool:
        n = self.options.loop_window
        return n > 0 and len(tokens) >= n and len(set(tokens[-n:])) <= self.options.loop_max_distinct

    def _unlooped(self, tokens: list[int]) -> list[int]:
        """Keeps one turn of the loop: the tokens before the looping window, then its shortest period."""
        n = self.options.loop_window
        tail = tokens[-n:]
        for period in range(1, n // 2 + 1):
            if all(tail[i] == tail[i % period] for i in range(n)):
                return tokens[:-n] + tail[:period]
        return tokens

    # --- transcription: each job a program (batch.py), run alone here or together in a runtime's batch ------------

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        return run_alone(self.batch(), self.transcribe_program(audio, opts, on_segment, on_progress), check)

    def transcribe_program(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(),
                           on_segment: Callable[[Segment], None] | None = None,
                           on_progress: Callable[[float, float], None] | None = None) -> Program:
        """16 kHz mono float32 samples -> transcript. Audio past ``max_chunk_s`` (or, timed, past the aligner's
        chunk) is split at quiet points, each chunk decoded with its own token budget and its own detected
        language (unless one is forced)."""
        audio = normalized(audio)
        duration = len(audio) / SAMPLE_RATE
        segments: list[Segment] = []
        generated, finish = 0, "stop"
        if len(audio) < HOP_LENGTH:  # not one frame of audio: nothing to hear, and the model would invent words
            return _transcript([], opts, duration, 0, "stop")
        max_chunk_s, search_s = self.options.max_chunk_s, self.options.split_search_s
        if opts.timed:  # chunks the aligner takes, cut as the official timed transcription cuts them
            max_chunk_s, search_s = ALIGNER_CHUNK_S, ALIGNER_SEARCH_S
        for start, chunk in split_long_audio(audio, max_chunk_s, search_s):
            seconds = len(chunk) / SAMPLE_RATE
            gen, language, text = yield from self._decode(chunk, opts)
            generated += len(gen.tokens)
            finish = gen.finish if gen.finish != "stop" else finish
            if text:
                seg = Segment(len(segments), int(start / HOP_LENGTH), start / SAMPLE_RATE,
                              start / SAMPLE_RATE + seconds, text, gen.tokens, 0.0,
                              gen.logprob / max(1, len(gen.tokens)), _compression_ratio(text), 0.0, None, language)
                segments.append(seg)
                if on_segment is not None:
                    on_segment(seg)
            if on_progress is not None:
                on_progress(min(duration, start / SAMPLE_RATE + seconds), duration)
        return _transcript(segments, opts, duration, generated, finish)

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]],
                         opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                         on_segment: Callable[[Segment], None] | None = None) -> Transcript:
        return run_alone(self.batch(), self.clips_program(audio, clips, opts, on_segment), check)

    def clips_program(self, audio: np.ndarray, clips: list[tuple[int, int]],
                      opts: TranscribeOptions = TranscribeOptions(),
                      on_segment: Callable[[Segment], None] | None = None) -> Program:
        """Only the given parts of a clip (sample spans, in order), each on its own, times on the clip's timeline."""
        segments: list[Segment] = []
        generated, finish = 0, "stop"
        for start, end in clips:
            part = yield from self.transcribe_program(audio[start:end], opts)
            for seg in part.segments:
                seg = replace(seg, id=len(segments), seek=seg.seek + start // HOP_LENGTH,
                              start=seg.start + start / SAMPLE_RATE, end=seg.end + start / SAMPLE_RATE)
                segments.append(seg)
                if on_segment is not None:
                    on_segment(seg)
            generated += part.generated_tokens
            finish = part.finish_reason if part.finish_reason != "stop" else finish
        return _transcript(segments, opts, len(audio) / SAMPLE_RATE, generated, finish)

    def _decode(self, audio: np.ndarray, opts: TranscribeOptions, prefix: str = "",
                language: str | None = None) -> Generator[Any, Any, tuple[Generation, str | None, str]]:
        language = opts.language or language
        features = yield Encode(audio)
        ids = self.prompt(opts.prompt or "", features.shape[0], language, prefix)
        gen = yield Generate(ids, features, self._budget(len(audio), opts))
        raw = prefix + self.tokenizer.decode(gen.tokens)
        answer = parse(raw, language)
        return gen, answer.language, answer.text

    def _budget(self, samples: int, opts: TranscribeOptions) -> int:
        """The request's budget, as the official implementation takes it, else one that grows with the audio."""
        if opts.max_new_tokens:
            return opts.max_new_tokens
        return max(self.options.min_new_tokens, math.ceil(self.options.tokens_per_second * samples / SAMPLE_RATE))

    def preview(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), prefix: str = "",
                check: Check = lambda: None) -> str:
        return run_alone(self.batch(), self.preview_program(audio, opts, prefix), check)

    def preview_program(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(),
                        prefix: str = "") -> Program:
        """The text of one clip, forced to begin with ``prefix`` (a final that must continue the text already sent
        as append-only deltas): the prefix is written after the language header, and the decode continues it."""
        text = prefix.strip()
        if not text:
            return (yield from self._decode(audio, opts))[2]
        features = yield Encode(audio)
        language = opts.language
        if language is None:  # its header first: a short decode of the answer's start
            head = yield Generate(self.prompt(opts.prompt or "", features.shape[0]), features, 8)
            language = parse(self.tokenizer.decode(head.tokens)).language
        # Without a language named, the text follows the assistant header directly, as the official streaming
        # recipe forces a previous answer that named none.
        ids = self.prompt(opts.prompt or "", features.shape[0], language, text)
        gen = yield Generate(ids, features, self._budget(len(audio), opts))
        return (text + self.tokenizer.decode(gen.tokens)).strip()

    def final_program(self, audio: np.ndarray, opts: TranscribeOptions, sent: str) -> Program:
        """A realtime segment's final: a transcription, or, with deltas already sent, a decode continuing them."""
        if sent.strip():
            return (yield from self.preview_program(audio, opts, sent))
        return (yield from self.transcribe_program(audio, opts)).text

    # --- live previews: the official streaming recipe ----------------------------------------------------------------

    def redecode(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                 check: Check = lambda: None, final: bool = False) -> Hypothesis:
        return run_alone(self.batch(), self.redecode_program(audio, opts, previous, final), check)

    def redecode_program(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                         final: bool = False) -> Program:
        """Decodes the whole open segment again. The first ``stream_unfixed_decodes`` decodes have no prefix; later
        ones force the previous decode minus its last ``stream_rollback_tokens`` tokens (more while that would
        cut a character in half), so only the unstable end is sampled again. A language detected once is forced
        for the rest of the segment. ``final`` is the official flush: at least one token kept, no such guard."""
        o = self.options
        decodes = previous.decodes if previous else 0
        language = opts.language or (previous.language if previous else None)
        raw = previous.raw if previous else ""
        if previous and language and not opts.language and previous.raw_language is None:
            raw = parse(raw).text  # the language was detected by that decode: from now on it is forced
        prefix = ""
        if decodes >= o.stream_unfixed_decodes:
            cur = self.tokenizer.encode(raw)
            if final:
                prefix = self.tokenizer.decode(cur[: max(1, len(cur) - o.stream_rollback_tokens)], skip_special=False)
            else:
                k = o.stream_rollback_tokens
                while True:
                    cut = max(0, len(cur) - k)
                    prefix = self.tokenizer.decode(cur[:cut], skip_special=False) if cut else ""
                    if "\ufffd" not in prefix:
                        break
                    if cut == 0:
                        prefix = ""
                        break
                    k += 1
        features = yield Encode(audio)
        ids = self.prompt(opts.prompt or "", features.shape[0], language) + (self.tokenizer.encode(prefix) if prefix else [])
        budget = min(o.preview_max_new_tokens, opts.max_new_tokens or o.preview_max_new_tokens)
        gen = yield Generate(ids, features, budget)
        new_raw = prefix + self.tokenizer.decode(gen.tokens)
        answer = parse(new_raw, language)
        return Hypothesis(text=answer.text, raw=new_raw, decodes=decodes + 1, language=answer.language,
                          raw_language=language, tokens=tuple(self.tokenizer.encode(prefix)) + tuple(gen.tokens))


def _one(request: Generate) -> Program:
    """A program of a single decode."""
    return (yield request)


def _transcript(segments: list[Segment], opts: TranscribeOptions, duration: float, generated: int,
                finish: str) -> Transcript:
    """The chunks' texts joined; the language forced, else the first one detected ("" when none was)."""
    detected = [s.language for s in segments if s.language]
    return Transcript(text=join_segments([s.text for s in segments]), segments=segments,
                      language=opts.language or (detected[0] if detected else ""), duration=duration,
                      generated_tokens=generated, finish_reason=finish)


def _compression_ratio(text: str) -> float:
    data = text.encode()
    return len(data) / len(zlib.compress(data)) if data else 0.0
