"""The Python loops of the user's source files: which loop a line of the trace ran in.

A trace names the line each operator call came from, never the loop around it, and a loop's body is spread
over several lines (and often over a helper it calls). This module reads the user's files with ``ast`` (each
file once per process, as long as it is unchanged) and answers, for a line of a function, the innermost
``for``, ``while`` or comprehension (list, set, dict, generator) around it in that same function.

Two guards keep a wrong file from giving a wrong loop. A line resolves only in the function the trace names
(the frame's ``co_name``; a comprehension's own frame, ``<listcomp>``, is the function around it), so a file
edited since the run, whose line now sits in another function, gives no answer. And a file that is not where the
trace says (a trace analysed on another machine) is *unread*: the caller falls back to the line alone and says so.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["Loop", "SourceLoops", "find_source", "loops_of"]

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
#: the frame names Python gives code that is not a ``def`` of its own name (3.11's comprehension frames, lambdas)
_ANONYMOUS = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>", "<lambda>"})


@dataclass(frozen=True)
class Loop:
    """One loop of a file: its header's line, its last line, its kind and the function it is in."""

    line: int
    end: int
    kind: str  # "for", "while" or "comprehension"
    function: str  # "<module>" at the top level


@dataclass(frozen=True)
class _Scope:
    name: str
    line: int
    end: int


class SourceLoops:
    """The loops and functions of one parsed file."""

    def __init__(self, tree: ast.AST) -> None:
        self.loops: list[Loop] = []
        self.scopes: list[_Scope] = []
        self._walk(tree, "<module>")

    def _walk(self, node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, _FUNCTIONS):
                inner = getattr(child, "name", "<lambda>")
                self.scopes.append(_Scope(inner, child.lineno, child.end_lineno or child.lineno))
            elif isinstance(child, (ast.For, ast.AsyncFor, ast.While)):
                kind = "while" if isinstance(child, ast.While) else "for"
                self.loops.append(Loop(child.lineno, child.end_lineno or child.lineno, kind, function))
            elif isinstance(child, _COMPREHENSIONS):
                self.loops.append(Loop(child.lineno, child.end_lineno or child.lineno, "comprehension", function))
            self._walk(child, inner)

    def function_at(self, line: int) -> str:
        """The innermost function holding the line, "<module>" outside every one."""
        holding = [s for s in self.scopes if s.line <= line <= s.end]
        return min(holding, key=lambda s: s.end - s.line).name if holding else "<module>"

    def innermost(self, line: int, function: str) -> Loop | None:
        """The innermost loop around ``line`` in ``function``; None when the line is in no loop of it, or when
        the file does not hold the line in that function (it changed since the run)."""
        own = self.function_at(line)
        if function != own and function not in _ANONYMOUS:
            return None
        around = [lp for lp in self.loops if lp.line <= line <= lp.end and lp.function == own]
        return min(around, key=lambda lp: lp.end - lp.line) if around else None

    def holds(self, line: int, function: str) -> bool:
        """Whether the file holds ``line`` inside ``function`` (a check that it is the file that ran)."""
        return function in _ANONYMOUS or self.function_at(line) == function


def find_source(file: str, roots: list[str]) -> Path | None:
    """The file a trace names, absolute or under one of the run's source roots; None when it is not here."""
    candidates = [Path(file)] if os.path.isabs(file) else [Path(root) / file for root in roots]
    return next((p for p in candidates if p.is_file()), None)


def loops_of(path: Path) -> SourceLoops | None:
    """The loops of a file, parsed once while its size and modification time stay; None when it cannot be read
    or parsed."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _parsed(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _parsed(path: str, mtime_ns: int, size: int) -> SourceLoops | None:
    try:
        text = Path(path).read_bytes()
        return SourceLoops(ast.parse(text, filename=path))
    except (OSError, SyntaxError, ValueError):  # unreadable, not Python, or a null byte in it
        return None
