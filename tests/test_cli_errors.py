"""Errors as a user reads them (issue 44 part 5): every ``omnid`` command that takes a model or a configuration,
run as a user runs it (a fresh ``python -m omnid``), on a broken checkpoint or configuration file, prints one line,
``omnid: <message>``, naming the file (and the tensor or key), and exits as omnid/cli/failures.py documents (1: a
checkpoint that cannot load; 2: bad configuration or usage); never a traceback, unless OMNID_LOG_LEVEL=debug.

The checkpoints are tiny, built here: a random Whisper folder (tests/helpers.py), copies of the golden Qwen3-ASR
folder and of the golden .nemo files, each broken one way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from omnid.cli.failures import one_line
from omnid.engine.errors import CheckpointError
from omnid.engine.whisper.model import ModelDims
from omnid.runtime.models import named
from tests.helpers import ROOT, clip_path, nemo_with, random_weights, write_mlx

GOLDENS = ROOT / "tests" / "goldens"
DIMS = ModelDims(n_mels=80, n_audio_ctx=24, n_audio_state=32, n_audio_head=4, n_audio_layer=2, n_vocab=51864,
                 n_text_ctx=64, n_text_state=32, n_text_head=4, n_text_layer=2)
AUDIO = str(clip_path("ljspeech_LJ001-0002"))


def omnid(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # OMNID_LOG_LEVEL=warning: the daemon's info lines (it binds before it loads) are not what is asserted on.
    environ = {**os.environ, "OMNID_LOG_LEVEL": "warning", **(env or {})}
    return subprocess.run([sys.executable, "-m", "omnid", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=environ, stdin=subprocess.DEVNULL)


@dataclass(frozen=True)
class Broken:
    """A broken checkpoint: where it is, the kind a configuration gives it, what its error must name, and the exit
    code of ``--model PATH`` (a path no kind recognises, or that does not exist, is a usage error there)."""

    path: Path
    kind: str
    names: tuple[str, ...]
    model_flag_code: int = 1


def whisper(folder: Path, weights: dict | None = None) -> Path:
    return write_mlx(folder, DIMS, weights if weights is not None else random_weights(DIMS))


def build_checkpoints(root: Path) -> dict[str, Broken]:
    out: dict[str, Broken] = {}
    weights = random_weights(DIMS)

    folder = whisper(root / "not_json")
    (folder / "config.json").write_text("{not json")
    out["config.json is not JSON"] = Broken(folder, "whisper", (f"{folder / 'config.json'}: not valid JSON",))

    folder = whisper(root / "truncated")
    data = (folder / "weights.safetensors").read_bytes()
    (folder / "weights.safetensors").write_bytes(data[: len(data) // 2])
    out["truncated weights"] = Broken(folder, "whisper", (f"{folder / 'weights.safetensors'}: corrupt or unreadable",))

    folder = whisper(root / "shape", {**weights, "decoder.ln.weight": weights["decoder.ln.weight"][:5]})
    out["wrong-shaped tensor"] = Broken(folder, "whisper", (f"{folder / 'weights.safetensors'}: tensor decoder.ln.weight "
                                                            "has shape (5,), expected (32,)",))

    folder = whisper(root / "missing", {k: v for k, v in weights.items() if k != "decoder.ln.bias"})
    out["missing tensor"] = Broken(folder, "whisper", (f"{folder / 'weights.safetensors'}: missing tensor decoder.ln.bias",))

    folder = whisper(root / "unreadable_config")
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()  # unreadable as a file, whoever runs the test (root reads any mode)
    out["unreadable config.json"] = Broken(folder, "whisper", (f"{folder / 'config.json'}: cannot read: Is a directory",))

    folder = root / "qwen_truncated"
    shutil.copytree(GOLDENS / "qwen3_asr_tiny", folder)
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
    out["truncated Qwen3-ASR weights"] = Broken(folder, "qwen3_asr", (f"{folder / 'model.safetensors'}: corrupt",))

    junk = root / "junk.nemo"
    junk.write_bytes(b"this is no archive")
    out[".nemo that is no archive"] = Broken(junk, "parakeet", (str(junk),), model_flag_code=2)

    (root / "zip").mkdir()
    not_zip = nemo_with(GOLDENS / "parakeet_tiny" / "tdt.nemo", root / "zip", state_edit=lambda _: b"not a zip")
    out[".nemo whose weights are no zip"] = Broken(not_zip, "parakeet", (f"{not_zip}:model_weights.ckpt: corrupt",))

    nowhere = root / "nowhere"
    out["checkpoint path that does not exist"] = Broken(nowhere, "whisper", (f"{nowhere}: no such folder",),
                                                        model_flag_code=2)
    return out


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Broken]:
    return build_checkpoints(tmp_path_factory.mktemp("broken"))


def configured(broken: Broken, folder: Path) -> Path:
    """A configuration serving the broken checkpoint as its default model."""
    path = folder / f"{broken.path.name}.toml"
    path.write_text(f'[transcription]\ndefault_model = "m"\n\n[[models]]\nid = "m"\nkind = "{broken.kind}"\n'
                    f"path = {json.dumps(str(broken.path))}\n")
    return path


def assert_one_line(done: subprocess.CompletedProcess, code: int, *names: str) -> str:
    """Exit ``code``, and stderr exactly one ``omnid:`` line holding each of ``names``, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("omnid: "), done.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert done.returncode == code, (done.returncode, done.stderr)
    return lines[0]


CHECKPOINT_CASES = ["config.json is not JSON", "truncated weights", "wrong-shaped tensor", "missing tensor",
                    "unreadable config.json", "truncated Qwen3-ASR weights", ".nemo that is no archive",
                    ".nemo whose weights are no zip", "checkpoint path that does not exist"]


def each_case_and_each_command(commands: list[str], cases: list[str], full: str) -> list[tuple[str, str]]:
    """Every case through ``full`` and every other command through one case, the cases dealt round robin: the error
    is made by the loader (or the config reader) and written by the one failures.report every command ends in, so
    each command is shown to reach it and each case to be told, in a fraction of the subprocesses."""
    others = [c for c in commands if c != full]
    return [(full, case) for case in cases] + [(c, cases[i % len(cases)]) for i, c in enumerate(others)]


@pytest.mark.parametrize(("command", "case"),
                         each_case_and_each_command(["transcribe", "eval"], CHECKPOINT_CASES, "transcribe")
                         + [("eval", CHECKPOINT_CASES[-1])])
def test_model_flag_on_a_broken_checkpoint_is_one_line(command, case, checkpoints):
    broken = checkpoints[case]
    args = [AUDIO, "-q"] if command == "transcribe" else ["--manifest", "tests/corpus", "--limit", "1"]
    done = omnid(command, "--model", str(broken.path), *args)
    assert_one_line(done, broken.model_flag_code, *(broken.names if broken.model_flag_code == 1 else (str(broken.path),)))
    assert done.stdout == ""


@pytest.mark.parametrize(("command", "case"),
                         each_case_and_each_command(["transcribe", "eval", "serve"], CHECKPOINT_CASES[::-1], "serve"))
def test_a_configured_broken_checkpoint_is_one_line(command, case, checkpoints, tmp_path):
    """The same checkpoint as the configuration's default model: the command that loads it fails with its line."""
    broken = checkpoints[case]
    config = configured(broken, tmp_path)
    args = {"transcribe": [AUDIO, "-q"], "eval": ["--manifest", "tests/corpus", "--limit", "1"],
            "serve": ["--port", "0"]}[command]
    done = omnid(command, "--config", str(config), *args)
    assert_one_line(done, 1, *broken.names)


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_supervised_failed_line_names_the_file(case, checkpoints, tmp_path):
    """Under Voxt: the one failed line on stdout holds the same one-line reason; exit 1, no traceback."""
    broken = checkpoints[case]
    done = omnid("serve", "--supervised", "--port", "0", "--config", str(configured(broken, tmp_path)))
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr
    (line,) = done.stdout.splitlines()
    event = json.loads(line)
    assert event["event"] == "failed" and "\n" not in event["reason"], event
    for name in broken.names:
        assert name in event["reason"], (name, event)


def test_diarize_on_broken_sortformer_checkpoints(tmp_path):
    junk = tmp_path / "junk.nemo"
    junk.write_bytes(b"this is no archive")
    truncated = tmp_path / "truncated.nemo"
    truncated.write_bytes((GOLDENS / "sortformer_tiny" / "tiny.nemo").read_bytes()[:200_000])
    not_zip = nemo_with(GOLDENS / "sortformer_tiny" / "tiny.nemo", tmp_path, state_edit=lambda _: b"not a zip")
    for path, code, says in ((junk, 1, f"{junk}: not a .nemo checkpoint (a tar archive, as NeMo writes one)"),
                             (truncated, 1, f"{truncated}: cannot read"),
                             (not_zip, 1, f"{not_zip}:model_weights.ckpt: corrupt"),
                             (tmp_path / "nowhere.nemo", 2, f"{tmp_path / 'nowhere.nemo'}")):
        assert_one_line(omnid("diarize", AUDIO, "--model", str(path)), code, says)


def bad_configs(folder: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Configuration files broken one way each, and what the error must name."""
    unknown = folder / "unknown_key.toml"
    unknown.write_text("[server]\nprot = 8001\n")
    typed = folder / "wrong_type.toml"
    typed.write_text('[engine]\nmax_batch = "four"\n')
    not_toml = folder / "not_toml.toml"
    not_toml.write_text("[server\nport = 1\n")
    a_folder = folder / "folder.toml"
    a_folder.mkdir()
    nowhere = folder / "nowhere.toml"
    return {"unknown key": (unknown, (f"{unknown}: server.prot: unknown key",)),
            "wrong type": (typed, (f"{typed}: engine.max_batch: Expected `int`",)),
            "not TOML": (not_toml, (f"{not_toml}: not valid TOML",)),
            "unreadable": (a_folder, (f"{a_folder}: cannot read",)),
            "missing": (nowhere, (f"--config: no such file: {nowhere}",))}


CONFIG_COMMANDS = {
    "transcribe": ["transcribe", AUDIO],
    "eval": ["eval", "--manifest", "tests/corpus", "--limit", "1"],
    "serve": ["serve", "--port", "0"],
    "serve --supervised": ["serve", "--supervised", "--port", "0"],
    "listen": ["listen", "--file", AUDIO],
    "diarize": ["diarize", AUDIO],
    "doctor": ["doctor"],
    "service": ["service", "print"],
}


@pytest.mark.parametrize(("command", "case"), each_case_and_each_command(
    list(CONFIG_COMMANDS), ["unknown key", "wrong type", "not TOML", "unreadable", "missing"], "serve --supervised"))
def test_a_broken_config_file_is_one_line_naming_file_and_key(command, case, tmp_path):
    path, names = bad_configs(tmp_path)[case]
    done = omnid(*CONFIG_COMMANDS[command], "--config", str(path))
    assert_one_line(done, 2, *names)
    assert done.stdout == ""  # supervised too: a bad option is no failed line (wire.md section 2)


def test_unreadable_weights_name_the_file(tmp_path):
    """A weights file that cannot be read (here a folder in its place: the tests run as root, which reads a file
    whatever its mode) is one line naming it."""
    folder = whisper(tmp_path / "locked")
    (folder / "weights.safetensors").unlink()
    (folder / "weights.safetensors").mkdir()
    assert_one_line(omnid("transcribe", "--model", str(folder), AUDIO), 1, f"{folder / 'weights.safetensors'}")


def test_debug_log_level_shows_the_traceback_too(checkpoints, tmp_path):
    broken = checkpoints["missing tensor"]
    done = omnid("transcribe", "--model", str(broken.path), AUDIO, env={"OMNID_LOG_LEVEL": "debug"})
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr and "CheckpointError" in done.stderr
    assert done.stderr.splitlines()[-1] == f"omnid: {broken.names[0]}"
    served = omnid("serve", "--port", "0", "--config", str(configured(broken, tmp_path)), env={"OMNID_LOG_LEVEL": "debug"})
    assert served.returncode == 1 and "Traceback (most recent call last)" in served.stderr
    assert served.stderr.splitlines()[-1] == f"omnid: {broken.names[0]}"


def test_what_a_library_raises_at_load_names_the_checkpoint():
    """A load failing in a way no loader check foresaw (a library's own exception) still names the checkpoint, its
    type and message; the original is kept as the cause (the debug traceback shows it)."""

    def broken():
        raise KeyError("encoder.layers.0.weight")

    with pytest.raises(CheckpointError, match=r"^/models/x: cannot load: KeyError: 'encoder.layers.0.weight'$") as info:
        named(Path("/models/x"), broken)()
    assert isinstance(info.value.__cause__, KeyError)


def test_one_line_reads_an_os_error_as_file_and_reason():
    assert one_line(PermissionError(13, "Permission denied", "/m/weights.npz")) == "/m/weights.npz: Permission denied"
    assert one_line(CheckpointError("/m.nemo: cannot read:\n- method gz: no\n- method tar: no")) == \
        "/m.nemo: cannot read:; - method gz: no; - method tar: no"


def test_a_checkpoint_folder_that_does_not_exist_is_told_from_a_file(tmp_path):
    from omnid.engine.qwen3 import checkpoint as qwen
    from omnid.engine.whisper import checkpoint as whisper_checkpoint

    a_file = tmp_path / "notes.txt"
    a_file.write_text("no checkpoint")
    for load in (whisper_checkpoint.load_checkpoint, qwen.load_checkpoint):
        with pytest.raises(CheckpointError, match=f"^{tmp_path / 'nowhere'}: no such folder$"):
            load(tmp_path / "nowhere")
        with pytest.raises(CheckpointError, match=f"^{a_file}: not a folder$"):
            load(a_file)
