"""The user's traceback is the user's: what the collector shows and records when the script raises.

The collector runs the script from its own frames (the bootstrap) and wraps a
few torch functions to label phases and steps (``DataLoader.__next__``,
``Optimizer.step``, ``Module.__call__``, a torch function mode), so an
exception raised in the script passes through frames of advisor's code.
Python would show none of them. So:

- :func:`print_user_traceback` prints the traceback as ``python script.py``
  would: without advisor's frames (in the exception, its causes and contexts);
  a syntax error in the script as Python prints one, with the script's file and
  line and no frames at all.
- :func:`describe` is the short record for ``status.rank<R>.json``: the type, a
  one-line message, and the innermost line of the user's own code: for a
  syntax error the script's line, for a crash in a DataLoader worker the
  line in the worker, whose full traceback (which torch folds into the
  message, 15 lines and more) is kept apart, for a file in the run directory.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Iterable
from typing import Any

__all__ = ["ADVISOR_ROOT", "describe", "is_advisor_file", "print_user_traceback", "worker_failure"]

#: the advisor package's folder: frames of files below it are the collector's, not the user's
ADVISOR_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: what torch's ExceptionWrapper makes of an exception raised in a DataLoader worker
_WORKER = re.compile(r"^Caught (?P<type>\w+) in DataLoader worker process (?P<worker>\d+)\.\s*\n"
                     r"Original (?P<traceback>Traceback \(most recent call last\):.*)\Z", re.S)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$', re.M)
#: the longest message a status keeps on its one line
MESSAGE_CHARS = 300


def is_advisor_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(ADVISOR_ROOT + os.sep)


def _same_file(a: str | None, b: str) -> bool:
    return bool(a) and os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def _script_syntax_error(exc: BaseException, script: str) -> bool:
    return isinstance(exc, SyntaxError) and _same_file(exc.filename, script)


def _drop_advisor_frames(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not is_advisor_file(f.filename)])
    for nested in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if nested is not None:
            _drop_advisor_frames(nested, seen)


def print_user_traceback(exc: BaseException, script: str) -> None:
    """Print ``exc`` to stderr as ``python script.py`` would have."""
    if _script_syntax_error(exc, script):
        text = traceback.format_exception_only(type(exc), exc)  # Python shows no frames for the script's own
    else:
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
        # Before the script's first frame are the bootstrap's and runpy's: Python shows none of them.
        first = next((i for i, f in enumerate(te.stack) if _same_file(f.filename, script)), 0)
        te.stack = traceback.StackSummary.from_list(list(te.stack)[first:])
        _drop_advisor_frames(te, set())
        text = list(te.format())
    sys.stderr.write("".join(text))
    sys.stderr.flush()


def one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MESSAGE_CHARS else flat[: MESSAGE_CHARS - 3].rstrip() + "..."


def worker_failure(exc: BaseException) -> dict[str, Any] | None:
    """A DataLoader worker's exception, re-raised in the main process by torch: its type, message and traceback."""
    match = _WORKER.match(str(exc))
    if match is None:
        return None
    tb = match.group("traceback").rstrip()
    last = tb.splitlines()[-1] if tb else ""
    message = last.split(": ", 1)[1] if last.startswith(match.group("type") + ":") else last
    return {"worker": int(match.group("worker")), "type": match.group("type"), "message": message, "traceback": tb}


def _innermost_user(frames: Iterable[tuple[str, int, str | None]], libraries: tuple[str, ...],
                    script: str) -> tuple[str, int, str | None] | None:
    frames = list(frames)
    user = [f for f in frames if not f[0].startswith("<") and not os.path.abspath(f[0]).startswith(libraries)
            and not is_advisor_file(f[0])]
    if user:
        return user[-1]
    return next((f for f in reversed(frames) if _same_file(f[0], script)), frames[-1] if frames else None)


def describe(exc: BaseException, script: str, libraries: tuple[str, ...]) -> dict[str, Any]:
    """The exception, on one line, with the innermost line of the user's own code it came from."""
    if _script_syntax_error(exc, script):
        assert isinstance(exc, SyntaxError)
        return {"type": type(exc).__name__, "message": one_line(exc.msg), "file": exc.filename,
                "line": exc.lineno, "code": (exc.text or "").strip() or None}
    worker = worker_failure(exc)
    if worker is not None:
        frames = [(m["file"], int(m["line"]), None) for m in _FRAME.finditer(worker["traceback"])]
        where = _innermost_user(frames, libraries, script)
        return {"type": worker["type"], "message": one_line(worker["message"]),
                "file": where[0] if where else None, "line": where[1] if where else None, "code": None,
                "worker": worker["worker"]}
    frames = [(f.filename, f.lineno or 0, f.line) for f in traceback.extract_tb(exc.__traceback__)]
    where = _innermost_user(frames, libraries, script)
    return {"type": type(exc).__name__, "message": one_line(str(exc)), "file": where[0] if where else None,
            "line": where[1] if where else None, "code": where[2] if where else None}
