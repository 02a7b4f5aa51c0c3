"""GET /metrics: Prometheus text that prometheus_client's own parser reads, with counters that move."""

from __future__ import annotations

import json

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import CORPUS, append, clip_audio, manifest


async def scrape(http, url: str) -> dict[str, list]:
    async with http.get(url + "/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(families: dict, name: str, sample: str, **labels) -> float:
    return sum(s.value for s in families.get(name, []) if s.name == sample
               and all(s.labels.get(k) == v for k, v in labels.items()))


async def test_metrics_parse_and_move_with_work(server):
    clip = "ljspeech_LJ001-0013"
    audio = clip_audio(clip)
    async with aiohttp.ClientSession() as http:
        before = await scrape(http, server.url)
        for name in ("omnid_resident_memory_bytes", "omnid_mlx_active_memory_bytes", "omnid_mlx_cache_memory_bytes",
                     "omnid_engine_queue_depth", "omnid_realtime_sessions"):
            assert name in before, name
        assert value(before, "omnid_resident_memory_bytes", "omnid_resident_memory_bytes") > 50e6
        form = aiohttp.FormData()
        form.add_field("file", (CORPUS / manifest()[clip]["path"]).read_bytes(), filename="clip.wav")
        form.add_field("model", "tiny.en")
        async with http.post(server.url + "/v1/audio/transcriptions", data=form) as r:
            assert r.status == 200
        async with http.get(server.url + "/v1/models?x=1") as r:
            assert r.status == 200
        async with http.ws_connect(server.ws_url + "/v1/realtime?protocol=voxt") as ws:
            await ws.send_str(append(audio))
            await ws.send_str(json.dumps({"type": "transcription.done"}))
            while (await ws.receive()).type == aiohttp.WSMsgType.TEXT:
                pass
        after = await scrape(http, server.url)

    def moved(name, sample, **labels):
        return value(after, name, sample, **labels) - value(before, name, sample, **labels)
    assert moved("omnid_http_requests", "omnid_http_requests_total", route="/v1/audio/transcriptions", method="POST", status="200") == 1
    assert moved("omnid_http_requests", "omnid_http_requests_total", route="/v1/models", status="200") == 1
    # the file, the realtime final (and any previews) of the same 2.6 s clip
    assert moved("omnid_audio_seconds", "omnid_audio_seconds_total", model="tiny.en") >= 2 * len(audio) / 16000 - 0.1
    assert moved("omnid_audio_seconds", "omnid_audio_seconds_total", model="silero-vad") >= len(audio) / 16000 - 0.1
    assert moved("omnid_realtime_factor", "omnid_realtime_factor_count", model="tiny.en") >= 2
    assert moved("omnid_compute_seconds", "omnid_compute_seconds_total", model="tiny.en") > 0
    assert moved("omnid_queue_wait_seconds", "omnid_queue_wait_seconds_count", model="tiny.en") >= 2
    assert value(after, "omnid_engine_queue_depth", "omnid_engine_queue_depth", model="tiny.en", state="running") == 0
