"""The engine runtime: a worker thread per model, priorities, the queue cap, cancellation and idle state."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from omnid.config import load_config, load_pins, model_folder
from omnid.engine.options import TranscribeOptions
from omnid.engine.whisper.engine import WhisperEngine
from omnid.runtime.errors import JobCancelledError, QueueFullError
from omnid.runtime.scheduler import EngineRuntime, Priority
from tests.helpers import clip_audio, reference


class Blocker:
    """A stand-in engine for queue mechanics only; the real engine is tested below."""

    def __init__(self):
        self.thread = threading.get_ident()
        self.release = threading.Event()


async def _wait_for(predicate, timeout: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def whisper_runtime():
    model = load_config().model("tiny.en")
    runtime = EngineRuntime("tiny.en", lambda: WhisperEngine("tiny.en", model_folder(model), load_pins()["tiny.en"]), 4)
    runtime.start()
    yield runtime
    runtime.close()


async def test_real_engine_runs_on_its_own_thread_and_transcribes(whisper_runtime):
    engine = await whisper_runtime.wait_loaded()
    audio = clip_audio("ljspeech_LJ001-0002")
    threads = []

    def job(check):
        threads.append(threading.get_ident())
        return engine.transcribe(audio, TranscribeOptions(), check)

    result = await whisper_runtime.submit(job)
    assert result.text == reference()["ljspeech_LJ001-0002"].strip()
    assert threads[0] != threading.get_ident()
    assert whisper_runtime.request_states == {}


async def test_cancelling_a_running_transcription_frees_the_engine_promptly(whisper_runtime):
    """Cancellation is checked between encoder layers and before every token, so a cancelled job frees the engine
    within a fraction of one short transcription's time: the bound is three of them, measured here and now (a busy
    machine slows both alike)."""
    engine = await whisper_runtime.wait_loaded()
    short = clip_audio("an4_an369-mtos-b")
    started = time.monotonic()
    assert (await whisper_runtime.submit(lambda check: engine.transcribe(short, TranscribeOptions(), check))).text
    unit = time.monotonic() - started
    long_audio = np.concatenate([clip_audio("ljspeech_LJ001-0001")] * 12)  # ~2 minutes: many windows
    task = asyncio.create_task(whisper_runtime.submit(lambda check: engine.transcribe(long_audio, TranscribeOptions(), check)))
    await _wait_for(lambda: whisper_runtime.request_states.get("running") == 1, 120)
    await asyncio.sleep(unit)  # well inside the job (it takes many units)
    assert whisper_runtime.request_states == {"running": 1}
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    freed = await _wait_for(lambda: whisper_runtime.request_states == {}, 120)
    assert freed < 3 * unit, (freed, unit)
    # and it is usable straight away
    result = await whisper_runtime.submit(lambda check: engine.transcribe(short, TranscribeOptions(), check))
    assert result.text


async def test_queue_cap_rejects_with_a_clear_error_and_priorities_order_work():
    runtime = EngineRuntime("blocker", Blocker, max_queue=2)
    runtime.start()
    engine = await runtime.wait_loaded()
    order: list[str] = []

    def blocking(check):
        engine.release.wait(5)
        return "first"

    first = asyncio.create_task(runtime.submit(blocking))
    await _wait_for(lambda: runtime.request_states == {"running": 1}, 2)
    file_job = asyncio.create_task(runtime.submit(lambda c: order.append("file"), Priority.FILE))
    final_job = asyncio.create_task(runtime.submit(lambda c: order.append("final"), Priority.FINAL))
    await _wait_for(lambda: runtime.request_states == {"running": 1, "queued": 2}, 2)
    with pytest.raises(QueueFullError, match="queue is full \\(2 jobs\\)"):
        await runtime.submit(lambda c: None)
    engine.release.set()
    assert await first == "first"
    await asyncio.gather(file_job, final_job)
    assert order == ["final", "file"]
    assert runtime.request_states == {}
    runtime.close()


async def test_cancelled_queued_job_never_runs():
    runtime = EngineRuntime("blocker", Blocker, max_queue=4)
    runtime.start()
    engine = await runtime.wait_loaded()
    ran: list[int] = []
    first = asyncio.create_task(runtime.submit(lambda c: engine.release.wait(5)))
    await _wait_for(lambda: runtime.request_states == {"running": 1}, 2)
    queued = asyncio.create_task(runtime.submit(lambda c: ran.append(1)))
    await _wait_for(lambda: runtime.request_states.get("queued") == 1, 2)
    queued.cancel()
    await asyncio.sleep(0.05)
    assert runtime.request_states == {"running": 1}
    engine.release.set()
    await first
    await asyncio.sleep(0.05)
    assert ran == []
    runtime.close()


async def test_job_errors_reach_the_caller_and_load_errors_reach_wait_loaded():
    runtime = EngineRuntime("blocker", Blocker, max_queue=1)
    runtime.start()
    await runtime.wait_loaded()
    with pytest.raises(ZeroDivisionError):
        await runtime.submit(lambda c: 1 / 0)
    runtime.close()
    with pytest.raises(JobCancelledError):
        await runtime.submit(lambda c: None)

    def broken():
        raise RuntimeError("weights missing")

    bad = EngineRuntime("broken", broken, max_queue=1)
    bad.start()
    with pytest.raises(RuntimeError, match="weights missing"):
        await bad.wait_loaded()


async def test_realtime_finals_have_a_reserve_past_the_queue_cap():
    runtime = EngineRuntime("blocker", Blocker, max_queue=1, final_reserve=1)
    runtime.start()
    engine = await runtime.wait_loaded()
    first = asyncio.create_task(runtime.submit(lambda c: engine.release.wait(5)))
    await _wait_for(lambda: runtime.request_states == {"running": 1}, 2)
    preview = asyncio.create_task(runtime.submit(lambda c: "preview", Priority.PREVIEW))
    await _wait_for(lambda: runtime.request_states.get("queued") == 1, 2)
    with pytest.raises(QueueFullError):
        await runtime.submit(lambda c: None, Priority.FILE)  # file jobs and previews stop at max_queue
    final = asyncio.create_task(runtime.submit(lambda c: "final", Priority.FINAL))
    await _wait_for(lambda: runtime.request_states.get("queued") == 2, 2)
    with pytest.raises(QueueFullError):
        await runtime.submit(lambda c: None, Priority.FINAL)  # and finals at max_queue + final_reserve
    engine.release.set()
    assert await asyncio.gather(first, final, preview) == [True, "final", "preview"]
    runtime.close()


async def traced_runtime() -> tuple[EngineRuntime, list[tuple[str, str]]]:
    runtime = EngineRuntime("blocker", Blocker, 4)
    timeline: list[tuple[str, str]] = []
    runtime.trace = lambda event, priority, seq: timeline.append((event, priority.name))
    runtime.start()
    await runtime.wait_loaded()
    return runtime, timeline


async def test_a_running_preview_yields_to_a_final_at_its_next_check():
    """Told through the runtime's trace: between the final being queued and the preview stopping, the preview
    passes at most one check; the final is the next job to start, and runs to its end."""
    runtime, timeline = await traced_runtime()
    running = threading.Event()

    def preview(check):
        for _ in range(100_000):
            timeline.append(("check", "PREVIEW"))
            check()
            running.set()
            time.sleep(0.001)
        return "preview ran to its end"

    previewing = asyncio.ensure_future(runtime.submit(preview, Priority.PREVIEW))
    await asyncio.get_running_loop().run_in_executor(None, running.wait, 10)
    assert await runtime.submit(lambda check: "final", Priority.FINAL) == "final"
    with pytest.raises(JobCancelledError):
        await previewing
    runtime.close()
    queued = timeline.index(("queued", "FINAL"))
    stopped = timeline.index(("preempted", "PREVIEW"))
    assert queued < stopped
    assert timeline[queued:stopped].count(("check", "PREVIEW")) <= 1
    after = [e for e in timeline[stopped:] if e[0] != "check"]
    assert after[:4] == [("preempted", "PREVIEW"), ("cancelled", "PREVIEW"), ("started", "FINAL"), ("finished", "FINAL")]


async def test_file_jobs_are_not_preempted_by_finals():
    runtime, events = await traced_runtime()
    running = threading.Event()

    def file_job(check):
        running.set()
        for _ in range(50):
            check()
            time.sleep(0.002)
        return "file"

    job = asyncio.ensure_future(runtime.submit(file_job, Priority.FILE))
    await asyncio.get_running_loop().run_in_executor(None, running.wait, 10)
    assert await runtime.submit(lambda check: "final", Priority.FINAL) == "final"
    assert await job == "file"
    runtime.close()
    assert [e for e in events if e[0] in ("started", "finished")] == [
        ("started", "FILE"), ("finished", "FILE"), ("started", "FINAL"), ("finished", "FINAL")]


async def test_the_mlx_cache_is_released_once_idle_not_between_busy_jobs():
    """Jobs back to back (gaps well under idle_clear_s) leave the cache alone; once the runtime has been idle for
    idle_clear_s it is released, once, and a real MLX job's buffers are gone from the cache."""
    import mlx.core as mx

    def work(check) -> float:
        a = mx.random.normal((512, 512))
        mx.eval(a @ a)  # leaves buffers in MLX's cache
        return float(mx.get_cache_memory())

    runtime = EngineRuntime("mlx-work", Blocker, 4, idle_clear_s=0.5)
    released: list[float] = []

    def on_idle() -> None:
        mx.clear_cache()
        released.append(time.monotonic())

    runtime.on_idle = on_idle
    runtime.start()
    await runtime.wait_loaded()
    try:
        cached = []
        for _ in range(10):
            cached.append(await runtime.submit(work))
            await asyncio.sleep(0.05)
        assert released == [] and max(cached) > 0
        done = time.monotonic()
        await _wait_for(lambda: released, 5)
        assert 0.4 <= released[0] - done <= 3
        assert mx.get_cache_memory() == 0
        await asyncio.sleep(1.0)
        assert len(released) == 1  # idle and already released: nothing more to do
    finally:
        runtime.close()


def test_the_idle_release_delay_is_checked_when_the_config_loads():
    from omnid.config import ConfigError

    with pytest.raises(ConfigError, match="engine.idle_clear_s"):
        load_config(overrides={"engine": {"idle_clear_s": 0}})
