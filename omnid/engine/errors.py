"""Errors an engine raises while loading; the runtime's own errors are in omnid/runtime/errors.py."""


class EngineError(Exception):
    """Base class for engine failures."""


class CheckpointError(EngineError):
    """A checkpoint is missing, corrupt, mismatched or pinned to another hash. Raised at load, never later."""
