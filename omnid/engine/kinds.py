"""Every kind of model omnid serves: one descriptor per folder under omnid/engine/ (engine/kind.py), collected here.
Adding a kind is its folder (with its kind.py) and its entry below; the configuration, the runtime, the catalog and
the command line derive what they know of kinds from this collection. Nothing but this module imports a kind's
folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omnid.engine.cohere_asr.kind import KIND as COHERE_ASR
from omnid.engine.fun_asr_nano.kind import KIND as FUN_ASR_NANO
from omnid.engine.kind import KindDescriptor, Role, Section
from omnid.engine.moss_transcribe_diarize.kind import KIND as MOSS_TRANSCRIBE_DIARIZE
from omnid.engine.nemotron.kind import KIND as NEMOTRON
from omnid.engine.parakeet.kind import KIND as PARAKEET
from omnid.engine.qwen3_aligner.kind import KIND as QWEN3_ALIGNER
from omnid.engine.qwen3_asr.kind import KIND as QWEN3_ASR
from omnid.engine.sensevoice.kind import KIND as SENSEVOICE
from omnid.engine.sortformer.kind import KIND as SORTFORMER
from omnid.engine.whisper.kind import KIND as WHISPER

# In the order messages and the configuration reference list them. The first is a model's kind where its
# [[models]] entry names none.
KINDS: tuple[KindDescriptor[Any], ...] = (WHISPER, QWEN3_ASR, PARAKEET, NEMOTRON, COHERE_ASR, SENSEVOICE,
                                         FUN_ASR_NANO, MOSS_TRANSCRIBE_DIARIZE, SORTFORMER, QWEN3_ALIGNER)
DEFAULT = KINDS[0]
NAMES = tuple(k.name for k in KINDS)
_BY_NAME = {k.name: k for k in KINDS}
# The kinds' own sections of the configuration, in the order of KINDS.
SECTIONS: tuple[Section[Any], ...] = tuple(k.section for k in KINDS if k.section is not None)


def named(name: str) -> KindDescriptor[Any]:
    """The kind a configured model names (the configuration has checked that there is one)."""
    return _BY_NAME[name]


def of_role(role: Role) -> tuple[KindDescriptor[Any], ...]:
    return tuple(k for k in KINDS if k.role == role)


def aligners_of(kind: str) -> tuple[KindDescriptor[Any], ...]:
    """The forced aligners that time a kind's transcripts (none: its models take no `aligner`)."""
    return tuple(k for k in of_role("alignment") if kind in k.times)


def timed() -> tuple[KindDescriptor[Any], ...]:
    """The kinds some forced aligner times."""
    return tuple(k for k in KINDS if aligners_of(k.name))


def recognise(path: Path, role: Role | None = None) -> KindDescriptor[Any] | None:
    """The kind of the role (None: of any role) whose checkpoint a path holds, told by its files; None when none
    recognises it. Where several do, a kind that another accepting kind shadows gives way to it (the more specific
    recogniser wins)."""
    accepting = [k for k in (of_role(role) if role else KINDS) if k.recognises is not None and k.recognises(path)]
    shadowed = {name for k in accepting for name in k.shadows}
    return next((k for k in accepting if k.name not in shadowed), None)


def spoken(words: Sequence[str]) -> str:
    """Words as a message lists alternatives: "Whisper, Qwen3-ASR, Parakeet or Nemotron"."""
    return f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else "".join(words)
