"""How an ``omnid`` command ends on a bad input: one line on stderr, ``omnid: <message>``, the message naming the
file (and the tensor or key where its loader knows it), and an exit code; never a traceback, unless
OMNID_LOG_LEVEL=debug asks for it. ``main`` (omnid/cli/__init__.py) is the one place that turns these errors
into that line, for every command; ``omnid serve`` uses the same line for a start that fails.

Exit codes:

* 0: done;
* 1: a checkpoint that cannot load, a file that cannot be read or written, audio that is not audio (or some of
  the command's own work failed, as it says);
* 2: bad configuration or usage: a flag, a configuration key or file, a model id or path that names nothing;
* 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import sys
import traceback

from omnid.audio import AudioDecodeError
from omnid.config import ConfigError
from omnid.engine.errors import EngineError

FAILED = 1
USAGE = 2
INTERRUPTED = 130

# What a user's input can make a command raise. Anything else is omnid's own bug, and keeps its traceback.
FAILURES: tuple[type[BaseException], ...] = (ConfigError, EngineError, AudioDecodeError, OSError)


def exit_code(exc: BaseException) -> int:
    return USAGE if isinstance(exc, ConfigError) else FAILED


def one_line(exc: BaseException) -> str:
    """The error's message on one line: an OSError as ``FILE: why`` (not ``[Errno 13] ...: 'FILE'``), any line
    breaks a library put in its message joined with "; "."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        message = f"{os.fsdecode(exc.filename)}: {exc.strerror}"
    else:
        message = str(exc) or type(exc).__name__
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def debug() -> bool:
    return os.environ.get("OMNID_LOG_LEVEL", "").strip().lower() == "debug"


def report(exc: BaseException) -> int:
    """``omnid: <message>`` on stderr (after the traceback when OMNID_LOG_LEVEL=debug); the exit code."""
    if debug():
        traceback.print_exception(exc, file=sys.stderr)
    print(f"omnid: {one_line(exc)}", file=sys.stderr, flush=True)
    return exit_code(exc)
