"""Cohere Transcribe as a transcription engine: the official processor's chunks for audio past 30 s, each chunk
decoded greedily after the official prompt in the language asked (always given: the model detects none), the
chunk texts joined as the processor joins them; live previews decode the open segment again, forcing the stable
part of the previous decode (as Qwen3-ASR's streaming recipe does).

Text: the official decode of a transcription starts with a space (the prompt's ``▁``, see tokenizer.py); the
transcript's text is that text without its leading whitespace, as every other kind's is (``official_text`` keeps
it, for parity). Segments are the chunks (one for audio up to 30 s), timed by their spans only: no word times and
no subtitle-grade times.

Punctuation is the prompt's one option (``<|pnc|>`` or ``<|nopnc|>``): the [cohere_asr] section's ``punctuation``,
or a request's own where its options carry a ``punctuation`` attribute (None: the section's).

Synchronous and thread-confined: only the engine's worker thread calls into it (see runtime/scheduler.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.cohere_asr.checkpoint import load
from omnid.engine.cohere_asr.chunks import chunk_spans, join_texts
from omnid.engine.cohere_asr.model import CohereAsr, Generation, numpy_packed
from omnid.engine.cohere_asr.options import CohereOptions
from omnid.engine.cohere_asr.tokenizer import LANGUAGES
from omnid.engine.errors import EngineError
from omnid.engine.interface import Capabilities, Hypothesis
from omnid.engine.nemo.mlx_folder import keep_packed
from omnid.engine.options import TranscribeOptions
from omnid.engine.transcript import Segment, Transcript, after_prefix

log = structlog.get_logger(__name__)
Check = Callable[[], None]
HOP = 160
# Fewer samples than two valid mel frames: the official front end's normalisation divides 0 by 0 there and the
# model emits <unk> for its whole budget (empty text); here the transcript is empty without model work.
MIN_SAMPLES = 2 * HOP


class LanguageError(EngineError):
    """A request's language is missing or not one of the model's 14 (the model has no language detection): the
    request's fault, for the API a 400 naming ``param``."""

    param = "language"


class CohereAsrEngine:
    kind = "cohere_asr"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None,
                 options: CohereOptions = CohereOptions(), keep_quantized: bool | None = None):
        self.model_id, self.options = model_id, options
        started = time.perf_counter()
        ckpt = load(Path(path), dict(pins) if pins else None, keep_packed(keep_quantized, on_cpu=numpy_packed))
        self.model, self.tokenizer = CohereAsr(ckpt), ckpt.tokenizer
        self.layout, self.quantized = ckpt.layout, bool(ckpt.quantized)
        self.languages = self.tokenizer.languages()
        # the prompt's fixed tokens are all there (a missing one fails at load, not at the first request)
        self.tokenizer.prompt(self.languages[0] if self.languages else "en", True)
        self.tokenizer.prompt(self.languages[0] if self.languages else "en", False)
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=self.layout, quantized=self.quantized,
                 seconds=round(self.load_seconds, 3))

    @property
    def capabilities(self) -> Capabilities:
        # Greedy only, no text prompt; segments are the long-audio chunks (no subtitles, no word times); a language
        # it does not take is refused, never detected instead.
        positions = self.model.dims.decoder.positions - len(self.prompt("en" if "en" in self.languages
                                                                         else self.languages[0]))
        return Capabilities(languages=self.languages, prompt=False, word_timestamps=False, timestamps=False,
                            max_new_tokens=positions, streaming="redecode", temperature=False,
                            refuses_unknown_language=True, requires_language=True, punctuation=True,
                            default_language=self.options.default_language)

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        return ()

    # --- the model, step by step (also what the parity tests call) -------------------------------------------------

    def language(self, opts: TranscribeOptions) -> str:
        """The request's language: required, one of the model's."""
        code = opts.language
        if not code:
            raise LanguageError(f"model {self.model_id} needs a language (it detects none): one of "
                                f"{', '.join(self.languages)}")
        if code not in self.languages:
            raise LanguageError(f"model {self.model_id} does not transcribe {code!r}; it takes "
                                f"{', '.join(self.languages)}")
        return code

    def punctuation(self, opts: TranscribeOptions) -> bool:
        asked = getattr(opts, "punctuation", None)
        return self.options.punctuation if asked is None else bool(asked)

    def prompt(self, language: str, punctuation: bool = True) -> list[int]:
        if language not in LANGUAGES:
            raise LanguageError(f"model {self.model_id} does not transcribe {language!r}")
        return self.tokenizer.prompt(language, punctuation)

    def decode_chunk(self, audio: np.ndarray, prompt: list[int], budget: int, check: Check = lambda: None,
                     forced: list[int] | None = None) -> Generation:
        """One input's greedy tokens after the prompt (and ``forced`` tokens, which it continues)."""
        return self.decode_chunks([audio], prompt + (forced or []), budget, check)[0]

    def decode_chunks(self, chunks: list[np.ndarray], prompt: list[int], budget: int,
                      check: Check = lambda: None) -> list[Generation]:
        """Each input's greedy tokens after the prompt, the inputs encoded one by one and decoded together."""
        encoded = []
        for audio in chunks:
            if len(audio) >= MIN_SAMPLES:
                mel = self.model.features(audio)
                check()
                encoded.append(self.model.encode(mel, check))
        generated = iter(self.model.generate_together(encoded, prompt, budget, check) if encoded else [])
        return [next(generated) if len(audio) >= MIN_SAMPLES else Generation([], "stop") for audio in chunks]

    def official_text(self, prompt: list[int], tokens: list[int]) -> str:
        """The official processor's text of one input: its decode of the prompt and the tokens."""
        return self.tokenizer.decode(prompt + tokens)

    # --- transcription ---------------------------------------------------------------------------------------------

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """16 kHz mono float32 -> transcript: one input up to 30 s, else the official chunks, ``chunks_together``
        of them decoded at once."""
        language = self.language(opts)
        prompt = self.prompt(language, self.punctuation(opts))
        budget = opts.max_new_tokens or self.options.max_new_tokens
        audio = np.asarray(audio, np.float32)
        duration = len(audio) / SAMPLE_RATE
        found = chunk_spans(len(audio), audio)
        spans = found or [(0, len(audio))]
        segments: list[Segment] = []
        texts: list[str] = []
        generated, finish = 0, "stop"
        together = self.options.chunks_together  # chunks decoded at once: their caches are in memory together
        for group in (spans[i : i + together] for i in range(0, len(spans), together)):
            check()
            generations = self.decode_chunks([audio[a:b] for a, b in group], prompt, budget, check)
            for (start, end), gen in zip(group, generations, strict=True):
                text = self.official_text(prompt, gen.tokens)
                texts.append(text)
                generated += len(gen.tokens)
                finish = gen.finish if gen.finish != "stop" else finish
                if text.strip():
                    seg = Segment(len(segments), start // HOP, start / SAMPLE_RATE, end / SAMPLE_RATE, text.strip(),
                                  gen.tokens, 0.0, 0.0, 0.0, 0.0, None, language)
                    if on_segment is not None:
                        on_segment(replace(seg, text=" " + seg.text) if segments and language not in ("ja", "zh")
                                   else seg)
                    segments.append(seg)
                if on_progress is not None:
                    on_progress(end / SAMPLE_RATE, duration)
        official = join_texts(texts, language) if found is not None else (texts[0] if texts else "")
        return Transcript(official.lstrip(), segments, language, duration, generated, finish)

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]],
                         opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                         on_segment: Callable[[Segment], None] | None = None) -> Transcript:
        """Only the given sample spans (the speech a VAD found), each transcribed on its own, on the clip's
        timeline; their texts joined as chunk texts are."""
        language = self.language(opts)
        segments: list[Segment] = []
        texts: list[str] = []
        generated, finish = 0, "stop"
        for first, last in clips:
            part = self.transcribe(audio[first:last], opts, check)
            texts.append(part.text)
            generated += part.generated_tokens
            finish = part.finish_reason if part.finish_reason != "stop" else finish
            for seg in part.segments:
                seg = replace(seg, id=len(segments), seek=seg.seek + first // HOP, start=seg.start + first / SAMPLE_RATE,
                              end=seg.end + first / SAMPLE_RATE)
                if on_segment is not None:
                    on_segment(replace(seg, text=" " + seg.text) if segments and language not in ("ja", "zh")
                               else seg)
                segments.append(seg)
        return Transcript(join_texts(texts, language).strip(), segments, language, len(audio) / SAMPLE_RATE,
                          generated, finish)

    def preview(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), prefix: str = "",
                check: Check = lambda: None) -> str:
        """The clip's text; with ``prefix`` (words a realtime final has already sent) a text that starts with it."""
        return after_prefix(self.transcribe(audio, opts, check).text, prefix)

    def redecode(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                 check: Check = lambda: None, final: bool = False) -> Hypothesis:
        """A live preview: the whole open segment decoded again. The first ``stream_unfixed_decodes`` decodes of a
        segment are free; later ones force the previous decode's tokens minus the last ``stream_rollback_tokens``
        (more while the kept part ends inside a character), so only the unstable end is decoded again. ``final``
        keeps at least one token. A segment past 30 s is transcribed in its chunks instead."""
        o = self.options
        language = self.language(opts)
        decodes = previous.decodes if previous else 0
        if chunk_spans(len(audio), audio) is not None:
            text = self.transcribe(audio, opts, check).text
            return Hypothesis(text=text, raw=text, decodes=decodes + 1, language=language)
        prompt = self.prompt(language, self.punctuation(opts))
        forced: list[int] = []
        if previous and decodes >= o.stream_unfixed_decodes:
            cur = list(previous.tokens)
            keep = max(1 if final else 0, len(cur) - o.stream_rollback_tokens)
            while keep > (1 if final else 0) and "\ufffd" in self.tokenizer.decode(cur[:keep])[-1:]:
                keep -= 1
            forced = cur[:keep]
        budget = opts.max_new_tokens or (self.options.max_new_tokens if final else o.preview_max_new_tokens)
        gen = self.decode_chunk(np.asarray(audio, np.float32), prompt, budget, check, forced)
        tokens = forced + gen.tokens
        text = self.official_text(prompt, tokens)
        return Hypothesis(text=text.strip(), raw=text, decodes=decodes + 1, language=language, tokens=tuple(tokens))
