"""The aiohttp application factory: routes translate between HTTP and the domain, nothing more."""

from __future__ import annotations

import asyncio
import time

import msgspec
import structlog
from aiohttp import web
from prometheus_client.core import GaugeMetricFamily

from omnid.api import diarization, page, realtime, security, transcriptions, vad
from omnid.api.errors import error_middleware
from omnid.api.fallback import add_catch_all, expect_continue
from omnid.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from omnid.metrics import gauge
from omnid.runtime.registry import Services

log = structlog.get_logger(__name__)
SERVICES = web.AppKey("services", Services)
STARTED = web.AppKey("started", float)
# A request whose client hung up before its answer (nginx's convention): neither a success nor a server error.
CLIENT_GONE = 499


class ModelCard(msgspec.Struct, kw_only=True):
    id: str
    object: str = "model"
    owned_by: str = "omnid"
    kind: str  # the model's kind (engine/kinds.py), or the VAD's


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: str = "list"


def json_response(body: object, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status, content_type="application/json")


async def health(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    leaving = services.leaving or services.draining
    body = {
        "status": "draining" if leaving else "healthy" if services.ready else "loading",
        "running": True,
        "request_states": services.request_states(),
        "models": {r.name: {"kind": services.kind(r.name), "status": _status(r), "request_states": r.request_states}
                   for r in services.runtimes()},
        "realtime_sessions": len(request.app[realtime.REGISTRY]),
        "diarization_streams": len(request.app[diarization.STREAMS]),
        "uptime_s": round(time.monotonic() - request.app[STARTED], 3),
    }
    return json_response(body, 200 if services.ready and not leaving else 503)


def _status(runtime) -> str:
    return "ready" if runtime.loaded else "loading"


async def models(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    names = [*services.transcribers, *services.aligners, *services.diarizers]
    cards = [ModelCard(id=name, kind=services.kind(name)) for name in names]
    if services.vad is not None:
        cards.append(ModelCard(id=services.vad.name, kind=services.kind(services.vad.name)))
    return json_response(ModelList(cards))


async def transcribe(request: web.Request) -> web.StreamResponse:
    return await transcriptions.handle(request, request.app[SERVICES])


async def realtime_socket(request: web.Request) -> web.StreamResponse:
    return await realtime.handle(request, request.app[SERVICES])


async def metrics(request: web.Request) -> web.Response:
    body = request.app[SERVICES].metrics.render()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


def _scraped_gauges(app: web.Application) -> list:
    services = app[SERVICES]
    queue = GaugeMetricFamily("omnid_engine_queue_depth", "Jobs per engine, queued or running",
                              labels=["model", "state"])
    for runtime in services.runtimes():
        states = runtime.request_states
        for state in ("queued", "running"):
            queue.add_metric([runtime.name, state], states.get(state, 0))
    sessions = gauge("omnid_realtime_sessions", "Open realtime sessions", len(app[realtime.REGISTRY]))
    return [queue, sessions]


def _route(request: web.Request) -> str:
    """The route's pattern, never the raw path: metrics labels must not grow with what clients send."""
    info = request.match_info
    resource = info.route.resource if info is not None and info.route is not None else None
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def request_log(request: web.Request, handler):
    """One line per request: route, status and duration; never bodies."""
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except (asyncio.CancelledError, ConnectionError):
        status = CLIENT_GONE
        raise
    finally:
        request.app[SERVICES].metrics.observe_request(_route(request), request.method, status)
        log.info("request", method=request.method, path=request.path, status=status,
                 duration_s=round(time.perf_counter() - started, 4))


@web.middleware
async def heap_trim(request: web.Request, handler):
    """Counts the request as open, so that freed memory goes back to the system once none is (runtime.allocator)."""
    heap = request.app[SERVICES].heap
    heap.enter()
    try:
        return await handler(request)
    finally:
        heap.leave()


def create_app(services: Services) -> web.Application:
    max_body = int(services.config.server.max_upload_mb * 1024 * 1024)
    guard = security.middleware(services.config.security, services.config.server.host)
    app = web.Application(middlewares=[heap_trim, request_log, error_middleware, guard], client_max_size=max_body)
    app[SERVICES] = services
    app[STARTED] = time.monotonic()
    app[realtime.REGISTRY] = set()
    app.router.add_get("/health", health, expect_handler=expect_continue)
    app.router.add_get("/v1/models", models, expect_handler=expect_continue)
    app.router.add_post("/v1/audio/transcriptions", transcribe, expect_handler=expect_continue)
    app.router.add_get("/v1/realtime", realtime_socket, expect_handler=expect_continue)
    app.router.add_get("/metrics", metrics, expect_handler=expect_continue)
    services.metrics.add_gauges(lambda: _scraped_gauges(app))
    vad.add_routes(app, SERVICES, expect_continue)
    diarization.add_routes(app, SERVICES, expect_continue)
    if services.config.server.page:
        page.add_routes(app, expect_continue)
    add_catch_all(app)
    return app
