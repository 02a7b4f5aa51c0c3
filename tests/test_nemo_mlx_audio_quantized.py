"""Parakeet and Nemotron folders quantized by mlx-audio 0.6.2's own converters, made here from the tiny random
checkpoints, loaded through omnid's production loader (widened to float32 at load; kept packed, which on MLX's CPU
device the numpy layers multiply as packed, cpu_packed.py, and on Metal MLX's quantized layers compute, here forced
through them by a batch of two) and compared with mlx-audio's own model on the same folder; what the converters
cannot write (mixed recipes, Sortformer) and why; and what a broken quantized folder says.

What each converter writes (a ``quantization`` block ``{"group_size", "bits", "mode"}``, copied to
``quantization_config``; a packed uint32 ``weight`` with ``scales``, and ``biases`` in affine mode):

* Parakeet: mlx-audio has no Parakeet converter of its own (``parakeet.convert`` is Parakeet Redux's), so a
  parakeet-mlx folder (omnid's ``.nemo`` conversion, parakeet-mlx ships none) goes through the generic
  ``python -m mlx_audio.convert -q``: every Linear whose input width is a multiple of 64 and of the group size (the
  encoder's, its pre-encode output, the joint's encoder projection), in affine 2-8 bits, mxfp4, nvfp4 or mxfp8. The
  folder's config must say ``"model_type": "parakeet"`` (what mlx-audio's own loader assumes): without it the
  converter's detection takes it for Phonon-2 and refuses.
* Nemotron: ``mlx_audio.stt.models.nemotron_asr.convert --quantize --q-bits B --q-group-size G`` (affine only;
  every Linear and Embedding whose input width is a multiple of the group size, the prediction embedding and the
  joint too at group 32), in bfloat16 by default; and the generic converter on its float folder (any mode).
* Mixed recipes (``mixed_2_6`` ... ``mixed_4_6``) need ``down_proj`` layers: the FastConformer has none, so the
  generic converter refuses them for both kinds. Sortformer: the generic converter knows no ``vad`` domain and its
  detection picks another model; mlx-audio's Sortformer converter has no quantization option. Neither writes one.

Measured on these checkpoints (three clips each): omnid's encoder output (and Nemotron's prompted output) is within
1.0e-5 of mlx-audio's on the same folder, widened or packed, in every mode; mlx-audio's own float32-versus-quantized
difference on the same outputs is 0.09-0.14 at 8 bits, 0.32-0.91 at 5-6 bits, 0.9-2.1 at 4 bits (mxfp4, nvfp4
included) and 0.34-0.75 in mxfp8 for Parakeet; 0.04-0.06 (8-bit), 0.29-0.47 (4-bit), 0.10-0.19 (mxfp8) and 0.32-0.53
(nvfp4) for Nemotron. Bound: a hundredth of that difference (the measured ratio is 1e-4 or less). A bfloat16 folder
(Nemotron's converter's default) is computed in float32 by omnid and in bfloat16 by mlx-audio (0.012-0.027 apart, a
fifth of the quantization's own difference): it is compared with mlx-audio's model upcast to float32.

Tokens: Nemotron's greedy rule is NeMo's in both, so the tokens are compared in order up to mlx-audio's first
decision by a margin under twice the joint's logit difference (measured 2e-5 to 9e-5): every case but the 4-bit
folder at right context 0 gives all its tokens, identical (that one 189 of 515, before a near tie). mlx-audio's
Parakeet decoding is parakeet-mlx's, whose TDT and RNN-T rules differ from NeMo's where a blank has duration 0 or a
frame's symbols run out (omnid keeps NeMo's, docs/models/parakeet.md), and its CTC merges a label repeated across a
blank into one, so there every one of omnid's decisions is checked against mlx-audio's own prediction network and
joint (or CTC head) at that point: the same label and duration wherever mlx-audio's margin is wider than twice the
difference.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_map

from omnid.engine.cpu_packed import PackedLinear
from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.fastconformer import FastConformer
from omnid.engine.nemo.transducer import Transducer
from omnid.engine.nemotron.checkpoint import load as load_nemotron
from omnid.engine.nemotron.engine import NemotronEngine
from omnid.engine.nemotron.model import Nemotron
from omnid.engine.parakeet.checkpoint import load as load_parakeet
from omnid.engine.parakeet.convert import to_mlx_folder
from omnid.engine.parakeet.engine import ParakeetEngine
from omnid.engine.parakeet.model import Parakeet
from omnid.engine.quantization import offered_modes
from tests import nemotron_reference
from tests.helpers import nemo_goldens
from tests.qwen3_mlx_audio import convert as generic_convert
from tests.test_qwen3_mlx_audio_quantized import _edit_block  # both blocks of mlx-audio's config

GOLDENS = Path(__file__).parent / "goldens"
PARAKEET, NEMOTRON = GOLDENS / "parakeet_tiny", GOLDENS / "nemotron_tiny" / "nemotron.nemo"
SORTFORMER = GOLDENS / "sortformer_tiny" / "tiny.nemo"
# The converters' options for each choice (bits, group size, mode; None: the mode's default).
CHOICES: dict[str, dict[str, Any]] = {
    "4bit": {"bits": 4}, "8bit": {"bits": 8}, "5bit-g32": {"bits": 5, "group_size": 32},
    "6bit-g128": {"bits": 6, "group_size": 128}, "8bit-g32": {"bits": 8, "group_size": 32},
    "mxfp4": {"mode": "mxfp4"}, "nvfp4": {"mode": "nvfp4"}, "mxfp8": {"mode": "mxfp8"},
}
SHARE = 0.01  # of mlx-audio's own float32-versus-quantized difference (measured: about 1e-4 of it)
CLIPS = ("short", "ljspeech", "librispeech")

parakeet_meta, parakeet_arrays, parakeet_audio = nemo_goldens(PARAKEET)
nemotron_meta, nemotron_arrays, nemotron_audio = nemo_goldens(NEMOTRON.parent)


def _mode(choice: str) -> str:
    return CHOICES[choice].get("mode", "affine")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Each folder made once, by name: ``parakeet/KIND/CHOICE``, ``nemotron/CHOICE`` (its own converter, float32
    unless ``-bf16``: its default dtype) and ``nemotron/generic/CHOICE``; ``float32`` for the unquantized ones."""
    root = tmp_path_factory.mktemp("nemo_mlx_audio")
    done: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name in done:
            return done[name]
        dest = root / name.replace("/", "-")
        parts = name.split("/")
        if parts[0] == "parakeet" and parts[2] == "float32":
            to_mlx_folder(PARAKEET / f"{parts[1]}.nemo", dest)
            config = json.loads((dest / "config.json").read_text())
            config["model_type"] = "parakeet"  # as mlx-audio's loader takes a NeMo config (see the docstring)
            (dest / "config.json").write_text(json.dumps(config))
        elif parts[0] == "parakeet":
            generic_convert(make(f"parakeet/{parts[1]}/float32"), dest, quantize=True, **CHOICES[parts[2]])
        elif parts == ["nemotron", "float32"]:
            nemotron_reference.convert(NEMOTRON, dest, dtype="float32")
        elif parts[1] == "generic":
            generic_convert(make("nemotron/float32"), dest, quantize=True, **CHOICES[parts[2]])
        else:
            choice = parts[1].removesuffix("-bf16")
            options = {"q_bits": CHOICES[choice]["bits"], "q_group_size": CHOICES[choice].get("group_size", 64)}
            dtype = "bfloat16" if parts[1].endswith("-bf16") else "float32"
            nemotron_reference.convert(NEMOTRON, dest, dtype=dtype, quantize=True, **options)
        done[name] = dest
        return dest

    return make


def _packed_modules(folder: Path) -> set[str]:
    """The modules the converter packed (the folder's names), from its tensors."""
    tensors = mx.load(str(folder / "model.safetensors"))
    assert isinstance(tensors, dict)
    return {k.removesuffix(".scales") for k in tensors if k.endswith(".scales")}


def _reference(folder: Path, float32: bool = False) -> Any:
    """mlx-audio's model for the folder (strict); ``float32``: its float tensors upcast, as omnid computes."""
    model = nemotron_reference.load(folder)
    if float32:
        model.update(tree_map(lambda a: a.astype(mx.float32) if mx.issubdtype(a.dtype, mx.floating) else a,
                              model.parameters()))
    return model


def _clear_labels(decisions: list[tuple[float, bool]], limit: float) -> int:
    """How many labels were emitted before the first decision (a label or a blank, with its margin) by a margin of
    ``limit`` or less: those that rounding of that size cannot change."""
    labels = 0
    for margin, label in decisions:
        if margin <= limit:
            break
        labels += label
    return labels


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _margins(logits: np.ndarray) -> np.ndarray:
    top = np.sort(logits, axis=-1)[..., -2:]
    return top[..., 1] - top[..., 0]


# --- Parakeet -----------------------------------------------------------------------------------------------------


def _their_encoder(model: Any, mel: np.ndarray) -> np.ndarray:
    encoded, _ = model.encoder(mx.array(mel)[None])
    return np.array(encoded[0])


def _emissions(t: Transducer | None, theirs: Any, encoded: np.ndarray, their_encoded: np.ndarray,
               tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """omnid's and mlx-audio's joint logits where omnid emitted each token: at its frame, each prediction network
    fed the tokens before it (NeMo's start: the blank)."""
    assert t is not None
    f, state = t.joint.project_encoder(encoded), t.prediction.initial()
    out, state = t.prediction.step(t.blank, state)
    h_c, last, features = None, None, mx.array(their_encoded)[None]
    mine, theirs_rows = [], []
    for token in tokens:
        mine.append(t.joint.logits(f[token.frame], t.joint.project_prediction(out)))
        pred, new = theirs.decoder(None if last is None else mx.array([[last]]), h_c)
        theirs_rows.append(np.array(theirs.joint(features[:, token.frame : token.frame + 1], pred)[0, 0, 0]))
        out, state = t.prediction.step(token.id, state)
        h_c, last = new, token.id
    return np.array(mine), np.array(theirs_rows)


def _packed_in(encoder: FastConformer) -> int:
    """How many of the encoder's modules are MLX's quantized ones (kept packed)."""
    return sum(isinstance(m, nn.QuantizedLinear) for _, m in encoder.named_modules())


class _MlxLayers:
    """A Parakeet model whose encoder runs MLX's layers, quantized ones included (Metal's path): a batch of two
    copies of the input, which the CPU's numpy layers (one sequence) do not take."""

    def __init__(self, model: Parakeet):
        self.model = model

    def encode(self, mel: np.ndarray) -> np.ndarray:
        x = self.model.encoder.subsampling(mx.array(np.stack([mel, mel])))
        out = self.model.encoder.encode(x)[0]
        mx.eval(out)
        return np.array(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


PARAKEET_CASES = [("tdt", "4bit"), ("tdt", "8bit"), ("tdt", "mxfp4"), ("tdt", "nvfp4"), ("rnnt", "5bit-g32"),
                  ("ctc", "6bit-g128"), ("ctc", "mxfp8")]


@pytest.mark.parametrize(("kind", "choice"), PARAKEET_CASES)
def test_parakeet_folders_quantized_by_mlx_audio_compute_as_mlx_audio(
        kind: str, choice: str, made: Callable[[str], Path]) -> None:
    assert _mode(choice) in offered_modes()  # the locked MLX offers every mode mlx-audio writes
    folder = made(f"parakeet/{kind}/{choice}")
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"]["mode"] == _mode(choice) and config["quantization_config"] == config["quantization"]
    written = _packed_modules(folder)
    assert "encoder.pre_encode.out" in written and ("joint.enc" in written) == (kind != "ctc")
    wide, packed = load_parakeet(folder), load_parakeet(folder, keep_quantized=True)
    assert wide.quantized == {} and all(n.startswith("encoder.") for n in packed.quantized)
    assert len(packed.quantized) == sum(n.startswith("encoder.") for n in written)  # the joint's widened
    assert {q.mode for q in packed.quantized.values()} == {_mode(choice)}
    ours: dict[str, Any] = {"widened": Parakeet(wide), "packed": Parakeet(packed)}
    ours["mlx layers"] = _MlxLayers(ours["packed"])
    assert _packed_in(ours["widened"].encoder) == 0 and _packed_in(ours["packed"].encoder) == len(packed.quantized)
    theirs, float32 = _reference(folder), _reference(made(f"parakeet/{kind}/float32"))
    compared = 0
    for clip in CLIPS:
        mel = parakeet_arrays()[f"mel/{clip}"]
        their_encoded = _their_encoder(theirs, mel)
        spread = np.abs(their_encoded - _their_encoder(float32, mel)).max()
        assert spread > 0.05  # the quantization shows
        for how, model in ours.items():
            encoded = model.encode(mel)
            diff = np.abs(encoded - their_encoded).max()
            assert diff <= SHARE * spread, (clip, how, diff, spread)
            tokens = model.decode(encoded)
            if kind == "ctc":
                assert model.ctc is not None
                mine = _log_softmax(encoded @ model.ctc.weight.T + model.ctc.bias)
                rows = np.array(theirs.decoder(mx.array(their_encoded)[None])[0])
                labels = model.ctc.frame_labels(encoded)
            else:
                mine, rows = _emissions(model.transducer, theirs, encoded, their_encoded, tokens)
                labels = np.array([t.id for t in tokens])
            blank = model.dims.vocabulary
            assert np.abs(mine - rows).max() <= SHARE * max(1.0, np.abs(rows).max()), (clip, how)
            clear = _margins(rows[:, : blank + 1]) > 2 * max(np.abs(mine - rows).max(), 1e-6)
            assert (labels == rows[:, : blank + 1].argmax(-1))[clear].all(), (clip, how)
            if kind == "tdt":
                durations = np.array(model.dims.durations)[rows[:, blank + 1 :].argmax(-1)]
                steps = _margins(rows[:, blank + 1 :]) > 2 * np.abs(mine - rows).max()
                assert (np.array([t.duration for t in tokens]) == durations)[steps].all(), (clip, how)
            compared += int(clear.sum())
    assert compared > 50


@pytest.mark.parametrize("kind", ["tdt", "ctc"])
def test_a_quantized_parakeet_folder_transcribes_alike_widened_and_packed(kind: str,
                                                                          made: Callable[[str], Path]) -> None:
    """The production engine on a quantized folder: its CPU default (a 4-bit affine folder's encoder layers kept
    packed and multiplied so by the numpy layers; an mxfp8 one widened at load), every module widened, and every
    module kept packed give the same tokens."""
    folder = made(f"parakeet/{kind}/{'4bit' if kind == 'tdt' else 'mxfp8'}")
    audio = parakeet_audio("ljspeech")
    default = ParakeetEngine("d", folder)
    widened, packed = ParakeetEngine("w", folder, keep_quantized=False), ParakeetEngine("p", folder, keep_quantized=True)
    in_layers = sum(n.startswith("encoder.layers.") for n in load_parakeet(folder, keep_quantized=True).quantized)
    assert in_layers > 0 and _packed_in(default.model.encoder) == (in_layers if kind == "tdt" else 0)
    assert _packed_in(widened.model.encoder) == 0 and _packed_in(packed.model.encoder) > 0
    tokens = [t.id for t in widened.tokens(audio)]
    assert tokens and [t.id for t in default.tokens(audio)] == tokens == [t.id for t in packed.tokens(audio)]
    if kind == "tdt":  # the numpy layers read the kept modules as cpu_packed's maps
        first = default.model.encoder._cpu_layers[0]
        assert all(isinstance(m, PackedLinear) for m in (first.q, first.k, first.v, first.o, first.ff1.linear1))


# --- Nemotron -----------------------------------------------------------------------------------------------------


def _their_prompted(model: Any, mel: np.ndarray, right: int) -> np.ndarray:
    """mlx-audio's offline pass with the chunked-limited mask, its English prompt applied."""
    encoded, lengths = model.encoder(mx.array(mel)[None], att_context_size=[nemotron_meta()["left"], right])
    return np.array(model.apply_prompt(encoded, "en-US")[0, : int(lengths[0])])


def _their_greedy(model: Any, prompted: np.ndarray) -> tuple[list[int], list[tuple[float, bool]]]:
    """mlx-audio's greedy decoding (GreedyDecoderState, NeMo's RNN-T rule) of prompted frames: every label it
    emits, and the margin of each label it emits or blank it stops at, in order (its joint's calls, recorded)."""
    from mlx_audio.stt.models.nemotron_asr.rnnt import GreedyDecoderState

    joint, labels, decisions = model.joint, [], []

    def recorded(enc: mx.array, pred: mx.array) -> mx.array:
        out = joint(enc, pred)
        row = np.array(out[0, 0, 0])
        label = int(row.argmax()) != model.blank_id
        decisions.append((float(_margins(row)), label))
        if label:
            labels.append(int(row.argmax()))
        return out

    class Recorded:  # the model, its joint's calls recorded
        def __getattr__(self, name: str) -> Any:
            return recorded if name == "joint" else getattr(model, name)

    GreedyDecoderState(Recorded()).decode(mx.array(prompted)[None], 0)
    return labels, decisions


NEMOTRON_CASES = ["4bit", "8bit-g32", "6bit-g128-bf16", "generic/mxfp8", "generic/nvfp4"]
CHOICES["6bit-g128-bf16"] = CHOICES["6bit-g128"]
CHOICES["generic/mxfp8"], CHOICES["generic/nvfp4"] = CHOICES["mxfp8"], CHOICES["nvfp4"]


@pytest.mark.parametrize("choice", NEMOTRON_CASES)
def test_nemotron_folders_quantized_by_mlx_audio_compute_as_mlx_audio(choice: str,
                                                                      made: Callable[[str], Path]) -> None:
    assert _mode(choice) in offered_modes()
    folder = made(f"nemotron/{choice}")
    written = _packed_modules(folder)
    assert "prompt_kernel.2" in written and ("joint.pred" in written) == choice.startswith("8bit-g32")
    wide, packed = load_nemotron(folder), load_nemotron(folder, keep_quantized=True)
    assert wide.quantized == {} and {q.mode for q in packed.quantized.values()} == {_mode(choice)}
    assert "prompt_kernel.2" in packed.quantized  # the prompt's first Linear is read by columns: widened
    assert len(packed.quantized) == sum(n.startswith("encoder.") for n in written) + 1
    ours = {"widened": Nemotron(wide), "packed": Nemotron(packed)}
    bf16, compared = choice.endswith("-bf16"), 0
    theirs, float32 = _reference(folder, float32=bf16), _reference(made("nemotron/float32"))
    for clip, right in (("short", 13), ("ljspeech", 0)):  # the native chunk and the shortest
        mel = nemotron_arrays()[f"mel/{clip}"]
        prompted = _their_prompted(theirs, mel, right)
        spread = np.abs(prompted - _their_prompted(float32, mel, right)).max()
        assert spread > 0.03
        labels, margins = _their_greedy(theirs, prompted)
        for how, model in ours.items():
            mine = model.encode_offline(mel, (nemotron_meta()["left"], right), model.streaming.prompts["en-US"])
            diff = np.abs(mine - prompted).max()
            assert diff <= SHARE * spread, (clip, right, how, diff, spread)
            tokens = model.transducer.greedy(mine)
            logits, rows = _emissions(model.transducer, theirs, mine, prompted, tokens)
            limit = 2 * max(np.abs(logits - rows).max(), 1e-6)
            # Every label before mlx-audio's first decision by a margin under that: no rounding can flip them.
            n = _clear_labels(margins, limit)
            assert [t.id for t in tokens][:n] == labels[:n] and (n < len(labels) or len(tokens) == n), (
                clip, right, how)
            compared += n
    assert compared > 200


def test_a_quantized_nemotron_folder_streams_alike_widened_and_packed(made: Callable[[str], Path]) -> None:
    """The production engine's streaming pass (the cache-aware step: numpy layers on the CPU by default, MLX's
    quantized layers when kept packed) gives the same text either way."""
    folder = made("nemotron/8bit-g32")
    audio = nemotron_audio("ljspeech")
    default = NemotronEngine("d", folder)
    widened, packed = NemotronEngine("w", folder, keep_quantized=False), NemotronEngine("p", folder, keep_quantized=True)
    assert _packed_in(default.model.encoder) > 0 and _packed_in(widened.model.encoder) == 0
    text = widened.transcribe(audio).text
    assert text and packed.transcribe(audio).text == text == default.transcribe(audio).text
    # The streaming step's numpy layers read the kept modules as cpu_packed's maps.
    assert isinstance(default.model.encoder.cpu_streaming_layers[0].q, PackedLinear)


# --- what the converters cannot write -----------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["parakeet/tdt/float32", "nemotron/float32"])
def test_the_mixed_recipes_need_layers_the_fastconformer_has_not(source: str, made: Callable[[str], Path],
                                                                 tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Model does not have expected keys for mixed quant"):
        generic_convert(made(source), tmp_path / "mixed", quantize=True, recipe="mixed_4_6")


def test_a_parakeet_folder_without_model_type_is_taken_for_phonon2(made: Callable[[str], Path],
                                                                   tmp_path: Path) -> None:
    """parakeet-mlx's config.json (NeMo's) names no model_type: the generic converter's detection matches its keys
    to Phonon-2's config and refuses."""
    folder = shutil.copytree(made("parakeet/tdt/float32"), tmp_path / "tdt")
    config = json.loads((folder / "config.json").read_text())
    del config["model_type"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="Phonon-2/2.5 generic conversion and requantization are unsupported"):
        generic_convert(folder, tmp_path / "q4", quantize=True)


def test_no_mlx_audio_converter_quantizes_sortformer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generic converter has no ``vad`` domain, and given another it builds some other model; Sortformer's own
    converter takes no quantization option."""
    from mlx_audio.convert import convert

    from tests import sortformer_reference

    folder = sortformer_reference.convert(SORTFORMER, tmp_path / "float", "sinusoid")
    with pytest.raises(ValueError, match="'vad' is not a valid Domain"):
        convert(str(folder), str(tmp_path / "q"), quantize=True, model_domain="vad")
    with pytest.raises(ValueError, match="parameters not in model"):
        generic_convert(folder, tmp_path / "q", quantize=True)  # detected within stt: not Sortformer
    _, _, sortformer_convert = sortformer_reference.modules()
    monkeypatch.setattr(sys, "argv", ["convert", "--nemo-path", str(SORTFORMER), "--output-dir", str(tmp_path / "o"),
                                      "-q"])
    with pytest.raises(SystemExit):
        sortformer_convert.main()


# --- what a broken quantized folder says --------------------------------------------------------------------------


def _copy(made: Callable[[str], Path], name: str, dest: Path) -> Path:
    return Path(shutil.copytree(made(name), dest))


def _drop_tensor(folder: Path, name: str) -> None:
    """The folder without one tensor (the loaders read model.safetensors alone, not the generic converter's index)."""
    tensors = mx.load(str(folder / "model.safetensors"))
    assert isinstance(tensors, dict)
    del tensors[name]
    mx.save_safetensors(str(folder / "model.safetensors"), tensors)


LOADERS = {"parakeet/tdt/4bit": load_parakeet, "nemotron/4bit": load_nemotron}


@pytest.mark.parametrize("name", list(LOADERS))
@pytest.mark.parametrize("keep", [False, True])
def test_a_block_disagreeing_with_the_packed_shapes_is_refused(name: str, keep: bool, made: Callable[[str], Path],
                                                               tmp_path: Path) -> None:
    folder = _copy(made, name, tmp_path / "a")
    _edit_block(folder, lambda b: b.update(bits=8))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor encoder\.\S+\.weight is packed 4-bit in "
                                              r"groups of 64, but config\.json's quantization says 8-bit"):
        LOADERS[name](folder, keep_quantized=keep)
    folder = _copy(made, name, tmp_path / "b")
    _edit_block(folder, lambda b: b.update(group_size=32))
    with pytest.raises(CheckpointError, match=r"groups of 64, but config\.json's quantization says 4-bit in groups "
                                              r"of 32"):
        LOADERS[name](folder, keep_quantized=keep)


def test_a_block_in_another_mode_than_the_tensors_is_refused(made: Callable[[str], Path], tmp_path: Path) -> None:
    folder = _copy(made, "parakeet/tdt/mxfp4", tmp_path / "a")
    _edit_block(folder, lambda b: b.update(mode="affine"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor encoder\.\S+\.biases missing .*affine"):
        load_parakeet(folder)
    folder = _copy(made, "nemotron/4bit", tmp_path / "b")
    _edit_block(folder, lambda b: b.update(mode="mxfp4", group_size=None, bits=None))
    with pytest.raises(CheckpointError, match=r"tensor encoder\.\S+\.weight has packed shape .* which fit no mxfp4 "
                                              r"quantization"):
        load_nemotron(folder)


@pytest.mark.parametrize("name", list(LOADERS))
def test_an_unknown_mode_is_refused_naming_the_key(name: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    folder = _copy(made, name, tmp_path / "a")
    _edit_block(folder, lambda b: b.update(mode="int3"))
    with pytest.raises(CheckpointError, match=r"config\.json: quantization\.mode: unknown quantization mode 'int3' "
                                              r"\(this MLX offers affine"):
        LOADERS[name](folder)


@pytest.mark.parametrize("name", list(LOADERS))
def test_a_missing_scale_or_bias_is_named(name: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    module = "encoder.layers.1.self_attn.linear_q"
    folder = _copy(made, name, tmp_path / "a")
    _drop_tensor(folder, f"{module}.scales")
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: tensor {module}\.weight is packed \(uint32\), but "
                                              rf"its {module}\.scales is missing"):
        LOADERS[name](folder)
    folder = _copy(made, name, tmp_path / "b")
    _drop_tensor(folder, f"{module}.biases")
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: tensor {module}\.biases missing"):
        LOADERS[name](folder, keep_quantized=True)


def test_a_quantized_sortformer_folder_is_refused_naming_its_config(tmp_path: Path) -> None:
    """No converter writes one (above); one made by hand, a module packed by MLX's own quantize, is refused."""
    from omnid.engine.sortformer.checkpoint import load
    from tests import sortformer_reference

    folder = sortformer_reference.convert(SORTFORMER, tmp_path / "s", "sinusoid")
    tensors = dict(mx.load(str(folder / "model.safetensors")))
    module = "fc_encoder.layers.0.feed_forward1.linear1"
    packed = mx.quantize(tensors[f"{module}.weight"], group_size=64, bits=4)
    tensors.update(zip((f"{module}.weight", f"{module}.scales", f"{module}.biases"), packed, strict=True))
    mx.save_safetensors(str(folder / "model.safetensors"), tensors)
    with pytest.raises(CheckpointError, match=rf"model\.safetensors: tensor {module}\.weight has shape \(256, 8\)"):
        load(folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization"] = {"group_size": 64, "bits": 4, "mode": "affine"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"s/config\.json: quantized Sortformer weights are not read"):
        load(folder)
