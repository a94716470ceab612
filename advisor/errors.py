"""The advisor's exceptions, in one tree.

    AdvisorError                 base: the CLI catches this and prints one line
    ├── UsageError               a bad option or argument on the command line
    ├── InputError               a file given to us is missing, unreadable or malformed
    │   ├── TraceError           a profiler trace (Kineto, nsys, ncu) cannot be read
    │   └── RunDirError          a run directory is missing pieces or is not one
    ├── RuleError                a rule or workflow file is invalid (names file:line and field)
    │   └── ExpressionError      an expression does not parse or breaks a safety limit
    ├── CollectError             a profiling tool could not be started or gave nothing
    │   └── ToolMissingError     nsys / ncu / a GPU is not available; carries the command to run by hand
    ├── AnalysisError            the analysis broke on an input it should have handled: a bug, the file named
    ├── ScriptFailed             the user's script failed; what was captured is kept
    └── Interrupted              Ctrl-C; the message says what was kept and where (exit code 130)

Every message says what happened, to which file, and what to do next.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import TracebackType
from typing import Any

#: the exit code of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130

__all__ = [
    "AdvisorError",
    "AnalysisError",
    "CollectError",
    "ExpressionError",
    "EXIT_INTERRUPTED",
    "InputError",
    "Interrupted",
    "RuleError",
    "RunDirError",
    "ScriptFailed",
    "ToolMissingError",
    "TraceError",
    "UsageError",
    "DroppedInterrupts",
]


class AdvisorError(Exception):
    """Base of every error the advisor raises on purpose."""

    exit_code = 2


class UsageError(AdvisorError):
    """A bad option or argument."""


class InputError(AdvisorError):
    """A file we were given is missing, unreadable or malformed."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[Path, str]]:
        # Raised in a worker process (advisor.rank_files), it is pickled back: rebuilt from what it was given.
        return type(self), (self.path, self.problem)


class TraceError(InputError):
    """A profiler trace cannot be read."""


class RunDirError(InputError):
    """A run directory is missing pieces or is not a run directory."""


class RuleError(AdvisorError):
    """A rule or workflow file is invalid."""

    def __init__(self, path: str | Path | None, line: int | None, message: str) -> None:
        self.path = Path(path) if path else None
        self.line = line
        self.message = message
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(f"{where}{message}")


class ExpressionError(AdvisorError):
    """An expression does not parse, or breaks one of the safety limits."""

    def __init__(self, message: str, source: str = "", position: int | None = None) -> None:
        self.message = message
        self.source = source
        self.position = position
        super().__init__(message)


class CollectError(AdvisorError):
    """A profiling tool could not be started, or left nothing behind."""


class ToolMissingError(CollectError):
    """A tool or device needed for a stage is not available here."""

    def __init__(self, message: str, command: str | None = None) -> None:
        self.command = command
        super().__init__(message)


class AnalysisError(AdvisorError):
    """The analysis of an input failed where it should not: a bug in advisor, reported with the input named.

    Raised from the exception that broke it (``--debug`` shows both tracebacks).
    """

    exit_code = 3

    def __init__(self, what: str, cause: BaseException) -> None:
        self.what = what
        self.cause = cause
        text = " ".join(str(cause).split())[:200]
        where = _advisor_frame(cause)
        super().__init__(f"{what}: the analysis failed on it ({type(cause).__name__}: {text}{where}); this is a "
                         "bug in advisor, not a problem of the file: please report it with the file (--debug shows "
                         "the traceback)")


def _advisor_frame(exc: BaseException) -> str:
    """`` at advisor/analyze/precision.py:112``: the innermost frame in advisor's own code."""
    import traceback

    root = Path(__file__).resolve().parent
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(root):
            return f" at advisor/{path.relative_to(root)}:{frame.lineno}"
    return ""


class ScriptFailed(AdvisorError):
    """The user's script exited with an error; the profile captured so far was kept."""

    exit_code = 1


class Interrupted(AdvisorError):
    """Ctrl-C stopped a run; what was collected until then is kept, and the message says where."""

    exit_code = EXIT_INTERRUPTED


class DroppedInterrupts:
    """``with DroppedInterrupts() as dropped: ...; dropped.take()``: the Ctrl-C that Python dropped meanwhile.

    Python drops an exception raised where it cannot propagate: a weakref callback, ``__del__``, the import
    machinery's lock clean-up among them. A Ctrl-C that lands there is printed as "Exception ignored in ..." and
    the command goes on (CI saw ``advisor analyze`` write its report and exit 0). While this is entered, such an
    interrupt is caught on its way to :func:`sys.unraisablehook` and kept, unprinted, for the caller to act on;
    any other dropped exception goes to the hook that was there before.
    """

    def __init__(self) -> None:
        self.pending = False
        self._before = sys.unraisablehook

    def __enter__(self) -> DroppedInterrupts:
        self._before = sys.unraisablehook
        sys.unraisablehook = self._hook
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        sys.unraisablehook = self._before

    def take(self) -> bool:
        """Whether an interrupt was dropped since the last call."""
        pending, self.pending = self.pending, False
        return pending

    def _hook(self, unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            self.pending = True
        else:
            self._before(unraisable)
