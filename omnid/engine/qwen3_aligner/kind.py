"""Qwen3-ForcedAligner as a kind of model (engine/kind.py): a forced aligner that times a Qwen3-ASR model's
transcripts (the model names it as its `aligner`), cutting them as [qwen3_asr]'s timed_segment_max_s says; its
checkpoint a folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.kind import KindDescriptor, Sections, plain_layout

if TYPE_CHECKING:
    from omnid.engine.qwen3_aligner.engine import Qwen3AlignerEngine

TIMES = "qwen3_asr"  # the kind whose transcripts it times, and whose section holds its one setting


def options(sections: Sections) -> float:
    """The longest timed segment, in seconds."""
    return float(sections[TIMES]["timed_segment_max_s"])


def load(model_id: str, path: Path, pins: Mapping[str, str], segment_max_s: float) -> Qwen3AlignerEngine:
    from omnid.engine.qwen3_aligner.engine import Qwen3AlignerEngine

    return Qwen3AlignerEngine(model_id, path, pins, segment_max_s=segment_max_s)


def recognises(path: Path) -> bool:
    from omnid.engine.qwen3.checkpoint import is_forced_aligner

    return path.is_dir() and is_forced_aligner(path)


KIND: KindDescriptor[float] = KindDescriptor(
    name="qwen3_forced_aligner", title="Qwen3-ForcedAligner", role="alignment", options=options, load=load,
    layout=plain_layout, recognises=recognises, shadows=("qwen3_asr", "whisper"), times=(TIMES,),
)
