"""Nemotron streaming ASR against NVIDIA NeMo 3.0.0 (scripts/nemotron_goldens.py): a tiny random cache-aware prompt
checkpoint built with NeMo's own classes (EncDecRNNTBPEModelWithPrompt), loaded from its .nemo through the
production loader, on four real clips (one over 20 s), for every attention context the checkpoint was trained for
and two prompt languages: the log-mel, NeMo's offline pass with the chunked-limited mask (its streaming oracle),
and its greedy tokens."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from omnid.engine.nemotron.checkpoint import load
from omnid.engine.nemotron.model import Nemotron
from tests.helpers import DELETED, nemo_goldens, nemo_with_value

GOLDENS = Path(__file__).parent / "goldens" / "nemotron_tiny"
CLIPS = ("short", "ljspeech", "librispeech", "long")
LANGUAGES = ("en-US", "de-DE")
RIGHTS = (13, 6, 3, 1, 0)


meta, arrays, audio = nemo_goldens(GOLDENS)


@cache
def model() -> Nemotron:
    return Nemotron(load(GOLDENS / "nemotron.nemo"))


def test_the_streaming_configuration_comes_from_the_checkpoint() -> None:
    """Contexts, prompts and the encoder's switches as NeMo's config holds them, not defaults."""
    m = model()
    assert m.streaming.contexts == tuple((meta()["left"], r) for r in meta()["rights"])
    assert m.streaming.prompts == meta()["prompts"]
    assert m.dims.conformer.causal and m.dims.conformer.conv_norm == "layer_norm"
    assert m.front.normalize == "NA"
    assert not m.dims.durations and m.dims.max_symbols == 10


def test_the_long_clip_is_over_20_seconds() -> None:
    assert len(audio("long")) > 20 * 16000


@pytest.mark.parametrize("clip", CLIPS)
def test_log_mel_is_nemos_unnormalised_one(clip: str) -> None:
    """NeMo's streaming buffer holds the valid frames and one frame of its pad value (0) after them."""
    mel = model().features(audio(clip))
    want = arrays()[f"mel/{clip}"]
    assert mel.shape == (len(want) - 1, want.shape[1])
    assert not want[-1].any()
    assert np.abs(mel - want[:-1]).max() <= 1e-3


@pytest.mark.parametrize("right", RIGHTS)
@pytest.mark.parametrize("clip", CLIPS)
def test_the_offline_pass_with_the_chunked_mask_is_nemos(clip: str, right: int) -> None:
    """The causal FastConformer over the whole clip with chunked-limited attention, then the prompt: NeMo's
    model.forward within 1e-4 for both languages, and NeMo's greedy ids on it."""
    m = model()
    mel = arrays()[f"mel/{clip}"][:-1]
    for language in LANGUAGES:
        out = m.encode_offline(mel, (meta()["left"], right), m.streaming.prompts[language])
        want = arrays()[f"offline/{right}/{language}/{clip}"]
        assert out.shape == want.shape
        assert np.abs(out - want).max() <= 1e-4, (clip, right, language)
        offline = meta()["runs"][f"{right}/{language}/{clip}"]["offline"]
        tokens = m.transducer.greedy(out)
        assert [t.id for t in tokens] == offline["ids"]
        assert [t.frame for t in tokens] == offline["frames"]
        assert m.vocabulary.text([t.id for t in tokens]) == offline["text"]


def test_the_two_prompts_give_different_encodings() -> None:
    """The prompt is applied: the same audio and context under two languages differ (and NeMo's agree with each)."""
    m = model()
    mel = arrays()["mel/ljspeech"][:-1]
    en, de = (m.encode_offline(mel, (56, 13), m.streaming.prompts[lang]) for lang in LANGUAGES)
    assert np.abs(en - de).max() > 0.1


@pytest.mark.parametrize("right", RIGHTS)
@pytest.mark.parametrize("clip", CLIPS)
def test_cache_aware_streaming_is_nemos_chunk_by_chunk(clip: str, right: int) -> None:
    """NeMo's streaming loop (conformer_stream_step over CacheAwareStreamingAudioBuffer's chunks, caches carried):
    the same chunks, each chunk's encoder output within 1e-4 before and after the prompt, for both languages, and
    NeMo's streaming ids and frames from greedy decoding over them (RNN-T's greedy loop carries over a chunk
    boundary as over any frame). Where this differs from the offline pass, the streaming rule is followed."""
    m = model()
    chunks = m.stream_nemo(arrays()[f"mel/{clip}"], (meta()["left"], right))
    encoded = np.concatenate(chunks)
    want = arrays()[f"encoded/{right}/{clip}"]
    assert encoded.shape == want.shape
    assert np.abs(encoded - want).max() <= 1e-4
    for language in LANGUAGES:
        run = meta()["runs"][f"{right}/{language}/{clip}"]
        assert [len(c) for c in chunks] == run["chunk_frames"]
        prompted = m.prompted(encoded, m.streaming.prompts[language])
        assert np.abs(prompted - arrays()[f"prompted/{right}/{language}/{clip}"]).max() <= 1e-4
        tokens = m.transducer.greedy(prompted)
        assert [t.id for t in tokens] == run["ids"]
        assert [t.frame for t in tokens] == run["frames"]
        assert m.vocabulary.text([t.id for t in tokens]) == run["text"]
        decoding, grown = m.transducer.start(), []  # chunk by chunk, the decode carried: NeMo's hypothesis growth
        for chunk in np.split(prompted, np.cumsum(run["chunk_frames"])[:-1]):
            new, decoding = m.transducer.continue_greedy(chunk, decoding)
            grown.append((grown[-1] if grown else 0) + len(new))
        assert grown == run["chunk_ids"]


def test_streaming_and_offline_disagree_where_nemo_says() -> None:
    """The goldens hold NeMo's two rules apart. At right context 0 streaming differs from the offline pass from the
    second frame on (its first one-frame chunk has no pre-encode cache). NeMo's streaming buffer takes the zero
    frame its preprocessor pads after the valid mel frames as audio: where that frame is encoded, the last chunk
    differs from the offline pass over the valid frames and equals one that counts the zero frame too; where fewer
    than 8 mel frames are left, the loop stops before them (one encoder frame fewer)."""
    m = model()
    zero, full = (arrays()[f"{kind}/0/en-US/ljspeech"] for kind in ("prompted", "offline"))
    assert np.abs(zero[0] - full[0]).max() <= 1e-4 and np.abs(zero[1:] - full[1 : len(zero)]).max() > 1e-3
    streamed, offline = (arrays()[f"{kind}/13/en-US/ljspeech"] for kind in ("prompted", "offline"))
    assert len(streamed) == len(offline) and np.abs(streamed - offline).max() > 1e-2
    counted = m.encode_offline(arrays()["mel/ljspeech"], (meta()["left"], 13), m.streaming.prompts["en-US"])
    assert np.abs(streamed - counted).max() <= 1e-4
    streamed, offline = (arrays()[f"{kind}/13/en-US/long"] for kind in ("prompted", "offline"))
    assert len(offline) == len(streamed) + 1
    assert np.abs(streamed - offline[: len(streamed)]).max() <= 1e-4


def test_a_streams_state_does_not_grow() -> None:
    """After any number of chunks the encoder cache is the same few arrays: left x d_model keys and values and
    (kernel - 1) x d_model per layer, and a count."""
    import mlx.core as mx

    from omnid.engine.nemo.cache_aware import EncoderCache, stream_step

    m = model()
    mel = arrays()["mel/long"]
    cache = EncoderCache.initial(m.encoder, 56)
    shapes = (cache.keys.shape, cache.values.shape, cache.time.shape)
    for i, start in enumerate(range(0, 800, 16)):
        _, cache = stream_step(m.encoder, mx.array(mel[start : start + 16 + 9]), cache, (56, 1), 2 if i else 0)
        assert (cache.keys.shape, cache.values.shape, cache.time.shape) == shapes
    assert cache.filled == 56


def test_the_cpu_step_keeps_one_relative_key_table_per_layer_whatever_the_chunk_lengths() -> None:
    """Chunks of any length (a stream's last is often short) take their relative keys from one table per layer, grown
    only for a chunk with more keys than it has, and they are the keys of a table made for that length."""
    from omnid.engine.nemo.cpu_cache_aware import TABLE_KEYS, CpuStreamingLayer
    from omnid.engine.nemo.cpu_fastconformer import relative_keys, relative_sinusoids, relative_table

    layer = CpuStreamingLayer(model().encoder.layers[0])  # a fresh one: no chunk has made its table yet
    d = layer.relative_k.weight_t.shape[0]
    most = TABLE_KEYS
    for n in (1, 9, 57, 71, TABLE_KEYS, 58, TABLE_KEYS + 7, 60):
        own = relative_keys(layer.relative_k, *relative_sinusoids(relative_table(n, d)))
        got = layer._relative_keys(n)
        assert got.shape == own.shape == (2 * n - 1, d) and np.abs(got - own).max() <= 1e-6
        most = max(most, n)
        assert layer._positions.shape == (2 * most - 1, d)


def _streamed_mel(audio_: np.ndarray, pieces: list[int], block: int) -> np.ndarray:
    """The log-mel through a MelStream: the audio pushed in pieces of the given sizes (cycled), frames taken
    ``block`` at a time whenever that many are ready, the rest once finished."""
    from omnid.engine.nemo.features import MelStream

    stream, out, at, i = MelStream(model().front), [], 0, 0
    while at < len(audio_):
        stream.push(audio_[at : at + pieces[i % len(pieces)]])
        at += pieces[i % len(pieces)]
        i += 1
        while stream.ready() >= block:
            out.append(stream.take(block))
    stream.finish()
    out.append(stream.take(stream.ready()))
    return np.concatenate(out)


@pytest.mark.parametrize("pieces", [[1], [592], [20800], [7, 16000, 3]])
def test_a_streamed_log_mel_does_not_depend_on_how_the_audio_was_split(pieces: list[int]) -> None:
    """Pushed a sample at a time, 37 ms, 1.3 s or mixed, the frames taken in the same blocks are the same bits as
    the whole clip pushed at once, and NeMo's model frames (n // hop) of the one-shot log-mel to float rounding."""
    clip = audio("ljspeech")[: 16000 * 3 + 123]
    whole = _streamed_mel(clip, [len(clip)], 112)
    assert np.array_equal(_streamed_mel(clip, pieces, 112), whole)
    assert whole.shape == model().features(clip).shape
    assert np.abs(whole - model().features(clip)).max() <= 1e-4


def test_a_streamed_log_mel_gives_only_final_frames() -> None:
    """A frame is taken only once the samples its window covers have come; taking more is refused."""
    from omnid.engine.nemo.features import MelStream

    stream = MelStream(model().front)
    stream.push(np.zeros(255, np.float32))
    assert stream.ready() == 0  # frame 0's window reaches sample 255
    stream.push(np.zeros(1, np.float32))
    assert stream.ready() == 1
    with pytest.raises(ValueError):
        stream.take(2)
    stream.push(np.zeros(16000 - 256, np.float32))
    assert stream.ready() == 99  # frame 99 needs samples up to 16096
    stream.finish()
    assert stream.ready() == 100 and stream.total == 100


def reference_stream(clip: str, right: int, pieces: list[int] | None = None) -> tuple[list[np.ndarray], list]:
    """The reference server's stream over a clip at chunk right + 1, English prompt, pushed whole or in pieces of
    the given sizes (cycled), then finished: each chunk's encoder frames, and the tokens."""
    from omnid.engine.nemotron.stream import Stream

    chunks: list[np.ndarray] = []
    stream = Stream(model(), right + 1, model().streaming.prompts["en-US"], on_chunk=chunks.append)
    samples, at, i = audio(clip), 0, 0
    sizes = pieces or [len(samples)]
    while at < len(samples):
        stream.push(samples[at : at + sizes[i % len(sizes)]])
        at += sizes[i % len(sizes)]
        i += 1
    stream.finish()
    return chunks, stream.tokens


@pytest.mark.parametrize("right", RIGHTS)
@pytest.mark.parametrize("clip", CLIPS)
def test_the_reference_servers_stream_is_nemos_but_at_its_ends(clip: str, right: int) -> None:
    """The reference's rule (a whole first chunk, a 16-frame mel cache, the rest flushed at the end) encodes NeMo's
    streaming frames, chunk for chunk, up to either's last chunk; at right context 0, where NeMo's first one-frame
    chunk changes what follows, it encodes NeMo's offline frames instead. Over all the clip it is the masked
    offline pass over every STFT frame (1 + n // hop), but for a last chunk of right + 2 frames (the causal
    subsampling's frame after the end), which sees its whole chunk."""
    import mlx.core as mx

    from omnid.engine.nemo.features import log_mel

    m = model()
    chunks, tokens = reference_stream(clip, right)
    ours = np.concatenate(chunks)
    assert all(len(c) == right + 1 for c in chunks[:-1])
    nemo = arrays()[f"encoded/{right}/{clip}"]
    settled = min(len(ours) - len(chunks[-1]), sum(meta()["runs"][f"{right}/en-US/{clip}"]["chunk_frames"][:-1]))
    if right:
        assert np.allclose(ours[:settled], nemo[:settled], rtol=0, atol=1e-4)
    else:
        offline = arrays()[f"offline/0/en-US/{clip}"]
        prompted = m.prompted(ours[:settled], m.streaming.prompts["en-US"])
        assert settled and np.abs(prompted - offline[:settled]).max() <= 1e-4
    mel = log_mel(audio(clip), m.front, keep_last=True)
    whole = np.array(m.encoder.encode(m.encoder.subsampling(mx.array(mel)[None]), (meta()["left"], right))[0])
    assert ours.shape == whole.shape
    if len(chunks[-1]) <= right + 1:
        assert np.abs(ours - whole).max() <= 1e-4
        assert [t.id for t in tokens] == [t.id for t in m.transducer.greedy(m.prompted(whole, 0))]
    else:
        assert np.abs(ours[: -len(chunks[-1])] - whole[: -len(chunks[-1])]).max() <= 1e-4


@pytest.mark.parametrize("pieces", [[1], [592], [20800], [7, 16000, 3]])
def test_the_stream_does_not_depend_on_how_the_audio_was_split(pieces: list[int]) -> None:
    """A sample at a time, 37 ms, 1.3 s or mixed: the same encoder frames, bit for bit, and the same tokens as the
    clip pushed whole (the reference's own test: realtime equals the one-shot request however the audio is
    split)."""
    whole_chunks, whole_tokens = reference_stream("ljspeech", 6)
    chunks, tokens = reference_stream("ljspeech", 6, pieces)
    assert len(chunks) == len(whole_chunks)
    assert all(np.array_equal(a, b) for a, b in zip(chunks, whole_chunks, strict=True))
    assert tokens == whole_tokens and tokens


@pytest.fixture(scope="module")
def mlx_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden .nemo converted to the mlx-community layout (omnid.engine.nemotron.convert), once per module, in
    pytest's temporary folders (removed with them, not left in /tmp)."""
    from omnid.engine.nemotron.convert import to_mlx_folder

    return to_mlx_folder(GOLDENS / "nemotron.nemo", tmp_path_factory.mktemp("nemotron-mlx") / "model")


def test_the_mlx_community_folder_holds_the_nemos_model(mlx_folder: Path) -> None:
    """Converted and read back: every tensor the .nemo's (each LSTM layer's two biases arrive summed), the same
    configuration, contexts, prompts and vocabulary."""
    nemo, folder = load(GOLDENS / "nemotron.nemo"), load(mlx_folder)
    assert folder.dims == nemo.dims and folder.streaming == nemo.streaming and folder.front == nemo.front
    assert folder.vocabulary.pieces == nemo.vocabulary.pieces
    assert set(folder.weights) == set(nemo.weights)
    rnn = "decoder.prediction.dec_rnn.lstm."
    for name, want in nemo.weights.items():
        if name.startswith(rnn + "bias_"):
            continue
        assert np.array_equal(folder.weights[name], want), name
    for layer in range(nemo.dims.pred_layers):
        both = nemo.weights[f"{rnn}bias_ih_l{layer}"] + nemo.weights[f"{rnn}bias_hh_l{layer}"]
        assert np.array_equal(folder.weights[f"{rnn}bias_ih_l{layer}"] + folder.weights[f"{rnn}bias_hh_l{layer}"], both)


@pytest.mark.parametrize("clip", CLIPS[:3])  # the long clip adds time, not cases: its chunks are the same kind
def test_mlx_audio_gives_the_reference_streams_tokens(clip: str, mlx_folder: Path) -> None:
    """mlx-audio 0.6.2's nemotron_asr on the same weights (the mlx-community folder, loaded strictly), its own
    front end and streaming loop (the reference server's rule): the tokens of omnid's stream at every chunk size."""
    import mlx.core as mx

    from omnid.engine.nemotron.stream import Stream
    from tests.nemotron_reference import load as load_reference

    reference = load_reference(mlx_folder)
    m = model()
    for right in RIGHTS:
        stream = Stream(m, right + 1, m.streaming.prompts["en-US"])
        stream.push(audio(clip))
        stream.finish()
        result = reference.generate(mx.array(audio(clip)), language="en-US", att_context_size=[meta()["left"], right])
        theirs = [t.id for sentence in result.sentences for t in sentence.tokens]
        assert [t.id for t in stream.tokens] == theirs, right
        assert theirs


def _edited(tmp_path: Path, *path: str, value: object) -> Path:
    """The golden checkpoint with one config value changed (``path``: its keys, outermost first) or removed."""
    return nemo_with_value(GOLDENS / "nemotron.nemo", tmp_path, *path, value=value)


@pytest.mark.parametrize(("path", "value", "message"), [
    (("model_defaults", "prompt_dictionary"), DELETED, "prompt_dictionary is missing"),
    (("model_defaults", "prompt_dictionary"), {"en-US": 9}, "prompt 'en-US' has index 9; num_prompts is 8"),
    (("encoder", "att_context_size"), [[56, "13"]], "att_context_size must be"),
    (("encoder", "conv_norm_type"), "batch_norm", "conv_norm_type is 'batch_norm'; only 'layer_norm'"),
    (("encoder", "causal_downsampling"), False, "causal_downsampling is False"),
    (("encoder", "n_layers"), 3, r"missing tensor encoder\.layers\.2\."),
    (("num_prompts",), 4, r"prompt_kernel\.0\.weight has shape"),
])
def test_a_broken_checkpoint_is_refused_at_load_naming_the_file_and_the_key(
        tmp_path: Path, path: tuple[str, ...], value: object, message: str) -> None:
    from omnid.engine.errors import CheckpointError

    with pytest.raises(CheckpointError, match=message) as refused:
        load(_edited(tmp_path, *path, value=value))
    assert "edited.nemo" in str(refused.value)


def test_a_broken_mlx_folder_is_refused_at_load(tmp_path: Path, mlx_folder: Path) -> None:
    """A reflect-padded front end (mlx-audio's default), quantized weights, a missing tensor."""
    import json
    import shutil

    import mlx.core as mx

    from omnid.engine.errors import CheckpointError

    def folder(edit_config=None, drop: str | None = None) -> Path:
        out = tmp_path / f"f{len(list(tmp_path.iterdir()))}"
        shutil.copytree(mlx_folder, out)
        config = json.loads((out / "config.json").read_text())
        if edit_config:
            edit_config(config)
        (out / "config.json").write_text(json.dumps(config))
        if drop:
            tensors = dict(mx.load(str(out / "model.safetensors")))
            del tensors[drop]
            mx.save_safetensors(str(out / "model.safetensors"), tensors)
        return out

    with pytest.raises(CheckpointError, match="pad_mode 'reflect'"):
        load(folder(lambda c: c["preprocessor"].update(pad_mode="reflect")))
    with pytest.raises(CheckpointError, match="quantized"):
        load(folder(lambda c: c.update(quantization={"bits": 4})))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: missing tensor prompt_kernel\.2\.bias"):
        load(folder(drop="prompt_kernel.2.bias"))
    with pytest.raises(CheckpointError, match="default_att_context_size"):
        load(folder(lambda c: c.update(default_att_context_size=[56, 5])))


def test_streams_at_one_chunk_size_are_encoded_together_each_with_its_caches():
    """Three streams (three clips, one of them German) fed through the engine's batch: their chunks of one shape go
    in one encoder call, and each stream's tokens are those it gets alone."""
    from omnid.engine.nemotron.engine import NemotronEngine
    from omnid.engine.nemotron.stream import Stream

    engine = NemotronEngine("nemotron-tiny", GOLDENS / "nemotron.nemo")
    batch = engine.batch()
    rows: list[int] = []
    encode = batch.encode
    batch.encode = lambda requests, between: rows.append(len(requests)) or encode(requests, between)  # type: ignore[method-assign]
    asked = [("ljspeech", "en-US"), ("librispeech", "de-DE"), ("long", "en")]
    for key, (clip, language) in enumerate(asked):
        live = engine.open_stream(language, None)
        batch.add(key, engine.stream_program(live, audio(clip), finish=True))
    results: dict[int, object] = {}
    while len(results) < len(asked):
        for key, result, error in batch.step(lambda keys, encoding: ()):
            assert error is None, error
            results[key] = result
    m, chunks = model(), []
    for key, (clip, language) in enumerate(asked):
        alone = Stream(m, engine.chunk, engine.prompt_index(language), on_chunk=chunks.append)
        alone.push(audio(clip))
        alone.finish()
        assert results[key].text == m.vocabulary.text([t.id for t in alone.tokens]), clip  # type: ignore[attr-defined]
    assert sum(rows) == len(chunks) and max(rows) == 3 and len(rows) < len(chunks), rows


def test_a_streams_text_extended_token_by_token_is_the_vocabularys_text_of_them_all():
    """A live stream's text is extended as tokens come (its cost per token, not per token so far): at every step
    it equals Vocabulary.text of all the ids, over random sequences with word starts, lone spaces, punctuation after
    spaces, byte pieces making up a character (and a broken one), control and unknown pieces."""
    import random

    from omnid.engine.nemo.tokenizer import IncrementalText, Vocabulary
    from omnid.engine.nemotron.stream import Stream

    vocab = Vocabulary.from_pieces(["<unk>", "<s>", "\u2581the", "\u2581", "cat", ".", ",", "\u2581.", "?", "s",
                                    "<0xE4>", "<0xBD>", "<0xA0>", "\u2581a", "!"])
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randrange(len(vocab)) for _ in range(rng.randrange(1, 30))]
        growing, at = IncrementalText(vocab), 0
        while at < len(ids):
            step = rng.randrange(1, 4)
            growing.extend(ids[at : at + step])
            at += step
            assert growing.text == vocab.text(ids[:at]), ids[:at]
    m = model()
    stream = Stream(m, 2, 0)
    stream.push(audio("librispeech"))
    stream.finish()
    assert stream.text == m.vocabulary.text([t.id for t in stream.tokens]) and stream.text
