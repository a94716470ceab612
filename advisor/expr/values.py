"""The values of the expression language, and the limits that keep evaluation cheap.

An expression only ever sees numbers, strings, booleans, null, lists and
records (dicts): the plain data that findings hold. These helpers name those
types in messages and keep numbers finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from advisor.errors import ExpressionError

__all__ = [
    "MAX_EXPONENT", "MAX_LIST", "MAX_MAGNITUDE", "MAX_PATTERN", "MAX_STEPS", "MAX_STRING", "REGEX_TIMEOUT_S",
    "Absent", "check_number", "is_number", "truthy", "type_name",
]

#: evaluation steps (tree nodes visited) one evaluation may take
MAX_STEPS = 200_000
MAX_STRING = 10_000
MAX_LIST = 100_000
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e300
MAX_PATTERN = 200
REGEX_TIMEOUT_S = 0.05


class Absent(Exception):
    """A name the expression reads is not present in this run: the rule is not applicable."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"`{name}` is not available in this run")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_number(value: Any, source: str, pos: int) -> Any:
    """Keep arithmetic results finite and small: huge ints become floats, NaN and overflow are errors."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > 2**63:
        value = float(value)
    if isinstance(value, float) and (math.isnan(value) or abs(value) > MAX_MAGNITUDE):
        raise ExpressionError("arithmetic result is out of range", source, pos)
    return value


def truthy(value: Any) -> bool:
    return bool(value)


def type_name(value: Any) -> str:
    """The language's name for the type of ``value``, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "record"
    return "value"
