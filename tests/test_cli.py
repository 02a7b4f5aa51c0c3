"""The omnid command as a user runs it: a fresh process, real weights, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import manifest, reference

ROOT = Path(__file__).resolve().parents[1]


def omnid(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omnid", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_transcribe_prints_text_and_writes_subtitles(corpus, tmp_path):
    a, b = "ljspeech_LJ001-0002", "mfa_common_voice_en_22058264"
    files = [str(corpus / manifest()[c]["path"]) for c in (a, b)]
    out = omnid("transcribe", *files)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [reference()[a].strip(), reference()[b].strip()]
    for fmt, ext in (("srt", "srt"), ("vtt", "vtt"), ("verbose_json", "json")):
        done = omnid("transcribe", files[0], "-f", fmt, "-o", str(tmp_path))
        assert done.returncode == 0, done.stderr
        body = (tmp_path / f"ljspeech_LJ001-0002.{ext}").read_text()
        if fmt == "srt":
            assert body.startswith("1\n00:00:00,000 --> 00:00:0") and "comparatively modern" in body
        elif fmt == "vtt":
            assert body.startswith("WEBVTT\n\n00:00:00.000 --> ")
        else:
            data = json.loads(body)
            assert data["language"] == "english" and data["segments"][0]["start"] == 0.0
            assert data["text"] == reference()[a].strip()


def test_bad_inputs_fail_clearly(tmp_path):
    junk = tmp_path / "notes.wav"
    junk.write_text("not audio")
    out = omnid("transcribe", str(junk))
    assert out.returncode == 1 and "not a recognised audio format" in out.stderr
    # A language the model does not know is detected, as on the HTTP route, and said so (then the file fails).
    out = omnid("transcribe", str(junk), "--language", "klingon")
    assert out.returncode == 1 and "--language: model tiny.en does not transcribe 'klingon'; the language is detected" in out.stderr
    out = omnid("transcribe", str(junk), "--language", "de")
    assert out.returncode == 1 and "does not transcribe 'de'" in out.stderr
    out = omnid("transcribe", str(junk), "--temperature", "-1")
    assert out.returncode == 2 and "--temperature" in out.stderr
    # Files that do not exist are told before any model is loaded: here the model's folder is missing too, and the
    # only line is the file's.
    nowhere = tmp_path / "nowhere"
    out = omnid("transcribe", str(tmp_path / "gone.wav"), str(tmp_path), "--model", str(nowhere))
    assert out.returncode == 1 and out.stdout == "", out.stderr
    assert out.stderr.splitlines() == [f"omnid: {tmp_path / 'gone.wav'}: no such file: {tmp_path / 'gone.wav'}",
                                       f"omnid: {tmp_path}: is a folder, not an audio file"], out.stderr
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text("[engine]\nmax_queue = 0\n")
    out = omnid("transcribe", str(junk), "--config", str(bad_config))
    assert out.returncode == 2 and "engine.max_queue" in out.stderr


def test_eval_checks_the_committed_golden_on_a_subset(corpus):
    out = omnid("eval", "--manifest", str(corpus / "manifest.jsonl"), "--limit", "6",
                "--check", str(ROOT / "tests" / "goldens" / "whisper-tiny.en.cpu.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "golden check passed: 6 clips unchanged" in out.stdout
    assert "identical to faster-whisper-tiny.en" in out.stdout


def test_doctor_reports_blas_and_pins():
    out = omnid("doctor")
    assert out.returncode == 0, out.stdout
    assert "blas" in out.stdout and "pin        model.bin: ok" in out.stdout
    assert "config       " in out.stdout and "omnid.toml" in out.stdout
    try:
        import sounddevice  # noqa: F401

        usable = True
    except OSError:
        usable = False
    assert ("portaudio    usable" if usable else "portaudio    not usable") in out.stdout
