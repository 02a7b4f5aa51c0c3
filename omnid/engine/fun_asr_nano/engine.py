"""Fun-ASR-Nano as a transcription engine: each clip (the whole audio up to ``max_clip_s``; longer audio comes as
the speech clips the daemon's VAD found, or is cut at ``max_clip_s``) decoded as funasr's ``FunASRNano.inference``
decodes one input: FunASR's front end (no normalisation), the SAN-M encoder, the adaptor, the first slots of its
rows in the chat prompt (engine/funasr/llm_prompt.py), the Qwen3 decoder greedy to ``<|im_end|>``
(engine/qwen3/model.py; on MLX's CPU device Qwen3-ASR's numpy decoder, engine/qwen3/cpu_decoder.py); the text
as funasr writes it (specials skipped, ``/sil`` and runs of whitespace one space).

Options: a request's language (zh, en, ja: the prompt asks for 中文, 英文, 日文; any other, or none, asks for none, and
the model writes what it hears, as the reference server does with zh and auto), ``itn`` (a request's ``use_itn``,
else the section's: on, as the reference), ``prompt`` as comma-separated hotwords (the reference server's reading),
``max_new_tokens`` per clip. Segments are the clips, timed by their spans; no word times.

Synchronous and thread-confined: only the engine's worker thread calls into it (see runtime/scheduler.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path

import mlx.core as mx
import numpy as np
import structlog

from omnid.engine.clips import ClipEngine, clip_segment
from omnid.engine.errors import CheckpointError
from omnid.engine.fun_asr_nano.checkpoint import load
from omnid.engine.fun_asr_nano.options import FunAsrNanoOptions
from omnid.engine.funasr.adaptor import Adaptor, slots
from omnid.engine.funasr.llm_prompt import prompt_ids
from omnid.engine.funasr.sanm import SanmEncoder
from omnid.engine.interface import Capabilities
from omnid.engine.options import TranscribeOptions
from omnid.engine.qwen3.cpu_decoder import NumpyDecoder, greedy_numpy
from omnid.engine.qwen3.model import CausalLM, greedy
from omnid.engine.transcript import Segment

log = structlog.get_logger(__name__)
Check = Callable[[], None]
# The languages the prompt names, as the reference server names them (zh asks for none: the model's default).
LANGUAGE_NAMES = {"en": "英文", "ja": "日文"}
LANGUAGES = ("zh", "en", "ja")
MAX_TOKENS = 4096


def hotwords(prompt: str | None) -> list[str]:
    """A request's prompt as the reference server reads it: comma-separated hotwords, blanks dropped."""
    return [w.strip() for w in (prompt or "").split(",") if w.strip()]


def text_of(raw: str) -> str:
    """funasr's text: /sil and runs of whitespace as one space."""
    return re.sub(r"\s+", " ", raw.replace("/sil", " "))


class FunAsrNanoEngine(ClipEngine):
    kind = "fun_asr_nano"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None,
                 options: FunAsrNanoOptions = FunAsrNanoOptions()):
        self.model_id, self.options = model_id, options
        self.max_clip_s = options.max_clip_s
        started = time.perf_counter()
        ckpt = load(Path(path), dict(pins) if pins else None)
        self.front, self.tokenizer, self.low_frame_rate = ckpt.front, ckpt.tokenizer, ckpt.low_frame_rate
        self.encoder, self.adaptor, self.lm = SanmEncoder(ckpt.encoder), Adaptor(ckpt.adaptor), CausalLM(ckpt.text)
        self.text = ckpt.text
        for module, weights, label in ((self.encoder, ckpt.encoder_weights, "audio_encoder"),
                                       (self.adaptor, ckpt.adaptor_weights, "audio_adaptor"),
                                       (self.lm, ckpt.llm_weights, "llm")):
            try:
                module.load_weights(weights, strict=True)
            except ValueError as exc:
                raise CheckpointError(f"{path / 'model.pt'}: {label}: {exc}") from exc
            mx.eval(module.parameters())
        self.end = self.tokenizer.special("<|im_end|>")
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, seconds=round(self.load_seconds, 3))

    @property
    def capabilities(self) -> Capabilities:
        # Greedy; the prompt is hotwords; segments are clips (no word or subtitle times).
        return Capabilities(languages=LANGUAGES, prompt=True, word_timestamps=False, timestamps=False,
                            max_new_tokens=MAX_TOKENS, streaming="redecode", temperature=False, itn=True,
                            max_clip_s=self.max_clip_s)

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        return ()

    def itn(self, opts: TranscribeOptions) -> bool:
        return self.options.use_itn if opts.itn is None else opts.itn

    def decode(self, audio: np.ndarray, language: str | None = None, itn: bool = True, words: list[str] | None = None,
               budget: int = 512, check: Check = lambda: None) -> tuple[list[int], str]:
        """One input as funasr decodes it: the generated tokens (the end token not kept) and how it ended."""
        features = self.front.features(np.asarray(audio, np.float32))
        rows = self.adaptor(self.encoder(mx.array(features)[None]))[0]
        n = slots(len(features)) if self.low_frame_rate else len(features)
        ids, first = prompt_ids(self.tokenizer, n, LANGUAGE_NAMES.get(language or ""), itn, words or [])
        check()
        x = self.lm.embed_at(ids, first, rows[:n])
        if self.cpu_decoder is not None:  # on MLX's CPU device: Qwen3-ASR's numpy decoder (engine/qwen3/cpu_decoder.py)
            return greedy_numpy(self.cpu_decoder, np.array(x[0], np.float32), {self.end}, budget, check)
        return greedy(self.lm, x, {self.end}, budget, check)

    @cached_property
    def cpu_decoder(self) -> NumpyDecoder | None:
        """The decoder in numpy on the CPU backend (decided once, at the first decode); None on Metal."""
        return NumpyDecoder(self.lm, self.text) if mx.default_device() == mx.cpu else None

    def clip(self, audio: np.ndarray, first: int, opts: TranscribeOptions, seg_id: int,
              check: Check) -> tuple[Segment | None, int, str]:
        budget = opts.max_new_tokens or self.options.max_new_tokens
        tokens, finish = self.decode(audio, opts.language, self.itn(opts), hotwords(opts.prompt), budget, check)
        text = text_of(self.tokenizer.decode(tokens)).strip()
        if not text:
            return None, len(tokens), finish
        return clip_segment(seg_id, first, len(audio), text, tokens, opts.language), len(tokens), finish
