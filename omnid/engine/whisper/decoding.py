"""Decoding one 30 s window: greedy or sampled tokens under Whisper's logit rules, and the fallback over
temperatures when a decode looks failed (too repetitive, or too unlikely), as the Whisper paper defines it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Sequence

import mlx.core as mx
import numpy as np

from omnid.engine.whisper.model import Whisper
from omnid.engine.whisper.tokenizer import WhisperTokenizer

TIME_PRECISION = 0.02  # seconds per timestamp token
NEG_INF = -np.inf


@dataclass(frozen=True)
class DecodeOptions:
    language: str | None = None
    task: str = "transcribe"
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    max_new_tokens: int | None = None
    max_initial_timestamp: float = 1.0
    # The window's real content ends here (seconds); set when a short window is encoded without 30 s padding.
    max_timestamp: float | None = None
    without_timestamps: bool = False
    suppress_blank: bool = True
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    # Sampling at temperature > 0 is seeded per window, so the same audio always gives the same text.
    seed: int | None = 0


@dataclass(frozen=True)
class DecodeResult:
    tokens: list[int]
    text: str
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float
    finish_reason: str  # "stop" at end-of-text, "length" at the token limit


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x)
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted)))


class LogitRules:
    """Suppression and timestamp rules applied to every step's logits (numpy, in place)."""

    def __init__(self, tokenizer: WhisperTokenizer, suppress: tuple[int, ...], suppress_begin: tuple[int, ...]):
        self.tok = tokenizer
        self.suppress = np.array(sorted(set(suppress)), dtype=np.int64)
        self.suppress_begin = np.array(sorted(set(suppress_begin)), dtype=np.int64)

    def apply(self, logits: np.ndarray, sampled: list[int], opts: DecodeOptions) -> None:
        if opts.suppress_blank and not sampled:
            logits[self.suppress_begin] = NEG_INF
        logits[self.suppress] = NEG_INF
        if not opts.without_timestamps:
            self._timestamps(logits, sampled, opts)

    def _timestamps(self, logits: np.ndarray, sampled: list[int], opts: DecodeOptions) -> None:
        ts = self.tok.timestamp_begin
        logits[self.tok.no_timestamps] = NEG_INF
        last_was_ts = len(sampled) >= 1 and sampled[-1] >= ts
        penultimate_was_ts = len(sampled) < 2 or sampled[-2] >= ts
        if last_was_ts:
            if penultimate_was_ts:  # a segment just closed: text must follow
                logits[ts:] = NEG_INF
            else:  # a segment's end timestamp is open: another timestamp or the end must follow
                logits[: self.tok.eot] = NEG_INF
        stamps = [t for t in sampled if t >= ts]
        if stamps:
            # Time never runs backwards; a segment's end may equal its start only as the pair's second token.
            last = stamps[-1] if last_was_ts and not penultimate_was_ts else stamps[-1] + 1
            logits[ts:last] = NEG_INF
        if not sampled:
            logits[:ts] = NEG_INF
            if opts.max_initial_timestamp is not None:
                logits[ts + int(round(opts.max_initial_timestamp / TIME_PRECISION)) + 1 :] = NEG_INF
        if opts.max_timestamp is not None:
            last_allowed = ts + int(np.ceil(opts.max_timestamp / TIME_PRECISION))
            logits[last_allowed + 1 :] = NEG_INF
            if last_was_ts and penultimate_was_ts and sampled and sampled[-1] >= last_allowed:
                # A segment closed at the end of the content: nothing is left to transcribe.
                logits[: self.tok.eot] = NEG_INF
                logits[self.tok.eot + 1 :] = NEG_INF
                return
        logprobs = _log_softmax(logits)
        ts_logprob = np.logaddexp.reduce(logprobs[ts:])
        if ts_logprob > np.max(logprobs[:ts]):
            logits[:ts] = NEG_INF


class Decoding:
    """One sequence being decoded: the tokens chosen so far under the logit rules, and their score. Its KV caches
    live elsewhere (a DecodeBatch), so that many sequences can step through the model together."""

    def __init__(self, rules: LogitRules, eot: int, prompt: list[int], opts: DecodeOptions,
                 prefix: Sequence[int], no_speech_prob: float, limit: int):
        self.rules = rules
        self.eot = eot
        self.prompt = prompt
        self.opts = opts
        self.prefix_len = len(prefix)
        self.sampled: list[int] = list(prefix)
        self.no_speech_prob = no_speech_prob
        self.limit = limit
        self.temperature = opts.temperatures[0]
        self.rng = np.random.default_rng(opts.seed)
        self.sum_logprob = 0.0
        self.finish: str | None = None  # set once done: "stop" or "length"

    def choose(self, logits: np.ndarray) -> bool:
        """Takes the next token from this step's logits (modified in place); True when the sequence is done."""
        self.rules.apply(logits, self.sampled, self.opts)
        logprobs = _log_softmax(logits)
        if self.temperature > 0:
            probs = np.exp(logprobs / self.temperature - np.max(logprobs / self.temperature))
            token = int(self.rng.choice(len(probs), p=probs / probs.sum()))
        else:
            token = int(np.argmax(logits))
        self.sum_logprob += float(logprobs[token])
        if token == self.eot:
            self.finish = "stop"
            return True
        self.sampled.append(token)
        if len(self.prompt) + len(self.sampled) >= self.limit:
            self.finish = "length"
        return self.finish is not None

    def result(self) -> DecodeResult:
        text = self.rules.tok.decode(self.sampled)
        return DecodeResult(
            tokens=self.sampled,
            text=text,
            avg_logprob=self.sum_logprob / (len(self.sampled) - self.prefix_len + 1),
            no_speech_prob=self.no_speech_prob,
            temperature=self.temperature,
            compression_ratio=compression_ratio(text.strip()),
            finish_reason=self.finish or "length",
        )


def needs_fallback(r: DecodeResult, opts: DecodeOptions) -> bool:
    """The Whisper paper's test of a failed decode (too repetitive or too unlikely, and not silence)."""
    too_repetitive = opts.compression_ratio_threshold is not None and r.compression_ratio > opts.compression_ratio_threshold
    too_unlikely = opts.log_prob_threshold is not None and r.avg_logprob < opts.log_prob_threshold
    silence = opts.no_speech_threshold is not None and r.no_speech_prob > opts.no_speech_threshold and too_unlikely
    return (too_repetitive or too_unlikely) and not silence


def best_of(results: list[DecodeResult], opts: DecodeOptions) -> DecodeResult:
    """When every temperature failed: the likeliest decode that is not too repetitive."""
    below_cr = [
        r for r in results
        if opts.compression_ratio_threshold is None or r.compression_ratio <= opts.compression_ratio_threshold
    ]
    best = max(below_cr or results, key=lambda r: r.avg_logprob)
    return replace(best, temperature=results[-1].temperature)


class WindowDecoder:
    """Starts decodes of one window of encoder output: the prompt's forward pass and the first token."""

    def __init__(self, model: Whisper, tokenizer: WhisperTokenizer, rules: LogitRules):
        self.model = model
        self.tok = tokenizer
        self.rules = rules
        self.max_length = model.dims.n_text_ctx

    def begin(self, cross: list, prompt: list[int], opts: DecodeOptions, prefix: Sequence[int] = ()
              ) -> tuple[Decoding, list, np.ndarray]:
        """The sequence, its self-attention caches after the prompt, and the logits of its first step.
        ``prefix``: tokens the text must begin with; they run through the decoder in the prompt's single forward
        pass (cheap next to sampling them one by one) and are part of the result's tokens."""
        context = prompt + list(prefix)
        limit = self.max_length
        if opts.max_new_tokens:
            limit = min(limit, len(context) + opts.max_new_tokens)
        sot_index = prompt.index(self.tok.sot)
        decoder = self.model.decoder
        hidden, cache = decoder(mx.array([context]), None, kv_cache=cross)
        first = np.array(decoder.logits(hidden[0, mx.array([sot_index, len(context) - 1])]), dtype=np.float32)
        no_speech_prob = float(np.exp(_log_softmax(first[0])[self.tok.no_speech]))
        sequence = Decoding(self.rules, self.tok.eot, prompt, opts, prefix, no_speech_prob, limit)
        return sequence, [layer[0] for layer in cache], first[1]
