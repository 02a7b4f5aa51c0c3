"""``omnid eval``: the corpus transcribed as the reference systems decoded it, scored, and checked against a golden."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path

import msgspec

from omnid.audio import decode_audio
from omnid.cli.transcribe import start_model
from omnid.config import Config
from omnid.engine.interface import TranscriptionEngine
from omnid.engine.languages import language_code
from omnid.evaluation import harness as evaluate
from omnid.evaluation.corpus import NoCorpus, manifest_path
from omnid.runtime import transcription
from omnid.runtime.models import transcribe_options


async def eval_command(args: argparse.Namespace, config: Config) -> int:
    try:
        manifest = manifest_path(args.manifest)
    except NoCorpus as exc:
        print(f"omnid eval: {exc}", file=sys.stderr)
        return 2
    corpus = manifest.parent
    clips = evaluate.read_manifest(manifest, args.language, args.limit, args.ids)
    if not clips:
        print("omnid eval: no clips selected", file=sys.stderr)
        return 2
    references = {p.stem: evaluate.read_reference(p) for p in (args.reference or _default_references(corpus, config))}
    runtime = await start_model(config, args.model, revision=args.revision)
    engine = runtime.engine
    can = engine.capabilities
    if can.requires_language and can.default_language is None:
        # A model that detects no language transcribes only the clips in one of its languages.
        kept = [c for c in clips if clip_language(engine, c.language) is not None]
        if len(kept) < len(clips):
            print(f"omnid eval: {len(clips) - len(kept)} clips skipped: model {engine.model_id} detects no language "
                  f"and has none of theirs", file=sys.stderr)
        if not kept:
            runtime.close()
            print("omnid eval: no clips selected", file=sys.stderr)
            return 2
        clips = kept
    # The reference systems decoded greedily at temperature 0, without fallback.
    opts = transcribe_options(config.transcription, window=args.window, fallback=args.fallback)
    loop = asyncio.get_running_loop()
    results: dict[str, str] = {}
    started = time.perf_counter()
    try:
        for i, clip in enumerate(clips, 1):
            audio = await loop.run_in_executor(None, decode_audio, corpus / clip.path)
            # Each clip's language forced where the model has it (the reference systems forced it), else detected.
            language = clip_language(engine, clip.language)
            transcript = await transcription.transcribe(runtime, audio, dataclasses.replace(opts, language=language))
            results[clip.id] = transcript.text
            print(f"\r[{i}/{len(clips)}] {clip.id[:50]:<50}", end="", file=sys.stderr, flush=True)
    finally:
        runtime.close()
    elapsed = time.perf_counter() - started
    audio_s = sum(c.duration_s for c in clips)
    print(file=sys.stderr)
    print(evaluate.table(clips, results, references, engine.model_id))
    print(f"\n{len(clips)} clips, {audio_s:.1f} s of audio in {elapsed:.1f} s ({audio_s / elapsed:.1f}x realtime)")
    first_ref = next(iter(references.values()), {})
    import mlx.core as mx

    device = "gpu" if mx.default_device().type == mx.gpu else "cpu"
    window = (args.window or config.transcription.window) + ("+fallback" if args.fallback else "")
    if args.write:
        golden = evaluate.make_golden(engine.model_id, device, window, clips, results, first_ref)
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_bytes(msgspec.json.format(msgspec.json.encode(golden), indent=2) + b"\n")
        print(f"golden written: {args.write}")
    if args.check:
        golden = msgspec.json.decode(args.check.read_bytes(), type=evaluate.Golden)
        moved = evaluate.check_golden(golden, results)
        if moved:
            for cid in moved:
                print(f"moved: {cid}\n  golden: {golden.clips[cid]}\n  now:    {results[cid]}")
            print(f"golden check FAILED: {len(moved)} of {len(results)} clips moved")
            return 1
        print(f"golden check passed: {len(results)} clips unchanged")
    return 0


def clip_language(engine: TranscriptionEngine, language: str) -> str | None:
    """The clip's language where the model has it; else the model's configured default (None: detect)."""
    code = language_code(language)
    can = engine.capabilities
    return code if code in can.languages else can.default_language


def _default_references(corpus: Path, config: Config) -> list[Path]:
    ref = corpus / "reference" / f"faster-whisper-{config.transcription.default_model}.jsonl"
    return [ref] if ref.exists() else []
