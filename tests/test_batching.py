"""Several jobs on one model at once (engine/whisper/batch.py and the runtime's batches): each gets exactly its
solo result, finals are never held up by previews, and the batch stays within its cap. Real tiny.en weights, real
corpus speech."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from omnid.engine.options import TranscribeOptions
from omnid.runtime import transcription
from omnid.runtime.errors import JobCancelledError
from omnid.runtime.scheduler import EngineRuntime, Priority
from tests.helpers import clip_audio, manifest

FULL = TranscribeOptions()
CONTENT = TranscribeOptions(window="content")


@pytest.fixture(scope="module")
def speech() -> list[np.ndarray]:
    ids = [k for k, r in manifest().items() if r["language"] == "en" and r["duration_s"] >= 4][:6]
    return [clip_audio(i)[: 16000 * 12] for i in ids]


def run_batch(engine, programs: list, join_at: dict[int, int], record: dict) -> dict[int, object]:
    """Runs programs in one batch; program i joins before step join_at.get(i, 0). Records the largest encoder
    batch and the most sequences decoded in one step."""
    batch = engine.batch()
    real_encoder = batch.model.encoder

    def encoder(mel, between_layers=None):
        record["encoded"] = max(record.get("encoded", 0), mel.shape[0])
        return real_encoder(mel, between_layers=between_layers)

    batch.model = SimpleNamespace(encoder=encoder, decoder=batch.model.decoder)
    results: dict[int, object] = {}
    step = 0
    while len(results) < len(programs):
        for i, program in enumerate(programs):
            if join_at.get(i, 0) == step:
                batch.add(i, program)
        record["decoded"] = max(record.get("decoded", 0), batch.decoding)
        for key, result, error in batch.step(lambda keys, encoding: ()):
            assert error is None, error
            results[key] = result
        step += 1
    return results


def test_a_batch_gives_every_program_exactly_its_solo_result(engine, speech):
    """Finals (30 s windows, one continuing sent deltas), previews (content windows of different lengths, one with
    a forced prefix) and a two-window file transcription, some joining while others are mid-decode."""
    long = np.concatenate([speech[0], speech[1], speech[2]])  # 36 s: two windows
    jobs = [
        ("transcribe", speech[0], FULL, ""),
        ("transcribe", speech[1], FULL, ""),
        ("final", speech[2], FULL, "The"),
        ("preview", speech[3], CONTENT, ""),
        ("preview", speech[4][: 16000 * 5], CONTENT, ""),
        ("preview", speech[5], CONTENT, " ".join(engine.preview(speech[5][: 16000 * 3], CONTENT).split()[:2])),
        ("transcribe", long, FULL, ""),
        ("transcribe", speech[3], FULL, ""),
    ]

    def solo(kind, audio, opts, text):
        if kind == "transcribe":
            return engine.transcribe(audio, opts).text
        return engine.preview(audio, opts, text)  # a final with sent deltas is this decode too

    def program(kind, audio, opts, text):
        if kind == "transcribe":
            return engine.transcribe_program(audio, opts)
        if kind == "final":
            return engine.final_program(audio, opts, text)
        return engine.preview_program(audio, opts, text)

    expected = [solo(*job) for job in jobs]
    record: dict = {}
    results = run_batch(engine, [program(*job) for job in jobs], {5: 3, 6: 9, 7: 20}, record)
    got = [r.text if hasattr(r, "text") else r for _, r in sorted(results.items())]
    assert got == expected
    assert all(expected) and expected[2].startswith("The")
    assert record["encoded"] >= 2 and record["decoded"] >= 3  # they really ran together


def test_a_program_fails_alone(engine, speech):
    """A program that raises ends with its error; the others in the batch finish with their solo results."""

    def broken():
        yield from engine.preview_program(speech[0][: 16000 * 4], CONTENT)
        raise RuntimeError("the program broke")

    expected = engine.preview(speech[1][: 16000 * 4], CONTENT)
    batch = engine.batch()
    batch.add("broken", broken())
    batch.add("fine", engine.preview_program(speech[1][: 16000 * 4], CONTENT))
    outcomes = {}
    while len(batch):
        for key, result, error in batch.step(lambda keys, encoding: ()):
            outcomes[key] = (result, error)
    assert isinstance(outcomes["broken"][1], RuntimeError)
    assert outcomes["fine"] == (expected, None)


def test_the_numpy_decode_steps_are_the_mlx_steps(engine, speech):
    """On the CPU a batch's decode steps run in numpy (cpu_decoder.py); Metal runs batch.py's MLX DecodeBatch. Both
    step the same three sequences (windows of 5, 12 and 30 s, prompts of different lengths, one joining late and one
    leaving early) and give the same logits each step, to float32 rounding."""
    from omnid.engine.whisper.batch import DecodeBatch
    from omnid.engine.whisper.cpu_decoder import CpuDecodeBatch
    from omnid.engine.whisper.decoding import DecodeOptions

    tok = engine.tokenizer
    windows = [engine._window(engine_mel(engine, speech[i][: 16000 * s]), opts)
               for i, s, opts in ((0, 5, CONTENT), (1, 12, CONTENT), (2, 12, FULL))]
    prompts = [tok.sot_sequence("en", "transcribe"), [tok.sot_prev, *tok.encode(" Hello there.")]
               + tok.sot_sequence("en", "transcribe"), tok.sot_sequence("en", "transcribe") + [tok.no_timestamps]]
    starts = []
    for mel, prompt in zip(windows, prompts):
        cross = engine.model.decoder.cross_kv(engine.model.encoder(mel[None]))
        sequence, self_kv, logits = engine.decoder.begin(cross, prompt, DecodeOptions(language="en"))
        starts.append((sequence, self_kv, cross, logits))
    mlx_batch, cpu_batch = DecodeBatch(engine.model), CpuDecodeBatch(engine.model.decoder.cpu_step)
    joins, leaves = {0: [0, 1], 3: [2]}, {6: [1]}
    for step in range(10):
        for i in joins.get(step, []):
            sequence, self_kv, cross, logits = starts[i]
            sequence.choose(logits.copy())
            for batch in (mlx_batch, cpu_batch):
                batch.join(i, sequence, (self_kv, cross))
        for batch in (mlx_batch, cpu_batch):
            batch.leave(leaves.get(step, []))
        expected = mlx_batch.step()
        got = cpu_batch.step()
        assert got.shape == expected.shape == (len(mlx_batch), engine.dims.n_vocab)
        assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max(), step
        for sequence, row in zip(mlx_batch.sequences, expected):
            sequence.sampled.append(int(np.argmax(row)))  # the next token fed, the same in both batches


def engine_mel(engine, audio: np.ndarray):
    from omnid.engine.whisper.mel import log_mel_spectrogram

    mel = log_mel_spectrogram(audio, engine.dims.n_mels)
    return mel[: mel.shape[0] - 1]


def traced(engine, max_batch: int) -> tuple[EngineRuntime, list[tuple[str, str, int]], threading.Event]:
    """A runtime on the real engine, the timeline its trace writes, and an event set at the first batch check."""
    runtime = EngineRuntime("tiny.en", lambda: engine, 16, final_reserve=8, max_batch=max_batch)
    timeline: list[tuple[str, str, int]] = []
    checked = threading.Event()

    def trace(event, priority, seq):
        timeline.append((event, priority.name, seq))
        if event == "check":
            checked.set()

    runtime.trace = trace
    runtime.start()
    return runtime, timeline, checked


def most_running(timeline) -> int:
    running, most = 0, 0
    for event, _, _ in timeline:
        running += {"started": 1, "finished": -1, "cancelled": -1}.get(event, 0)
        most = max(most, running)
    return most


async def test_finals_of_several_sessions_run_together_each_with_its_solo_text(engine, speech):
    """Six sessions' finals queued at once on a runtime batching four: all six texts are the solo ones, four ran
    together and never more."""
    expected = [engine.transcribe(a, FULL).text for a in speech]
    runtime, timeline, _ = traced(engine, max_batch=4)
    await runtime.wait_loaded()
    try:
        texts = await asyncio.gather(*(transcription.final(runtime, a, FULL, "") for a in speech))
    finally:
        runtime.close()
    assert texts == expected
    assert most_running(timeline) == 4
    assert sum(1 for e in timeline if e[0] == "finished") == 6


async def test_a_final_waits_at_most_one_check_for_previews_in_a_full_batch(engine, speech):
    """Two previews fill a batch of two; a final queued meanwhile takes the place of one of them. Between the final
    being queued and starting, no preview passes more than one check (one encoder layer or decode step)."""
    runtime, timeline, checked = traced(engine, max_batch=2)
    await runtime.wait_loaded()
    try:
        previews = [asyncio.ensure_future(transcription.preview(runtime, a, FULL, "")) for a in speech[:2]]
        await asyncio.get_running_loop().run_in_executor(None, checked.wait, 30)
        final = await transcription.final(runtime, speech[2], FULL, "")
        outcomes = await asyncio.gather(*previews, return_exceptions=True)
    finally:
        runtime.close()
    assert final == engine.transcribe(speech[2], FULL).text
    assert any(isinstance(o, JobCancelledError) for o in outcomes)  # one gave its place
    queued = next(i for i, e in enumerate(timeline) if e[:2] == ("queued", "FINAL"))
    started = next(i for i, e in enumerate(timeline) if e[:2] == ("started", "FINAL"))
    between = [e for e in timeline[queued:started] if e[0] == "check"]
    assert all(sum(1 for e in between if e[2] == seq) <= 1 for _, _, seq in between), between
    assert any(e[0] == "preempted" and e[1] == "PREVIEW" for e in timeline[queued:started + 1])


async def test_an_encode_of_previews_alone_yields_to_a_final(engine, speech):
    """With room in the batch, a preview being encoded (30 s window, layer by layer) stops at its next layer when a
    final is queued, so the final starts after at most one check of it."""
    runtime, timeline, checked = traced(engine, max_batch=8)
    await runtime.wait_loaded()
    try:
        preview = asyncio.ensure_future(transcription.preview(runtime, speech[0], FULL, ""))
        await asyncio.get_running_loop().run_in_executor(None, checked.wait, 30)
        final = await transcription.final(runtime, speech[1], FULL, "")
        outcome = (await asyncio.gather(preview, return_exceptions=True))[0]
    finally:
        runtime.close()
    assert final == engine.transcribe(speech[1], FULL).text
    queued = next(i for i, e in enumerate(timeline) if e[:2] == ("queued", "FINAL"))
    started = next(i for i, e in enumerate(timeline) if e[:2] == ("started", "FINAL"))
    assert sum(1 for e in timeline[queued:started] if e[0] == "check") <= 1
    if isinstance(outcome, JobCancelledError):  # queued during its encode: it yielded
        assert ("preempted", "PREVIEW") in [e[:2] for e in timeline[queued:started]]
    else:  # queued while it decoded: the final joined at the next step and the preview ran to its end
        assert isinstance(outcome, str)


async def test_a_cancelled_job_leaves_the_batch_and_the_rest_finish(engine, speech):
    runtime, timeline, _ = traced(engine, max_batch=4)
    await runtime.wait_loaded()
    try:
        doomed = asyncio.ensure_future(transcription.transcribe(runtime, speech[0], FULL, priority=Priority.FILE))
        kept = asyncio.ensure_future(transcription.final(runtime, speech[1], FULL, ""))
        await asyncio.sleep(0.3)
        doomed.cancel()
        text = await kept
    finally:
        runtime.close()
    assert text == engine.transcribe(speech[1], FULL).text
    assert doomed.cancelled()


@pytest.mark.parametrize("size", [0, 65])
def test_the_batch_cap_is_checked_when_the_config_loads(size):
    from omnid.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="engine.max_batch"):
        load_config(overrides={"engine": {"max_batch": size}})
    assert load_config(overrides={"engine": {"max_batch": 1}}).engine.max_batch == 1
