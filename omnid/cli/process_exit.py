"""Ending the process with a command's exit code, without interpreter teardown.

MLX keeps per-thread state whose C++ destructors take the GIL when an engine thread ends. If that thread ends
while the main thread is already finalizing the interpreter, taking the GIL unwinds the thread through a
``noexcept`` destructor and the process aborts (SIGABRT, "terminate called without an active exception")
instead of returning the command's code. Everything a command owns is closed before it returns, so the process
flushes its streams and leaves at once.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)
