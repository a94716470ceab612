"""Command-line values converted without pydantic where typer's own conversion would give the same value.

Typer (0.29 and later) converts every parameter it parses, ``None`` defaults
included, through a pydantic ``TypeAdapter`` built for it on first use: on
every ``advisor`` command that imported pydantic and built a schema per
parameter, 70-110 ms before the command ran (more than ``advisor --help``'s
whole budget), and it was most of what made pydantic a cost of
``advisor analyze``. The commands' parameters are plain: paths, text, numbers
with bounds, enums, and lists of those. For those, :func:`install` has typer
convert a value here, with typer's own path and choice functions, and hands
everything else to typer's adapter, built only then: an annotation of another
kind, a custom parser, and any value that does not convert cleanly, so a
wrong value gets typer's own error message.

It replaces one name of typer's internals (``typer.core.build_runtime_param``);
where typer has no such name (other versions) nothing is changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from collections.abc import Callable
from typing import Any, get_args, get_origin

__all__ = ["NOT_PLAIN", "install", "plain_value"]

#: what :func:`plain_value` returns for a value it leaves to typer
NOT_PLAIN = object()
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_installed: list[Callable[..., Any]] = []


def install() -> None:
    """Have typer's parameters convert plain values here (once per process; a no-op for other typer versions)."""
    if _installed:
        return
    try:
        import typer.core as typer_core
        from typer._coercion import RuntimeParam
    except ImportError:
        return
    original = getattr(typer_core, "build_runtime_param", None)
    if original is None:
        return
    _installed.append(original)

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):  # type: ignore[misc, valid-type]
        """A parameter converted by :func:`plain_value`, else by typer's own conversion (built on first need)."""

        descriptor: Any = None
        typer_param: list[Any] = field(default_factory=list)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            converted = plain_value(self.annotation, self.parameter_info, value, param, ctx)
            if converted is not NOT_PLAIN:
                return converted
            if not self.typer_param:
                self.typer_param.append(original(self.descriptor))
            return self.typer_param[0]._coerce_value(value, param=param, ctx=ctx)

    def build_runtime_param(descriptor: Any) -> Any:
        if descriptor.file_annotation is not None or descriptor.parameter_info.parser is not None:
            return original(descriptor)  # typer's own: files need no pydantic, parsers are the user's
        return PlainRuntimeParam(descriptor.parameter_info, descriptor.annotation, descriptor=descriptor)

    typer_core.build_runtime_param = build_runtime_param


def plain_value(annotation: Any, info: Any, value: Any, param: Any = None, ctx: Any = None) -> Any:
    """``value`` converted as typer converts it to ``annotation`` (a path, text, an int or float within
    ``info``'s bounds, an enum, or a list of those), or :data:`NOT_PLAIN` where typer must decide."""
    if get_origin(annotation) is list:
        if not isinstance(value, (list, tuple)):
            return NOT_PLAIN
        (item_type,) = get_args(annotation)
        items = [_leaf(item_type, info, v, param, ctx) for v in value]
        return NOT_PLAIN if any(i is NOT_PLAIN for i in items) else items
    return _leaf(annotation, info, value, param, ctx)


def _leaf(annotation: Any, info: Any, value: Any, param: Any, ctx: Any) -> Any:
    if not isinstance(annotation, type) or getattr(info, "clamp", False):
        return NOT_PLAIN
    if issubclass(annotation, Path):
        return _path(annotation, info, value, param, ctx)
    if issubclass(annotation, Enum):
        return _choice(annotation, info, value, ctx)
    if annotation is str:
        return value if isinstance(value, str) else NOT_PLAIN
    if annotation is int or annotation is float:
        return _number(annotation, info, value)
    return NOT_PLAIN


def _path(annotation: type[Path], info: Any, value: Any, param: Any, ctx: Any) -> Any:
    from typer._param_types import coerce_cli_path

    if isinstance(value, str) and value:
        value = annotation(value)
    if not isinstance(value, annotation) or (info.path_type is not None and info.path_type is not annotation):
        return NOT_PLAIN
    # typer's own checks (exists, file_okay, resolve_path, ...) on a value already of the path type, which is
    # all its adapter adds; their errors are its errors
    return coerce_cli_path(value, info, path_type=annotation, param=param, ctx=ctx)


def _choice(annotation: type[Enum], info: Any, value: Any, ctx: Any) -> Any:
    from typer._param_types import coerce_cli_choice

    try:
        return coerce_cli_choice(value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
    except ValueError:  # not a choice: typer's adapter says so in its words
        return NOT_PLAIN


def _number(annotation: type, info: Any, value: Any) -> Any:
    if isinstance(value, bool):
        return NOT_PLAIN
    if isinstance(value, str):
        if not (_INT if annotation is int else _FLOAT).fullmatch(value):
            return NOT_PLAIN
        number: Any = annotation(value)
    elif isinstance(value, int) or (annotation is float and isinstance(value, float)):
        number = annotation(value)
    else:
        return NOT_PLAIN
    if number != number or number in (float("inf"), float("-inf")):
        return NOT_PLAIN
    if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
        return NOT_PLAIN  # out of bounds: typer's message
    return number
