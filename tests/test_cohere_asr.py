"""Cohere Transcribe (kind cohere_asr) against transformers 5.23.0's own implementation: the tiny random checkpoint
in the real hub layout and the goldens scripts/cohere_asr_goldens.py wrote with it (tests/goldens/cohere_asr_README.md
describes the keys), read through the production loader. Features within 1e-3 of the official feature extractor's
(dither 0), the encoder within 1e-4, prompt ids, greedy ids, chunk boundaries, chunk texts and the reassembled text
exact; the folder mlx-audio 0.6.2's converter writes from it (as is, float16, 8-bit) loads and decodes alike;
tokenizer.model alone gives the official text; broken checkpoints and languages the model cannot take are refused."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from functools import cache
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_map

from omnid.audio import decode_audio
from omnid.engine import kinds
from omnid.engine.cohere_asr import checkpoint
from omnid.engine.cohere_asr.chunks import ENERGY_WINDOW, chunk_spans, join_texts
from omnid.engine.cohere_asr.engine import CohereAsrEngine, LanguageError
from omnid.engine.cohere_asr.options import CohereOptions
from omnid.engine.errors import CheckpointError
from omnid.engine.options import TranscribeOptions
from omnid.runtime.request_rules import RuleError, language
from tests.helpers import ends_within, nemo_goldens
from tests.nemotron_reference import stt_models_package
from tests.test_sharded import sharded_copy

GOLDENS = Path(__file__).parent / "goldens" / "cohere_asr_tiny"
CORPUS = Path(__file__).parent / "corpus"
EOS = 3


meta, arrays, _ = nemo_goldens(GOLDENS)


@cache
def audio(case: str) -> np.ndarray:
    """The case's clip, or its clips decoded one by one and joined (a case between 30 and 35 s), as the script fed
    transformers."""
    return np.concatenate([decode_audio(CORPUS / path) for path in meta()["cases"][case]["paths"]])


@cache
def engine(folder: Path = GOLDENS) -> CohereAsrEngine:
    return CohereAsrEngine("cohere", folder)


CASES = tuple(meta()["cases"])


def opts(case: str, **more: object) -> TranscribeOptions:
    c = meta()["cases"][case]
    return TranscribeOptions(language=c["language"], punctuation=c["punctuation"], **more)  # type: ignore[arg-type]


def golden_ids(chunk: dict) -> list[int]:
    """The generated ids without the end token (the engine stops on it)."""
    ids = list(chunk["ids"])
    return ids[:-1] if ids and ids[-1] == EOS else ids


def test_the_audio_is_what_transformers_read() -> None:
    for case in CASES:
        c = meta()["cases"][case]
        a = audio(case)
        assert len(a) == c["audio_samples"], case
        assert abs(float(a.astype(np.float64).sum()) - c["audio_sum"]) < 1e-3, case


def test_prompt_ids_for_every_language_and_punctuation() -> None:
    e = engine()
    for key, ids in meta()["prompt_ids"].items():
        code, pnc = key.split("/")
        assert e.prompt(code, pnc == "pnc") == ids, key
    assert e.languages == ("ar", "de", "el", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "vi", "zh")
    assert e.model.eos == EOS


@pytest.mark.parametrize("case", CASES)
def test_features_encoder_tokens_and_texts_match_transformers(case: str) -> None:
    """Per chunk: the official chunk boundaries, the first and last valid feature frames, the encoder output (all of
    it, or its first and last 48 rows for a long clip's chunks), the greedy ids and the chunk's official text; then
    the reassembled text (the transcript's is the official text without its leading space)."""
    e, c, z = engine(), meta()["cases"][case], arrays()
    a = audio(case)
    spans = chunk_spans(len(a), a)
    assert (spans is not None) == c["chunked"]
    assert [list(s) for s in spans or [(0, len(a))]] == [ch["samples"] for ch in c["chunks"]]
    prompt = e.prompt(c["language"], c["punctuation"])
    assert prompt == c["prompt_ids"]
    texts = []
    for k, ch in enumerate(c["chunks"]):
        start, end = ch["samples"]
        mel = e.model.features(a[start:end])
        assert len(mel) == ch["feature_frames"]
        assert ends_within(mel, z[f"{case}/chunk{k}/features_first"], z[f"{case}/chunk{k}/features_last"], 1e-3)
        encoded = e.model.encode(mel)
        out = np.array(encoded)[0]
        assert len(out) == ch["encoder_frames"]
        if f"{case}/chunk{k}/encoder_out" in z:
            assert np.abs(out - z[f"{case}/chunk{k}/encoder_out"]).max() <= 1e-4
        else:
            assert ends_within(out, z[f"{case}/chunk{k}/encoder_first"], z[f"{case}/chunk{k}/encoder_last"], 1e-4)
        gen = e.model.generate(encoded, prompt, meta()["max_new_tokens"])
        assert gen.tokens == golden_ids(ch)
        assert gen.finish == ("stop" if ch["stopped_on_eos"] else "length")
        text = e.official_text(prompt, gen.tokens)
        assert text == ch["text"]
        texts.append(text)
    if c["chunked"]:
        assert join_texts(texts, c["language"]) == c["text"]
    else:
        assert texts[0] == c["text"]
    transcript = e.transcribe(a, opts(case, max_new_tokens=meta()["max_new_tokens"]))
    assert transcript.text == c["text"].lstrip()
    assert transcript.language == c["language"]
    assert [(s.start, s.end) for s in transcript.segments] == [
        (ch["samples"][0] / 16000, ch["samples"][1] / 16000) for ch in c["chunks"] if ch["text"].strip()]


@pytest.mark.parametrize("case", CASES)
def test_the_numpy_step_and_the_mlx_decoder_give_the_same_tokens(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On MLX's CPU device the tokens after the prompt come from the numpy step (engine/cpu_cross_decoder.py), on
    Metal from the MLX decoder: both give transformers' ids, and their logits agree step by step."""
    e, c = engine(), meta()["cases"][case]
    assert mx.default_device() == mx.cpu and e.model.cpu_step is not None
    prompt = e.prompt(c["language"], c["punctuation"])
    ch = c["chunks"][0]
    encoded = e.model.encode(e.model.features(audio(case)[ch["samples"][0] : ch["samples"][1]]))
    step, mlx_caches, numpy_caches = e.model.cpu_step, e.model.decoder.caches(encoded), e.model.decoder.caches(encoded)
    e.model.decoder.logits(prompt, 0, mlx_caches)
    e.model.decoder.logits(prompt, 0, numpy_caches)
    row = step.row([(k.keys, k.values) for k in numpy_caches], [(k.cross_keys, k.cross_values) for k in numpy_caches])
    for position, token in enumerate(golden_ids(ch)[:8], start=len(prompt)):
        theirs = np.array(e.model.decoder.logits([token], position, mlx_caches))
        assert np.abs(step.step([token], [row])[0] - theirs).max() <= 1e-3
    with monkeypatch.context() as m:
        m.setattr(type(e.model), "cpu_step", property(lambda self: None))
        assert e.model.generate(encoded, prompt, meta()["max_new_tokens"]).tokens == golden_ids(ch)


@pytest.mark.parametrize("case", CASES)
def test_the_numpy_prompt_and_cross_attention_give_the_mlx_decoders_logits(case: str) -> None:
    """A packed decoder's path on the CPU (its prompt through the numpy step's ``prefill``, its cross-attention keys
    and values by numpy maps), run here over float weights: the prompt's logits and each later step's agree with the
    MLX decoder's, and its greedy tokens are transformers' ids."""
    e, c = engine(), meta()["cases"][case]
    prompt = e.prompt(c["language"], c["punctuation"])
    ch = c["chunks"][0]
    encoded = e.model.encode(e.model.features(audio(case)[ch["samples"][0] : ch["samples"][1]]))
    step, caches = e.model.cpu_step, e.model.decoder.caches(encoded)
    assert step is not None
    row = step.start(e.model.cross_maps(encoded))
    for (k, v), layer_cache in zip(row.cross, caches, strict=True):
        assert np.abs(k - np.array(layer_cache.cross_keys[0])).max() <= 1e-4
        assert np.abs(v - np.array(layer_cache.cross_values[0])).max() <= 1e-4
    ours = step.prefill(prompt, row)
    assert row.length == len(prompt)
    assert np.abs(ours - np.array(e.model.decoder.logits(prompt, 0, caches))).max() <= 1e-3
    tokens = [int(np.argmax(ours))]
    for position in range(len(prompt), len(prompt) + len(golden_ids(ch)) - 1):
        logits = step.step([tokens[-1]], [row])[0]
        assert np.abs(logits - np.array(e.model.decoder.logits([tokens[-1]], position, caches))).max() <= 1e-3
        tokens.append(int(np.argmax(logits)))
    assert tokens == golden_ids(ch)


def test_the_section_default_budget_and_punctuation_are_the_model_cards() -> None:
    """Without a request's budget each chunk gets 256 tokens (the model card's max_new_tokens); without a request's
    punctuation the section's (default on) picks the prompt."""
    case = next(k for k, c in meta()["cases"].items() if not c["chunked"] and c["punctuation"])
    c = meta()["cases"][case]
    transcript = engine().transcribe(audio(case), TranscribeOptions(language=c["language"]))
    assert transcript.text == c["text"].lstrip()
    assert CohereOptions().max_new_tokens == 256 and CohereOptions().punctuation


def test_a_long_clips_chunks_decoded_together_give_each_its_own_tokens() -> None:
    """chunks_together chunks go through the decoder at once (their steps share the weights' reads): every chunk's
    tokens are still transformers', however many share a step, a chunk too short to encode among them is empty, and
    the section refuses a group size past its cap."""
    case = next(k for k, c in meta()["cases"].items() if c["chunked"])
    c = meta()["cases"][case]
    a = audio(case)
    spans = [tuple(ch["samples"]) for ch in c["chunks"]]
    e = engine()
    prompt = e.prompt(c["language"], c["punctuation"])
    chunks = [a[start:end] for start, end in spans]
    together = e.decode_chunks([chunks[0], a[:100], *chunks[1:], chunks[0]], prompt, meta()["max_new_tokens"])
    want = [golden_ids(ch) for ch in c["chunks"]]
    assert [g.tokens for g in together] == [want[0], [], *want[1:], want[0]]
    assert together[1].finish == "stop"
    for n in (1, 2):
        one_by_one = CohereAsrEngine("cohere", GOLDENS, options=CohereOptions(chunks_together=n))
        assert one_by_one.transcribe(a, opts(case, max_new_tokens=meta()["max_new_tokens"])).text == c["text"].lstrip()
    with pytest.raises(ValueError, match="chunks_together"):
        CohereOptions(chunks_together=65).check()


def test_tokenizer_model_alone_gives_the_official_text(tmp_path: Path) -> None:
    """A folder without tokenizer.json (a converted folder may carry only tokenizer.model): the same ids by name
    and the same text of every case, and of random ids over the whole vocabulary (bytes, specials, <unk>)."""
    folder = tmp_path / "spm"
    shutil.copytree(GOLDENS, folder, ignore=shutil.ignore_patterns("tokenizer.json", "goldens.*"))
    fast, spm = engine().tokenizer, engine(folder).tokenizer
    assert spm.path.name == "tokenizer.model"
    for key, ids in meta()["prompt_ids"].items():
        code, pnc = key.split("/")
        assert spm.prompt(code, pnc == "pnc") == ids
    for c in meta()["cases"].values():
        for ch in c["chunks"]:
            assert spm.decode(c["prompt_ids"] + golden_ids(ch)) == ch["text"]
    rng = np.random.default_rng(0)
    for _ in range(500):
        ids = [fast.require("\u2581"), *rng.integers(0, fast.size, int(rng.integers(1, 24))).tolist()]
        assert spm.decode(ids) == fast.decode(ids)


def test_languages_the_model_cannot_take_are_refused() -> None:
    """No language (the model detects none) or one outside the 14 (even one with a token, 'sv'; a name; upper case)
    raises the engine's LanguageError before any model work; the request rules refuse an unknown language with a
    400 naming the field (refuses_unknown_language), and a missing one too (requires_language), before the engine."""
    e = engine()
    a = audio(CASES[0])
    for bad in meta()["prompt_refusals"]:
        with pytest.raises(LanguageError, match="does not transcribe"):
            e.transcribe(a, TranscribeOptions(language=bad))
    for missing in (None, ""):
        with pytest.raises(LanguageError, match="needs a language") as raised:
            e.transcribe(a, TranscribeOptions(language=missing))
        assert raised.value.param == "language"
    with pytest.raises(LanguageError):
        e.redecode(a, TranscribeOptions(), None)
    can = e.capabilities
    assert can.refuses_unknown_language and not can.prompt and not can.word_timestamps and not can.timestamps
    assert can.streaming == "redecode" and not can.temperature
    with pytest.raises(RuleError) as rule:
        language("sv", can, "cohere")
    assert rule.value.param == "language" and rule.value.code == "unsupported_value"
    assert language("French", can, "cohere").code == "fr"
    with pytest.raises(RuleError) as rule:
        language(None, can, "cohere")
    assert rule.value.param == "language" and rule.value.code == "missing_required_parameter"
    assert language("de-DE", can, "cohere").code == "de"


def test_long_audio_chunks_as_the_processor_cuts_it() -> None:
    """Up to 30 s one input; past it 35 s windows cut at the first strictly-quietest 1600-sample window from
    start + 30 s; 30-35 s one chunk; the reassembly's join rules."""
    rate = 16000
    assert chunk_spans(30 * rate) is None
    a = np.full(33 * rate, 0.5, np.float32)
    assert chunk_spans(len(a), a) == [(0, len(a))]
    a = np.full(80 * rate, 0.5, np.float32)
    a[30 * rate + 7 * ENERGY_WINDOW : 30 * rate + 8 * ENERGY_WINDOW] = 0.1  # quieter
    a[30 * rate + 9 * ENERGY_WINDOW : 30 * rate + 10 * ENERGY_WINDOW] = 0.1  # as quiet, later: not chosen
    cut = 30 * rate + 7 * ENERGY_WINDOW
    spans = chunk_spans(len(a), a)
    assert spans is not None and spans[0] == (0, cut) and spans[-1][1] == len(a)
    assert all(0 < end - start <= 35 * rate for start, end in spans)
    assert join_texts([" Hello there ", "  ", " world. "], "en") == " Hello there world."
    assert join_texts([" 今日は", " 晴れ"], "ja") == " 今日は晴れ"
    assert join_texts(["", " "], "en") == ""


def test_redecode_continues_its_stable_prefix() -> None:
    """Live previews: the first decodes are free, later ones force the previous tokens less the rollback and add at
    most the preview budget; greedy decoding continues its own prefix, so every preview is the free greedy decode
    of its length."""
    case = next(k for k, c in meta()["cases"].items() if not c["chunked"])
    e, a = engine(), audio(case)
    request = opts(case, max_new_tokens=12)
    prompt = e.prompt(request.language or "", bool(request.punctuation))
    encoded = e.model.encode(e.model.features(a))
    previous = None
    for decodes in range(1, 5):
        previous = e.redecode(a, request, previous)
        assert previous.decodes == decodes
        free = e.model.generate(encoded, prompt, len(previous.tokens)).tokens
        assert list(previous.tokens) == free
        assert previous.text == e.official_text(prompt, free).strip()
    assert len(previous.tokens) > 12  # the forced decodes continued the kept tokens


def test_a_job_can_stop_between_encoder_layers() -> None:
    """The shared FastConformer runs the job's check after each layer (numpy layers on the CPU, MLX's elsewhere), so
    a cancelled transcription stops inside the 48-layer encoder, not after it."""
    e = engine()
    mel = e.model.features(audio(CASES[0]))
    calls: list[int] = []
    e.model.encode(mel, lambda: calls.append(1))
    assert len(calls) == e.model.dims.conformer.layers

    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        e.model.encode(mel, stop)


def test_audio_too_short_for_two_frames_is_empty() -> None:
    """Under 320 samples the official features are NaN (0/0) and the model emits <unk> for its whole budget: an
    empty text; here empty without model work."""
    transcript = engine().transcribe(np.zeros(319, np.float32), TranscribeOptions(language="en"))
    assert transcript.text == "" and transcript.segments == []


def test_the_kind_recognises_both_layouts(tmp_path: Path) -> None:
    mlx = convert(tmp_path / "mlx")
    for folder, form in ((GOLDENS, "original"), (mlx, "mlx")):
        kind = kinds.recognise(folder)
        assert kind is not None and kind.name == "cohere_asr"
        assert kind.layout(folder).startswith(f"{form}, tokenizer: tokenizer.json")


def test_sharded_original_weights_load_by_their_index(tmp_path: Path) -> None:
    """The original layout saved in shards (as save_pretrained writes them past its shard size), read by their
    index: the same weights, the index named first among the pinned files."""
    folder = sharded_copy(GOLDENS, tmp_path / "sharded")
    ours, theirs = checkpoint.load(GOLDENS), checkpoint.load(folder)
    assert len(list(folder.glob("model-*.safetensors"))) > 1 and theirs.layout == "original"
    assert theirs.files[2].name == "model.safetensors.index.json"
    for name, array in ours.weights.items():
        assert np.array_equal(np.asarray(array), np.asarray(theirs.weights[name])), name


# --- mlx-audio's conversion ----------------------------------------------------------------------------------------


def convert(dest: Path, **kwargs: object) -> Path:
    """``mlx_audio.convert.convert(GOLDENS, dest, model_domain="stt", ...)`` (the golden files beside the checkpoint
    left out of its source, as the real repo has none)."""
    stt_models_package()
    from mlx_audio.convert import convert as run

    source = dest.parent / f"{dest.name}-source"
    if not source.exists():
        shutil.copytree(GOLDENS, source, ignore=shutil.ignore_patterns("goldens.*"))
    with contextlib.redirect_stdout(io.StringIO()):
        run(str(source), str(dest), model_domain="stt", **kwargs)  # type: ignore[arg-type]
    return dest


def test_mlx_audio_folder_loads_the_same_weights_and_tokens(tmp_path: Path) -> None:
    """The converter's folder as it writes it by default (the source's bfloat16 kept, the index always written,
    the decoder renamed, convolutions channels-last, no front-end buffers): bit-equal weights, the goldens' tokens."""
    folder = convert(tmp_path / "mlx")
    assert (folder / "model.safetensors.index.json").is_file()
    ours, theirs = checkpoint.load(GOLDENS), checkpoint.load(folder)
    assert theirs.layout == "mlx" and ours.layout == "original"
    assert sorted(ours.weights) == sorted(theirs.weights)
    for name, array in ours.weights.items():
        assert np.array_equal(np.asarray(array), np.asarray(theirs.weights[name])), name
    e = engine(folder)
    for case in CASES[:2]:
        c = meta()["cases"][case]
        assert e.transcribe(audio(case), opts(case)).text == c["text"].lstrip()


def test_mlx_audio_float16_folder_decodes_as_transformers_does(tmp_path: Path) -> None:
    """``dtype="float16"``: the weights are the original's in float16 exactly, and the goldens' ids come out up to
    the first step where transformers' own top-two margin is under 1e-3 (float16 rounding may turn a near tie)."""
    folder = convert(tmp_path / "f16", dtype="float16")
    ours, theirs = checkpoint.load(GOLDENS), checkpoint.load(folder)
    for name, array in ours.weights.items():
        assert np.array_equal(np.array(mx.array(array).astype(mx.float16).astype(mx.float32)), theirs.weights[name])
    e = engine(folder)
    for case in CASES:
        c = meta()["cases"][case]
        for k, ch in enumerate(c["chunks"]):
            start, end = ch["samples"]
            gen = e.model.generate(e.model.encode(e.model.features(audio(case)[start:end])), c["prompt_ids"], 256)
            margins = arrays()[f"{case}/chunk{k}/margins"]
            sure = next((i for i, m in enumerate(margins) if m < 1e-3), len(margins))
            assert gen.tokens[:sure] == golden_ids(ch)[:sure], (case, k)


@pytest.mark.parametrize("packed", [False, True, None])
def test_mlx_audio_quantized_folder_decodes_as_mlx_audio_does(tmp_path: Path, packed: bool | None) -> None:
    """An 8-bit folder (group 32: the modules whose input width it divides), widened at load, kept packed (Metal's
    choice: MLX's quantized layers; on this CPU the numpy layers multiply them packed), or as MLX's CPU device takes
    it by default (the encoder layers and the decoder kept packed for the numpy layers, cpu_packed.py, the decoder's
    prompt and cross-attention in numpy too; the rest widened): the encoder output within 1e-5 of mlx-audio's own
    model on the same folder (upcast to float32 as omnid computes it), and its greedy tokens."""
    folder = convert(tmp_path / "q8", quantize=True, q_bits=8, q_group_size=32)
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"]["bits"] == 8
    e = CohereAsrEngine("q8", folder, keep_quantized=packed)
    packable = set(checkpoint.load(folder, None, True).quantized)
    # The CPU's default keeps the encoder layers' packed Linears (none in this tiny model: no width of its layers
    # divides by the group size; test_nemo_mlx_audio_quantized.py covers those) and, at 8 bits, the decoder's, and
    # widens the rest (the encoder's other modules).
    kept = {name for name in packable if not name.startswith("encoder.")} if packed is None else (
        packable if packed else set())
    assert kept or not packed
    assert packable and e.quantized == bool(kept) and e.layout == "mlx"
    assert {f"{part}.{name}" for part in ("encoder", "decoder") for name, m in getattr(e.model, part).named_modules()
            if isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding)} == {
        n.replace("transf_decoder.", "decoder.transf_decoder.") for n in kept}
    if packed is None:
        assert any(name.startswith("transf_decoder.decoder.layers.") for name in kept)
        assert e.model.cpu_step is not None and e.model.decoder.packed  # the numpy decoder over packed weights
    model = mlx_audio_model(folder)
    case = CASES[0]
    mel = e.model.features(audio(case))
    ours = e.model.encode(mel)
    theirs, _ = model.encoder(mx.array(mel)[None], mx.array([len(mel)]))
    assert np.abs(np.array(ours) - np.array(theirs)).max() <= 1e-5
    prompt = e.prompt("en")
    memory = model.encoder_decoder_proj(theirs)
    cache = model.make_cache()
    tokens: list[int] = []
    ids = prompt
    for step in range(12):
        hidden, cache = model.transf_decoder(mx.array([ids]), memory, cache=cache,
                                             start_pos=0 if step == 0 else len(prompt) + step - 1)
        token = int(np.array(model.log_softmax.mlp.layer0(hidden[:, -1]))[0].argmax())
        if token == e.model.eos:
            break
        tokens.append(token)
        ids = [token]
    assert e.model.generate(ours, prompt, len(tokens)).tokens == tokens


def test_a_4_bit_folders_decoder_is_widened_on_the_cpu(tmp_path: Path) -> None:
    """At 4 bits the CPU's default widens the decoder at load (its packed one-row products are the slower there,
    bench/quantized.py): no decoder module stays quantized, the numpy step reads float weights, and the text is the
    folder's widened everywhere."""
    folder = convert(tmp_path / "q4", quantize=True, q_bits=4, q_group_size=32)
    packable = set(checkpoint.load(folder, None, True).quantized)
    assert any(name.startswith("transf_decoder.") for name in packable)
    e = CohereAsrEngine("q4", folder)
    assert not any(isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding) for _, m in e.model.decoder.named_modules())
    assert e.model.cpu_step is not None and not e.model.decoder.packed
    widened = CohereAsrEngine("q4 widened", folder, keep_quantized=False)
    assert e.transcribe(audio(CASES[0]), opts(CASES[0])).text == widened.transcribe(audio(CASES[0]), opts(CASES[0])).text


def mlx_audio_model(folder: Path):  # noqa: ANN201  (mlx-audio's own Model)
    stt_models_package()
    from mlx_audio.stt.models.cohere_asr.cohere_asr import Model
    from mlx_audio.stt.models.cohere_asr.config import ModelConfig
    from mlx_audio.utils import apply_quantization

    config = json.loads((folder / "config.json").read_text())
    model = Model(ModelConfig.from_dict(config))
    files = [mx.load(str(path)) for path in sorted(folder.glob("*.safetensors"))]
    weights = model.sanitize({name: t for loaded in files if isinstance(loaded, dict) for name, t in loaded.items()})
    apply_quantization(model, config, weights, None)
    model.load_weights(list(weights.items()), strict=True)
    model.eval()
    # computed in float32, as omnid computes a 16-bit folder (mlx-audio itself would compute in bfloat16)
    model.update(tree_map(lambda p: p.astype(mx.float32) if p.dtype == mx.bfloat16 else p, model.parameters()))
    return model


# --- broken checkpoints --------------------------------------------------------------------------------------------


def copy(tmp_path: Path) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(GOLDENS, folder, ignore=shutil.ignore_patterns("goldens.*"))
    return folder


def rewrite_weights(folder: Path, edit) -> None:  # noqa: ANN001
    path = folder / "model.safetensors"
    tensors = dict(mx.load(str(path)))
    edit(tensors)
    mx.save_safetensors(str(path), tensors)


def test_a_missing_tensor_is_refused_naming_file_and_tensor(tmp_path: Path) -> None:
    folder = copy(tmp_path)
    rewrite_weights(folder, lambda t: t.pop("transf_decoder._decoder.layers.1.second_sub_layer.key_net.bias"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: missing tensor "
                                              r"transf_decoder\.decoder\.layers\.1\.second_sub_layer\.key_net\.bias"):
        checkpoint.load(folder)


def test_a_tensor_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    folder = copy(tmp_path)
    rewrite_weights(folder, lambda t: t.update({"encoder.layers.0.self_attn.linear_q.weight": mx.zeros((4, 4))}))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor encoder\.layers\.0\.self_attn\.q_proj"
                                              r"\.weight has shape \(4, 4\), expected"):
        checkpoint.load(folder)


def test_an_unexpected_tensor_is_refused(tmp_path: Path) -> None:
    folder = copy(tmp_path)
    rewrite_weights(folder, lambda t: t.update({"transf_decoder._decoder.layers.9.extra": mx.zeros((2,))}))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: unexpected tensor "
                                              r"transf_decoder\.decoder\.layers\.9\.extra"):
        checkpoint.load(folder)


@pytest.mark.parametrize(("section", "key", "value", "message"), [
    ("encoder", "d_model", "wide", r"config\.json: d_model must be an integer, not 'wide'"),
    ("encoder", "self_attention_model", "abs_pos", r"config\.json: self_attention_model is 'abs_pos'"),
    ("config_dict", "hidden_act", "gelu", r"config\.json: transf_decoder\.config_dict\.hidden_act is 'gelu'"),
    ("config_dict", "num_layers", None, r"config\.json: num_layers is missing"),
    ("head", "num_classes", 999, r"tokenizer\.json has \d+ tokens; the head \(head\.num_classes in config\.json\) "
                                 r"has 999"),
])
def test_a_bad_config_key_is_refused_naming_it(tmp_path: Path, section: str, key: str, value: object,
                                              message: str) -> None:
    folder = copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    part = config["transf_decoder"]["config_dict"] if section == "config_dict" else config[section]
    if value is None:
        del part[key]
    else:
        part[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        checkpoint.load(folder)


def test_a_quantized_module_without_its_scales_is_refused(tmp_path: Path) -> None:
    folder = convert(tmp_path / "q8", quantize=True, q_bits=8, q_group_size=32)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = next(n for n in index["weight_map"] if n.endswith(".scales"))
    index["weight_map"].pop(name)
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    rewrite_weights(folder, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=rf"{name.removesuffix('.scales')}\.weight is packed \(uint32\), but "
                                              r"its .*\.scales is missing"):
        checkpoint.load(folder)
