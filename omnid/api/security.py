"""Who may talk to the daemon: a Host header naming this machine (DNS rebinding), no browser Origin but the daemon's
own (its try-it page) or an allowed one, and the API key when one is configured. Checked before any handler runs."""

from __future__ import annotations

import hmac
import ipaddress

from aiohttp import web

from omnid.api.errors import ApiError
from omnid.api.page import is_page
from omnid.config import SecurityConfig
from omnid.echo import shown

LOOPBACK_NAMES = {"localhost", "localhost.", "127.0.0.1", "::1"}
OPEN_PATHS = {"/health"}  # a supervisor's liveness check needs no key
KEY_PARAMETER = "api_key"  # the key in the query string, for browsers (which cannot set a WebSocket's headers)


def host_name(host: str) -> str:
    """The name part of a Host header: without the port, without IPv6 brackets, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bearer(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.query.get(KEY_PARAMETER)


def _raw(value: str) -> bytes:
    """The key as bytes. Header values arrive as str with undecodable bytes kept as surrogates; whatever they hold,
    the comparison must run (and fail), never raise."""
    return value.encode("utf-8", "surrogatepass")


def check(request: web.Request, config: SecurityConfig, bound_host: str) -> None:
    name = host_name(request.host or "")
    allowed = {host_name(h) for h in config.allowed_hosts}
    if not (_loopback(name) or name in allowed or (name == host_name(bound_host) and bound_host not in ("0.0.0.0", "::"))):
        raise ApiError(403, f"Host {shown(request.host)} is not this server; add it to security.allowed_hosts",
                       code="host_not_allowed", type="permission_error")
    origin = request.headers.get("Origin")
    if origin is not None and not _origin_allowed(origin, request, config):
        raise ApiError(403, f"Origin {shown(origin)} is not allowed; add it to security.allowed_origins",
                       code="origin_not_allowed", type="permission_error")
    if config.api_key and request.path not in OPEN_PATHS and not is_page(request.path):
        given = bearer(request)
        if given is None or not hmac.compare_digest(_raw(given), config.api_key.encode()):
            raise ApiError(401, "missing or wrong API key (Authorization: Bearer KEY)", code="invalid_api_key",
                           type="authentication_error", headers={"WWW-Authenticate": "Bearer"})


def _origin_allowed(origin: str, request: web.Request, config: SecurityConfig) -> bool:
    """An allowed origin, or the daemon's own: a page it served itself (scheme and Host, which passed the Host
    check above, so a rebound name never gets here)."""
    origin = origin.rstrip("/").lower()
    if origin in {o.rstrip("/").lower() for o in config.allowed_origins}:
        return True
    return origin == f"{request.scheme}://{request.host}".lower()


def middleware(config: SecurityConfig, bound_host: str):
    @web.middleware
    async def security(request: web.Request, handler):
        check(request, config, bound_host)
        return await handler(request)

    return security
