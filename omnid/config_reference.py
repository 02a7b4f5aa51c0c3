"""The configuration reference of docs/configuration.md, generated from the typed config (names, types, defaults)
and the comments of config/omnid.toml (what the keys mean). Keys that one comment describes share one row, so each
meaning is written once. ``python -m omnid.config_reference`` prints it, ``--write`` puts it in the page (between
START and END); tests/test_docs.py keeps the page's copy current."""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import msgspec

from omnid.config import PATH_KEYS, SECTIONS, ModelConfig, _section_type, config_dir
from omnid.engine import kinds

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
HEADER = ["key", "type", "default", "meaning"]
Key = tuple[str, str]  # (section, key); the section of a [[models]] key is "models"


def comment_groups() -> list[tuple[list[Key], str]]:
    """Each comment of config/omnid.toml with the keys it describes: those right below it, up to the next blank
    line or comment. A key with no comment above it is a group of its own with no meaning."""
    groups: list[tuple[list[Key], str]] = []
    section, block = "", []
    keys: list[Key] | None = None  # the keys of the group being read
    for line in (config_dir() / "omnid.toml").read_text().splitlines():
        line = line.strip()
        if line.startswith("#"):
            block.append(line.lstrip("# "))
            keys = None
        elif m := re.match(r"\[+([\w.]+)\]+", line):
            section, block, keys = m.group(1), [], None
        elif m := re.match(r"(\w+)\s*=", line):
            if keys is None:
                keys = []
                groups.append((keys, " ".join(block)))
                block = []
            keys.append((section, m.group(1)))
        else:
            block, keys = [], None
    return groups


def config_fields() -> dict[Key, msgspec.structs.FieldInfo]:
    """Every key of the typed configuration, in the order of its sections and fields."""
    structs = [(s, _section_type(s)) for s in SECTIONS] + [("models", ModelConfig)]
    return {(s, f.name): f for s, struct in structs for f in msgspec.structs.fields(struct)}


def key_name(key: Key) -> str:
    section, name = key
    return f"models[].{name}" if section == "models" else f"{section}.{name}"


TOML_TYPES = {str: "string", int: "integer", float: "float", bool: "boolean", type(None): "null"}


def _type_name(key: Key, t: Any) -> str:
    if key in PATH_KEYS or key == ("models", "path"):
        return "path"
    if key == ("models", "kind"):  # a string the configuration checks against the kinds' names
        return _one_of(kinds.NAMES)
    if typing.get_origin(t) is Literal:
        return _one_of(typing.get_args(t))
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(key, a) for a in typing.get_args(t))
    if typing.get_origin(t) is list:
        return f"array of {_type_name(key, typing.get_args(t)[0])}s"
    return TOML_TYPES.get(t, str(t))


def _one_of(values: tuple[Any, ...]) -> str:
    return "one of " + ", ".join(json.dumps(a) for a in values)


def _default(f: msgspec.structs.FieldInfo) -> str:
    if f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT:
        return "required"
    value = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
    return "`" + msgspec.json.encode(value).decode() + "`"


def cell(text: str) -> str:
    """Text as one table cell: a | in it would start another cell."""
    return text.replace("|", "\\|")


def reference_markdown() -> str:
    """One row per meaning: the keys one comment describes, with their types and defaults line by line."""
    fields = config_fields()
    group_of = {key: group for group in comment_groups() for key in group[0]}
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    written: set[Key] = set()
    for key in fields:
        if key in written:
            continue
        keys, meaning = group_of.get(key, ([key], ""))
        written.update(keys)
        cells = ["<br>".join(f"`{key_name(k)}`" for k in keys),
                 "<br>".join(_type_name(k, fields[k].type) for k in keys),
                 "<br>".join(_default(fields[k]) for k in keys),
                 meaning]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


def page_reference(text: str) -> str:
    """The reference as a page holds it."""
    return text[text.index(START) + len(START) : text.index(END)].strip()


def write_page() -> None:
    text = PAGE.read_text()
    head, tail = text[: text.index(START) + len(START)], text[text.index(END) :]
    PAGE.write_text(f"{head}\n{reference_markdown()}\n{tail}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_page()
    else:
        print(reference_markdown())
