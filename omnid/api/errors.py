"""HTTP errors in the shape both OpenAI SDKs and Voxt read:
``{"error": {"message", "type", "param", "code"}, "detail": message}``."""

from __future__ import annotations

import msgspec
from aiohttp import web

from omnid.engine.errors import QueueFullError


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


def require_ready(services) -> None:
    """Refuses work while the engines are still loading, or once the daemon is shutting down."""
    if services.draining:
        raise ApiError(503, "the server is shutting down", code="shutting_down", type="server_error")
    if not services.ready:
        raise ApiError(503, "models are still loading", code="loading", type="server_error", headers={"Retry-After": "1"})


def invalid(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except QueueFullError:  # any route whose engine queue is at its cap
        busy = ApiError(503, "the server is busy; retry shortly", code="server_busy", type="server_error",
                        headers={"Retry-After": "1"})
        return busy.response()
    except web.HTTPRequestEntityTooLarge as exc:
        return ApiError(413, f"request body is larger than the {exc.max_size} byte limit", code="request_too_large").response()
