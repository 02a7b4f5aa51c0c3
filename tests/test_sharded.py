"""Transformers checkpoints saved in shards (``model.safetensors.index.json`` + ``model-0000K-of-0000N.safetensors``)
load wherever omnid reads a transformers layout: Whisper's transformers folder, Qwen3-ASR's and the forced aligner's
original and -hf folders, Parakeet's transformers folder. The sharded folders under tests/goldens/sharded/ were
written by the libraries themselves (scripts/sharded_goldens.py: transformers' save_pretrained with a small
max_shard_size, for Qwen3-ASR's -hf folder). The others are split here, when the tests load, by huggingface_hub's own
shard split (the call save_pretrained makes) from the single-file checkpoints in tests/goldens/: Whisper's
transformers folder, Parakeet's, and the original Qwen3 layout, which no transformers class reads.
Each loads through the production loader with the tensors and
transcript of its single-file twin; a broken index or shard is refused naming the file and the tensor; pins still
hold."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from omnid.engine import kinds
from omnid.engine.errors import CheckpointError
from omnid.engine.options import TranscribeOptions
from omnid.engine.parakeet import checkpoint as parakeet
from omnid.engine.pins import sha256
from omnid.engine.qwen3 import checkpoint as qwen3
from omnid.engine.tensor_file import INDEX
from omnid.engine.whisper import checkpoint as whisper
from tests.helpers import ROOT, clip_audio
from tests.qwen_goldens import write_hf

GOLDENS = ROOT / "tests" / "goldens"
SHARDED = GOLDENS / "sharded"
CLIP = "ljspeech_LJ001-0002"  # 1.9 s


def sharded_copy(source: Path, dest: Path) -> Path:
    """``source``'s model.safetensors in shards of at most 200 KB, named and indexed as save_pretrained names and
    indexes them (huggingface_hub's split), its other files beside them."""
    from huggingface_hub.serialization import split_state_dict_into_shards_factory

    state = mx.load(str(source / "model.safetensors"))
    assert isinstance(state, dict)
    split = split_state_dict_into_shards_factory(state, get_storage_size=lambda a: a.nbytes,
                                                 filename_pattern="model{suffix}.safetensors", max_shard_size="200KB")
    dest.mkdir(parents=True)
    for filename, names in split.filename_to_tensors.items():
        mx.save_safetensors(str(dest / filename), {n: state[n] for n in names}, metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(a.nbytes for a in state.values())}, "weight_map": split.tensor_to_filename}
    (dest / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    for path in source.iterdir():
        if path.suffix != ".safetensors" and not path.name.startswith("goldens"):
            shutil.copy(path, dest / path.name)
    return dest


_SPLIT = Path(tempfile.mkdtemp(prefix="omnid-sharded-"))
atexit.register(shutil.rmtree, _SPLIT, True)


def _hf_single(tmp: Path) -> Path:
    return write_hf(tmp / "hf")  # the -hf layout in one model.safetensors, which the sharded folder was saved from


# name -> (single-file folder (from a temporary folder), sharded folder, loader, kind recognised)
CASES: dict[str, tuple[Callable[[Path], Path], Path, Callable[[Path], Any], str]] = {
    "whisper": (lambda _: SHARDED / "whisper", sharded_copy(SHARDED / "whisper", _SPLIT / "whisper_sharded"),
                whisper.load_checkpoint, "whisper"),
    "qwen3_asr": (lambda _: GOLDENS / "qwen3_asr_tiny", sharded_copy(GOLDENS / "qwen3_asr_tiny", _SPLIT / "qwen3_asr"),
                  qwen3.load_checkpoint, "qwen3_asr"),
    "qwen3_asr_hf": (_hf_single, SHARDED / "qwen3_asr_hf", qwen3.load_checkpoint, "qwen3_asr"),
    "qwen3_aligner": (lambda _: GOLDENS / "qwen3_aligner_tiny",
                      sharded_copy(GOLDENS / "qwen3_aligner_tiny", _SPLIT / "qwen3_aligner"), qwen3.load_checkpoint,
                      "qwen3_forced_aligner"),
    "parakeet": (lambda _: GOLDENS / "parakeet_tiny" / "hf_tdt",
                 sharded_copy(GOLDENS / "parakeet_tiny" / "hf_tdt", _SPLIT / "parakeet_tdt"), parakeet.load,
                 "parakeet"),
}


def shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("model-*-of-*.safetensors"))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, mx.array):
        return a.dtype == b.dtype and a.shape == b.shape and bool(mx.array_equal(a, b).item())
    return np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("case", CASES)
def test_a_sharded_folder_loads_the_tensors_of_its_single_file_twin(case: str, tmp_path: Path) -> None:
    single_of, folder, load, kind = CASES[case]
    assert len(shards(folder)) >= 2 and (folder / INDEX).is_file() and not (folder / "model.safetensors").exists()
    one, split = load(single_of(tmp_path)), load(folder)
    assert sorted(split.weights) == sorted(one.weights)
    for name, value in one.weights.items():
        assert same(split.weights[name], value), name
    # Every file the weights came from is among the files pins are checked against: the index and each shard.
    assert {folder / INDEX, *shards(folder)} <= set(split.files)
    found = kinds.recognise(folder)
    assert found is not None and found.name == kind


def test_the_layout_the_loader_tells_is_the_single_files() -> None:
    assert whisper.detect_format(CASES["whisper"][1]) == "transformers"
    assert qwen3.load_checkpoint(CASES["qwen3_asr"][1]).layout == "qwen"
    assert qwen3.load_checkpoint(SHARDED / "qwen3_asr_hf").layout == "hf"
    assert parakeet.load(CASES["parakeet"][1]).layout == "transformers"


def _whisper(folder: Path) -> Any:
    from omnid.engine.whisper.engine import WhisperEngine

    return WhisperEngine("w", folder)


def _qwen(folder: Path) -> Any:
    from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions

    return Qwen3AsrEngine("q", folder, options=QwenOptions(loop_window=0))


def _parakeet(folder: Path) -> Any:
    from omnid.engine.parakeet.engine import ParakeetEngine

    return ParakeetEngine("p", folder)


ENGINES = {"whisper": _whisper, "qwen3_asr": _qwen, "qwen3_asr_hf": _qwen, "parakeet": _parakeet}


@pytest.mark.parametrize("case", ENGINES)
def test_a_sharded_folder_transcribes_a_clip_as_its_single_file_twin(case: str, tmp_path: Path) -> None:
    single_of, folder, _, _ = CASES[case]
    audio = clip_audio(CLIP)
    opts = TranscribeOptions(fallback=False, max_new_tokens=40)
    want = ENGINES[case](single_of(tmp_path)).transcribe(audio, opts)
    got = ENGINES[case](folder).transcribe(audio, opts)
    assert got.text == want.text
    assert [(s.start, s.end, s.text) for s in got.segments] == [(s.start, s.end, s.text) for s in want.segments]


# --- broken indexes and shards: refused at load, naming the file (and the tensor) --------------------------------

LOADERS = {"whisper": "whisper_sharded", "qwen3_asr": "qwen3_asr", "qwen3_asr_hf": "qwen3_asr_hf",
           "parakeet": "parakeet_tdt"}


def broken_copy(case: str, tmp_path: Path) -> tuple[Path, Callable[[Path], Any]]:
    _, folder, load, _ = CASES[case]
    dest = tmp_path / folder.name
    shutil.copytree(folder, dest)
    return dest, load


@pytest.mark.parametrize("case", LOADERS)
def test_an_index_naming_a_missing_shard_is_refused_naming_the_index_and_the_shard(case: str,
                                                                                     tmp_path: Path) -> None:
    folder, load = broken_copy(case, tmp_path)
    gone = shards(folder)[-1]
    gone.unlink()
    index = json.loads((folder / INDEX).read_text())["weight_map"]
    first = next(name for name, shard in index.items() if shard == gone.name)
    with pytest.raises(CheckpointError) as err:
        load(folder)
    assert str(err.value) == f"{folder / INDEX}: shard {gone.name} (tensor {first}) is missing"


@pytest.mark.parametrize("case", LOADERS)
def test_a_shard_missing_a_tensor_its_index_maps_to_it_is_refused_naming_both(case: str, tmp_path: Path) -> None:
    folder, load = broken_copy(case, tmp_path)
    shard = shards(folder)[0]
    tensors = mx.load(str(shard))
    assert isinstance(tensors, dict)
    dropped = sorted(tensors)[-1]
    del tensors[dropped]
    mx.save_safetensors(str(shard), tensors)
    with pytest.raises(CheckpointError) as err:
        load(folder)
    assert str(err.value) == f"{shard}: missing tensor {dropped}, which {INDEX} maps to this shard"


@pytest.mark.parametrize("case", LOADERS)
def test_an_index_that_is_not_json_is_refused_naming_it(case: str, tmp_path: Path) -> None:
    folder, load = broken_copy(case, tmp_path)
    (folder / INDEX).write_text('{"weight_map": {')
    with pytest.raises(CheckpointError, match=rf"^{folder / INDEX}: not valid JSON"):
        load(folder)


@pytest.mark.parametrize("weight_map", [None, {}, [], {"a.weight": "../elsewhere.safetensors"},
                                        {"a.weight": 3}])
def test_an_index_without_a_weight_map_of_shard_files_is_refused(weight_map: Any, tmp_path: Path) -> None:
    folder, load = broken_copy("whisper", tmp_path)
    (folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(CheckpointError, match=rf"^{folder / INDEX}: weight_map"):
        load(folder)


def test_only_the_tensors_the_index_maps_are_read_from_its_shards(tmp_path: Path) -> None:
    """A stray .safetensors file beside the index is not read (Qwen3-ASR and Parakeet read every file of a folder
    without an index)."""
    folder, load = broken_copy("qwen3_asr", tmp_path)
    mx.save_safetensors(str(folder / "stray.safetensors"), {"thinker.stray": mx.zeros((2,))})
    assert "thinker.stray" not in str(sorted(load(folder).weights))
    assert folder / "stray.safetensors" not in load(folder).files


# --- pins ---------------------------------------------------------------------------------------------------------


def test_a_pinned_shard_whose_bytes_changed_fails_and_unpinned_shards_load(tmp_path: Path) -> None:
    from omnid.engine.whisper.engine import WhisperEngine

    folder, _ = broken_copy("whisper", tmp_path)
    shard = shards(folder)[0]
    engine = WhisperEngine("w", folder)  # unpinned: loads, every file reported so
    assert engine.pin_report[INDEX] == "unpinned" and engine.pin_report[shard.name] == "unpinned"
    pins = {INDEX: sha256(folder / INDEX), shard.name: sha256(shard)}
    assert WhisperEngine("w", folder, pins).pin_report[shard.name] == "ok"
    tensors = mx.load(str(shard))
    assert isinstance(tensors, dict)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1
    mx.save_safetensors(str(shard), tensors)
    with pytest.raises(CheckpointError, match=rf"^{shard}: SHA-256 \w+ does not match its pin"):
        WhisperEngine("w", folder, pins)


@pytest.mark.parametrize("case", ["qwen3_asr", "parakeet"])
def test_other_kinds_check_a_sharded_folders_pins(case: str, tmp_path: Path) -> None:
    folder, _ = broken_copy(case, tmp_path)
    pins = {INDEX: "0" * 64}
    if case == "parakeet":
        with pytest.raises(CheckpointError, match=rf"^{folder / INDEX}: SHA-256"):
            parakeet.load(folder, pins)
    else:
        from omnid.engine.qwen3.network import load_network

        with pytest.raises(CheckpointError, match=rf"^{folder / INDEX}: SHA-256"):
            load_network(folder, pins)
