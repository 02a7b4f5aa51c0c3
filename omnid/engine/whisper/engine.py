"""A loaded Whisper model and long-form transcription: window after window, seeking by timestamps.

Synchronous and thread-confined: only the engine's worker thread calls into it (see runtime.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import numpy as np
import structlog

from omnid.engine import pins as pinning
from omnid.engine.errors import CheckpointError
from omnid.engine.interface import Capabilities
from omnid.engine.options import TranscribeOptions
from omnid.engine.transcript import Segment, Transcript, Word
from omnid.engine.whisper.alignment import word_timestamps
from omnid.engine.whisper.batch import Decode, Encode, Program, WhisperBatch, run_alone
from omnid.engine.whisper.checkpoint import VOCABULARY_KEY, build_model, load_checkpoint, numpy_packed
from omnid.engine.whisper.decoding import (
    TIME_PRECISION,
    DecodeOptions,
    DecodeResult,
    LogitRules,
    WindowDecoder,
    best_of,
    needs_fallback,
)
from omnid.engine.whisper.mel import (
    FRAMES_PER_SECOND,
    N_FRAMES,
    N_SAMPLES,
    SAMPLE_RATE,
    log_mel_spectrogram,
)
from omnid.engine.whisper.options import WhisperOptions
from omnid.engine.whisper.tokenizer import WhisperTokenizer, tokenizer_files

log = structlog.get_logger(__name__)

INPUT_STRIDE = 2  # mel frames per encoder position


class WhisperEngine:
    kind = "whisper"

    def __init__(self, model_id: str, folder: Path, pins: Mapping[str, str] | None = None,
                 options: WhisperOptions = WhisperOptions()):
        started = time.perf_counter()
        self.model_id, self.options = model_id, options
        self.folder = Path(folder)
        # A quantized checkpoint runs MLX's quantized layers on Metal; on MLX's CPU device the encoder and the decode
        # steps run in numpy, a wide encoder's blocks packed (cpu_packed), the rest widened to float32 at load.
        ckpt = load_checkpoint(self.folder, keep_quantized=True if mx.default_device() != mx.cpu else numpy_packed)
        tok_files = tokenizer_files(self.folder)
        self.pin_report = pinning.verify(list(ckpt.files) + tok_files, pins or {})
        self.dims = ckpt.dims
        # A folder without a tokenizer (mlx-community's) takes the rank file its vocabulary size names.
        source = self.folder / ("model.bin" if ckpt.format == "ctranslate2" else "config.json")
        key = VOCABULARY_KEY[ckpt.format]
        self.tokenizer = WhisperTokenizer.for_model(self.folder, ckpt.dims.n_vocab, source, key)
        if self.tokenizer.timestamp_begin + 1501 > ckpt.dims.n_vocab:
            raise CheckpointError(
                f"{self.tokenizer.source}: tokenizer does not fit the model (timestamps start at "
                f"{self.tokenizer.timestamp_begin}, vocabulary has {ckpt.dims.n_vocab})"
            )
        self.model = build_model(ckpt)
        self.model.decoder.freeze_projection()
        self.alignment_heads = ckpt.alignment_heads
        tok = self.tokenizer
        specials = (tok.transcribe, tok.translate, tok.sot, tok.sot_prev, tok.sot_lm, tok.no_speech)
        self.rules = LogitRules(
            tok,
            suppress=tuple(ckpt.suppress_ids or ()) + tok.non_speech_tokens + specials,
            suppress_begin=tuple(ckpt.suppress_ids_begin or tok.encode(" ") + [tok.eot]),
        )
        self.decoder = WindowDecoder(self.model, tok, self.rules)
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, format=ckpt.format, seconds=round(self.load_seconds, 3))

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=self.languages, prompt=True, word_timestamps=True, timestamps=True,
                            max_new_tokens=self.dims.n_text_ctx, streaming="forced_prefix")

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(self.tokenizer.language_tokens) if self.dims.is_multilingual else ("en",)

    # --- jobs, run alone --------------------------------------------------------------------------------

    def batch(self, lane: Callable[[Any], Any] | None = None) -> WhisperBatch:
        """A batch to run many programs (``*_program``) together on this model; ``lane`` as in WhisperBatch."""
        return WhisperBatch(self.model, self.decoder, lane)

    def transcribe(
        self,
        audio: np.ndarray,
        opts: TranscribeOptions = TranscribeOptions(),
        check: Callable[[], None] = lambda: None,
        on_segment: Callable[[Segment], None] | None = None,
        on_progress: Callable[[float, float], None] | None = None,
    ) -> Transcript:
        """16 kHz mono float32 samples -> transcript. ``check`` raises to cancel; it is called between encoder
        layers and before every decoded token."""
        return run_alone(self.batch(), self.transcribe_program(audio, opts, on_segment, on_progress), check)

    def transcribe_clips(
        self,
        audio: np.ndarray,
        clips: list[tuple[int, int]],
        opts: TranscribeOptions = TranscribeOptions(),
        check: Callable[[], None] = lambda: None,
        on_segment: Callable[[Segment], None] | None = None,
    ) -> Transcript:
        """Only the given parts of a clip (sample spans, in order), each transcribed on its own, with segment and
        word times on the whole clip's timeline. No part at all is an empty transcript, without the model."""
        return run_alone(self.batch(), self.clips_program(audio, clips, opts, on_segment), check)

    def preview(
        self,
        audio: np.ndarray,
        opts: TranscribeOptions = TranscribeOptions(),
        prefix: str = "",
        check: Callable[[], None] = lambda: None,
    ) -> str:
        """Text of one window (at most 30 s) without timestamps, forced to begin with ``prefix``. Live previews
        pass the stable start of their previous hypothesis, so only the new words are sampled; a final passes the
        text already sent as append-only deltas, so the authoritative text continues it."""
        return run_alone(self.batch(), self.preview_program(audio, opts, prefix), check)

    # --- jobs as programs (see batch.py) ----------------------------------------------------------------

    def transcribe_program(
        self,
        audio: np.ndarray,
        opts: TranscribeOptions = TranscribeOptions(),
        on_segment: Callable[[Segment], None] | None = None,
        on_progress: Callable[[float, float], None] | None = None,
    ) -> Program[Transcript]:
        duration = len(audio) / SAMPLE_RATE
        mel = log_mel_spectrogram(audio, self.dims.n_mels)
        content_frames = mel.shape[0] - 1
        language = opts.language or ("en" if not self.dims.is_multilingual else None)
        decode_opts = replace(self.options.decode, temperatures=self._temperatures(opts),
                              max_new_tokens=opts.max_new_tokens)
        prompt_tokens = self._prompt_of(opts)
        segments: list[Segment] = []
        history: list[int] = []
        generated, finish = 0, "stop"
        seek = 0
        while seek < content_frames:
            segment_size = min(N_FRAMES, content_frames - seek)
            features = yield Encode(self._window(mel[seek : seek + segment_size], opts))
            if language is None:
                language = self.detect_language(features)
            seconds = segment_size / FRAMES_PER_SECOND
            content_end = seconds if opts.window == "content" else None
            # Speech never needs more than a few tokens a second; a decode past this budget is a loop, cut early
            # so that the fallback (compression ratio) retries it instead of running to the context limit.
            budget = int(self.options.token_budget_base + self.options.tokens_per_second * seconds)
            if opts.max_new_tokens:
                budget = min(budget, opts.max_new_tokens)
            decode_opts = replace(decode_opts, language=language, max_timestamp=content_end, max_new_tokens=budget)
            context = history if self.options.condition_on_previous_text else []
            prompt = self._prompt(prompt_tokens, context, language, decode_opts)
            result = yield from self._decode_with_fallback(features, prompt, decode_opts)
            generated += len(result.tokens)
            if result.finish_reason == "length":
                finish = "length"
            window_seek = seek
            if self._is_silence(result, decode_opts):
                seek += segment_size
            else:
                pieces, seek = self._split(result, seek, segment_size)
                kept = [(a, b, t, self.tokenizer.decode(t)) for a, b, t in pieces]
                # Empty or zero-length pieces are dropped, as faster-whisper drops them.
                kept = [(a, b, t, text) for a, b, t, text in kept if a != b and text.strip()]
                words = self._words(features, kept, language, decode_opts, segment_size, window_seek) if opts.word_timestamps else None
                for i, (start, end, tokens, text) in enumerate(kept):
                    # Whisper may stamp an end past the audio; subtitles should not outlast it.
                    start, end = min(start, duration), min(end, duration)
                    seg = Segment(
                        len(segments), window_seek, start, end, text, tokens, result.temperature,
                        result.avg_logprob, result.compression_ratio, result.no_speech_prob,
                        words[i] if words is not None else None,
                    )
                    segments.append(seg)
                    history.extend(tokens)
                    if on_segment is not None:
                        on_segment(seg)
            if on_progress is not None:
                on_progress(min(seek, content_frames) / FRAMES_PER_SECOND, duration)
        return Transcript(
            text="".join(s.text for s in segments).strip(),
            segments=segments,
            language=language or "en",
            duration=duration,
            generated_tokens=generated,
            finish_reason=finish,
        )

    def clips_program(
        self,
        audio: np.ndarray,
        clips: list[tuple[int, int]],
        opts: TranscribeOptions = TranscribeOptions(),
        on_segment: Callable[[Segment], None] | None = None,
    ) -> Program[Transcript]:
        segments: list[Segment] = []
        generated, finish, language = 0, "stop", opts.language
        for start, end in clips:
            offset = start / SAMPLE_RATE

            def shifted(seg: Segment, offset: float = offset, first: int = len(segments)) -> Segment:
                words = [replace(w, start=w.start + offset, end=w.end + offset) for w in seg.words] if seg.words else seg.words
                return replace(seg, id=first + seg.id, seek=seg.seek + int(offset * FRAMES_PER_SECOND),
                               start=seg.start + offset, end=seg.end + offset, words=words)

            report = (lambda seg, shifted=shifted: on_segment(shifted(seg))) if on_segment is not None else None
            part = yield from self.transcribe_program(audio[start:end], opts, on_segment=report)
            segments.extend(shifted(seg) for seg in part.segments)
            generated += part.generated_tokens
            finish = "length" if part.finish_reason == "length" else finish
            language = language or part.language
        return Transcript(
            text="".join(s.text for s in segments).strip(),
            segments=segments,
            language=language or self.languages[0],
            duration=len(audio) / SAMPLE_RATE,
            generated_tokens=generated,
            finish_reason=finish,
        )

    def preview_program(
        self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), prefix: str = "",
    ) -> Program[str]:
        mel = log_mel_spectrogram(audio[:N_SAMPLES], self.dims.n_mels)
        frames = mel.shape[0] - 1
        if frames <= 0:
            return prefix.strip()
        features = yield Encode(self._window(mel[:frames], opts))
        language = opts.language or ("en" if not self.dims.is_multilingual else self.detect_language(features))
        budget = int(self.options.token_budget_base + self.options.tokens_per_second * frames / FRAMES_PER_SECOND)
        decode_opts = replace(
            self.options.decode, temperatures=self._temperatures(opts), language=language, without_timestamps=True,
            max_new_tokens=min(budget, opts.max_new_tokens or budget),
        )
        prompt = self._prompt(self._prompt_of(opts), [], language, decode_opts)
        forced = self.tokenizer.encode(" " + prefix.strip()) if prefix.strip() else []
        result = yield from self._decode_with_fallback(features, prompt, decode_opts, tuple(forced))
        if not forced and self._is_silence(result, decode_opts):
            return ""
        return result.text.strip()

    def final_program(self, audio: np.ndarray, opts: TranscribeOptions, sent: str) -> Program[str]:
        """A closed realtime segment's text: as a file transcription, or continuing the deltas already sent."""
        if sent.strip():
            return (yield from self.preview_program(audio, opts, sent))
        return (yield from self.transcribe_program(audio, opts)).text

    def _decode_with_fallback(self, features: mx.array, prompt: list[int], opts: DecodeOptions,
                              prefix: tuple[int, ...] = ()) -> Program[DecodeResult]:
        """Decodes at each temperature in turn until one does not look failed (Whisper's fallback)."""
        cross = self.model.decoder.cross_kv(features)
        results: list[DecodeResult] = []
        for temperature in opts.temperatures:
            result = yield Decode(cross, prompt, replace(opts, temperatures=(temperature,)), prefix)
            results.append(result)
            if not needs_fallback(result, opts):
                return result
        return best_of(results, opts)

    def _temperatures(self, opts: TranscribeOptions) -> tuple[float, ...]:
        return self.options.temperatures(opts.temperature, opts.fallback)

    def _window(self, window: mx.array, opts: TranscribeOptions) -> mx.array:
        """A window's log-mel frames padded as the window mode asks, ready to encode."""
        frames = window.shape[0]
        pad_frames = int(self.options.content_padding_s * FRAMES_PER_SECOND)
        min_frames = int(self.options.content_min_window_s * FRAMES_PER_SECOND)
        if opts.window == "full":
            target = N_FRAMES
        else:
            target = min(N_FRAMES, max(frames + pad_frames, min_frames))
            target += target % INPUT_STRIDE
        if target > frames:
            # Padding is zeros in the normalised log-mel domain, as faster-whisper pads.
            window = mx.concatenate([window, mx.zeros((target - frames, window.shape[1]), window.dtype)])
        return window

    def detect_language(self, features: mx.array) -> str:
        tok = self.tokenizer
        hidden, _ = self.model.decoder(mx.array([[tok.sot]]), features)
        logits = np.array(self.model.decoder.logits(hidden[0, -1]), dtype=np.float32)
        codes = list(tok.language_tokens)
        ids = np.array([tok.language_tokens[c] for c in codes])
        return codes[int(np.argmax(logits[ids]))]

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        """The tokens of a prompt as the decoder is conditioned on them. Only the last ones are ever used
        (half the text context), so a long prompt costs its tokenization once, never per window."""
        if not prompt or not prompt.strip():
            return ()
        return tuple(self.tokenizer.encode(" " + prompt.strip())[-(self.dims.n_text_ctx // 2 - 1):])

    def _prompt_of(self, opts: TranscribeOptions) -> list[int]:
        return list(opts.prompt_tokens if opts.prompt_tokens is not None else self.prompt_tokens(opts.prompt))

    def _prompt(self, prompt_tokens: list[int], history: list[int], language: str, opts: DecodeOptions) -> list[int]:
        half = self.dims.n_text_ctx // 2 - 1
        context = (prompt_tokens + history)[-half:]
        prompt = ([self.tokenizer.sot_prev] + context) if context else []
        prompt += self.tokenizer.sot_sequence(language, opts.task)
        if opts.without_timestamps:
            prompt.append(self.tokenizer.no_timestamps)
        return prompt

    def _words(self, features: mx.array, kept: list, language: str, opts: DecodeOptions, frames: int, seek: int) -> list[list[Word]]:
        """Aligns all of a window's text at once, then hands each segment its words."""
        ts = self.tokenizer.timestamp_begin
        per_segment = [[t for t in tokens if t < ts] for _, _, tokens, _ in kept]
        words = word_timestamps(
            self.model, self.tokenizer, features, self.tokenizer.sot_sequence(language, opts.task),
            [t for seg in per_segment for t in seg], frames, self.alignment_heads, seek / FRAMES_PER_SECOND,
        )
        out, pos = [], 0
        for seg_tokens in per_segment:
            text = self.tokenizer.decode(seg_tokens)
            mine: list[Word] = []
            while pos < len(words) and len("".join(w.word for w in mine)) < len(text):
                mine.append(words[pos])
                pos += 1
            out.append(mine)
        return out

    @staticmethod
    def _is_silence(result: DecodeResult, opts: DecodeOptions) -> bool:
        if opts.no_speech_threshold is None or result.no_speech_prob <= opts.no_speech_threshold:
            return False
        return not (opts.log_prob_threshold is not None and result.avg_logprob > opts.log_prob_threshold)

    def _split(self, result: DecodeResult, seek: int, segment_size: int) -> tuple[list[tuple[float, float, list[int]]], int]:
        """Cuts a window's tokens at consecutive timestamp pairs; returns the pieces and the next seek."""
        tokens, ts = result.tokens, self.tokenizer.timestamp_begin
        offset = seek / FRAMES_PER_SECOND
        single_ending = len(tokens) >= 2 and tokens[-2] < ts <= tokens[-1]
        cuts = [i for i in range(1, len(tokens)) if tokens[i] >= ts and tokens[i - 1] >= ts]
        if not cuts:
            stamps = [t for t in tokens if t >= ts]
            end = segment_size / FRAMES_PER_SECOND
            if stamps and stamps[-1] != ts:
                end = (stamps[-1] - ts) * TIME_PRECISION
            return [(offset, offset + end, tokens)], seek + segment_size
        if single_ending:
            cuts.append(len(tokens))
        pieces, last = [], 0
        for cut in cuts:
            piece = tokens[last:cut]
            pieces.append(
                (offset + (piece[0] - ts) * TIME_PRECISION, offset + (piece[-1] - ts) * TIME_PRECISION, piece)
            )
            last = cut
        if single_ending:
            return pieces, seek + segment_size
        # The last piece is unfinished: decode it again from its start in the next window.
        return pieces, seek + (tokens[last - 1] - ts) * INPUT_STRIDE
