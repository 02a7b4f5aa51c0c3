"""Several Qwen3-ASR jobs on one model at once (engine/qwen3_asr/batch.py on the shared driver, engine/programs.py):
each gets exactly what it gets alone, in both decoders, and a served daemon running four realtime sessions and two
file requests together gives each its official transcript. The tiny checkpoint and the official goldens."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from omnid.audio import wav_bytes
from omnid.engine.interface import Hypothesis
from omnid.engine.options import TranscribeOptions
from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions
from omnid.engine.transcript import Transcript
from tests.helpers import append, collect
from tests.qwen_goldens import TINY, clip, meta
from tests.server import ServerThread

QWEN = "qwen3-asr-tiny"


@pytest.fixture(scope="module", params=["numpy decoder", "mlx decoder"])
def engine(request) -> Qwen3AsrEngine:
    return Qwen3AsrEngine("qwen3-tiny", TINY, options=QwenOptions(loop_window=0),
                          cpu_decoder=request.param == "numpy decoder")


def jobs(engine: Qwen3AsrEngine) -> list[tuple[str, object, object]]:
    """(name, program factory, its solo result) for transcriptions, a forced-prefix final and streaming decodes."""
    en = TranscribeOptions(language="en")
    previous = Hypothesis(text="", raw="", decodes=0, language=None)
    cases = [
        ("mid_auto", lambda: engine.transcribe_program(clip("mid"), TranscribeOptions()),
         lambda: engine.transcribe(clip("mid"), TranscribeOptions())),
        ("mid_en", lambda: engine.transcribe_program(clip("mid"), en), lambda: engine.transcribe(clip("mid"), en)),
        ("short_auto", lambda: engine.transcribe_program(clip("short"), TranscribeOptions()),
         lambda: engine.transcribe(clip("short"), TranscribeOptions())),
        ("long_budget", lambda: engine.transcribe_program(clip("long"), TranscribeOptions(max_new_tokens=5)),
         lambda: engine.transcribe(clip("long"), TranscribeOptions(max_new_tokens=5))),
        ("final_prefix", lambda: engine.final_program(clip("mid"), en, "sy"),
         lambda: engine.preview(clip("mid"), en, "sy")),
        ("redecode", lambda: engine.redecode_program(clip("long")[:32000], TranscribeOptions(), previous),
         lambda: engine.redecode(clip("long")[:32000], TranscribeOptions(), previous)),
    ]
    return [(name, make, solo()) for name, make, solo in cases]


def test_a_batch_gives_every_program_exactly_its_solo_result(engine: Qwen3AsrEngine) -> None:
    """Programs joining at different steps, decoding side by side: each result is its solo result, and the
    transcriptions are the official texts."""
    todo = jobs(engine)
    batch = engine.batch()
    results: dict[int, object] = {}
    widest, step = 0, 0
    while len(results) < len(todo):
        for i, (_, make, _) in enumerate(todo):
            if i == step:  # one more job joins at each of the first steps
                batch.add(i, make())
        widest = max(widest, batch.decoding)
        for key, result, error in batch.step(lambda keys, encoding: ()):
            assert error is None, error
            results[key] = result
        step += 1
    assert widest >= 3  # sequences really stepped together
    for i, (name, _, solo) in enumerate(todo):
        assert same(results[i], solo), name
    for i, (name, _, _) in enumerate(todo[:4]):
        assert results[i].text == meta()["cases"][name]["text_unfixed"], name


def same(a: object, b: object) -> bool:
    """The same tokens, texts, times and ends; log-probabilities to float rounding (a row's products in a batch may
    round differently in the last bit)."""
    if isinstance(a, Transcript) and isinstance(b, Transcript):
        def key(t: Transcript) -> tuple:
            return (t.text, t.language, t.finish_reason, t.generated_tokens,
                    [(s.tokens, s.text, s.start, s.end, s.language) for s in t.segments])

        return key(a) == key(b) and all(x.avg_logprob == pytest.approx(y.avg_logprob, abs=1e-5)
                                        for x, y in zip(a.segments, b.segments))
    return a == b


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": QWEN, "kind": "qwen3_asr", "path": str(TINY)}]
    with ServerThread(overrides={"models": models, "engine": {"max_batch": 8},
                                 "transcription": {"default_model": QWEN}}) as srv:
        yield srv


async def voxt_session(daemon, name: str, audio) -> str:
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": QWEN, "turn_detection": None}}))
        for i in range(0, len(audio), 1600):
            await ws.send_str(append(audio[i : i + 1600]))
            await asyncio.sleep(0.02)
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        events = await collect(ws, lambda e: e["type"] in ("transcription.completed", "error"), 120)
    assert events[-1]["type"] == "transcription.completed", (name, events[-1])
    return events[-1]["text"]


async def file_request(daemon, audio, language: str | None) -> str:
    form = aiohttp.FormData()
    form.add_field("file", wav_bytes(audio), filename="a.wav", content_type="audio/wav")
    form.add_field("model", QWEN)
    form.add_field("vad_filter", "false")
    if language:
        form.add_field("language", language)
    async with aiohttp.ClientSession() as http, http.post(daemon.url + "/v1/audio/transcriptions", data=form) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["text"]


async def test_four_sessions_and_two_files_at_once_each_get_their_solo_transcript(daemon) -> None:
    """Four Voxt sessions and two file requests on one daemon at once, their decodes batched: each text is the
    official (solo) transcript of its audio."""
    runtime = daemon.server.services.transcribers[QWEN]
    running: set[int] = set()
    widest = [0]

    def trace(event: str, _priority, job: int) -> None:
        if event == "started":
            running.add(job)
        elif event in ("finished", "cancelled", "preempted"):
            running.discard(job)
        widest[0] = max(widest[0], len(running))

    runtime.trace = trace
    runs = [voxt_session(daemon, "mid", clip("mid")), voxt_session(daemon, "short", clip("short")),
            voxt_session(daemon, "mid 2", clip("mid")), voxt_session(daemon, "short 2", clip("short")),
            file_request(daemon, clip("mid"), "en"), file_request(daemon, clip("short"), None)]
    try:
        texts = await asyncio.gather(*runs)
    finally:
        runtime.trace = None
    assert widest[0] >= 2  # jobs ran in one batch
    want = [meta()["cases"][c]["text_unfixed"] for c in ("mid_auto", "short_auto", "mid_auto", "short_auto",
                                                          "mid_en", "short_auto")]
    assert texts == want
