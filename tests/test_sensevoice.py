"""SenseVoice Small (omnid/engine/sensevoice/) against funasr 1.4.16 itself: a tiny random SenseVoiceSmall in the
real repository's layout (scripts/sensevoice_goldens.py: model.pt saved by torch, config.yaml, configuration.json,
am.mvn and a SentencePiece model of the real vocabulary's size with the tags at the ids funasr's code names),
decoded by funasr's AutoModel on corpus clips under every query option (language, use_itn, ban_emo_unk): the
same ids, the same text, the same rich post-processing, and the SAN-M encoder's output within 1e-4."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from omnid.audio import decode_audio
from omnid.engine.errors import CheckpointError
from omnid.engine.kinds import recognise
from omnid.engine.options import TranscribeOptions
from omnid.engine.sensevoice.checkpoint import load
from omnid.engine.sensevoice.engine import SenseVoiceEngine
from omnid.engine.sensevoice.model import EMO_UNKNOWN, collapse
from omnid.engine.sensevoice.options import SenseVoiceOptions
from omnid.engine.sensevoice.tags import Tagged, rich_text
from tests.helpers import CORPUS, ends_within, sensevoice_goldens, unpack_sensevoice

GOLDENS = sensevoice_goldens()
CASES = [(clip, run) for clip, case in GOLDENS["cases"].items() for run in case["runs"]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack_sensevoice(tmp_path_factory.mktemp("sensevoice"))


@pytest.fixture(scope="module")
def engine(folder: Path) -> SenseVoiceEngine:
    return SenseVoiceEngine("sensevoice-tiny", folder)


def audio_of(clip: str) -> np.ndarray:
    return np.concatenate([decode_audio(CORPUS / p) for p in GOLDENS["cases"][clip]["paths"]])


@pytest.mark.parametrize(("clip", "run"), CASES)
def test_ids_text_and_rich_text_are_funasrs(engine: SenseVoiceEngine, clip: str, run: str) -> None:
    want = GOLDENS["cases"][clip]["runs"][run]
    language, itn, ban = run.split("/")
    decoded = engine.decode(audio_of(clip), language, itn == "1", ban == "1")
    assert list(decoded.ids) == want["ids"]
    raw = engine.raw_text(decoded.ids)
    assert raw == want["text"]
    assert rich_text(raw) == want["rich"]


def test_the_goldens_exercise_every_option(engine: SenseVoiceEngine) -> None:
    """The tiny model writes <|EMO_UNKNOWN|> where it is not banned and never where it is; language and itn change
    the decode (the queries reach the encoder)."""
    for clip, case in GOLDENS["cases"].items():
        runs = case["runs"]
        assert all(EMO_UNKNOWN not in r["ids"] for k, r in runs.items() if k.endswith("/1"))
        assert runs["auto/0/0"]["ids"] != runs["en/1/0"]["ids"]
    assert sum(EMO_UNKNOWN in r["ids"] for c in GOLDENS["cases"].values() for r in c["runs"].values()) >= 3
    # a language funasr does not list ("de") is its "auto"
    assert all(c["runs"]["de/0/0"] == c["runs"]["auto/0/0"] for c in GOLDENS["cases"].values() if "de/0/0" in c["runs"])


@pytest.mark.parametrize("clip", list(GOLDENS["cases"]))
def test_the_san_m_encoder_output_is_funasrs(engine: SenseVoiceEngine, clip: str) -> None:
    features = engine.front.features(audio_of(clip))
    out = np.array(engine.model.encode(features, "auto", False))
    with np.load(Path(GOLDENS["dir"]) / "goldens.npz") as z:
        first, last, total = z[f"{clip}/encoder_first"], z[f"{clip}/encoder_last"], float(z[f"{clip}/encoder_sum"])
    assert ends_within(out, first, last, 1e-4)
    assert abs(out.astype(np.float64).sum() - total) <= 1e-4 * out.size


@pytest.mark.parametrize("written", list(GOLDENS["written"]))
def test_rich_post_processing_is_funasrs(written: str) -> None:
    assert rich_text(written) == GOLDENS["written"][written]


def test_tags_become_fields_and_the_plain_text_drops_them() -> None:
    raw = "<|en|><|SAD|><|Laughter|><|woitn|> ha ha<|en|><|SAD|><|Speech|><|woitn|> more words"
    tags = Tagged.of(raw)
    assert (tags.language, tags.emotion, tags.events) == ("en", "sad", ("laughter", "speech"))
    assert rich_text(raw, emoji=False) == "ha hamore words"  # funasr joins language parts without a space
    assert rich_text(raw) == "😀ha hamore words😔"  # the repeated emotion once, at the end
    assert Tagged.of("<|nospeech|><|Event_UNK|>") == Tagged(None, None, ("unknown",))
    assert rich_text("<|nospeech|><|Event_UNK|>", emoji=False) == ""
    assert Tagged.of("<|zh|><|EMO_UNKNOWN|><|BGM|><|withitn|>你好").emotion == "unknown"
    assert Tagged.of("<|ja|><|HAPPY|><|ANGRY|><|ANGRY|><|Speech|>x").emotion == "angry"
    assert Tagged.of("<|ja|><|HAPPY|><|ANGRY|><|Speech|>x").emotion == "happy"  # a tie: funasr's order
    assert Tagged.of("no tags at all") == Tagged(None, None, ())


def test_collapse_is_funasrs_unique_consecutive_then_no_blank() -> None:
    d = collapse(np.array([7, 7, 0, 7, 3, 3, 0, 0, 5]))
    assert d.ids == (7, 7, 3, 5)
    assert d.first == (-4, -1, 0, 4) and d.last == (-3, -1, 1, 4)  # frames counted from the first feature frame


def test_transcribe_serves_plain_text_and_the_tags_as_fields(engine: SenseVoiceEngine) -> None:
    clip = "en_librispeech"
    want = GOLDENS["cases"][clip]["runs"]["en/1/0"]
    out = engine.transcribe(audio_of(clip), TranscribeOptions(language="en", itn=True))
    assert out.text == rich_text(want["text"], emoji=False)
    assert "<|" not in out.text and out.text
    (seg,) = out.segments
    assert seg.tokens == want["ids"]
    tags = Tagged.of(want["text"])
    assert (seg.language, seg.emotion, seg.events) == (tags.language, tags.emotion, tags.events)
    assert seg.start == 0 and abs(seg.end - out.duration) < 1e-6


def test_emoji_and_itn_come_from_the_section_where_the_request_is_silent(folder: Path) -> None:
    clip = "en_librispeech"
    e = SenseVoiceEngine("sensevoice-tiny", folder, options=SenseVoiceOptions(use_itn=True, emoji=True))
    want = GOLDENS["cases"][clip]["runs"]["en/1/0"]
    assert e.transcribe(audio_of(clip), TranscribeOptions(language="en")).text == want["rich"]


def test_audio_past_the_clip_limit_is_cut_into_clips_on_the_files_timeline(folder: Path) -> None:
    e = SenseVoiceEngine("sensevoice-tiny", folder, options=SenseVoiceOptions(max_clip_s=10.0))
    audio = audio_of("joined_40s")
    out = e.transcribe(audio, TranscribeOptions())
    assert len(out.segments) == -(-len(audio) // 160_000)
    assert [s.start for s in out.segments] == [10.0 * i for i in range(len(out.segments))]
    first = e.decode(audio[:160_000])
    assert out.segments[0].tokens == list(first.ids)
    clipped = e.transcribe_clips(audio, [(16_000, 48_000)], TranscribeOptions())
    assert clipped.segments[0].start == 1.0 and clipped.segments[0].end == 3.0
    assert clipped.segments[0].tokens == list(e.decode(audio[16_000:48_000]).ids)


def test_word_times_come_from_the_ctc_runs(engine: SenseVoiceEngine) -> None:
    out = engine.transcribe(audio_of("en_short"), TranscribeOptions(word_timestamps=True))
    words = out.segments[0].words
    assert words and all(0 <= w.start <= w.end <= out.duration for w in words)
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert "".join(w.word for w in words).replace(" ", "") in out.text.replace(" ", "")


def test_every_tensor_is_used_and_the_folder_is_recognised(folder: Path) -> None:
    ckpt = load(folder)
    assert ckpt.layout == "funasr" and ckpt.dims.vocabulary == 25055
    model = SenseVoiceEngine("t", folder).model
    params = dict(tree_flatten(model.parameters()))
    assert set(params) == {k for k, _ in ckpt.weights}
    assert all(params[k].shape == v.shape for k, v in ckpt.weights)
    assert recognise(folder).name == "sensevoice"


def copy_of(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


def test_broken_folders_are_refused_naming_the_file_and_key(folder: Path, tmp_path: Path) -> None:
    f = copy_of(folder, tmp_path / "no_mvn")
    (f / "am.mvn").unlink()
    with pytest.raises(CheckpointError, match=r"am\.mvn: missing"):
        load(f)
    f = copy_of(folder, tmp_path / "frontend")
    (f / "config.yaml").write_text((f / "config.yaml").read_text().replace("n_mels: 80", "n_mels: 64"))
    with pytest.raises(CheckpointError, match=r"config\.yaml: frontend_conf\.n_mels is 64"):
        load(f)
    f = copy_of(folder, tmp_path / "escape")
    meta = json.loads((f / "configuration.json").read_text())
    meta["file_path_metas"]["init_param"] = "../model.pt"
    (f / "configuration.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"configuration\.json: file_path_metas\.init_param must name a file"):
        load(f)
    f = copy_of(folder, tmp_path / "weights")
    (f / "model.pt").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match=r"model\.pt: "):
        load(f)
    f = copy_of(folder, tmp_path / "tokens")
    (f / "chn_jpn_yue_eng_ko_spectok.bpe.model").unlink()
    (f / "tokens.json").write_text(json.dumps(["<unk>", "<s>", "</s>", "a"]))
    with pytest.raises(CheckpointError, match=r"model\.pt: tensor ctc\.ctc_lo\.weight has shape \(25055, 16\), "
                                              r"expected \(4, 16\)"):
        load(f)


def test_the_mlx_community_layout_loads_the_same_model(folder: Path, tmp_path: Path) -> None:
    """mlx-community's folder as mlx-audio 0.6.2 reads it: config.json (model_type sensevoice) and safetensors under
    funasr's names and PyTorch layouts (its sanitize renames the CTC head and transposes every 3-d FSMN kernel at
    load, so the file holds them unsanitized; checked by running mlx-audio's own SenseVoice on such a folder, which
    gave funasr's ids in 10 of 10 runs from the same features): the same ids here; also with the CTC head already
    renamed and the kernels already transposed, and with the normalisation in config.json."""
    from omnid.engine.nemo.torch_zip import read_state_dict

    mlx_dir = tmp_path / "mlx"
    mlx_dir.mkdir()
    state = read_state_dict(folder / "model.pt")
    mx.save_safetensors(str(mlx_dir / "model.safetensors"), {k: mx.array(v) for k, v in state.items()})
    for name in ("am.mvn", "chn_jpn_yue_eng_ko_spectok.bpe.model"):
        shutil.copy(folder / name, mlx_dir / name)
    (mlx_dir / "config.json").write_text(json.dumps({
        "model_type": "sensevoice", "vocab_size": 25055, "input_size": 560,
        "encoder_conf": {"output_size": 16, "attention_heads": 4, "linear_units": 32, "num_blocks": 3, "tp_blocks": 2,
                         "kernel_size": 11, "sanm_shfit": 0},
        "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25, "frame_shift": 10,
                          "lfr_m": 7, "lfr_n": 6}}))
    e = SenseVoiceEngine("m", mlx_dir)
    assert e.layout == "mlx"
    want = GOLDENS["cases"]["en_short"]["runs"]["en/1/0"]["ids"]
    assert list(e.decode(audio_of("en_short"), "en", True).ids) == want
    sanitized = {k.removeprefix("ctc."): mx.array(v.transpose(0, 2, 1) if k.endswith("fsmn_block.weight") else v)
                 for k, v in state.items()}
    mx.save_safetensors(str(mlx_dir / "model.safetensors"), sanitized)
    assert list(SenseVoiceEngine("m", mlx_dir).decode(audio_of("en_short"), "en", True).ids) == want
    # mlx-audio also reads the normalisation from config.json (cmvn_means, cmvn_istd) and spells sanm_shift right
    from omnid.engine.funasr.frontend import read_cmvn

    shift, scale = read_cmvn(mlx_dir / "am.mvn")
    (mlx_dir / "am.mvn").unlink()
    config = json.loads((mlx_dir / "config.json").read_text())
    config["encoder_conf"]["sanm_shift"] = config["encoder_conf"].pop("sanm_shfit")
    (mlx_dir / "config.json").write_text(json.dumps({**config, "cmvn_means": shift.tolist(),
                                                    "cmvn_istd": scale.tolist()}))
    assert list(SenseVoiceEngine("m", mlx_dir).decode(audio_of("en_short"), "en", True).ids) == want


def test_the_cpu_encoder_is_the_mlx_encoder(engine: SenseVoiceEngine) -> None:
    """On MLX's CPU device the encoder runs its numpy layers (funasr/cpu_sanm.py); Metal runs the MLX layers, held
    here to the same output (and so to funasr's) on the CPU."""
    features = engine.front.features(audio_of("zh_aishell"))
    x = mx.concatenate([engine.model.queries("zh", True), mx.array(features)])[None]
    cpu, layers = np.array(engine.model.encoder(x)), np.array(engine.model.encoder.in_mlx(x))
    assert np.abs(cpu - layers).max() <= 1e-4
