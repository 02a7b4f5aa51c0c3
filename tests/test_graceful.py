"""Graceful life of `omnid serve`: SIGTERM drains (finals sent, then a closing error), SIGHUP reopens the log file."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import aiohttp

from omnid.audio import wav_bytes
from omnid.engine.options import TranscribeOptions
from tests.helpers import append, as_received, clip_audio, ready_line, spawn


async def test_sigterm_during_a_session_sends_its_final_then_closes(engine):
    audio = clip_audio("ljspeech_LJ001-0013")
    offline = engine.transcribe(as_received(audio), TranscribeOptions()).text
    proc = spawn("serve", "--supervised", "--port", "0")
    try:
        port = ready_line(proc)["port"]
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{port}/v1/realtime?protocol=voxt") as ws:
                await ws.send_str(append(audio))  # manual turns, no commit: the segment is still open
                await ws.send_str(json.dumps({"type": "session.update", "session": {}}))
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "transcription_session.updated"
                proc.send_signal(signal.SIGTERM)
                events = []
                while (msg := await ws.receive(timeout=60)).type == aiohttp.WSMsgType.TEXT:
                    events.append(json.loads(msg.data))
            finals = [e for e in events if e.get("is_final")]
            assert [f["text"] for f in finals] == [offline]
            assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "server_shutting_down"
        assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30) == 0
    finally:
        proc.kill()


def test_sighup_reopens_the_log_file(tmp_path):
    log = tmp_path / "omnid.log"
    proc = spawn("serve", "--port", "0", env={"OMNID_SERVER_LOG_FILE": str(log)})
    try:
        assert "omnid listening" in proc.stdout.readline()
        deadline = time.monotonic() + 30
        while "engines_ready" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.1)
        rotated = tmp_path / "omnid.log.1"
        log.rename(rotated)  # what logrotate or newsyslog does
        proc.send_signal(signal.SIGHUP)
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, "SIGHUP does not stop a daemon that is not supervised"
        assert "log_file_reopened" in log.read_text()
        assert "engines_ready" in rotated.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert "server_drained" in log.read_text()
    finally:
        proc.kill()


async def test_sigterm_with_a_drain_notice_says_draining_while_it_still_serves(engine):
    """With server.drain_notice_s, SIGTERM first turns /health into 503 "draining" (a load balancer's cue) while
    requests are still served; a second SIGTERM ends the notice, and the daemon drains and exits 0. Nothing here
    waits on the clock: the notice is long, and the second signal ends it."""
    audio = clip_audio("ljspeech_LJ001-0013")
    offline = engine.transcribe(as_received(audio), TranscribeOptions()).text
    proc = spawn("serve", "--supervised", "--port", "0", env={"OMNID_SERVER_DRAIN_NOTICE_S": "60"})
    try:
        url = f"http://127.0.0.1:{ready_line(proc)['port']}"
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/health") as resp:
                assert resp.status == 200 and (await resp.json())["status"] == "healthy"
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 60
            while True:
                async with http.get(url + "/health") as resp:
                    if resp.status == 503:
                        assert (await resp.json())["status"] == "draining"
                        break
                assert time.monotonic() < deadline, "/health never said draining"
                await asyncio.sleep(0.05)
            form = aiohttp.FormData()
            form.add_field("file", wav_bytes(audio), filename="a.wav")
            async with http.post(url + "/v1/audio/transcriptions", data=form) as resp:
                assert resp.status == 200 and (await resp.json())["text"] == offline  # still served
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 60) == 0
    finally:
        proc.kill()
