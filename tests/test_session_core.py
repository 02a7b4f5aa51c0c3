"""The realtime session core without a socket: audio in, domain events out (issue 11). With a stand-in engine where
the test needs to see exactly what was decoded, and with the real tiny.en and Silero VAD; both dialects' turn rules.
What the events look like on the wire is test_realtime*.py's business."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from omnid.config import load_config, load_pins, model_folder
from omnid.engine.whisper.engine import TranscribeOptions, WhisperEngine
from omnid.realtime import events as de
from omnid.realtime.protocol import openai, voxt
from omnid.realtime.session import Session
from omnid.realtime.settings import ServerVad, Settings
from omnid.runtime.scheduler import EngineRuntime
from omnid.vad.batcher import VadBatcher
from omnid.vad.silero import SileroVAD
from tests.fake_engine import FakeWhisper
from tests.helpers import clip_audio, silence, word_errors

CONFIG = load_config()
CLIP = "ljspeech_LJ001-0013"


def started(runtime: EngineRuntime) -> EngineRuntime:
    runtime.start()
    deadline = time.monotonic() + 60
    while not runtime.loaded and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runtime.loaded
    return runtime


@pytest.fixture(scope="module")
def vad():
    runtime = started(EngineRuntime("silero-vad", lambda: SileroVAD.load(None), 8, final_reserve=1))
    yield VadBatcher(runtime)
    runtime.close()


@pytest.fixture(scope="module")
def tiny():
    folder = model_folder(CONFIG.model("tiny.en"))
    runtime = started(EngineRuntime("tiny.en", lambda: WhisperEngine("tiny.en", folder, load_pins()["tiny.en"]), 8,
                                    final_reserve=4))
    yield runtime
    runtime.close()


@pytest.fixture
def stand_in():
    fake = FakeWhisper()
    runtime = started(EngineRuntime("tiny.en", lambda: fake, 8, final_reserve=4))
    yield runtime, fake
    runtime.close()


def session(rules: de.TurnRules, runtime: EngineRuntime, vad: VadBatcher, turns: ServerVad | None = None):
    events: list[de.DomainEvent] = []
    s = Session(rules, Settings("tiny.en", 16000, turns=turns), CONFIG.realtime, CONFIG.transcription,
                {"tiny.en": runtime}, vad, events.append)
    return s, events


async def feed(s: Session, audio: np.ndarray, step: int = 1600) -> None:
    for i in range(0, len(audio), step):
        await s.append(audio[i : i + step])
        await asyncio.sleep(0)


async def test_manual_turn_with_a_stand_in_engine_finalises_exactly_the_committed_audio(vad, stand_in):
    runtime, fake = stand_in
    audio = clip_audio(CLIP)
    s, events = session(voxt.RULES, runtime, vad)
    await feed(s, audio)
    assert await s.commit()
    text = await s.drain()
    finals = [e for e in events if isinstance(e, de.Final)]
    assert len(finals) == 1 and finals[0].text == f"{len(audio)} samples" == text
    assert finals[0].seconds == pytest.approx(len(audio) / 16000)
    # Manual turns: no speech events; the one segment is committed once, and every preview is of that segment.
    assert not [e for e in events if isinstance(e, (de.SpeechStarted, de.SpeechStopped))]
    assert len([e for e in events if isinstance(e, de.Committed)]) == 1
    previews = [e for e in events if isinstance(e, de.Preview)]
    assert previews and {e.segment_id for e in previews} == {0} and fake.calls == len(previews) + 1


async def test_silence_is_never_decoded(vad, stand_in):
    runtime, fake = stand_in
    s, events = session(openai.RULES, runtime, vad)
    await feed(s, silence(3.0))
    assert await s.commit()
    await s.drain()
    finals = [e for e in events if isinstance(e, de.Final)]
    assert [f.text for f in finals] == [""] and fake.calls == 0  # an empty item, and the model never ran


async def test_a_commit_under_100_ms_is_refused_under_openai_rules_only(vad, stand_in):
    runtime, _ = stand_in
    for rules, refused in ((openai.RULES, True), (voxt.RULES, False)):
        s, events = session(rules, runtime, vad)
        await s.append(silence(0.05))
        assert await s.commit() is not refused
        assert any(isinstance(e, de.Refused) and e.code == "input_audio_buffer_commit_empty" for e in events) is refused


async def test_server_vad_turns_with_the_real_engine(vad, tiny):
    """Two utterances 1.5 s apart: two turns that start and stop by themselves, two items chained by
    previous_item_id, agreed words a prefix of each final, each final within a word of the offline transcript."""
    a, b = clip_audio(CLIP), clip_audio("librispeech_3005-163389-0007")
    s, events = session(openai.RULES, tiny, vad, turns=ServerVad())
    await feed(s, np.concatenate([silence(0.5), a, silence(1.5), b, silence(1.5)]))
    await s.drain()
    started_ = [e for e in events if isinstance(e, de.SpeechStarted)]
    stopped = [e for e in events if isinstance(e, de.SpeechStopped)]
    committed = [e for e in events if isinstance(e, de.Committed)]
    finals = [e for e in events if isinstance(e, de.Final)]
    assert len(started_) == len(stopped) == len(committed) == len(finals) == 2
    assert committed[1].previous_item_id == committed[0].item_id
    assert abs(started_[0].audio_start_ms - 500) < 300
    engine = tiny.engine
    for final, clip in zip(finals, (a, b)):
        assert final.text.startswith(final.agreed)
        assert word_errors(final.text, engine.transcribe(clip, TranscribeOptions()).text) <= 1, final.text


async def test_a_manual_final_with_the_real_engine_is_the_offline_transcript(vad, tiny):
    audio = clip_audio(CLIP)
    s, events = session(voxt.RULES, tiny, vad)
    await feed(s, audio)
    assert await s.commit()
    text = await s.drain()
    assert text == tiny.engine.transcribe(audio, TranscribeOptions()).text
    previews = [e for e in events if isinstance(e, de.Preview)]
    assert previews and all(e.segment_id == 0 for e in previews)
