"""What aiohttp would otherwise answer by itself, in plain text and outside the middlewares: an unknown route, a
method a route does not take, and the Expect header (handled before any middleware runs; a value that is not
valid UTF-8 even crashed it with a 500). Every route gets ``expect_continue``, and a catch-all route answers the
rest, so that each of these is the JSON error shape too."""

from __future__ import annotations

from aiohttp import web
from aiohttp.http import HttpVersion11

from omnid.api.errors import ApiError
from omnid.echo import shown


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue`` lets an upload start; any other expectation is a 417 in the JSON shape."""
    expect = request.headers.get("Expect", "")
    if expect.lower() == "100-continue":
        if request.version == HttpVersion11:
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return None
    return ApiError(417, f"Expect {shown(expect)} is not supported; only 100-continue is",
                    code="expectation_failed").response()


async def not_routed(request: web.Request) -> web.StreamResponse:
    """No route takes this request: 405 naming the allowed methods when the path exists, else 404."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource.canonical == CATCH_ALL:
            continue
        match, methods = await resource.resolve(request)
        if match is None:
            allowed |= methods
    if allowed:
        return ApiError(405, f"{request.method} is not allowed on {shown(request.path)}", code="method_not_allowed",
                        headers={"Allow": ", ".join(sorted(allowed))}).response()
    return ApiError(404, f"no route {request.method} {shown(request.path)}; see the API documentation",
                    code="not_found").response()


CATCH_ALL = "/{path:.*}"


def add_catch_all(app: web.Application) -> None:
    """Last of all routes: whatever no other route took."""
    app.router.add_route("*", CATCH_ALL, not_routed, expect_handler=expect_continue)


WEBSOCKET_VERSIONS = ("13", "8", "7")


def require_websocket_upgrade(request: web.Request) -> None:
    """Refuses, in the JSON shape, what aiohttp's handshake would refuse in plain text (or crash on: it echoes the
    headers into its message, and a header that is not valid UTF-8 made that a 500)."""
    upgrade = request.headers.get("Upgrade", "").lower().strip()
    connection = request.headers.get("Connection", "").lower()
    if upgrade != "websocket" or "upgrade" not in connection:
        raise ApiError(400, "this route is a WebSocket: connect with 'Connection: Upgrade' and 'Upgrade: websocket'",
                       code="invalid_request")
    if request.headers.get("Sec-WebSocket-Version", "") not in WEBSOCKET_VERSIONS:
        raise ApiError(400, "unsupported Sec-WebSocket-Version; use 13", code="invalid_request")
