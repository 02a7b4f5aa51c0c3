"""What a kind of model is, said once by its own folder (``omnid/engine/<kind>/kind.py`` exports ``KIND``) and
collected in ``omnid/engine/kinds.py``. Whatever names kinds asks these descriptions instead of listing kinds: the
configuration (the accepted kinds, each kind's own section), the runtime (how an engine loads, which runtime its
role gets), the catalog's role checks, ``omnid transcribe --model PATH``, ``omnid doctor`` and /v1/models.

A descriptor module stays light: the configuration reads it, so a kind's model code is imported only when a
descriptor's function runs (in the function, not at the top)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import msgspec

from omnid.engine.errors import CheckpointError

# What a kind's models do, and so which runtime they get, which routes use them and where a request may name them.
Role = Literal["transcription", "diarization", "alignment"]
# Every section of the configuration by its name ("transcription", "qwen3_asr", ...), as plain values: what a kind
# builds its options from. Plain values because the configuration sits above the engines (it reads this module).
Sections = Mapping[str, Mapping[str, Any]]
Opts = TypeVar("Opts")


class KindSettings(msgspec.Struct, forbid_unknown_fields=True):
    """A kind's own section of the configuration (``[qwen3_asr]``, ``[parakeet]``), read as its section's keys."""

    def check(self) -> None:
        """Raises ValueError naming the key (``parakeet.max_chunk_s must be ...``) where a value is out of range;
        the configuration reports it as it reports its own keys."""


Settings = TypeVar("Settings", bound=KindSettings)


@dataclass(frozen=True)
class Section(Generic[Settings]):
    name: str  # its [table] in the configuration, and its OMNID_<NAME>_<KEY> variables
    settings: type[Settings]

    def read(self, sections: Sections) -> Settings:
        """The section's values as its type: the options of a kind whose engine takes its section as it is."""
        return self.settings(**sections[self.name])


@dataclass(frozen=True)
class KindDescriptor(Generic[Opts]):
    name: str  # the configuration's `kind`, and a model's kind on /v1/models and /health
    title: str  # how messages name it ("Qwen3-ASR")
    role: Role
    # What its engine reads from the configuration, built when the engine is built (None: nothing).
    options: Callable[[Sections], Opts]
    # (model id, checkpoint path, pins, options) -> its engine; called on the runtime's worker thread.
    load: Callable[[str, Path, Mapping[str, str], Opts], Any]
    # The layout of the checkpoint a path configured as this kind holds ("mlx", "nemo", ...), as its loader tells
    # it; CheckpointError where there is none.
    layout: Callable[[Path], str]
    # Whether a path holds one of its checkpoints, told by its files (``omnid transcribe --model PATH``, ``omnid
    # models``); None: a kind that is only ever configured.
    recognises: Callable[[Path], bool] | None = None
    # Kinds whose recognisers also accept some of this kind's checkpoints (a Nemotron folder is shaped like
    # Parakeet's; a transformers folder holds model.safetensors as Whisper's does): where both accept, this one wins.
    shadows: tuple[str, ...] = ()
    section: Section[Any] | None = None  # its own section of the configuration, if it has one
    times: tuple[str, ...] = ()  # a forced aligner: the kinds whose transcripts it times (their `aligner` key)


def no_options(_: Sections) -> None:
    """A kind that reads nothing from the configuration."""


def plain_layout(path: Path) -> str:
    """The layout of a kind whose loader tells its forms apart by the path alone: a ``.nemo`` file, or a folder."""
    if not path.exists():
        raise CheckpointError(f"{path}: missing")
    return "nemo" if path.suffix == ".nemo" else "folder"
