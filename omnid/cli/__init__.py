"""The ``omnid`` command: transcribe files, evaluate on a corpus, serve, listen, and report the installation."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from omnid import __version__
from omnid.config import ConfigError, load_config


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="a TOML file overriding config/omnid.toml")
    p.add_argument("--model", help="model id from the configuration, or a checkpoint folder (Whisper or Qwen3-ASR) "
                                   "or Parakeet .nemo file, told by its files, or a Hugging Face repo id (org/name) "
                                   "in the local cache; default: transcription.default_model")
    _add_revision(p)
    p.add_argument("--window", choices=["full", "content"], help="window padding mode (default: from config)")


def _add_revision(p: argparse.ArgumentParser) -> None:
    p.add_argument("--revision", default="", metavar="REV",
                   help="with a Hugging Face repo id as --model: the snapshot of this branch, tag or commit in the "
                        "local cache (default: main's), as a [[models]] entry's revision")


def _positive(value: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError("must be a finite number > 0")
    return v


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omnid", description="Streaming speech-to-text daemon on MLX")
    parser.add_argument("--version", action="version", version=f"omnid {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("transcribe", help="transcribe audio files")
    t.add_argument("files", nargs="+", type=Path, metavar="FILE")
    _add_common(t)
    t.add_argument("--language", help="ISO-639-1 code or English name; default: detect (English-only models: en; a "
                                      "model that detects none, Cohere Transcribe: its configured language, else "
                                      "required)")
    t.add_argument("--prompt", help="context text to condition the decoder")
    # Values are checked by the request rules, as the HTTP route checks them (omnid/runtime/request_rules.py).
    t.add_argument("--temperature", help="sampling temperature, 0..1 (fallback rises from it)")
    t.add_argument("--max-new-tokens", help="at most this many tokens per decode (0: the model's own limit; more than "
                                            "the model can produce is held to what it can)")
    t.add_argument("--format", "-f", default="text", choices=["text", "json", "verbose_json", "srt", "vtt"])
    t.add_argument("--word-timestamps", action="store_true", help="words with start/end times (verbose_json)")
    t.add_argument("--punctuation", action=argparse.BooleanOptionalAction, default=None,
                   help="with a model that has the switch (Cohere Transcribe): punctuated and cased text, or not "
                        "(default: the model's configured default)")
    t.add_argument("--use-itn", dest="itn", action=argparse.BooleanOptionalAction, default=None,
                   help="with a model that has the switch (SenseVoice): inverse text normalisation (numbers as "
                        "digits, punctuation), or not (default: the model's configured default)")
    t.add_argument("--aligner", help="a Qwen3-ForcedAligner (configured id or checkpoint folder) to time a Qwen3-ASR "
                                     "model's transcript (srt, vtt, verbose_json, --word-timestamps)")
    t.add_argument("--output-dir", "-o", type=Path, help="write FILE.<ext> there instead of printing")
    t.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")

    e = sub.add_parser("eval", help="score a model on a corpus manifest")
    _add_common(e)
    e.add_argument("--manifest", type=Path,
                   help="a corpus's manifest.jsonl (or its folder); default: $OMNID_CORPUS's. tests/corpus is a small one")
    e.add_argument("--reference", type=Path, action="append", help="reference outputs .jsonl (repeatable)")
    e.add_argument("--language", default="en",
                   help="only clips of these manifest languages (comma-separated, or 'all'; default: en); each clip's "
                        "language is forced where the model has it. Scored as English WER, Chinese CER, mixed MER")
    e.add_argument("--limit", type=int, help="only the first N clips")
    e.add_argument("--fallback", action="store_true",
                   help="use the configured temperature fallback (default: greedy at temperature 0 only, as the "
                        "reference outputs were made)")
    e.add_argument("--ids", nargs="*", help="only these clip ids")
    e.add_argument("--write", type=Path, metavar="GOLDEN", help="write the golden file")
    e.add_argument("--check", type=Path, metavar="GOLDEN", help="fail if any clip's output moved from the golden")

    s = sub.add_parser("serve", help="run the daemon (HTTP API and WebSockets)")
    s.add_argument("--config", type=Path)
    s.add_argument("--host", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="port; 0 lets the OS choose (default 8000)")
    s.add_argument("--supervised", action="store_true",
                   help="run under a parent (Voxt): one JSON 'ready'/'failed' line on stdout, commands on stdin")

    li = sub.add_parser("listen", help="stream the microphone (or a file) to a running daemon and print the words")
    li.add_argument("--config", type=Path)
    li.add_argument("--url", help="the daemon (default: http://<server.host>:<server.port> from the config)")
    li.add_argument("--protocol", choices=["voxt", "openai"], default="voxt", help="realtime dialect (default voxt)")
    li.add_argument("--file", type=Path, help="stream this audio file at real-time speed instead of the microphone")
    li.add_argument("--speed", type=_positive, default=1.0, help="with --file: times real-time speed (default 1)")
    li.add_argument("--api-key", help="the daemon's API key (default: security.api_key from the config)")
    li.add_argument("--language", help="the session's language: ISO-639-1 code or English name (default: the "
                                       "model's configured one, else detect; a model that detects none, Cohere "
                                       "Transcribe, needs one)")
    li.add_argument("--model", help="the session's model: a model id the daemon serves, or one of its aliases "
                                    "(default: the daemon's default model)")

    sv = sub.add_parser("service", help="run the daemon as a login service (launchd on macOS, systemd --user on Linux)")
    sv.add_argument("action", choices=["install", "uninstall", "status", "print"])
    sv.add_argument("--config", type=Path, help="the config the service runs with (default ~/.config/omnid/omnid.toml if present)")

    di = sub.add_parser("diarize", help="who spoke when in an audio file (a Sortformer model)")
    di.add_argument("file", type=Path, metavar="FILE")
    di.add_argument("--config", type=Path)
    di.add_argument("--model", help="a Sortformer checkpoint folder or .nemo file, a configured model id, or a "
                                    "Hugging Face repo id (org/name) in the local cache")
    _add_revision(di)
    di.add_argument("--latency", choices=["very_high", "high", "low", "ultra_low"],
                    help="streaming preset (default: diarization.file_latency)")

    d = sub.add_parser("doctor", help="versions, device, BLAS, models and their pins")
    d.add_argument("--config", type=Path)

    mo = sub.add_parser("models", help="the checkpoints in the local Hugging Face cache omnid can serve (repo id, "
                                       "kind, layout, dtype or bits, size), and why not for the others")
    mo.add_argument("--config", type=Path)
    return parser


def entry() -> NoReturn:
    """The console script and ``python -m omnid``: the command's code, without interpreter teardown (see
    ``process_exit``): a one-shot command that ran a model would otherwise abort now and then on its way out."""
    from omnid.cli.process_exit import exit_now

    exit_now(main())


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit code. A bad input's error, whatever the command, ends here as one line naming the file
    (and the tensor or key) with its exit code (omnid/cli/failures.py); its traceback only with
    OMNID_LOG_LEVEL=debug."""
    args = build_parser().parse_args(argv)
    from omnid.cli import failures
    from omnid.logging import configure_logging

    # The daemon logs a line per request; one-shot commands stay quiet unless asked.
    configure_logging(None if os.environ.get("OMNID_LOG_LEVEL") else ("info" if args.command == "serve" else "warning"))
    try:
        return _run(args)
    except failures.FAILURES as exc:
        return failures.report(exc)
    except KeyboardInterrupt:
        print("omnid: interrupted", file=sys.stderr)
        return failures.INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    overrides, flag_names = {}, {}
    if args.command == "serve":
        server = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        overrides = {"server": server} if server else {}
        flag_names = {("server", k): f"--{k}" for k in server}
    config = load_config(args.config, overrides, environ=dict(os.environ), flag_names=flag_names)
    if args.command == "service":
        from omnid.cli.service import command as service

        return service(args.action, args.config)
    if args.command == "listen":
        from omnid.cli.listen import run as listen

        url = args.url or f"http://{config.server.host}:{config.server.port}"
        return listen(url, args.protocol, args.file, args.speed, args.api_key or config.security.api_key or None,
                      model=args.model, language=args.language)
    if args.command == "diarize":
        from omnid.cli.diarize import diarize_command

        return diarize_command(args.file, args.model, args.latency, config, args.revision)
    if args.command == "doctor":
        from omnid.cli.doctor import doctor

        return doctor(config, args.config)
    if args.command == "models":
        from omnid.cli.models import models_command

        return models_command()
    if args.command == "serve":
        from omnid.cli.serve import run
        from omnid.logging import configure_logging

        if config.server.log_file:
            try:
                configure_logging(None if os.environ.get("OMNID_LOG_LEVEL") else "info", config.server.log_file)
            except OSError as exc:
                raise ConfigError(f"server.log_file: {exc}") from exc

        return run(config, supervised=args.supervised)
    from omnid.cli.eval import eval_command
    from omnid.cli.transcribe import transcribe_command

    if args.command == "transcribe":
        return asyncio.run(transcribe_command(args, config))
    return asyncio.run(eval_command(args, config))
