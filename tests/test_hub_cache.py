"""Checkpoints named by Hugging Face repo id, found offline in a local Hugging Face cache (omnid/engine/hub.py).

The cache is built in tmp_path as huggingface_hub writes it (tests/hf_cache.py). ``org/parakeet-tiny`` has two
revisions with different tiny Parakeet checkpoints of tests/goldens/ (the older TDT, main RNN-T, whose texts NeMo
recorded), so which one served is told by the transcript. Every command runs as a subprocess with HF_HUB_CACHE
pointing there (huggingface_hub reads it when imported), as a user runs it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omnid.audio import wav_bytes
from omnid.engine import kinds
from tests.helpers import get, health_once_loaded, post_transcription, ready_line
from tests.hf_cache import NEW, OLD, ROOT, omnid, put_snapshot
from tests.test_parakeet import GOLDENS, audio, meta

QWEN_TINY = GOLDENS.parent / "qwen3_asr_tiny"
ALIGNER_TINY = GOLDENS.parent / "qwen3_aligner_tiny"
SORTFORMER_TINY = GOLDENS.parent / "sortformer_tiny" / "tiny.nemo"
NEMO = "parakeet-tiny.nemo"


def safetensors(dtype: str, size: int) -> bytes:
    header = json.dumps({"w": {"dtype": dtype, "shape": [1], "data_offsets": [0, size]}}).encode()
    return len(header).to_bytes(8, "little") + header + bytes(size)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("hf") / "hub"
    put_snapshot(cache, "org/parakeet-tiny", OLD, {NEMO: (GOLDENS / "tdt.nemo").read_bytes()}, main=False)
    put_snapshot(cache, "org/parakeet-tiny", NEW, {NEMO: (GOLDENS / "rnnt.nemo").read_bytes(),
                                                   "README.md": b"# a tiny RNN-T\n"})
    put_snapshot(cache, "org/qwen3-asr-tiny", NEW, {p.name: p.read_bytes() for p in sorted(QWEN_TINY.iterdir())
                                                    if not p.name.startswith("goldens")})
    put_snapshot(cache, "org/aligner-tiny", NEW, {p.name: p.read_bytes() for p in sorted(ALIGNER_TINY.iterdir())
                                                  if not p.name.startswith("goldens")})
    put_snapshot(cache, "org/sortformer-tiny", NEW, {"sortformer-tiny.nemo": SORTFORMER_TINY.read_bytes()})
    # mlx-community Whisper folders, told by their files alone (no weights are read): bits from the quantization
    # block of config.json, else the dtype of the safetensors header's tensors.
    quantized = {"n_vocab": 51864, "quantization": {"group_size": 64, "bits": 4}}
    put_snapshot(cache, "org/whisper-4bit", NEW, {"config.json": json.dumps(quantized).encode(),
                                                  "weights.safetensors": safetensors("U32", 4)})
    put_snapshot(cache, "org/whisper-f16", NEW, {"config.json": b'{"n_vocab": 51864}',
                                                 "weights.safetensors": safetensors("F16", 2)})
    put_snapshot(cache, "org/notes", NEW, {"README.md": b"# no model here\n", "data/notes.txt": b"words\n"})
    # A download cut short: the weights' blob is gone (a broken link) ...
    broken = put_snapshot(cache, "org/broken", NEW, {NEMO: (GOLDENS / "tdt.nemo").read_bytes()})
    (broken / NEMO).resolve().unlink()
    # ... and one whose tree listing names a file the snapshot never got.
    half = put_snapshot(cache, "org/half", NEW, {NEMO: (GOLDENS / "tdt.nemo").read_bytes(),
                                                 "config.json": b"{}"})
    (half / "config.json").unlink()
    return cache


@pytest.fixture(scope="module")
def wav(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "clip.wav"
    path.write_bytes(wav_bytes(audio("librispeech")))
    return path


def text(kind: str) -> str:
    return meta()["models"][kind]["librispeech"]["text"] + "\n"


def test_the_texts_of_the_two_revisions_differ():
    assert text("tdt") != text("rnnt") != text("hybrid") != text("tdt")  # else the tests below could not tell


def test_a_repo_id_serves_its_main_snapshot(cache, wav):
    out = omnid(cache, "transcribe", "--model", "org/parakeet-tiny", str(wav))
    assert out.returncode == 0, out.stderr
    assert out.stdout == text("rnnt")


def test_a_configured_repo_id_at_a_revision_serves_that_snapshot(cache, wav, tmp_path):
    config = tmp_path / "omnid.toml"
    config.write_text(f'[[models]]\nid = "p"\nkind = "parakeet"\npath = "org/parakeet-tiny"\nrevision = "{OLD}"\n'
                      '[[models]]\nid = "q"\nkind = "parakeet"\npath = "org/parakeet-tiny"\n')
    old = omnid(cache, "transcribe", "--config", str(config), "--model", "p", str(wav))
    assert old.returncode == 0, old.stderr
    assert old.stdout == text("tdt")
    main = omnid(cache, "transcribe", "--config", str(config), "--model", "q", str(wav))
    assert main.returncode == 0, main.stderr
    assert main.stdout == text("rnnt")
    doctor = omnid(cache, "doctor", "--config", str(config))
    snapshots = cache.resolve() / "models--org--parakeet-tiny" / "snapshots"
    assert f"model        p (parakeet, nemo) at {snapshots / OLD}\n" in doctor.stdout, doctor.stdout
    assert f"model        q (parakeet, nemo) at {snapshots / NEW}\n" in doctor.stdout, doctor.stdout


def test_a_path_on_disk_wins_over_the_repo_id_it_spells(cache, wav, tmp_path):
    (tmp_path / "org" / "parakeet-tiny").mkdir(parents=True)
    (tmp_path / "org" / "parakeet-tiny" / NEMO).symlink_to(GOLDENS / "hybrid.nemo")
    config = tmp_path / "omnid.toml"
    config.write_text('[[models]]\nid = "p"\nkind = "parakeet"\npath = "org/parakeet-tiny"\n')
    out = omnid(cache, "transcribe", "--config", str(config), "--model", "p", str(wav))  # relative to the file
    assert out.returncode == 0, out.stderr
    assert out.stdout == text("hybrid")
    on_disk = omnid(cache, "transcribe", "--model", "org/parakeet-tiny", str(wav), cwd=tmp_path)  # to the cwd
    assert on_disk.returncode == 0, on_disk.stderr
    assert on_disk.stdout == text("hybrid")


def test_models_lists_what_the_cache_holds_by_kind_and_why_not(cache):
    out = omnid(cache, "models")
    assert out.returncode == 0, out.stderr
    lines = {line.split("  ", 1)[0]: line for line in out.stdout.splitlines() if not line.startswith("#")}
    assert set(lines) == {"org/parakeet-tiny", "org/qwen3-asr-tiny", "org/aligner-tiny", "org/sortformer-tiny",
                          "org/whisper-4bit", "org/whisper-f16", "org/notes", "org/broken", "org/half"}, out.stdout
    parakeet = lines["org/parakeet-tiny"].split("  ")
    assert parakeet[1:4] == ["parakeet", "nemo", "?"], parakeet  # main's snapshot; a .nemo's dtype is not cheap
    assert parakeet[4].endswith("MB"), parakeet
    assert lines["org/qwen3-asr-tiny"].split("  ")[1:4] == ["qwen3_asr", "folder", "float32"], out.stdout
    assert lines["org/aligner-tiny"].split("  ")[1:4] == ["qwen3_forced_aligner", "folder", "float32"], out.stdout
    for repo, precision in (("org/whisper-4bit", "4-bit"), ("org/whisper-f16", "float16")):
        kind, layout, bits = lines[repo].split("  ")[1:4]
        # The layout names the form first ("mlx"), then what doctor adds to it (a quantized folder's bits and group).
        assert (kind, layout.split(",")[0].split()[0], bits) == ("whisper", "mlx", precision), out.stdout
    assert lines["org/sortformer-tiny"].split("  ")[1:4] == ["sortformer", "nemo", "?"], out.stdout
    every = kinds.spoken([k.title for k in kinds.KINDS if k.recognises is not None])  # a new kind joins by itself
    assert every.startswith("Whisper, Qwen3-ASR") and "Sortformer" in every and "Qwen3-ForcedAligner" in every
    assert lines["org/notes"].startswith(f"org/notes  cannot serve: its files are no {every} checkpoint (README.md, "
                                         "data)"), out.stdout
    assert f"{cache.resolve()}/models--org--broken/snapshots/{NEW}/{NEMO}: " in lines["org/broken"], out.stdout
    assert f"{cache.resolve()}/models--org--half/snapshots/{NEW}/config.json: " in lines["org/half"], out.stdout
    assert str(cache.resolve()) in out.stdout.splitlines()[0]


def test_models_without_a_cache_says_so(tmp_path):
    out = omnid(tmp_path / "nowhere", "models")
    assert out.returncode == 1 and out.stderr == f"omnid: no Hugging Face cache at {tmp_path / 'nowhere'} (set " \
                                                 "HF_HUB_CACHE or HF_HOME)\n", out.stderr


def test_a_repo_missing_from_the_cache_is_one_line_naming_it_and_the_cache(cache, wav, tmp_path):
    out = omnid(cache, "transcribe", "--model", "org/absent", str(wav))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"omnid: --model: org/absent: not in the Hugging Face cache {cache.resolve()} "), \
        out.stderr
    config = tmp_path / "omnid.toml"
    config.write_text('[[models]]\nid = "p"\nkind = "parakeet"\npath = "org/parakeet-tiny"\nrevision = "v9"\n')
    out = omnid(cache, "transcribe", "--config", str(config), "--model", "p", str(wav))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("omnid: models[p]: path 'org/parakeet-tiny' names no file or folder, and "
                                 "org/parakeet-tiny: revision 'v9' is not in the Hugging Face cache "
                                 f"{cache.resolve()} "), out.stderr
    diarize = omnid(cache, "diarize", "--model", "org/absent", str(wav))
    assert diarize.returncode == 2 and "org/absent: not in the Hugging Face cache" in diarize.stderr, diarize.stderr


@pytest.mark.parametrize(("repo", "file", "why"), [
    ("org/broken", NEMO, "is missing (a broken link)"),
    ("org/half", "config.json", "it was never downloaded"),
])
def test_an_incomplete_snapshot_is_an_error_naming_its_file(cache, wav, repo, file, why):
    out = omnid(cache, "transcribe", "--model", repo, str(wav))
    path = cache.resolve() / ("models--" + repo.replace("/", "--")) / "snapshots" / NEW / file
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"omnid: --model: {path}: {repo}'s cached snapshot {NEW} is incomplete: "), \
        out.stderr
    assert why in out.stderr, out.stderr


def test_a_cached_checkpoint_of_another_role_is_named_not_transcribed(cache, wav):
    out = omnid(cache, "transcribe", "--model", "org/aligner-tiny", str(wav))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.endswith(f"/models--org--aligner-tiny/snapshots/{NEW} holds a Qwen3-ForcedAligner checkpoint, "
                               "which does not transcribe\n"), out.stderr


def test_the_daemon_serves_a_repo_id_and_lists_only_its_configured_models(cache, wav, tmp_path):
    """The real daemon, HF_HUB_CACHE set: the configured repo id at its revision answers a request with that
    snapshot's transcript, and /v1/models lists the configured models, not the cache's other checkpoints."""
    config = tmp_path / "omnid.toml"
    config.write_text(f'[[models]]\nid = "p"\nkind = "parakeet"\npath = "org/parakeet-tiny"\nrevision = "{OLD}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    proc = subprocess.Popen([sys.executable, "-m", "omnid", "serve", "--supervised", "--port", "0", "--config",
                             str(config)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env | {"HF_HUB_CACHE": str(cache)})
    try:
        ready = ready_line(proc)
        assert ready["event"] == "ready", ready
        url = f"http://127.0.0.1:{ready['port']}"
        health_once_loaded(url)
        status, models = get(url + "/v1/models")
        assert status == 200 and [m["id"] for m in models["data"]] == ["p", "silero-vad"], models
        status, body = asyncio.run(post_transcription(url, wav.read_bytes(), model="p", vad_filter="false"))
        assert status == 200 and body["text"] + "\n" == text("tdt"), body
        proc.stdin.write('{"command": "shutdown"}\n')
        proc.stdin.flush()
        proc.communicate(timeout=30)
    finally:
        proc.kill()
