"""The configuration reference of the README, generated from the typed config (names, types, defaults) and the
comments of config/omnid.toml (what each key means). ``python -m omnid.config_reference`` prints it; a test keeps
the README's copy current."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from omnid.config import SECTIONS, _section_type, config_dir

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def _comments() -> dict[tuple[str, str], str]:
    """The comment lines right above each key of config/omnid.toml."""
    out: dict[tuple[str, str], str] = {}
    section, block, note = "", [], ""
    for line in (config_dir() / "omnid.toml").read_text().splitlines():
        line = line.strip()
        if line.startswith("#"):
            block.append(line.lstrip("# "))
        elif m := re.match(r"\[+([\w.]+)\]+", line):
            section, block, note = m.group(1), [], ""
        elif m := re.match(r"(\w+)\s*=", line):
            # A comment block describes every key that follows it up to the next blank line or comment.
            note = " ".join(block) if block else note
            block = []
            out.setdefault((section, m.group(1)), note)
        else:
            block, note = [], ""
    return out


def _type_name(t: Any) -> str:
    return re.sub(r"typing\.|<class '(\w+)'>", r"\1", str(t)).replace("Literal", "one of ")


def _default(value: Any) -> str:
    return "`" + msgspec.json.encode(value).decode() + "`"


def reference_markdown() -> str:
    notes = _comments()
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for section in SECTIONS:
        struct = _section_type(section)
        for f in msgspec.structs.fields(struct):
            default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
            env = f"OMNID_{section.upper()}_{f.name.upper()}"
            meaning = notes.get((section, f.name), "").replace("|", "\\|")
            lines.append(f"| `{section}.{f.name}` (`{env}`) | {_type_name(f.type)} | {_default(default)} | {meaning} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference_markdown())
