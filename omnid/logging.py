"""structlog set-up: readable lines on a terminal, JSON lines otherwise; stderr, never stdout."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure_logging(level: str | None = None) -> None:
    level_name = (level or os.environ.get("OMNID_LOG_LEVEL", "warning")).upper()
    numeric = getattr(logging, level_name, logging.WARNING)
    renderer = (
        structlog.dev.ConsoleRenderer(colors=False)
        if sys.stderr.isatty()
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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
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
