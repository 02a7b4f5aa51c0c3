"""structlog set-up: readable lines on a terminal, JSON lines otherwise; stderr, never stdout."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog


class LogFile:
    """An append-mode log file that SIGHUP can reopen after a rotation moved it away."""

    def __init__(self, path: str):
        self.path = path
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115  (lives as long as the daemon)

    def write(self, text: str) -> int:
        return self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def isatty(self) -> bool:
        return False

    def reopen(self) -> None:
        old, self._file = self._file, open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        old.close()


_log_file: LogFile | None = None


def reopen_log_file() -> None:
    if _log_file is not None:
        _log_file.reopen()
        structlog.get_logger(__name__).info("log_file_reopened")


def configure_logging(level: str | None = None, log_file: str | None = None) -> None:
    global _log_file
    level_name = (level or os.environ.get("OMNID_LOG_LEVEL", "warning")).upper()
    numeric = getattr(logging, level_name, logging.WARNING)
    _log_file = LogFile(log_file) if log_file else None
    out: Any = _log_file or sys.stderr  # a TextIO, or the reopenable file that behaves as one
    renderer = (
        structlog.dev.ConsoleRenderer(colors=False)
        if out.isatty()
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


_log_content = False


def set_log_content(enabled: bool) -> None:
    """security.log_content: transcript text may appear in logs only when this is switched on."""
    global _log_content
    _log_content = enabled


def content(text: str | None) -> dict[str, str]:
    """Fields to add to a log event about a transcript: its text only when content logging is on."""
    return {"text": text} if _log_content and text is not None else {}
