"""Errors of the runtime, whatever the engine: the API maps them onto HTTP and socket errors."""


class QueueFullError(Exception):
    """The engine's queue is at its configured cap; the caller should retry later."""


class JobCancelledError(Exception):
    """The job was cancelled while queued or running (its caller went away, or the runtime closed)."""
