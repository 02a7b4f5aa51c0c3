"""Multipart form reading with a size cap, and typed field parsing that names the offending field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from aiohttp import web

from omnid.api.errors import ApiError, invalid

CHUNK = 1 << 16
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


@dataclass
class Form:
    fields: dict[str, list[str]] = field(default_factory=dict)
    file: bytes | None = None
    filename: str | None = None

    def get(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else None


async def read_form(request: web.Request, max_bytes: int) -> Form:
    if not request.content_type.startswith("multipart/"):
        raise invalid("file", "the request must be multipart/form-data with a 'file' part", "invalid_content_type")
    if request.content_length is not None and request.content_length > max_bytes:
        raise ApiError(413, f"request body is larger than the {max_bytes} byte limit", code="request_too_large")
    try:
        reader = await request.multipart()
    except Exception as exc:
        raise invalid("file", f"malformed multipart body: {exc}", "invalid_multipart") from exc
    form, total = Form(), 0
    try:
        while (part := await reader.next()) is not None:
            data = bytearray()
            while chunk := await part.read_chunk(CHUNK):
                total += len(chunk)
                if total > max_bytes:
                    raise ApiError(413, f"request body is larger than the {max_bytes} byte limit", code="request_too_large")
                data.extend(chunk)
            if part.name == "file" and part.filename is not None:
                form.file, form.filename = bytes(data), part.filename
            elif part.name:
                form.fields.setdefault(part.name, []).append(data.decode("utf-8", errors="replace"))
    except ApiError:
        raise
    except Exception as exc:
        raise invalid("file", f"malformed multipart body: {exc}", "invalid_multipart") from exc
    return form


def number(form: Form, name: str, *, low: float | None = None, high: float | None = None) -> float | None:
    raw = form.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise invalid(name, f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise invalid(name, f"{name} must be finite")
    if (low is not None and value < low) or (high is not None and value > high):
        raise invalid(name, f"{name} must be between {low} and {high}, got {raw!r}")
    return value


def integer(form: Form, name: str, *, low: int = 0) -> int | None:
    raw = form.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise invalid(name, f"{name} must be an integer, got {raw!r}") from None
    if value < low:
        raise invalid(name, f"{name} must be >= {low}, got {value}")
    return value


def flag(form: Form, name: str) -> bool:
    raw = (form.get(name) or "").strip().lower()
    if raw in TRUE:
        return True
    if raw in FALSE:
        return False
    raise invalid(name, f"{name} must be a flag (1/true/yes/on or 0/false/no/off), got {raw!r}")
