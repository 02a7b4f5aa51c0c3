"""Cohere Transcribe: NeMo's log-mel (engine/nemo/features.py: 128 mels, per-feature normalisation over the valid
frames, no dither), the shared FastConformer (engine/nemo/fastconformer.py, at 1280 wide and 48 layers with biases and
no input scaling; numpy layers on MLX's CPU device), then a Transformer decoder in MLX with cross-attention over the
projected encoder output, decoded greedily after the official prompt.

The decoder (transformers' ``CohereAsrDecoder``, NeMo's ``TransformerDecoder``): ``LN(E[token] + P[position])`` with
a stored position table and no embedding scaling, positions 0, 1, ... from the prompt's first token; pre-LN layers of
causal self-attention (a key/value cache per layer), cross-attention over ``encoder_decoder_proj(encoder output)``
(keys and values computed once per clip) and a ReLU feed-forward; a final LN; the head (``log_softmax.mlp.layer0``,
with a bias: its log-softmax changes no argmax). Every projection has a bias; attention is scaled by head_dim^-0.5.
Module names are mlx-audio's, so that a converted folder's weights load as they are.

On MLX's CPU device the prompt runs through the MLX decoder and every later token through the shared numpy step
(engine/cpu_cross_decoder.py, on views of the same weights): a token reads the decoder's 540 MB of float32 weights,
which numpy's BLAS streams nearer the memory's speed than MLX's per-token graph (bench/cohere_asr_speed.py measures
the whole). An 8-bit folder's decoder stays packed there (:func:`numpy_packed`): a token then reads a quarter of
those bytes (cpu_packed.py multiplies them as stored), and since MLX's own quantized kernels are several times
slower on the CPU, the cross-attention keys and values and the prompt go through numpy too. Metal keeps the MLX
decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cohere_asr.checkpoint import Checkpoint, DecoderDims
from omnid.engine.cpu_cross_decoder import CpuCrossDecoder, CrossLayer
from omnid.engine.cpu_math import relu_rows
from omnid.engine.nemo import fastconformer
from omnid.engine.nemo.fastconformer import FastConformer
from omnid.engine.nemo.features import log_mel
from omnid.engine.nemo.mlx_folder import load_module
from omnid.engine.numpy_layers import LinearMap, Norm, QuantizedRows, all_rows, as_numpy, linear_map
from omnid.engine.quantization import Quantization


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query_net, self.key_net, self.value_net, self.out_projection = (nn.Linear(hidden, hidden)
                                                                             for _ in range(4))

    def split(self, x: mx.array) -> mx.array:
        """(B, T, hidden) -> (B, heads, T, head_dim)."""
        b, t, h = x.shape
        return x.reshape(b, t, self.heads, h // self.heads).transpose(0, 2, 1, 3)

    def keys_values(self, x: mx.array) -> tuple[mx.array, mx.array]:
        """Contiguous (B, heads, T, head_dim): the numpy step reads them as they are stored."""
        return mx.contiguous(self.split(self.key_net(x))), mx.contiguous(self.split(self.value_net(x)))

    def attend(self, x: mx.array, k: mx.array, v: mx.array, mask: mx.array | None = None) -> mx.array:
        q = self.split(self.query_net(x))
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5, mask=mask)
        b, _, t, _ = out.shape
        return self.out_projection(out.transpose(0, 2, 1, 3).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.dense_in, self.dense_out = nn.Linear(hidden, inner), nn.Linear(inner, hidden)

    def __call__(self, x: mx.array) -> mx.array:
        return self.dense_out(nn.relu(self.dense_in(x)))


@dataclass
class LayerCache:
    keys: mx.array  # self-attention's, (1, heads, tokens so far, head_dim)
    values: mx.array
    cross_keys: mx.array  # over the clip's encoder frames
    cross_values: mx.array


class DecoderLayer(nn.Module):
    def __init__(self, d: DecoderDims):
        super().__init__()
        self.layer_norm_1, self.layer_norm_2, self.layer_norm_3 = (nn.LayerNorm(d.hidden) for _ in range(3))
        self.first_sub_layer = Attention(d.hidden, d.heads)
        self.second_sub_layer = Attention(d.hidden, d.heads)
        self.third_sub_layer = FeedForward(d.hidden, d.inner)

    def __call__(self, x: mx.array, cache: LayerCache, mask: mx.array | None) -> mx.array:
        normed = self.layer_norm_1(x)
        k, v = self.first_sub_layer.keys_values(normed)
        cache.keys = mx.concatenate([cache.keys, k], axis=2)
        cache.values = mx.concatenate([cache.values, v], axis=2)
        x = x + self.first_sub_layer.attend(normed, cache.keys, cache.values, mask)
        x = x + self.second_sub_layer.attend(self.layer_norm_2(x), cache.cross_keys, cache.cross_values)
        return x + self.third_sub_layer(self.layer_norm_3(x))


class PositionTable(nn.Module):
    def __init__(self, d: DecoderDims):
        super().__init__()
        self.pos_enc = mx.zeros((d.positions, d.hidden))


class Embedding(nn.Module):
    def __init__(self, d: DecoderDims):
        super().__init__()
        self.token_embedding = nn.Embedding(d.vocabulary, d.hidden)
        self.position_embedding = PositionTable(d)
        self.layer_norm = nn.LayerNorm(d.hidden)

    def __call__(self, ids: mx.array, first: int) -> mx.array:
        positions = self.position_embedding.pos_enc[first : first + ids.shape[-1]]
        return self.layer_norm(self.token_embedding(ids) + positions)


class Layers(nn.Module):
    def __init__(self, d: DecoderDims):
        super().__init__()
        self.layers = [DecoderLayer(d) for _ in range(d.layers)]
        self.final_layer_norm = nn.LayerNorm(d.hidden)


class TransfDecoder(nn.Module):
    def __init__(self, d: DecoderDims):
        super().__init__()
        self.embedding = Embedding(d)
        self.decoder = Layers(d)


class Classes(nn.Module):
    def __init__(self, d: DecoderDims):
        super().__init__()
        self.layer0 = nn.Linear(d.hidden, d.vocabulary)


class Head(nn.Module):
    def __init__(self, d: DecoderDims):
        super().__init__()
        self.mlp = Classes(d)


class Decoder(nn.Module):
    """Everything after the encoder, under the checkpoint's names."""

    def __init__(self, d: DecoderDims, d_model: int, proj: bool):
        super().__init__()
        self.dims = d
        self.transf_decoder = TransfDecoder(d)
        if proj:
            self.encoder_decoder_proj = nn.Linear(d_model, d.hidden)
        self.log_softmax = Head(d)

    def caches(self, encoded: mx.array) -> list[LayerCache]:
        """Each layer's caches for one clip: its cross-attention's keys and values over the projected encoder
        output (1, frames, d_model), and empty self-attention ones."""
        memory = self.encoder_decoder_proj(encoded) if "encoder_decoder_proj" in self else encoded
        out = []
        for layer in self.transf_decoder.decoder.layers:
            k, v = layer.second_sub_layer.keys_values(memory)
            empty = mx.zeros((1, self.dims.heads, 0, self.dims.hidden // self.dims.heads), k.dtype)
            out.append(LayerCache(empty, empty, k, v))
        return out

    def logits(self, ids: list[int], first: int, caches: list[LayerCache]) -> mx.array:
        """The next token's logits (vocabulary,) after ``ids`` at positions ``first``, ``first + 1``, ...; the caches
        extended by them."""
        x = self.transf_decoder.embedding(mx.array(ids)[None], first)
        t = len(ids)
        mask = None
        if t > 1:  # causal among the new tokens; every cached one is visible
            mask = mx.concatenate([mx.zeros((t, first)), nn.MultiHeadAttention.create_additive_causal_mask(t)],
                                  axis=1)
        for layer, cache in zip(self.transf_decoder.decoder.layers, caches, strict=True):
            x = layer(x, cache, mask)
        x = self.transf_decoder.decoder.final_layer_norm(x[:, -1])
        return self.log_softmax.mlp.layer0(x)[0]

    def cpu_step(self) -> CpuCrossDecoder | None:
        """The one-token step in numpy on views of these weights (packed modules multiplied packed), for MLX's CPU
        device; None on Metal."""
        if mx.default_device() != mx.cpu:
            return None
        layers = []
        for layer in self.transf_decoder.decoder.layers:
            attn, cross, mlp = layer.first_sub_layer, layer.second_sub_layer, layer.third_sub_layer
            layers.append(CrossLayer(
                Norm.of(layer.layer_norm_1), linear_map(attn.query_net), linear_map(attn.key_net),
                linear_map(attn.value_net), linear_map(attn.out_projection), Norm.of(layer.layer_norm_2),
                linear_map(cross.query_net), linear_map(cross.out_projection), Norm.of(layer.layer_norm_3),
                linear_map(mlp.dense_in), linear_map(mlp.dense_out)))
        embedding = self.transf_decoder.embedding
        table = embedding.token_embedding
        return CpuCrossDecoder(
            n_head=self.dims.heads, head_dim=self.dims.hidden // self.dims.heads,
            embedding=QuantizedRows(table) if isinstance(table, nn.QuantizedEmbedding) else as_numpy(table.weight),
            positions=as_numpy(embedding.position_embedding.pos_enc),
            embedding_ln=Norm.of(embedding.layer_norm), layers=layers,
            ln=Norm.of(self.transf_decoder.decoder.final_layer_norm), head=linear_map(self.log_softmax.mlp.layer0),
            activation=relu_rows, single_threaded=False)

    @property
    def packed(self) -> bool:
        """Whether some module is kept packed (on the CPU: the prompt and the cross-attention go through numpy)."""
        return any(isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding) for _, m in self.named_modules())

    def cross_maps(self) -> CrossMaps:
        """The numpy maps of the cross-attention's keys and values (packed where kept so): called on an encoder
        output, each layer's keys and values in numpy."""
        proj = linear_map(self.encoder_decoder_proj) if "encoder_decoder_proj" in self else None
        layers = [(linear_map(layer.second_sub_layer.key_net), linear_map(layer.second_sub_layer.value_net))
                  for layer in self.transf_decoder.decoder.layers]
        return CrossMaps(proj, layers, self.dims.heads, self.dims.hidden // self.dims.heads)


@dataclass(frozen=True)
class CrossMaps:
    proj: LinearMap | None
    layers: list[tuple[LinearMap, LinearMap]]
    heads: int
    head_dim: int

    def __call__(self, encoded: mx.array) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each layer's cross-attention keys and values over one clip's encoder output (1, frames, d_model), in
        numpy: (heads, frames, head_dim) each, contiguous."""
        memory = np.array(encoded[0], np.float32)
        if self.proj is not None:
            memory = all_rows(self.proj, memory)
        return [(self._heads(key, memory), self._heads(value, memory)) for key, value in self.layers]

    def _heads(self, linear: LinearMap, memory: np.ndarray) -> np.ndarray:
        """linear(memory) split into heads: (heads, frames, head_dim), contiguous."""
        out = all_rows(linear, memory).reshape(len(memory), self.heads, self.head_dim)
        return np.ascontiguousarray(out.transpose(1, 0, 2))


@dataclass(frozen=True)
class Generation:
    tokens: list[int]  # generated, the end token excluded
    finish: str  # "stop" (the end token) or "length" (the budget)


class CohereAsr:
    def __init__(self, ckpt: Checkpoint):
        self.front, self.dims, self.tokenizer, self.eos = ckpt.front, ckpt.dims, ckpt.tokenizer, ckpt.eos
        w = ckpt.weights
        self.encoder = FastConformer(ckpt.dims.conformer)
        load_module(self.encoder, w, "encoder.", ckpt.quantized)
        self.decoder = Decoder(ckpt.dims.decoder, ckpt.dims.conformer.d_model, "encoder_decoder_proj.weight" in w)
        load_module(self.decoder, w, "", ckpt.quantized)

    @cached_property
    def cpu_step(self) -> CpuCrossDecoder | None:
        """The decoder's numpy step on MLX's CPU device, else None (decided once, at the first decode)."""
        return self.decoder.cpu_step()

    @cached_property
    def cross_maps(self) -> CrossMaps:
        return self.decoder.cross_maps()

    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> (n // 160, 128): the valid frames, normalised per feature over them."""
        return log_mel(audio, self.front)

    def encode(self, mel: np.ndarray, check: Callable[[], None] | None = None) -> mx.array:
        """(frames, n_mels) -> (1, encoder frames, d_model); ``check`` between encoder layers."""
        x = self.encoder.subsampling(mx.array(mel)[None])
        out = self.encoder.encode(x, check=check)
        mx.eval(out)
        return out

    def generate(self, encoded: mx.array, prompt: list[int], budget: int,
                 check: Callable[[], None] = lambda: None) -> Generation:
        """Greedy tokens after the prompt: until the end token or ``budget`` new tokens (the end token counted, as
        transformers' max_new_tokens counts it), held to the position table."""
        return self.generate_together([encoded], prompt, budget, check)[0]

    def generate_together(self, encoded: list[mx.array], prompt: list[int], budget: int,
                          check: Callable[[], None] = lambda: None) -> list[Generation]:
        """``generate`` for several inputs (a long clip's chunks): each input's prompt through the MLX decoder, then,
        on MLX's CPU device, the live inputs' tokens stepped together through the numpy step (a step reads the
        weights once for all of them, as the official code batches its chunks); a row's products then run with the
        others' (its sums in another order: the tests hold every chunk's tokens to transformers'). Elsewhere one
        input after another through the MLX decoder."""
        budget = min(budget, self.dims.decoder.positions - len(prompt))
        if budget <= 0:
            return [Generation([], "length") for _ in encoded]
        step = self.cpu_step
        if step is None:
            return [self._generate_mlx(e, prompt, budget, check) for e in encoded]
        rows, next_tokens = [], []
        for e in encoded:
            check()
            if self.decoder.packed:
                row = step.start(self.cross_maps(e))
                next_tokens.append(int(np.argmax(step.prefill(prompt, row))))
                rows.append(row)
                continue
            caches = self.decoder.caches(e)
            next_tokens.append(int(np.array(mx.argmax(self.decoder.logits(prompt, 0, caches)))))
            rows.append(step.row([(c.keys, c.values) for c in caches], [(c.cross_keys, c.cross_values) for c in caches]))
        tokens: list[list[int]] = [[] for _ in encoded]
        finish = ["" for _ in encoded]
        while True:
            live = []
            for i, token in enumerate(next_tokens):
                if finish[i]:
                    continue
                if token == self.eos:
                    finish[i] = "stop"
                    continue
                tokens[i].append(token)
                if len(tokens[i]) == budget:
                    finish[i] = "length"
                else:
                    live.append(i)
            if not live:
                return [Generation(t, f) for t, f in zip(tokens, finish, strict=True)]
            check()
            logits = step.step([tokens[i][-1] for i in live], [rows[i] for i in live])
            for i, row_logits in zip(live, logits, strict=True):
                next_tokens[i] = int(np.argmax(row_logits))

    def _generate_mlx(self, encoded: mx.array, prompt: list[int], budget: int,
                      check: Callable[[], None]) -> Generation:
        caches = self.decoder.caches(encoded)
        tokens: list[int] = []
        ids, first = prompt, 0
        while len(tokens) < budget:
            check()
            token = int(np.array(mx.argmax(self.decoder.logits(ids, first, caches))))
            if token == self.eos:
                return Generation(tokens, "stop")
            tokens.append(token)
            first += len(ids)
            ids = [token]
        return Generation(tokens, "length")


def numpy_packed(module: str, q: Quantization) -> bool:
    """The packed modules kept so on MLX's CPU device (mlx_folder.keep_packed's ``on_cpu``): the FastConformer's (its
    own rule) and, at 8 bits, every decoder module (the numpy step, the prompt and the cross-attention multiply them
    as stored; the embedding's table looked up row by row). A 4-bit decoder is widened at load (540 MB more at the
    real shapes): bench/quantized.py measured its packed decode at 1.20x float32's time on this project's VM, the
    8-bit one at 0.81x (one row at a time the 4-bit kernel is bound by its unpacking, not by memory)."""
    return fastconformer.numpy_packed(module, q) or (
        not module.startswith("encoder.") and q.multiplied_packed_on_cpu and q.bits == 8)
