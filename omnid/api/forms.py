"""Multipart form reading with caps on every byte of the body and on the number of parts, and typed field
parsing that names the offending field (numbers by the bounds of omnid/runtime/request_rules.py), refusing a field
the route does not take.

The body is read from the socket chunk by chunk (the event loop stays free between chunks), counted whole:
preamble, boundaries, part headers and data alike. It is then parsed off the event loop by python-multipart, a
streaming parser that stops at the first part over the cap, so a body of half a million empty parts costs the
loop nothing and the parser a few dozen parts."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from omnid.api.errors import ApiError, invalid
from omnid.echo import ECHO_CHARS, shown
from omnid.runtime.request_rules import FALSE, TRUE, Count, Range

CHUNK = 1 << 16


@dataclass
class Form:
    fields: dict[str, list[str]] = field(default_factory=dict)
    file: bytes | None = None
    filename: str | None = None

    def get(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else None


@dataclass(frozen=True)
class FormLimits:
    max_bytes: int  # the whole body
    max_parts: int


def too_large(max_bytes: int) -> ApiError:
    return ApiError(413, f"request body is larger than the {max_bytes} byte limit", code="request_too_large")


async def read_form(request: web.Request, limits: FormLimits) -> Form:
    boundary = _boundary(request)
    if request.content_length is not None and request.content_length > limits.max_bytes:
        raise too_large(limits.max_bytes)
    body = await read_body(request, limits.max_bytes)
    return await asyncio.get_running_loop().run_in_executor(None, parse_multipart, body, boundary, limits.max_parts)


def _boundary(request: web.Request) -> bytes:
    if not request.content_type.startswith("multipart/"):
        raise invalid("file", "the request must be multipart/form-data with a 'file' part", "invalid_content_type")
    raw = request.headers.get("Content-Type", "")
    try:
        _, params = parse_options_header(raw)
    except Exception:  # noqa: BLE001  (any malformed header is the client's)
        params = {}
    boundary = params.get(b"boundary", b"")
    if not 1 <= len(boundary) <= 70:  # RFC 2046: 1 to 70 characters
        raise invalid("file", "the multipart Content-Type needs a boundary of 1 to 70 characters", "invalid_multipart")
    return boundary


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    """Every byte of the body, refused with 413 as soon as it passes ``max_bytes``."""
    body = bytearray()
    try:
        async for chunk in request.content.iter_chunked(CHUNK):
            if len(body) + len(chunk) > max_bytes:
                raise too_large(max_bytes)
            body.extend(chunk)
    except HttpProcessingError as exc:  # a broken chunked encoding, a body shorter than its Content-Length
        raise invalid("file", f"malformed request body: {shown(exc.message)}", "invalid_multipart") from None
    except RequestPayloadError:  # a body that does not decompress as its Content-Encoding says
        encoding = shown(request.headers.get("Content-Encoding", ""))
        raise invalid("file", f"malformed request body: it is not valid {encoding} data", "invalid_multipart") from None
    return bytes(body)


class _Parts:
    """python-multipart callbacks collecting parts, refusing more than ``max_parts``."""

    def __init__(self, max_parts: int):
        self.max_parts = max_parts
        self.form = Form()
        self.count = 0
        self.headers: dict[bytes, bytes] = {}
        self.name = self.value = b""
        self.data = bytearray()

    def callbacks(self) -> Any:  # python-multipart's MultipartCallbacks, a TypedDict of these
        return {
            "on_part_begin": self.begin, "on_part_data": self.part_data, "on_part_end": self.end,
            "on_header_field": self.header_field, "on_header_value": self.header_value,
            "on_header_end": self.header_end,
        }

    def begin(self) -> None:
        self.count += 1
        if self.count > self.max_parts:
            raise invalid("file", f"the form has more than {self.max_parts} parts", "too_many_parts")
        self.headers, self.name, self.value, self.data = {}, b"", b"", bytearray()

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self.name += data[start:end]

    def header_value(self, data: bytes, start: int, end: int) -> None:
        self.value += data[start:end]

    def header_end(self) -> None:
        self.headers[self.name.lower()] = self.value
        self.name = self.value = b""

    def part_data(self, data: bytes, start: int, end: int) -> None:
        self.data += data[start:end]

    def end(self) -> None:
        _, params = parse_options_header(self.headers.get(b"content-disposition", b""))
        name = params.get(b"name", b"").decode("utf-8", "replace")
        filename = params.get(b"filename")
        if name == "file" and filename is not None:
            self.form.file, self.form.filename = bytes(self.data), filename.decode("utf-8", "replace")
        elif name:
            self.form.fields.setdefault(name, []).append(self.data.decode("utf-8", errors="replace"))
        self.data = bytearray()


def parse_multipart(body: bytes, boundary: bytes, max_parts: int) -> Form:
    """Runs on a worker thread; every failure is the client's 400."""
    parts = _Parts(max_parts)
    parser = MultipartParser(boundary, parts.callbacks(), max_header_count=16, max_header_size=8192)
    try:
        parser.write(body)
        parser.finalize()
    except ApiError:
        raise
    except (FormParserError, ValueError, UnicodeError) as exc:
        raise invalid("file", f"malformed multipart body: {shown(str(exc))}", "invalid_multipart") from None
    return parts.form


# --- fields -----------------------------------------------------------------------------------------------------


def known_fields(form: Form, names: Collection[str], ignored: Collection[str] = ()) -> None:
    """Refuses the first field the route does not take, naming it, before anything is done with the others.
    ``ignored``: fields taken and documented as ignored (OpenAI's that omnid cannot honour)."""
    for name in form.fields:
        if name != "file" and name not in names and name not in ignored:
            raise invalid(name[:ECHO_CHARS], f"unknown field {shown(name)}: the fields are file, {', '.join(names)}",
                          "unknown_parameter")


def number(form: Form, name: str, rule: Range) -> float | None:
    return rule.parse(name, form.get(name))


def integer(form: Form, name: str, rule: Count) -> int | None:
    return rule.parse(name, form.get(name))


def flag(form: Form, name: str) -> bool:
    raw = (form.get(name) or "").strip().lower()
    if raw in TRUE:
        return True
    if not raw or raw in FALSE:  # a blank field is the flag off
        return False
    raise invalid(name, f"{name} must be a flag (1/true/yes/on or 0/false/no/off), got {shown(raw)}")


def text(form: Form, name: str, *, max_chars: int) -> str | None:
    raw = form.get(name)
    if raw is not None and len(raw) > max_chars:
        raise invalid(name, f"{name} is {len(raw)} characters long; at most {max_chars} are accepted", "too_long")
    return raw
