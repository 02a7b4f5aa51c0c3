"""``omnid eval``: a model over a corpus manifest, scored, compared with a reference system's outputs, and
recorded in (or checked against) a golden file."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from omnid.evaluation.scoring import ErrorRate, metric_name


class Clip(msgspec.Struct):
    id: str
    path: str
    language: str
    text: str
    duration_s: float = 0.0


class Golden(msgspec.Struct):
    model: str
    device: str
    window: str
    metric: str
    error_rate: float
    identical_to_reference: int
    clips: dict[str, str]


def read_manifest(path: Path, language: str | None, limit: int | None, ids: list[str] | None) -> list[Clip]:
    """Clips of ``language`` (a manifest language, a comma-separated list of them, or "all")."""
    clips = [msgspec.json.decode(line, type=Clip) for line in path.read_text().splitlines() if line.strip()]
    if language and language != "all":
        wanted_languages = {x.strip() for x in language.split(",")}
        clips = [c for c in clips if c.language in wanted_languages]
    if ids:
        wanted = set(ids)
        clips = [c for c in clips if c.id in wanted]
    return clips[:limit] if limit else clips


def read_reference(path: Path) -> dict[str, str]:
    return {d["id"]: d["text"] for d in map(json.loads, path.read_text().splitlines()) if d}


def score(clips: list[Clip], outputs: dict[str, str]) -> ErrorRate:
    rate = ErrorRate()
    for clip in clips:
        if clip.id in outputs and clip.text.strip():
            rate.add(clip.text, outputs[clip.id], clip.language)
    return rate


def identical(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return [k for k in a if k in b and a[k].strip() == b[k].strip()]


def table(clips: list[Clip], ours: dict[str, str], references: dict[str, dict[str, str]], model: str) -> str:
    """One table per metric among the clips (English WER, Chinese CER, mixed MER), each with its own clips."""
    metrics = list(dict.fromkeys(metric_name(c.language) for c in clips)) or ["WER"]
    return "\n\n".join(_table([c for c in clips if metric_name(c.language) == m], m, ours, references, model)
                       for m in metrics)


def _table(clips: list[Clip], metric: str, ours: dict[str, str], references: dict[str, dict[str, str]], model: str) -> str:
    rows = [("system", f"{metric} %", "clips", "identical to " + (next(iter(references), "-")))]
    first_ref = next(iter(references.values()), {})
    mine = score(clips, ours)
    mine_outs = {c.id: ours[c.id] for c in clips if c.id in ours}
    rows.append((f"omnid {model}", f"{mine.percent:.2f}", str(mine.clips), str(len(identical(mine_outs, first_ref)))))
    for name, outs in references.items():
        subset = {c.id: outs[c.id] for c in clips if c.id in outs}
        rate = score(clips, subset)
        rows.append((name, f"{rate.percent:.2f}", str(rate.clips), str(len(identical(subset, first_ref)))))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def make_golden(model: str, device: str, window: str, clips: list[Clip], ours: dict[str, str], reference: dict[str, str]) -> Golden:
    rate = score(clips, ours)
    return Golden(
        model=model,
        device=device,
        window=window,
        metric=metric_name(clips[0].language) if clips else "WER",
        error_rate=round(rate.percent, 2),
        identical_to_reference=len(identical(ours, reference)),
        clips=dict(sorted(ours.items())),
    )


def check_golden(golden: Golden, ours: dict[str, str]) -> list[str]:
    """Clips whose output moved since the golden was written (only clips present in both)."""
    return [cid for cid, text in ours.items() if cid in golden.clips and golden.clips[cid] != text]
