"""HTTP errors in the shape both OpenAI SDKs and Voxt read:
``{"error": {"message", "type", "param", "code"}, "detail": message}``."""

from __future__ import annotations

import asyncio

import msgspec
import structlog
from aiohttp import web, web_protocol

from omnid.echo import shown
from omnid.runtime.errors import JobCancelledError, QueueFullError
from omnid.runtime.request_rules import RuleError

log = structlog.get_logger(__name__)


class ErrorBody(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(msgspec.Struct):
    error: ErrorBody
    detail: str


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type
        self.headers = headers or {}

    def response(self) -> web.Response:
        body = ErrorResponse(ErrorBody(self.message, self.type, self.param, self.code), self.message)
        return web.Response(
            status=self.status, body=msgspec.json.encode(body), content_type="application/json", headers=self.headers
        )


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", code="shutting_down", type="server_error")


def require_ready(services) -> None:
    """Refuses work once the daemon is shutting down, or while the VAD every route relies on is still loading."""
    if services.draining:
        raise shutting_down()
    if services.vad is None or not services.vad.loaded:
        raise loading("the voice activity detector")


def require_loaded(runtime) -> None:
    """A request for one model waits for that model only: another may still be loading."""
    if not runtime.loaded:
        raise loading(f"model {runtime.name}")


def loading(what: str) -> ApiError:
    return ApiError(503, f"{what} is still loading", code="loading", type="server_error", headers={"Retry-After": "1"})


def invalid(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


# Any aiohttp HTTPException that still reaches the middleware, in the same JSON shape (unknown routes, wrong methods
# and WebSocket handshakes are answered before that: omnid/api/fallback.py).
HTTP_CODES = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def _from_http(exc: web.HTTPException) -> web.Response:
    headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
    return ApiError(exc.status, exc.reason.lower(), code=HTTP_CODES.get(exc.status, "invalid_request"),
                    headers=headers).response()


@web.middleware
async def error_middleware(request: web.Request, handler):
    """Every failure leaves as the JSON error shape; nothing a client sends produces aiohttp's plain-text pages."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except RuleError as exc:  # a field the request rules refuse (omnid/runtime/request_rules.py)
        return invalid(exc.param, exc.message, exc.code).response()
    except QueueFullError:  # any route whose engine queue is at its cap
        busy = ApiError(503, "the server is busy; retry shortly", code="server_busy", type="server_error",
                        headers={"Retry-After": "1"})
        return busy.response()
    except JobCancelledError:  # the runtime closed under a running request: the daemon is stopping
        return shutting_down().response()
    except web.HTTPRequestEntityTooLarge:
        return ApiError(413, "request body is larger than the upload limit", code="request_too_large").response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http(exc)
    except (asyncio.CancelledError, ConnectionError):
        raise  # the client is gone: nobody to answer
    except Exception:  # noqa: BLE001  (a bug: logged with its trace, answered in the JSON shape)
        log.exception("request_failed", path=request.path)
        return ApiError(500, "internal server error", code="internal_error", type="server_error").response()


class _JsonErrorHandler(web_protocol.RequestHandler):
    """aiohttp's connection handler, answering what fails below the application (a malformed request line or
    header, a header over aiohttp's size limit, a broken chunked body) in the JSON error shape instead of its
    plain-text page."""

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # part of a response went out already: only closing is left
            raise ConnectionError("response already started; cannot send an error")
        if status >= 500:
            log.error("protocol_error", status=status, error=type(exc).__name__ if exc else None)
        first = (message or "").strip().splitlines()[0] if (message or "").strip() else "bad request"
        text = "internal server error" if status >= 500 else f"malformed HTTP request: {shown(first)}"
        code = {413: "request_too_large", 504: "timeout"}.get(status, "internal_error" if status >= 500 else "invalid_request")
        response = ApiError(status, text, code=code, type="server_error" if status >= 500 else "invalid_request_error").response()
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


def answer_protocol_errors_in_json(server: web.Server) -> None:
    """Makes a runner's server (AppRunner.server, after setup) hand connections to the JSON-answering handler."""
    server.__class__ = _JsonErrorServer
