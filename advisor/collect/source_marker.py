"""Source-line labels: which line of the user's code called each PyTorch op.

The profiler's own Python tracer names the *function* (``train.py(40):
forward``) but not the line inside it that made the call. During the profiled
window a :class:`SourceMarker` (a ``TorchFunctionMode``) sees every call into
the torch API, walks up the Python stack to the nearest frame in the user's
code, and wraps the call in a ``record_function`` named::

    advisor::src train.py:57 in augment
    advisor::src train.py:61 in augment [direct]

so every op below it in the trace carries its call site. The second form marks
a *direct* call: the user's line called the torch function itself (no frame was
walked past, other than torch's own dispatch), as a loop over samples does; the
first, a call made by library code below the line, as when the line calls a
whole model. Only outermost torch calls are wrapped: inside
``__torch_function__`` the mode is off, so nested calls are not seen twice.

When the user's function was itself called straight from the user's code (a
helper a loop calls per row, a comprehension's own frame), the label names
those callers too, innermost first, up to :data:`_MAX_CALLERS`::

    advisor::src model.py:8 in row [direct] < model.py:30 in forward

so the analysis can find the loop around the call in the caller
(:mod:`advisor.analyze.framework.source_loops`). The chain stops at the first
library frame: a loop that calls a model (``nn.Module.__call__`` is torch's
code) hands the model its work, and the model's calls are not the loop's. It
costs one more frame looked at per torch call, and one per caller named
(``bench/source_marker_cost.py``).

The mode is inserted at the *bottom* of the torch-function mode stack, so a
mode the script itself enters and leaves (``with torch.device(...)``) is
never popped out of order. Under ``torch.compile`` tracing it steps aside.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from advisor.collect.labels import fast_range
from advisor.naming import source_label

__all__ = ["SourceMarker", "library_roots"]

_MAX_WALK = 64
#: the user's callers a label names at most: a helper, a comprehension's frame and the function around it
_MAX_CALLERS = 4
#: the module through which torch functions written in Python dispatch to a TorchFunctionMode
_OVERRIDES = os.path.abspath(torch.overrides.__file__)
# Metadata queries make no op; labelling them would only bloat the trace.
_SKIP = frozenset(
    {"__get__", "__set__", "size", "dim", "numel", "stride", "is_contiguous", "__len__", "data_ptr",
     "element_size", "__repr__", "__format__", "__hash__", "__iter__", "type", "get_device", "is_floating_point"}
)


def library_roots() -> tuple[str, ...]:
    """Folders whose code is never the user's: the standard library, site-packages, torch, advisor."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(str(Path(__file__).resolve().parents[1]))  # advisor itself
    roots.add(os.path.dirname(torch.__file__))
    return tuple(sorted(r for r in roots if r))


class SourceMarker(TorchFunctionMode):
    """Labels torch calls with the user's file:line while ``enabled``."""

    def __init__(self, roots: list[Path], direct_only: Callable[[], bool] = lambda: False) -> None:
        super().__init__()
        self.direct_only = direct_only
        self.roots = [str(r.resolve()) for r in roots]
        self.libraries = library_roots()
        self.enabled = False
        # Keyed by id(code), each entry holding its code object (so the id is not reused while the entry
        # lives): a code object's own hash is computed from its contents on every lookup, about 2 us, paid
        # per frame walked on every torch call.
        self._display: dict[int, tuple[CodeType, str | None]] = {}
        self._dispatch: dict[int, tuple[CodeType, bool]] = {}
        self._labels: dict[tuple[Any, ...], str] = {}
        self._on_stack = False

    # the mode ------------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not self.enabled or torch.compiler.is_compiling() or getattr(func, "__name__", "") in _SKIP:
            return func(*args, **kwargs)
        frame = self._caller(sys._getframe(1))
        # While a batch is fetched, torch calls made by the DataLoader's own code
        # (per-sample indexing, collate) are not the user's; only direct calls are.
        for walked in range(1 if self.direct_only() else _MAX_WALK):
            if frame is None:
                break
            code = frame.f_code
            display = self._user_path(code)
            if display is not None:
                callers = self._user_callers(frame)
                key: tuple[Any, ...] = (id(code), frame.f_lineno, walked == 0)
                if callers:  # most calls have none (a model's forward is called through nn.Module's code)
                    key += callers
                label = self._labels.get(key)
                if label is None:
                    label = self._labels[key] = source_label(display, key[1], code.co_name, direct=key[2],
                                                             callers=self._named(frame))
                with fast_range(label):
                    return func(*args, **kwargs)
            frame = frame.f_back
        return func(*args, **kwargs)

    def _user_callers(self, frame: FrameType) -> tuple[tuple[int, int], ...]:
        """``(id(code), instruction offset)`` of the user's frames that called ``frame``'s function straight from
        the user's code, innermost first.

        The instruction offset, not the line: a frame's ``f_lineno`` scans its code's line table on every read
        (about 0.4 us in a long function), and the walk runs on every torch call.
        """
        callers: tuple[tuple[int, int], ...] = ()
        caller = frame.f_back
        while caller is not None and len(callers) < _MAX_CALLERS:
            code = caller.f_code
            hit = self._display.get(id(code))
            if (hit[1] if hit is not None and hit[0] is code else self._user_path(code)) is None:
                break
            callers += ((id(code), caller.f_lasti),)
            caller = caller.f_back
        return callers

    def _named(self, frame: FrameType) -> tuple[tuple[str, int, str], ...]:
        """The callers of :meth:`_user_callers` as the label names them (file, line, function)."""
        named = []
        caller = frame.f_back
        for _ in self._user_callers(frame):
            named.append((self._user_path(caller.f_code) or "", caller.f_lineno, caller.f_code.co_name))
            caller = caller.f_back
        return tuple(named)

    def _caller(self, frame: FrameType | None) -> FrameType | None:
        """The frame that called the torch function, past torch's own dispatch to this mode.

        A torch function written in Python (``F.cross_entropy``, ``Tensor.backward``, the
        reflected operators) reaches the mode through ``handle_torch_function`` in
        ``torch/overrides.py``, from its own body: both frames are the call itself, not
        library code between the user's line and the call. A function in C reaches the mode
        from its caller's frame directly.
        """
        dispatched = False
        while frame is not None and self._is_dispatch(frame.f_code):
            frame, dispatched = frame.f_back, True
        return frame.f_back if dispatched and frame is not None else frame

    def _is_dispatch(self, code: CodeType) -> bool:
        hit = self._dispatch.get(id(code))
        if hit is not None and hit[0] is code:
            return hit[1]
        found = os.path.abspath(code.co_filename) == _OVERRIDES
        self._dispatch[id(code)] = (code, found)
        return found

    def caller_label(self) -> str | None:
        """The source label of the nearest user frame above the caller, for hooks."""
        frame = sys._getframe(2)
        for _ in range(_MAX_WALK):
            if frame is None:
                return None
            display = self._user_path(frame.f_code)
            if display is not None:
                return source_label(display, frame.f_lineno, frame.f_code.co_name)
            frame = frame.f_back
        return None

    def _user_path(self, code: CodeType) -> str | None:
        hit = self._display.get(id(code))
        if hit is not None and hit[0] is code:
            return hit[1]
        display = None
        filename = code.co_filename
        if filename and not filename.startswith("<"):
            full = os.path.abspath(filename)
            if not full.startswith(self.libraries):
                for root in self.roots:
                    if full == root or full.startswith(root + os.sep):
                        display = os.path.relpath(full, root)
                        break
        self._display[id(code)] = (code, display)
        return display

    # stack placement -------------------------------------------------------------
    def push_bottom(self) -> None:
        """Put the mode under any modes the script has already entered."""
        if self._on_stack:
            return
        from torch._C import _len_torch_function_stack, _pop_torch_function_stack, _push_on_torch_function_stack

        above = [_pop_torch_function_stack() for _ in range(_len_torch_function_stack())]
        _push_on_torch_function_stack(self)
        for mode in reversed(above):
            _push_on_torch_function_stack(mode)
        self._on_stack = True

    def remove(self) -> None:
        """Take the mode off the stack wherever it is, leaving the script's modes in order."""
        if not self._on_stack:
            return
        from torch._C import _len_torch_function_stack, _pop_torch_function_stack, _push_on_torch_function_stack

        modes = [_pop_torch_function_stack() for _ in range(_len_torch_function_stack())]
        for mode in reversed(modes):
            if mode is not self:
                _push_on_torch_function_stack(mode)
        self._on_stack = False
