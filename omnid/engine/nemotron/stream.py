"""One Nemotron stream as the reference server runs it (its ``NemotronStream``; mlx-audio's session follows the
same rule): audio in, each chunk of new audio encoded once against the stream's caches, the transcript growing.

The log-mel's frames are taken once final (a frame's window has all its samples), a chunk's worth (8 mel frames
per encoder frame) at a time; each chunk's subsampling reads the chunk after the last MEL_CACHE mel frames before
it, whose first subsampled frames (already encoded) it drops; the chunk's frames attend to each other and to the
last ``left`` frames' cache, with no look-ahead past the chunk. ``finish`` encodes what is left once, the last
chunk with every subsampled frame its mel gives (the causal subsampling's zero padding after the end included),
over all ``1 + n // hop`` STFT frames. Greedy RNN-T decoding carries its state from chunk to chunk.

Against NeMo's own streaming loop (Nemotron.stream_nemo): the same encoder frames in the same chunks for right
contexts 1 to 13, each chunk released 7 mel frames (70 ms) later (its first chunk is a whole one where NeMo's is
1 + 8R frames); at right context 0 the reference's frames are those of NeMo's offline pass, where NeMo's first
one-frame chunk, read without a pre-encode cache, changes the frames after it; and the end differs (NeMo encodes a
zero pad frame as audio and leaves a tail of fewer than 8 mel frames unencoded). tests/test_nemotron.py pins each.
Per stream the state is a few fixed-size arrays: nothing grows with its length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from omnid.engine.nemo.cache_aware import EncoderCache, stream_steps
from omnid.engine.nemo.fastconformer import subsampled_length
from omnid.engine.nemo.features import MelStream
from omnid.engine.nemo.tokenizer import IncrementalText
from omnid.engine.nemo.transducer import Token
from omnid.engine.nemotron.model import Nemotron

MEL_CACHE = 16  # mel frames before a chunk that its subsampling reads (two whole encoder frames' worth)


@dataclass(frozen=True)
class Chunk:
    """One chunk's encoder input: the subsampling's mel window (the mel cache, then the chunk's frames), which of its
    subsampled frames are the chunk's, and the stream's encoder caches. Chunks of one ``shape`` encode together."""

    window: np.ndarray  # (frames, n_mels)
    first: int
    last: int
    cache: EncoderCache
    frames: int  # mel frames of the chunk (after the cache)

    @property
    def shape(self) -> tuple[int, int, int]:
        return len(self.window), self.first, self.last


class Stream:
    def __init__(self, model: Nemotron, chunk: int, prompt: int, on_chunk: Callable[[np.ndarray], None] | None = None):
        """``chunk``: encoder frames per chunk (the checkpoint's right context + 1 by default); ``prompt``: the
        language's prompt index; ``on_chunk``: called with each chunk's encoder frames (before the prompt)."""
        if chunk < 1:
            raise ValueError("a chunk is at least one encoder frame")
        self.model, self.chunk, self.prompt, self.on_chunk = model, chunk, prompt, on_chunk
        self.left = model.streaming.contexts[0][0]
        self.mel = MelStream(model.front, keep_last=True)
        self.tokens: list[Token] = []
        self._text = IncrementalText(model.vocabulary)
        self._taken = np.zeros((0, model.front.n_mels), np.float32)  # taken from the log-mel, not yet encoded
        self._mel_cache = np.zeros((0, model.front.n_mels), np.float32)
        self._consumed = 0  # mel frames encoded
        self._emitted = 0  # encoder frames encoded
        self._encoder = EncoderCache.initial(model.encoder, self.left)
        self._decoding = model.transducer.start()

    def push(self, audio: np.ndarray) -> list[Token]:
        """New 16 kHz samples -> the tokens the chunks they complete add (each chunk encoded on its own)."""
        self.mel.push(audio)
        return self._decode()

    def finish(self) -> list[Token]:
        """The end of the audio: the rest encoded once -> the tokens it adds."""
        self.mel.finish()
        return self._decode()

    def _decode(self) -> list[Token]:
        new: list[Token] = []
        while (chunk := self.next_chunk()) is not None:
            (encoded, cache), = stream_steps(self.model.encoder, mx.array(chunk.window)[None], [chunk.cache], None,
                                             chunk.first, chunk.last)
            new += self.accept(chunk, encoded, cache)
        return new

    def next_chunk(self) -> Chunk | None:
        """The next chunk to encode (once its log-mel is final; after ``mel.finish()``, the rest), or None. Nothing
        changes until ``accept``: a chunk that is never encoded is asked for again."""
        factor = self.model.dims.conformer.subsampling_factor  # mel frames per encoder frame
        size = factor * self.chunk
        while True:
            if not len(self._taken):
                ready = self.mel.ready()
                if ready >= size or (self.mel.finished and ready > 0):
                    self._taken = self.mel.take(min(ready, size))
                else:
                    return None
            taken = self._taken
            last = self.mel.finished and self.mel.ready() == 0
            window = np.concatenate([self._mel_cache, taken])
            base = (self._consumed - len(self._mel_cache)) // factor
            low = self._emitted - base
            consumed = self._consumed + len(taken)
            high = subsampled_length(len(window), causal=True) if last else consumed // factor - base
            if high > low:
                return Chunk(window, low, high, self._encoder, len(taken))
            self._advance(window, len(taken), base + max(low, high))  # no new encoder frame: only the caches move

    def accept(self, chunk: Chunk, encoded: mx.array, cache: EncoderCache) -> list[Token]:
        """A chunk's encoder frames (before the prompt) and the caches after it -> the tokens they add."""
        self._advance(chunk.window, chunk.frames, self._emitted + chunk.last - chunk.first)
        self._encoder = cache
        if self.on_chunk is not None:
            self.on_chunk(np.array(encoded))
        tokens, self._decoding = self.model.transducer.continue_greedy(
            self.model.prompted(encoded, self.prompt), self._decoding)
        self.tokens.extend(tokens)
        self._text.extend([t.id for t in tokens])
        return tokens

    @property
    def text(self) -> str:
        """The text of the tokens so far (the vocabulary's text of them, extended chunk by chunk)."""
        return self._text.text

    def _advance(self, window: np.ndarray, frames: int, emitted: int) -> None:
        self._taken = self._taken[frames:]
        self._consumed += frames
        self._emitted = emitted
        self._mel_cache = window[-MEL_CACHE:]
