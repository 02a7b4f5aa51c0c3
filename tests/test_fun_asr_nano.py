"""Fun-ASR-Nano's parts against funasr 1.4.16 itself (scripts/fun_asr_nano_goldens.py: a tiny random FunASRNano in
the release's layout, decoded by funasr's AutoModel): its model.pt read without torch (a state dict saved inside
{"state_dict": ...}), the shared front end without normalisation and the shared SAN-M encoder, then FunASR's
adaptor (omnid/engine/funasr/adaptor.py): the adaptor's output within 1e-4 of funasr's on every clip, and the
number of its rows the prompt takes as funasr counts them."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from omnid.audio import decode_audio
from omnid.engine.funasr.adaptor import Adaptor, AdaptorDims, slots
from omnid.engine.funasr.frontend import FrontEnd
from omnid.engine.funasr.llm_prompt import PLACEHOLDER, prompt_ids
from omnid.engine.funasr.sanm import SanmDims, SanmEncoder, mlx_weights
from omnid.engine.nemo.torch_zip import read_state_dict
from omnid.engine.qwen3.tokenizer import ChatTokenizer
from omnid.engine.yaml_file import read_yaml_file
from tests.helpers import CORPUS, ROOT, ends_within, unpacked

GOLDENS = ROOT / "tests" / "goldens" / "fun_asr_nano_tiny"
META = json.loads((GOLDENS / "goldens.json").read_text())


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpacked(GOLDENS / "Fun-ASR-Nano.tar.xz", tmp_path_factory.mktemp("nano"))


@pytest.fixture(scope="module")
def parts(folder: Path) -> tuple[SanmEncoder, Adaptor]:
    config = read_yaml_file(folder / "config.yaml")
    state = read_state_dict(folder / "model.pt")
    e, a = config["audio_encoder_conf"], config["audio_adaptor_conf"]
    encoder = SanmEncoder(SanmDims(560, e["output_size"], e["attention_heads"], e["linear_units"], e["num_blocks"],
                                   e["tp_blocks"], e["kernel_size"], e["sanm_shfit"]))
    encoder.load_weights(mlx_weights(state, "audio_encoder."), strict=True)
    llm_dim = json.loads((folder / "Qwen3-0.6B" / "config.json").read_text())["hidden_size"]
    adaptor = Adaptor(AdaptorDims(e["output_size"], llm_dim, a["ffn_dim"], a["n_layer"]))
    adaptor.load_weights([(k.removeprefix("audio_adaptor."), mx.array(v.astype(np.float32)))
                          for k, v in state.items() if k.startswith("audio_adaptor.")], strict=True)
    return encoder, adaptor


def test_model_pt_is_the_state_dict_inside_its_wrapper(folder: Path) -> None:
    state = read_state_dict(folder / "model.pt")
    assert {k.split(".")[0] for k in state} == {"audio_encoder", "audio_adaptor", "llm"}
    assert state["llm.model.embed_tokens.weight"].shape == (340, 64)


@pytest.mark.parametrize("clip", list(META["cases"]))
def test_the_adaptor_output_is_funasrs(parts: tuple[SanmEncoder, Adaptor], clip: str) -> None:
    encoder, adaptor = parts
    audio = np.concatenate([decode_audio(CORPUS / p) for p in META["cases"][clip]["paths"]])
    features = FrontEnd(np.zeros(560, np.float32), np.ones(560, np.float32)).features(audio)  # no am.mvn
    out = np.array(adaptor(encoder(mx.array(features)[None])))[0]
    with np.load(GOLDENS / "goldens.npz") as z:
        first, last, total = z[f"{clip}/adaptor_first"], z[f"{clip}/adaptor_last"], float(z[f"{clip}/adaptor_sum"])
    assert ends_within(out, first, last, 1e-4)
    assert abs(out.astype(np.float64).sum() - total) <= 1e-4 * out.size
    # the prompt holds the first slots(frames) rows: funasr's audio placeholder ids are 0
    run = next(iter(META["cases"][clip]["runs"].values()))
    n = slots(len(features))
    prompt = run["prompt_ids"]
    first_slot = prompt.index(0)
    assert prompt[first_slot : first_slot + n] == [0] * n and prompt[first_slot + n] != 0
    assert run["prompt_rows"] == len(prompt)


def test_slots_are_funasrs_fake_token_len() -> None:
    def funasr(t: int) -> int:
        olens = 1 + (t - 3 + 2 * 1) // 2
        olens = 1 + (olens - 3 + 2 * 1) // 2
        return (olens - 1) // 2 + 1

    assert all(slots(t) == funasr(t) for t in range(1, 3000))


@pytest.mark.parametrize(("clip", "run"), [(c, r) for c, case in META["cases"].items() for r in case["runs"]])
def test_the_prompt_ids_are_funasrs(folder: Path, clip: str, run: str) -> None:
    """funasr's chat prompt for each option set (language as the model names it, ITN on or off, hotwords), with
    the audio slots the clip's features give, token for token."""
    language, itn, hotwords = run.split("/")
    audio = np.concatenate([decode_audio(CORPUS / p) for p in META["cases"][clip]["paths"]])
    features = FrontEnd(np.zeros(560, np.float32), np.ones(560, np.float32)).features(audio)
    ids, first = prompt_ids(ChatTokenizer.from_folder(folder / "Qwen3-0.6B"), slots(len(features)),
                            None if language == "none" else language, itn == "1",
                            [w for w in hotwords.split(",") if w])
    assert ids == META["cases"][clip]["runs"][run]["prompt_ids"]
    assert ids[first] == PLACEHOLDER and ids[first - 1] != PLACEHOLDER
