"""The try-it page at / : served without the API key, its own origin allowed and no other, and, in headless
Chromium against the real daemon, a fake microphone and an uploaded file both transcribed on the page."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import websockets
from aiohttp import web

from omnid.audio import SAMPLE_RATE, decode_audio, wav_bytes
from omnid.evaluation.scoring import edit_distance, tokens
from tests.fake_engine import fake_services
from tests.helpers import clip_audio
from tests.server import ServerThread

KEY = "page-key"
# Chromium's fake microphone plays only WAV files: the corpus's FLAC is written out as one (16 kHz mono), and the
# file tests upload the same file.
CLIP = Path(tempfile.gettempdir()) / f"omnid-page-clip-{os.getpid()}.wav"
CLIP.write_bytes(wav_bytes(clip_audio(os.environ.get("OMNID_PAGE_CLIP", "ljspeech_LJ001-0005"))))
atexit.register(CLIP.unlink, missing_ok=True)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = Path(os.environ.get("OMNID_SCREENSHOTS", Path(tempfile.gettempdir()) / "omnid-page-failures"))


@pytest.fixture(scope="module")
def keyed():
    with ServerThread(overrides={"security": {"api_key": KEY}}, services=fake_services()) as srv:
        yield srv


# --- HTTP: what the page is served with, and who may call -------------------------------------------------------


async def test_the_page_and_its_modules_need_no_key_but_every_api_call_does(keyed):
    async with aiohttp.ClientSession() as http:
        async with http.get(keyed.url + "/") as r:
            assert r.status == 200 and r.content_type == "text/html"
            html = await r.text()
            assert "default-src 'self'" in r.headers["Content-Security-Policy"]
        assert '<script type="module" src="/page/app.js">' in html
        for name, kind in (("app.js", "text/javascript"), ("mic.js", "text/javascript"),
                           ("capture-worklet.js", "text/javascript"), ("style.css", "text/css")):
            async with http.get(keyed.url + "/page/" + name) as r:
                assert r.status == 200 and r.content_type == kind, name
        for missing in ("/page/nope.js", "/page/..%2Fapi%2Fpage.py", "/page/index.html"):
            async with http.get(keyed.url + missing) as r:
                assert r.status == 404 and (await r.json())["error"]["code"] == "not_found", missing
        async with http.get(keyed.url + "/v1/models") as r:
            assert r.status == 401


async def test_the_pages_own_origin_is_allowed_and_no_other(keyed):
    own = keyed.url  # http://127.0.0.1:PORT, the origin a page loaded from the daemon sends
    auth = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(keyed.url + "/v1/models", headers={**auth, "Origin": own}) as r:
            assert r.status == 200
        for other in ("http://127.0.0.1:1", "https://127.0.0.1:" + own.rsplit(":", 1)[1], "http://evil.example"):
            async with http.get(keyed.url + "/v1/models", headers={**auth, "Origin": other}) as r:
                assert r.status == 403 and (await r.json())["error"]["code"] == "origin_not_allowed", other
        # A rebound name: Host and Origin agree, but the Host check refuses it first.
        async with http.get(keyed.url + "/v1/models", headers={**auth, "Origin": "http://evil.example",
                                                               "Host": "evil.example"}) as r:
            assert r.status == 403 and (await r.json())["error"]["code"] == "host_not_allowed"
    url = keyed.ws_url + f"/v1/realtime?protocol=openai&api_key={KEY}"
    async with websockets.connect(url, origin=own) as ws:
        assert "session.created" in await ws.recv()
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url, origin="http://localhost:" + own.rsplit(":", 1)[1])
    assert refused.value.response.status_code == 403


async def test_the_page_can_be_switched_off():
    with ServerThread(overrides={"server": {"port": 0, "page": False}}, services=fake_services()) as srv:
        async with aiohttp.ClientSession() as http, http.get(srv.url + "/") as r:
            assert r.status == 404


# --- a real browser -------------------------------------------------------------------------------------------


def _chromium_or_fail() -> None:
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("headless Chromium is missing: apt-get install chromium chromium-driver (scripts/setup-browser.sh)")


@contextlib.contextmanager
def chromium(*args: str) -> Iterator:
    _chromium_or_fail()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,1300", *args):
        options.add_argument(arg)
    # The system chromedriver, given explicitly: Selenium's own driver manager would try the internet.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def screenshot_on_failure(driver, name: str) -> Iterator[None]:
    try:
        yield
    except BaseException:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}-{int(time.time())}.png"
        driver.save_screenshot(str(path))
        print(f"screenshot of the failing page: {path}")
        raise


def wait_for(driver, condition, timeout: float, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: condition(d), message=what)


async def offline(server, path: Path, headers: dict | None = None, **fields: str) -> dict:
    """The daemon's JSON answer for the file (with the form's other ``fields``)."""
    form = aiohttp.FormData()
    form.add_field("file", path.read_bytes(), filename=path.name)
    for name, value in fields.items():
        form.add_field(name, value)
    async with aiohttp.ClientSession(headers=headers) as http, \
            http.post(server.url + "/v1/audio/transcriptions", data=form) as r:
        assert r.status == 200
        return await r.json()


async def offline_text(server, path: Path, headers: dict | None = None, **fields: str) -> str:
    return (await offline(server, path, headers, **fields))["text"]


def words_apart(a: str, b: str) -> int:
    return edit_distance(tokens(a, "en"), tokens(b, "en"))


async def test_the_microphone_is_transcribed_on_the_page(server):
    from selenium.webdriver.common.by import By

    offline = await offline_text(server, CLIP)
    clip_seconds = decode_audio(CLIP).size / SAMPLE_RATE
    fake_mic = ("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={CLIP}%noloop", "--autoplay-policy=no-user-gesture-required")

    def run() -> tuple[str, str]:
        with chromium(*fake_mic) as driver, screenshot_on_failure(driver, "microphone"):
            driver.get(server.url + "/")
            wait_for(driver, lambda d: "healthy" in d.find_element(By.ID, "health").text, 30, "the daemon's health")
            assert "tiny.en" in [o.get_attribute("value") for o in driver.find_elements(By.CSS_SELECTOR, "#model option")]
            silence = driver.find_element(By.ID, "vad-silence")
            silence.clear()
            silence.send_keys("800")
            driver.find_element(By.ID, "mic-toggle").click()
            started = time.monotonic()
            wait_for(driver, lambda d: d.find_element(By.ID, "mic-toggle").get_attribute("aria-pressed") == "true",
                     5, "the microphone to start")
            # Words come while the clip plays: deltas styled as not final, or (a busy machine thins previews, and
            # deltas are only words two previews agree on) a turn's final line already.
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#mic-transcript p.partial, #mic-transcript p.final"),
                     clip_seconds + 60, "the first words")
            # Once the whole clip has played, every turn it made is a final line, and no partial is left.
            time.sleep(max(0.0, clip_seconds - (time.monotonic() - started)))
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#mic-transcript p.final")
                     and not d.find_elements(By.CSS_SELECTOR, "#mic-transcript p.partial"), 60, "the final transcript")
            finals = " ".join(p.text for p in driver.find_elements(By.CSS_SELECTOR, "#mic-transcript p.final"))
            level = driver.execute_script("return document.getElementById('mic-level').style.width")
            driver.find_element(By.ID, "mic-toggle").click()
            assert driver.find_element(By.ID, "mic-error").text == ""
            return finals, level

    finals, level = await asyncio.to_thread(run)
    assert level.endswith("%")
    assert words_apart(offline, finals) <= 1, (offline, finals)


async def test_an_uploaded_file_streams_its_transcript_onto_the_page(server):
    from selenium.webdriver.common.by import By

    offline = await offline_text(server, CLIP)

    def run() -> tuple[str, list[str], bool]:
        with chromium() as driver, screenshot_on_failure(driver, "file"):
            driver.get(server.url + "/")
            # Record every text the transcript shows, to see it grow as the deltas arrive.
            driver.execute_script("""
                window.seen = [];
                new MutationObserver(() => window.seen.push(document.getElementById('file-transcript').textContent))
                  .observe(document.getElementById('file-transcript'), {subtree: true, childList: true, characterData: true});
            """)
            driver.find_element(By.ID, "file-input").send_keys(str(CLIP))
            wait_for(driver, lambda d: not d.find_element(By.ID, "download-srt").get_attribute("disabled")
                     or d.find_element(By.ID, "file-error").text, 60, "the file's transcript")
            assert driver.find_element(By.ID, "file-error").text == ""
            text = driver.find_element(By.CSS_SELECTOR, "#file-transcript p.final").text
            return text, driver.execute_script("return window.seen"), bool(driver.find_elements(By.ID, "copy"))

    text, seen, has_copy = await asyncio.to_thread(run)
    assert words_apart(offline, text) == 0, (offline, text)
    assert has_copy
    grown = [s for s in seen if s.strip()]
    assert grown and grown[-1].strip() == text.strip()


async def test_with_an_api_key_the_page_asks_for_it_and_every_call_carries_it():
    """A daemon with a key: the page loads without it and says the models could not be listed; once the key is
    entered, models, a file transcription (fetch) and the microphone (WebSocket) all work."""
    from selenium.webdriver.common.by import By

    fake_mic = ("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={CLIP}%noloop")

    def run(url: str) -> tuple[str, str, str]:
        with chromium(*fake_mic) as driver, screenshot_on_failure(driver, "api-key"):
            driver.get(url + "/")
            wait_for(driver, lambda d: "401" in d.find_element(By.ID, "mic-error").text, 30, "the models refused")
            refused = driver.find_element(By.ID, "mic-error").text
            key = driver.find_element(By.ID, "api-key")
            key.send_keys(KEY)
            driver.find_element(By.ID, "model").click()  # leaving the field commits it
            wait_for(driver, lambda d: "tiny.en" in [o.get_attribute("value")
                                                     for o in d.find_elements(By.CSS_SELECTOR, "#model option")],
                     30, "the models with the key")
            driver.find_element(By.ID, "file-input").send_keys(str(CLIP))
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#file-transcript p.final")
                     or d.find_element(By.ID, "file-error").text, 60, "the file's transcript")
            text = driver.find_element(By.ID, "file-transcript").text + driver.find_element(By.ID, "file-error").text
            driver.find_element(By.ID, "mic-toggle").click()
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#mic-transcript p")
                     or d.find_element(By.ID, "mic-error").text, 30, "a partial from the microphone")
            heard = driver.find_element(By.ID, "mic-transcript").text + driver.find_element(By.ID, "mic-error").text
            driver.find_element(By.ID, "mic-toggle").click()
            assert driver.execute_script("return localStorage.getItem('omnid.apiKey')") == KEY
            return refused, text, heard

    with ServerThread(overrides={"server": {"port": 0}, "security": {"api_key": KEY}}) as srv:
        offline = await offline_text(srv, CLIP, {"Authorization": f"Bearer {KEY}"})
        refused, text, heard = await asyncio.to_thread(run, srv.url)
    assert "invalid_api_key" in refused or "API key" in refused, refused
    assert words_apart(offline, text) == 0, (offline, text)
    # The first partial comes from however much of the clip the microphone had sent by then (more on a busy
    # machine): its words are the clip's, not necessarily from its first word on.
    assert tokens(heard, "en") and tokens(heard, "en")[0] in tokens(offline, "en"), (heard, offline)


async def test_a_refused_microphone_is_said_plainly(server):
    from selenium.webdriver.common.by import By

    def run() -> tuple[str, str]:
        with chromium("--use-fake-device-for-media-stream", "--deny-permission-prompts") as driver, \
                screenshot_on_failure(driver, "refused"):
            driver.get(server.url + "/")
            driver.find_element(By.ID, "mic-toggle").click()
            wait_for(driver, lambda d: d.find_element(By.ID, "mic-error").text, 15, "the refusal")
            return (driver.find_element(By.ID, "mic-error").text,
                    driver.find_element(By.ID, "mic-toggle").get_attribute("aria-pressed"))

    message, pressed = await asyncio.to_thread(run)
    assert "microphone was refused" in message and pressed == "false"


class OtherOrigin:
    """A page served from another origin (another port) that tries the daemon's socket."""

    def __init__(self, target: str):
        html = f"""<!doctype html><title>other</title><script>
            window.result = 'pending';
            const ws = new WebSocket('{target}/v1/realtime?protocol=openai');
            ws.onopen = () => {{ window.result = 'opened'; }};
            ws.onclose = () => {{ if (window.result === 'pending') window.result = 'refused'; }};
        </script>"""
        self.app = web.Application()

        async def page(request: web.Request) -> web.Response:
            return web.Response(text=html, content_type="text/html")

        self.app.router.add_get("/", page)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        self.runner = web.AppRunner(self.app)
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result(10)
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result(10)
        port = self.runner.addresses[0][1]
        return f"http://127.0.0.1:{port}/"

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def test_a_page_from_another_origin_cannot_open_the_socket(server):
    def run() -> str:
        with OtherOrigin(server.ws_url) as other, chromium() as driver, screenshot_on_failure(driver, "other-origin"):
            driver.get(other)
            wait_for(driver, lambda d: d.execute_script("return window.result") != "pending", 15, "the socket's fate")
            return driver.execute_script("return window.result")

    assert await asyncio.to_thread(run) == "refused"


async def test_the_pages_language_reaches_a_model_that_needs_one():
    """A model that detects no language (Cohere Transcribe's tiny checkpoint): the page's language field goes with
    the upload, and its transcript is the daemon's for that language; left empty, the daemon's 400 naming the field
    is shown on the page."""
    from selenium.webdriver.common.by import By

    tiny = Path(__file__).parent / "goldens" / "cohere_asr_tiny"
    models = [{"id": "cohere-tiny", "kind": "cohere_asr", "path": str(tiny)}]
    with ServerThread(overrides={"models": models, "transcription": {"default_model": "cohere-tiny"}}) as srv:
        offline_en = await offline_text(srv, CLIP, language="en")

        def upload(driver, language: str) -> tuple[str, str]:
            field = driver.find_element(By.ID, "language")
            field.clear()
            field.send_keys(language)
            driver.find_element(By.ID, "file-input").send_keys(str(CLIP))
            wait_for(driver, lambda d: not d.find_element(By.ID, "download-txt").get_attribute("disabled")
                     or d.find_element(By.ID, "file-error").text, 60, "the file's transcript or its error")
            finals = driver.find_elements(By.CSS_SELECTOR, "#file-transcript p.final")
            return (finals[0].text if finals else ""), driver.find_element(By.ID, "file-error").text

        def run() -> tuple[tuple[str, str], tuple[str, str]]:
            with chromium() as driver, screenshot_on_failure(driver, "language"):
                driver.get(srv.url + "/")
                wait_for(driver, lambda d: "cohere-tiny" in [o.get_attribute("value") for o in
                                                             d.find_elements(By.CSS_SELECTOR, "#model option")],
                         30, "the model list")
                without = upload(driver, "")
                driver.get(srv.url + "/")  # a fresh page: the file input takes the same file again
                wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"), 30, "the model list")
                return without, upload(driver, "en")

        (_, refused), (text, error) = await asyncio.to_thread(run)
    assert "language" in refused, refused
    assert error == "" and text == offline_en.strip(), (text, offline_en)


async def test_a_models_tags_are_shown_beside_each_line(tmp_path):
    """A model that tags what it hears (SenseVoice's tiny checkpoint): the file's lines on the page are its
    segments, each with its language, emotion and events beside it, as the daemon's verbose_json gives them."""
    from selenium.webdriver.common.by import By

    from tests.helpers import unpack_sensevoice

    models = [{"id": "sensevoice-tiny", "kind": "sensevoice", "path": str(unpack_sensevoice(tmp_path))}]
    with ServerThread(overrides={"models": models, "transcription": {"default_model": "sensevoice-tiny"}}) as srv:
        verbose = await offline(srv, CLIP, response_format="verbose_json")
        want = [(" · ".join(t for t in [s.get("language"), s.get("emotion"), *s.get("events", [])] if t), s["text"])
                for s in verbose["segments"]]

        def run() -> list[tuple[str, str]]:
            with chromium() as driver, screenshot_on_failure(driver, "tags"):
                driver.get(srv.url + "/")
                driver.find_element(By.ID, "file-input").send_keys(str(CLIP))
                wait_for(driver, lambda d: not d.find_element(By.ID, "download-txt").get_attribute("disabled")
                         or d.find_element(By.ID, "file-error").text, 60, "the file's transcript")
                lines = driver.find_elements(By.CSS_SELECTOR, "#file-transcript p.tagged")
                return [(p.find_element(By.CSS_SELECTOR, "span.tags").text,
                         p.text.removeprefix(p.find_element(By.CSS_SELECTOR, "span.tags").text).strip())
                        for p in lines]

        shown = await asyncio.to_thread(run)
    assert want and all(tags for tags, _ in want)
    assert shown == want, (shown, want)
