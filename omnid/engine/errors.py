"""Errors the engine raises; the API maps them onto HTTP and socket errors."""


class EngineError(Exception):
    """Base class for engine failures."""


class CheckpointError(EngineError):
    """A checkpoint is missing, corrupt, mismatched or pinned to another hash. Raised at load, never later."""


class QueueFullError(EngineError):
    """The engine's queue is at its configured cap; the caller should retry later."""


class JobCancelledError(EngineError):
    """The job was cancelled while queued or running."""

