"""Progress of long work on stderr: redrawn in place on a terminal, a line per 10 % otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

MIN_SECONDS = 30.0  # shorter audio finishes before a progress line would help


class Progress:
    def __init__(self, label: str, total: float, enabled: bool = True, stream: TextIO = sys.stderr):
        self.label, self.total, self.stream = label, total, stream
        self.enabled = enabled and total >= MIN_SECONDS
        self.tty = stream.isatty()
        self.started = time.perf_counter()
        self._last_decile = -1

    def update(self, done: float) -> None:
        if not self.enabled:
            return
        pct = round(100.0 * min(done, self.total) / self.total, 1)
        speed = done / max(time.perf_counter() - self.started, 1e-6)
        line = f"{self.label}: {pct:5.1f}% ({done:.0f}/{self.total:.0f} s, {speed:.1f}x realtime)"
        if self.tty:
            print(f"\r{line}", end="", file=self.stream, flush=True)
        elif int(pct // 10) > self._last_decile:
            self._last_decile = int(pct // 10)
            print(line, file=self.stream, flush=True)

    def finish(self) -> None:
        if self.enabled:
            self.update(self.total)
            if self.tty:
                print(file=self.stream)
