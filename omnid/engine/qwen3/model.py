"""Qwen3-ASR's thinker in MLX: the audio encoder (conv stem, per-chunk positions, windowed attention, projector) and
the Qwen3 decoder (GQA, q/k RMSNorm, RoPE, SwiGLU) with a KV cache. Names follow the original checkpoint's
``thinker.audio_tower.*`` / ``thinker.model.*`` below ``audio.`` / ``text.``.

The encoder never builds a dense mask over a clip: its attention runs window by window (full windows as one batch,
the remainder alone), which is what the model was trained with and costs linear memory in the audio's length.
Compute stays in float32 (as for Whisper: float16 matmuls are slow on the CPU backend). On MLX's CPU device the
conv stem and the encoder layers run in numpy over blocks of rows on every core (cpu_math.conv2d_stride2_gelu,
cpu_encoder.py), as Whisper's and Sortformer's encoders do: MLX's CPU convolution and its one-core element-wise
kernels made them more than twice as slow as torch's (bench/qwen3_asr_speed.py); Metal runs the MLX layers below.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cached_property

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_encoder import CpuEncoderLayer
from omnid.engine.cpu_math import attention, conv2d_stride2_gelu, gelu
from omnid.engine.numpy_layers import as_numpy, through_layers
from omnid.engine.qwen3.checkpoint import AudioDims, TextDims

Check = Callable[[], None]
TOKENS_PER_CHUNK = 13  # a full 100-frame chunk after three stride-2 convs
CONV_BATCH = 32  # chunks through the conv stem at once: bounds its activations (~100 MB at the 0.6B width)


def audio_token_count(frames: int, chunk: int = 100) -> int:
    """Audio tokens for a clip of ``frames`` mel frames: 13 per full chunk, then the tail's three halvings.
    Python's floor division throughout (MLX's `//` truncates toward zero, an off-by-one for an empty tail)."""
    tail = frames % chunk
    for _ in range(3):
        tail = (tail - 1) // 2 + 1
    return TOKENS_PER_CHUNK * (frames // chunk) + tail


def chunk_widths(frames: int, chunk: int = 100) -> list[int]:
    full, tail = divmod(frames, chunk)
    return [chunk] * full + ([tail] if tail else [])


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> mx.array:
    """[sin | cos] halves, log-spaced with ln(max)/(C/2 - 1), as the official SinusoidsPositionEmbedding."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv = mx.exp(-increment * mx.arange(channels // 2, dtype=mx.float32))
    scaled = mx.arange(length, dtype=mx.float32)[:, None] * inv[None, :]
    table = mx.concatenate([mx.sin(scaled), mx.cos(scaled)], axis=1)
    mx.eval(table)  # built here, not lazily on another thread (MLX refuses cross-thread lazy graphs)
    return table


class EncoderAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.v_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d)

    def __call__(self, x: mx.array) -> mx.array:
        """x: (windows, tokens, d); each window attends only to itself, bidirectionally."""
        b, n, d = x.shape
        q, k, v = (p(x).reshape(b, n, self.heads, -1).transpose(0, 2, 1, 3) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = attention(q, k, v, scale=(d // self.heads) ** -0.5)
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(b, n, d))


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int):
        super().__init__()
        self.self_attn = EncoderAttention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.final_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    def __init__(self, dims: AudioDims):
        super().__init__()
        c = dims.conv_channels
        self.dims = dims
        self.chunk = 2 * dims.n_window
        self.window = TOKENS_PER_CHUNK * (dims.n_window_infer // self.chunk)  # 104 tokens = 8 s
        self.conv2d1 = nn.Conv2d(1, c, 3, stride=2, padding=1)
        self.conv2d2 = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.conv2d3 = nn.Conv2d(c, c, 3, stride=2, padding=1)
        freq = (((dims.n_mels + 1) // 2 + 1) // 2 + 1) // 2
        self.conv_out = nn.Linear(c * freq, dims.d_model, bias=False)
        self.layers = [EncoderLayer(dims.d_model, dims.heads, dims.ffn_dim) for _ in range(dims.layers)]
        self.ln_post = nn.LayerNorm(dims.d_model, eps=1e-5)
        self.proj1 = nn.Linear(dims.d_model, dims.d_model)
        self.proj2 = nn.Linear(dims.d_model, dims.output_dim)
        self._positions = sinusoids(TOKENS_PER_CHUNK, dims.d_model)

    def conv_stem(self, mel: mx.array, check: Check) -> mx.array:
        """(frames, n_mels) -> (tokens, d_model): 100-frame chunks (the tail zero-padded to 100 only when a full
        chunk exists), each restarting its positions at 0, padding tokens dropped."""
        frames = mel.shape[0]
        widths = chunk_widths(frames, self.chunk)
        width = max(widths)
        if frames < width * len(widths):
            mel = mx.concatenate([mel, mx.zeros((width * len(widths) - frames, mel.shape[1]), mel.dtype)])
        # (chunks, n_mels, width, 1): height = mel bins, width = time, as the official (b, 1, mel, time) input.
        chunks = mel.reshape(len(widths), width, -1).transpose(0, 2, 1)[..., None]
        stem = self._stem_cpu if mx.default_device() == mx.cpu else self._stem
        out = []
        for first in range(0, len(widths), CONV_BATCH):
            out.append(stem(chunks[first : first + CONV_BATCH]))
            check()
        x = mx.concatenate(out) if len(out) > 1 else out[0]
        keep = [audio_token_count(w, self.chunk) for w in widths]
        if all(k == x.shape[1] for k in keep):
            return x.reshape(-1, x.shape[-1])
        return mx.concatenate([x[i, :k] for i, k in enumerate(keep)])

    def _stem(self, x: mx.array) -> mx.array:
        """(chunks, n_mels, width, 1) -> (chunks, tokens, d_model)."""
        x = gelu(self.conv2d1(x))
        x = gelu(self.conv2d2(x))
        x = gelu(self.conv2d3(x))
        b, f, t, c = x.shape
        x = self.conv_out(x.transpose(0, 2, 3, 1).reshape(b, t, c * f))  # channel-major: index c * f_total + f
        x = x + self._positions[:t]
        mx.eval(x)
        return x

    def _stem_cpu(self, chunks: mx.array) -> mx.array:
        """_stem in numpy (the convolutions' products on every core, each GELU in cache)."""
        mx.eval(chunks)
        data = np.asarray(chunks)
        x = np.zeros((data.shape[0], data.shape[1] + 2, data.shape[2] + 2, 1), np.float32)
        x[:, 1:-1, 1:-1] = data
        for conv in (self.conv2d1, self.conv2d2, self.conv2d3):
            x = conv2d_stride2_gelu(x, as_numpy(conv.weight), as_numpy(conv.bias), border=conv is not self.conv2d3)
        b, f, t, c = x.shape
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).reshape(b * t, c * f) @ as_numpy(self.conv_out.weight).T
        x = x.reshape(b, t, -1) + np.asarray(self._positions[:t])
        return mx.array(x)

    def __call__(self, mel: mx.array, check: Check = lambda: None) -> mx.array:
        """(frames, n_mels) log-mel -> (audio tokens, output_dim) embeddings for the decoder."""
        x = self.conv_stem(mel, check)
        if mx.default_device() == mx.cpu:  # windows and all: the layers' products over every row at once
            x = through_layers(x[None], self._cpu_layers, after_each=check)[0]
            x = self.proj2(gelu(self.proj1(self.ln_post(x))))
            mx.eval(x)
            return x
        n = x.shape[0]
        full = n // self.window
        parts = []
        if full:
            parts.append(self._layers(x[: full * self.window].reshape(full, self.window, -1), check).reshape(-1, x.shape[-1]))
        if n % self.window:
            parts.append(self._layers(x[full * self.window :][None], check)[0])
        x = mx.concatenate(parts) if len(parts) > 1 else parts[0]
        x = self.proj2(gelu(self.proj1(self.ln_post(x))))
        mx.eval(x)
        return x

    def _layers(self, windows: mx.array, check: Check) -> mx.array:
        for layer in self.layers:
            windows = layer(windows)
            mx.eval(windows)
            check()
        return windows


    @cached_property
    def _cpu_layers(self) -> list[CpuEncoderLayer]:
        """Built at the first CPU pass, after the weights are loaded (numpy views of them)."""
        return [CpuEncoderLayer(a.heads, layer.self_attn_layer_norm, a.q_proj, a.k_proj, a.v_proj, a.out_proj,
                                layer.final_layer_norm, layer.fc1, layer.fc2, window=self.window)
                for layer in self.layers for a in (layer.self_attn,)]


class KVCache:
    """Keys and values of one decoder layer, in a buffer grown in steps (not one concatenation per token)."""

    STEP = 256

    def __init__(self) -> None:
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0

    def update(self, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array]:
        n = k.shape[2]
        if self.keys is None or self.values is None or self.offset + n > self.keys.shape[2]:
            grow = ((n + self.STEP - 1) // self.STEP) * self.STEP
            shape = (k.shape[0], k.shape[1], grow, k.shape[3])
            new_k, new_v = mx.zeros(shape, k.dtype), mx.zeros(shape, v.dtype)
            if self.keys is not None and self.values is not None:
                new_k = mx.concatenate([self.keys[..., : self.offset, :], new_k], axis=2)
                new_v = mx.concatenate([self.values[..., : self.offset, :], new_v], axis=2)
            self.keys, self.values = new_k, new_v
        self.keys[..., self.offset : self.offset + n, :] = k
        self.values[..., self.offset : self.offset + n, :] = v
        self.offset += n
        return self.keys[..., : self.offset, :], self.values[..., : self.offset, :]


class DecoderAttention(nn.Module):
    def __init__(self, t: TextDims):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = t.heads, t.kv_heads, t.head_dim
        self.q_proj = nn.Linear(t.hidden_size, t.heads * t.head_dim, bias=False)
        self.k_proj = nn.Linear(t.hidden_size, t.kv_heads * t.head_dim, bias=False)
        self.v_proj = nn.Linear(t.hidden_size, t.kv_heads * t.head_dim, bias=False)
        self.o_proj = nn.Linear(t.heads * t.head_dim, t.hidden_size, bias=False)
        self.q_norm = nn.RMSNorm(t.head_dim, eps=t.rms_norm_eps)
        self.k_norm = nn.RMSNorm(t.head_dim, eps=t.rms_norm_eps)
        # The config's mrope_section is moot for ASR (all three position rows are equal): plain rotate-half RoPE.
        self.rope = nn.RoPE(t.head_dim, traditional=False, base=t.rope_theta)

    def __call__(self, x: mx.array, cache: KVCache | list[KVCache]) -> mx.array:
        """x (rows, n, hidden): one cache for one row, or a cache per row (rows at their own positions, as a batch
        of sequences steps together); the projections take every row at once."""
        b, n, _ = x.shape
        q = self.q_norm(self.q_proj(x).reshape(b, n, self.heads, -1)).transpose(0, 2, 1, 3)
        k = self.k_norm(self.k_proj(x).reshape(b, n, self.kv_heads, -1)).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(b, n, self.kv_heads, -1).transpose(0, 2, 1, 3)
        caches = cache if isinstance(cache, list) else [cache]
        rows = [q, k, v] if len(caches) == 1 else None
        outs = []
        for r, c in enumerate(caches):
            qr, kr, vr = rows if rows is not None else (q[r : r + 1], k[r : r + 1], v[r : r + 1])
            qr, kr = self.rope(qr, offset=c.offset), self.rope(kr, offset=c.offset)
            kr, vr = c.update(kr, vr)
            outs.append(mx.fast.scaled_dot_product_attention(qr, kr, vr, scale=self.head_dim**-0.5,
                                                             mask="causal" if n > 1 else None))
        out = outs[0] if len(outs) == 1 else mx.concatenate(outs)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, n, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, t: TextDims):
        super().__init__()
        self.self_attn = DecoderAttention(t)
        self.mlp = MLP(t.hidden_size, t.intermediate_size)
        self.input_layernorm = nn.RMSNorm(t.hidden_size, eps=t.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(t.hidden_size, eps=t.rms_norm_eps)

    def __call__(self, x: mx.array, cache: KVCache | list[KVCache]) -> mx.array:
        x = x + self.self_attn(self.input_layernorm(x), cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class TextDecoder(nn.Module):
    def __init__(self, t: TextDims):
        super().__init__()
        self.embed_tokens = nn.Embedding(t.vocab_size, t.hidden_size)
        self.layers = [DecoderLayer(t) for _ in range(t.layers)]
        self.norm = nn.RMSNorm(t.hidden_size, eps=t.rms_norm_eps)

    def __call__(self, x: mx.array, caches: Sequence[KVCache | list[KVCache]]) -> mx.array:
        """(rows, n, hidden) embeddings -> (rows, n, hidden) final hidden states; per layer a cache, or a cache per
        row (DecoderAttention)."""
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cache)
        return self.norm(x)


class TextModel(nn.Module):
    """What a model built on a Qwen3 text decoder offers on it, whatever the decoder's name in its checkpoint
    (``text`` in Qwen3-ASR's, ``model`` in a causal LM's): caches, the head (tied to the embedding, or
    ``lm_head``), token embeddings, and a prompt's embeddings with audio rows in its slots."""

    def __init__(self, text: TextDims, name: str):
        super().__init__()
        setattr(self, name, TextDecoder(text))
        self.decoder_name = name
        if not text.tied:
            self.lm_head = nn.Linear(text.hidden_size, text.head_rows, bias=False)
        self.tied = text.tied

    @property
    def decoder(self) -> TextDecoder:
        decoder: TextDecoder = getattr(self, self.decoder_name)
        return decoder

    def new_caches(self) -> list[KVCache]:
        return [KVCache() for _ in self.decoder.layers]

    def logits(self, hidden: mx.array) -> mx.array:
        if self.tied:
            return self.decoder.embed_tokens.as_linear(hidden)
        return self.lm_head(hidden)

    def token_embeddings(self, tokens: mx.array) -> mx.array:
        """Float32 rows of the embedding: a quantized one in the floating-point modes (mxfp4, nvfp4, mxfp8) gives
        bfloat16 (its values exact there), widened so that the network computes in float32 whatever the mode."""
        return self.decoder.embed_tokens(tokens).astype(mx.float32)

    def embed(self, ids: list[int], audio_pad: int, audio: mx.array | None) -> mx.array:
        """Prompt embeddings with the audio embeddings in the ``<|audio_pad|>`` slots, in order (transformers'
        masked_scatter: the slots need not be contiguous, as MOSS-Transcribe-Diarize's time markers split them)."""
        slots = [i for i, t in enumerate(ids) if t == audio_pad]
        if audio is None or not slots:
            return self.token_embeddings(mx.array(ids, dtype=mx.int32))[None]
        if len(slots) != audio.shape[0]:
            raise ValueError(f"{len(slots)} audio slots in the prompt for {audio.shape[0]} audio embeddings")
        if slots[-1] + 1 - slots[0] == len(slots):
            return self.embed_at(ids, slots[0], audio)
        x = self.token_embeddings(mx.array(ids, dtype=mx.int32))
        x[mx.array(slots, dtype=mx.int32)] = audio.astype(x.dtype)
        return x[None]

    def embed_at(self, ids: list[int], first: int, audio: mx.array) -> mx.array:
        """Prompt embeddings with ``audio``'s rows in place of the ids from ``first`` on (as many as it has)."""
        x = self.token_embeddings(mx.array(ids, dtype=mx.int32))
        return mx.concatenate([x[:first], audio.astype(x.dtype), x[first + audio.shape[0] :]])[None]


class Qwen3ASR(TextModel):
    def __init__(self, audio: AudioDims, text: TextDims):
        super().__init__(text, "text")
        self.audio = AudioEncoder(audio)


class CausalLM(TextModel):
    """A Qwen3 causal language model under transformers' Qwen3ForCausalLM names (``model.*``; ``lm_head`` unless
    tied): Fun-ASR-Nano's decoder."""

    def __init__(self, text: TextDims):
        super().__init__(text, "model")


def greedy_steps(logits: np.ndarray, step: Callable[[int], np.ndarray], stop: set[int], budget: int,
                 check: Callable[[], None] = lambda: None) -> tuple[list[int], str]:
    """Greedy decoding from the prompt's last logits, ``step`` feeding each token and giving the next logits: the
    tokens (a stop token ends it and is not kept), and "stop" or "length"."""
    tokens: list[int] = []
    while len(tokens) < budget:
        check()
        token = int(np.argmax(logits))
        if token in stop:
            return tokens, "stop"
        tokens.append(token)
        logits = step(token)
    return tokens, "length"


def greedy(lm: TextModel, x: mx.array, stop: set[int], budget: int, check: Callable[[], None] = lambda: None
           ) -> tuple[list[int], str]:
    """Greedy decoding through the MLX decoder after the prompt embeddings ``x`` (1, n, hidden)."""
    caches = lm.new_caches()

    def logits_of(hidden: mx.array) -> np.ndarray:
        return np.asarray(lm.logits(hidden[:, -1])[0], np.float32)

    return greedy_steps(logits_of(lm.decoder(x, caches)),
                        lambda token: logits_of(lm.decoder(lm.token_embeddings(mx.array([[token]], dtype=mx.int32)),
                                                           caches)), stop, budget, check)
