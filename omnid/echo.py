"""How a client's value appears in an error message: a short prefix, never the whole of it (an error must not cost
the daemon memory or time proportional to what a hostile client sent)."""

from __future__ import annotations

ECHO_CHARS = 64


def shown(value: object, limit: int = ECHO_CHARS) -> str:
    """A short, safe rendering of a client's value: a string's first ``limit`` characters (quoted, with its real
    length when cut), a number as written, and only the type of anything else (containers may be huge or deep)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 3 * limit:  # str() of a huge int is itself slow (and refused past 4300 digits)
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if len(value) > limit:
            return f"{value[:limit]!r}... ({len(value)} characters)"
        return repr(value)
    return f"a JSON {_kind(value)}"


def _kind(value: object) -> str:
    kinds: dict[type, str] = {dict: "object", list: "array"}
    return kinds.get(type(value), type(value).__name__)
