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

import mlx.core as mx
import numpy as np

from omnid.engine.nemo.cache_aware import EncoderCache, stream_step
from omnid.engine.nemo.fastconformer import subsampled_length
from omnid.engine.nemo.features import MelStream
from omnid.engine.nemo.transducer import Token
from omnid.engine.nemotron.model import Nemotron

MEL_CACHE = 16  # mel frames before a chunk that its subsampling reads (two whole encoder frames' worth)


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
        self._mel_cache = np.zeros((0, model.front.n_mels), np.float32)
        self._consumed = 0  # mel frames encoded
        self._emitted = 0  # encoder frames encoded
        self._encoder = EncoderCache.initial(model.encoder, self.left)
        self._decoding = model.transducer.start()

    def push(self, audio: np.ndarray) -> list[Token]:
        """New 16 kHz samples -> the tokens the chunks they complete add."""
        self.mel.push(audio)
        return self._decode(flush=False)

    def finish(self) -> list[Token]:
        """The end of the audio: the rest encoded once -> the tokens it adds."""
        self.mel.finish()
        return self._decode(flush=True)

    def _decode(self, flush: bool) -> list[Token]:
        new: list[Token] = []
        factor = self.model.dims.conformer.subsampling_factor  # mel frames per encoder frame
        size = factor * self.chunk
        while True:
            ready = self.mel.ready()
            if ready >= size or (flush and ready > 0):
                taken = self.mel.take(min(ready, size))
            else:
                return new
            last = flush and self.mel.ready() == 0
            window = np.concatenate([self._mel_cache, taken])
            base = (self._consumed - len(self._mel_cache)) // factor
            self._consumed += len(taken)
            low = self._emitted - base
            high = subsampled_length(len(window), causal=True) if last else self._consumed // factor - base
            self._mel_cache = window[-MEL_CACHE:]
            if high <= low:
                self._emitted = base + max(low, high)
                continue
            self._emitted = base + high
            encoded, self._encoder = stream_step(self.model.encoder, mx.array(window), self._encoder, None, low, high)
            if self.on_chunk is not None:
                self.on_chunk(np.array(encoded))
            tokens, self._decoding = self.model.transducer.continue_greedy(
                self.model.prompted(encoded, self.prompt), self._decoding)
            self.tokens.extend(tokens)
            new.extend(tokens)
