"""The aiohttp application factory: routes translate between HTTP and the domain, nothing more."""

from __future__ import annotations

import time

import msgspec
import structlog
from aiohttp import web

from omnid.api import realtime, security, transcriptions, vad
from omnid.api.errors import error_middleware
from omnid.services import Services

log = structlog.get_logger(__name__)
SERVICES = web.AppKey("services", Services)
STARTED = web.AppKey("started", float)


class ModelCard(msgspec.Struct):
    id: str
    object: str = "model"
    owned_by: str = "omnid"
    kind: str = "whisper"


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: str = "list"


def json_response(body: object, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status, content_type="application/json")


async def health(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    body = {
        "status": "healthy" if services.ready else "loading",
        "running": True,
        "request_states": services.request_states(),
        "models": {r.name: r.request_states for r in services.runtimes()},
        "realtime_sessions": len(request.app[realtime.REGISTRY].open),
        "uptime_s": round(time.monotonic() - request.app[STARTED], 3),
    }
    return json_response(body, 200 if services.ready else 503)


async def models(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    cards = [ModelCard(mid) for mid in services.transcribers]
    if services.vad is not None:
        cards.append(ModelCard(services.vad.name, kind="silero_vad"))
    return json_response(ModelList(cards))


async def transcribe(request: web.Request) -> web.StreamResponse:
    return await transcriptions.handle(request, request.app[SERVICES])


async def realtime_socket(request: web.Request) -> web.StreamResponse:
    return await realtime.handle(request, request.app[SERVICES])


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
    finally:
        log.info("request", method=request.method, path=request.path, status=status,
                 duration_s=round(time.perf_counter() - started, 4))


def create_app(services: Services) -> web.Application:
    max_body = int(services.config.server.max_upload_mb * 1024 * 1024)
    guard = security.middleware(services.config.security, services.config.server.host)
    app = web.Application(middlewares=[request_log, error_middleware, guard], client_max_size=max_body)
    app[SERVICES] = services
    app[STARTED] = time.monotonic()
    app[realtime.REGISTRY] = realtime.Registry()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/audio/transcriptions", transcribe)
    app.router.add_get("/v1/realtime", realtime_socket)
    vad.add_routes(app, SERVICES)
    return app
