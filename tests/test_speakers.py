"""Speakers on a transcript: the assignment rule on hand-made probability tracks, where the answer is known, and
diarized_json / diarize=true served with the golden tiny Sortformer beside tiny.en."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from omnid.engine.sortformer.engine import PRESETS
from omnid.engine.transcript import Segment, Transcript, Word
from omnid.formats import render
from omnid.runtime.speakers import assign, span_speaker


def track(*runs: tuple[int, int, int], frames: int = 100, p: float = 0.9) -> np.ndarray:
    """Probabilities (frames, 4): speaker k at p over frames [a, b) for each (k, a, b), 0.05 elsewhere."""
    out = np.full((frames, 4), 0.05, np.float32)
    for k, a, b in runs:
        out[a:b, k] = p
    return out


def seg(i: int, start: float, end: float, text: str, words=None) -> Segment:
    return Segment(i, 0, start, end, text, [], 0.0, 0.0, 1.0, 0.0, words)


def w(text: str, start: float, end: float) -> Word:
    return Word(text, start, end, 0.9)


def test_each_word_takes_the_speaker_with_the_most_probability_over_its_frames():
    probs = track((2, 0, 25), (0, 25, 50))  # speaker slot 2 for 0-2 s, slot 0 for 2-4 s
    words = [w(" Hello", 0.1, 0.6), w(" there.", 0.7, 1.9), w(" Hi", 2.05, 2.4), w(" back.", 2.5, 3.9)]
    t = Transcript(" Hello there. Hi back.", [seg(0, 0.0, 4.0, " Hello there. Hi back.", words)], "en", 4.0, 10, "stop")
    sp = assign(t, probs)
    # Labels in order of first appearance, whatever the slot numbers: slot 2 is "A".
    assert [(x.start, x.end, x.text, x.speaker) for x in sp.turns] == [(0.1, 1.9, "Hello there.", "A"),
                                                                       (2.05, 3.9, "Hi back.", "B")]
    assert sp.words == [["A", "A", "B", "B"]] and sp.segments == ["A"]


def test_a_word_straddling_a_change_goes_to_the_larger_sum_and_silent_words_join_their_neighbour():
    probs = track((1, 0, 20), (3, 20, 60))
    assert span_speaker(probs, 1.36, 1.76, 0.5) == 1  # frames 17-21: 3 of slot 1, 2 of slot 3
    assert span_speaker(probs, 1.44, 1.84, 0.5) == 3  # frames 18-22: 2 of slot 1, 3 of slot 3
    assert span_speaker(probs, 9.0, 9.5, 0.5) is None  # past the track
    probs[60:] = 0.1  # nobody above the threshold after 4.8 s
    words = [w(" one", 0.2, 0.9), w(" two", 2.0, 2.5), w(" three", 5.0, 5.5)]
    t = Transcript("", [seg(0, 0.0, 6.0, " one two three", words)], "en", 8.0, 3, "stop")
    assert assign(t, probs).words == [["A", "B", "B"]]
    lead = [w(" um", 5.0, 5.5), w(" yes", 2.0, 2.5)]  # a leading unassigned word takes the next one's speaker
    t2 = Transcript("", [seg(0, 0.0, 6.0, " um yes", lead)], "en", 8.0, 2, "stop")
    assert assign(t2, probs).words == [["A", "A"]]


def test_without_word_times_each_segment_takes_one_speaker():
    probs = track((0, 0, 50), (1, 50, 100))
    t = Transcript("a b", [seg(0, 0.0, 3.9, " a"), seg(1, 4.0, 7.9, " b"), seg(2, 7.9, 8.0, "")], "zh", 8.0, 2, "stop")
    sp = assign(t, probs)
    assert sp.words is None and sp.segments == ["A", "B", "B"]
    assert [(x.text, x.speaker) for x in sp.turns] == [("a", "A"), ("b", "B")]


def test_rendered_formats_carry_the_speakers():
    import json

    probs = track((0, 0, 25), (1, 25, 50))
    words = [w(" Hi", 0.1, 0.5), w(" Bob.", 0.6, 1.5), w(" Hello.", 2.1, 3.0)]
    t = Transcript(" Hi Bob. Hello.", [seg(0, 0.0, 3.0, " Hi Bob. Hello.", words)], "en", 4.0, 5, "stop")
    sp = assign(t, probs)
    body = json.loads(render(t, "diarized_json", speakers=sp))
    assert body == {"task": "transcribe", "duration": 4.0, "text": " Hi Bob. Hello.", "usage": {"type": "duration",
                    "seconds": 4.0}, "segments": [
        {"type": "transcript.text.segment", "id": "seg_0", "start": 0.1, "end": 1.5, "text": "Hi Bob.", "speaker": "A"},
        {"type": "transcript.text.segment", "id": "seg_1", "start": 2.1, "end": 3.0, "text": "Hello.", "speaker": "B"}]}
    verbose = json.loads(render(t, "verbose_json", words=True, speakers=sp))
    assert verbose["segments"][0]["speaker"] == "A"
    assert [x["speaker"] for x in verbose["words"]] == ["A", "A", "B"]
    assert "speaker" not in json.loads(render(t, "verbose_json", words=True))["segments"][0]


ESPEAK = Path(__file__).parent / "goldens" / "sortformer_tiny" / "two_voices_espeak.flac"


def transcribe(url: str, audio_file: Path, **fields) -> tuple[int, dict]:
    async def go():
        form = aiohttp.FormData()
        form.add_field("file", audio_file.read_bytes(), filename=audio_file.name, content_type="audio/flac")
        form.add_field("model", "tiny.en")
        for k, v in fields.items():
            for item in v if isinstance(v, list) else [v]:
                form.add_field(k, str(item))
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/audio/transcriptions", data=form) as r:
            return r.status, await r.json()

    return asyncio.run(go())


def test_diarized_json_gives_each_turn_its_speaker_by_the_word_rule(sortformer_daemon, sortformer_engine):
    """Two espeak-ng voices taking turns: each word's speaker is the rule's answer on the file route's
    probabilities, and diarized_json's segments are runs of consecutive words of one speaker."""
    from omnid.audio import decode_audio
    from omnid.engine.transcript import Segment, Transcript, Word
    from omnid.runtime.speakers import assign

    status, body = transcribe(sortformer_daemon.url, ESPEAK, response_format="diarized_json")
    assert status == 200 and body["task"] == "transcribe" and body["segments"]
    status, verbose = transcribe(sortformer_daemon.url, ESPEAK, response_format="verbose_json", diarize="true",
                                 **{"timestamp_granularities[]": ["word", "segment"]})
    assert status == 200 and verbose["text"] == body["text"] and verbose["words"]
    words = [Word(" " + x["word"], x["start"], x["end"], 1.0) for x in verbose["words"]]
    one = Transcript(body["text"], [Segment(0, 0, 0.0, body["duration"], body["text"], [], 0, 0, 1, 0, words)],
                     "en", body["duration"], 0, "stop")
    probs = sortformer_engine.diarize(decode_audio(ESPEAK.read_bytes()), PRESETS["very_high"])
    assert [x["speaker"] for x in verbose["words"]] == assign(one, probs).words[0]
    rest = list(verbose["words"])
    for segment in body["segments"]:
        n = len(segment["text"].split())
        run, rest = rest[:n], rest[n:]
        assert " ".join(x["word"] for x in run) == segment["text"]
        assert {x["speaker"] for x in run} == {segment["speaker"]}
        assert segment["start"] == pytest.approx(run[0]["start"], abs=1e-3)
        assert segment["end"] == pytest.approx(run[-1]["end"], abs=1e-3)
    assert not rest
    assert [s["id"] for s in body["segments"]] == [f"seg_{i}" for i in range(len(body["segments"]))]
    labels = [s["speaker"] for s in body["segments"]]
    assert labels[0] == "A" and set(labels) <= set("ABCD")


@pytest.mark.parametrize("fields,param", [({"response_format": "diarized_json"}, "response_format"),
                                          ({"response_format": "verbose_json", "diarize": "true"}, "diarize")])
def test_speakers_without_a_diarization_model_are_a_400_naming_the_field(server, fields, param):
    status, body = transcribe(server.url, ESPEAK, **fields)
    assert status == 400 and body["error"]["param"] == param and body["error"]["code"] == "no_diarization_model"


def test_speakers_need_a_format_that_carries_them(sortformer_daemon):
    status, body = transcribe(sortformer_daemon.url, ESPEAK, response_format="json", diarize="true")
    assert status == 400 and body["error"]["param"] == "diarize"
    status, body = transcribe(sortformer_daemon.url, ESPEAK, response_format="diarized_json", stream="true")
    assert status == 400 and body["error"]["param"] == "stream"
