"""Command-line values converted without pydantic equal typer's own conversion; anything else is typer's."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from typer._coercion import resolve_type_descriptor
from typer.models import ArgumentInfo, OptionInfo

from advisor.cli import coercion


class Color(str, Enum):
    red = "red"
    blue = "blue"


CASES: list[tuple[Any, Any, Any]] = [
    (Path, OptionInfo(), "some/file.json.gz"),
    (Path, OptionInfo(), Path("x")),
    (list[Path], ArgumentInfo(), ["a.json", "b/c.json.gz"]),
    (str, OptionInfo(), "text"),
    (int, OptionInfo(min=0), "5"),
    (int, OptionInfo(min=0), 5),
    (int, OptionInfo(), "-12"),
    (float, OptionInfo(min=0.1), "2.5"),
    (float, OptionInfo(min=0.1), 10.0),
    (float, OptionInfo(), "1e3"),
    (float, OptionInfo(), 3),
    (Color, OptionInfo(), "blue"),
    (Color, OptionInfo(), Color.red),
]


def _typers(annotation: Any, info: Any, value: Any) -> Any:
    """What typer's own conversion (its pydantic adapter) gives."""
    original = coercion._installed[0] if coercion._installed else None
    assert original is not None, "advisor.cli.app installs the plain conversion"
    return original(resolve_type_descriptor(annotation, info))._coerce_value(value, param=None, ctx=None)


@pytest.mark.parametrize(("annotation", "info", "value"), CASES)
def test_plain_values_convert_as_typer_converts_them(annotation: Any, info: Any, value: Any) -> None:
    import advisor.cli.app  # noqa: F401  (installs it)

    ours = coercion.plain_value(annotation, info, value)
    assert ours is not coercion.NOT_PLAIN
    theirs = _typers(annotation, info, value)
    assert ours == theirs and type(ours) is type(theirs)
    if isinstance(ours, list):
        assert [type(v) for v in ours] == [type(v) for v in theirs]


@pytest.mark.parametrize(("annotation", "info", "value"), [
    (int, OptionInfo(min=0), "-1"), (int, OptionInfo(), "abc"), (int, OptionInfo(), "1.5"),
    (float, OptionInfo(min=0.1), "0.05"), (float, OptionInfo(), "nan"), (Color, OptionInfo(), "green"),
    (Path, OptionInfo(), ""), (int, OptionInfo(), True), (list[Path], ArgumentInfo(), "a.json"),
])
def test_values_that_do_not_convert_cleanly_are_left_to_typer(annotation: Any, info: Any, value: Any) -> None:
    assert coercion.plain_value(annotation, info, value) is coercion.NOT_PLAIN


def test_a_path_that_must_exist_is_checked_by_typers_rule(tmp_path: Path) -> None:
    from typer._click.exceptions import BadParameter

    with pytest.raises(BadParameter, match="does not exist"):
        coercion.plain_value(Path, OptionInfo(exists=True), str(tmp_path / "missing"))
    assert coercion.plain_value(Path, OptionInfo(exists=True), str(tmp_path)) == tmp_path
