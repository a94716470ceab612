"""A progress bar for loads and analyses that take a while, on stderr, only on a terminal.

:class:`Progress` shows nothing for the first second: most traces load and
analyse faster than that, and a bar that flashes by is noise. After that, if
stderr is a terminal, a rich bar appears (and disappears when done); in tests,
CI logs and pipes there is never any output. rich is imported only when a bar
is actually shown.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

__all__ = ["DELAY_S", "Progress"]

#: a bar appears only once its task has run this long
DELAY_S = 1.0
_REFRESH_S = 0.1


class Progress:
    """``with Progress("Loading x.json.gz", total=n) as bar: ... bar.update(done)``."""

    def __init__(self, label: str, total: float | None = None, *, enabled: bool | None = None,
                 delay_s: float = DELAY_S) -> None:
        self.label = label
        self.total = total
        self.enabled = _is_terminal() if enabled is None else enabled
        self.delay_s = delay_s
        self.started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        self._last_refresh = 0.0

    def update(self, done: float, total: float | None = None) -> None:
        """Record progress; shows or refreshes the bar when it is due."""
        if total is not None:
            self.total = total
        if not self.enabled:
            return
        now = time.monotonic()
        if self._bar is None:
            if now - self.started < self.delay_s:
                return
            self._start()
        if now - self._last_refresh >= _REFRESH_S:
            self._bar.update(self._task, completed=done, total=self.total)
            self._bar.refresh()
            self._last_refresh = now

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

        # The label holds a file name: shown as text, never read as markup (see advisor.messages).
        label = TextColumn("{task.description}", markup=False)
        self._bar = RichProgress(label, BarColumn(), TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True, auto_refresh=False)
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=self.total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False
