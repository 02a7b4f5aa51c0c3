"""The try-it page: ``GET /`` and its modules under ``/page/``, plain files shipped in ``omnid/web`` (no build
step, no CDN). Only the files present at start-up are served, by exact name, so no path reaches the disk."""

from __future__ import annotations

from importlib import resources
from pathlib import PurePosixPath

from aiohttp import web

from omnid.api.errors import ApiError
from omnid.echo import shown

PREFIX = "/page/"
CONTENT_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript"}
# The page talks only to the daemon that served it; nothing from elsewhere runs, and no other site may frame it.
POLICY = ("default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; "
          "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
INDEX = "index.html"


def _files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("omnid") / "web"
    files = {}
    for entry in folder.iterdir():
        suffix = PurePosixPath(entry.name).suffix
        if entry.is_file() and suffix in CONTENT_TYPES:
            files[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return files


def add_routes(app: web.Application, expect) -> None:
    files = _files()

    def respond(name: str) -> web.Response:
        body, content_type = files[name]
        return web.Response(body=body, content_type=content_type, charset="utf-8",
                            headers={"Cache-Control": "no-cache", "Content-Security-Policy": POLICY,
                                     "X-Content-Type-Options": "nosniff"})

    async def index(request: web.Request) -> web.Response:
        return respond(INDEX)

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files or name == INDEX:
            raise ApiError(404, f"no page file {shown(name)}", code="not_found")
        return respond(name)

    app.router.add_get("/", index, expect_handler=expect)
    app.router.add_get(PREFIX + "{name}", asset, expect_handler=expect)


def is_page(path: str) -> bool:
    """The page's own files need no API key: they hold no data, and every call they make carries the key."""
    return path == "/" or path.startswith(PREFIX)
