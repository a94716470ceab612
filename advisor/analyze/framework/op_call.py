"""One operator call as the trace records it, and the cost a model gives it (see :mod:`.op_model`).

:class:`OpCall` holds a ``cpu_op``'s parsed ``Input Dims``, ``Input type`` and ``Concrete Inputs``, with
readers for the argument shapes, dtypes and scalar values; :class:`OpCost` is what a model returns;
:func:`register` files a model under the operator names it covers (:data:`MODELS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["MODELS", "OpCall", "OpCost", "bytes_per_element", "dtype_name", "register"]

#: trace dtype name -> (short name, bytes per element)
_DTYPES: dict[str, tuple[str, int]] = {
    "double": ("fp64", 8), "float": ("fp32", 4), "c10::half": ("fp16", 2), "c10::bfloat16": ("bf16", 2),
    "c10::float8_e4m3fn": ("fp8", 1), "c10::float8_e4m3fnuz": ("fp8", 1), "c10::float8_e5m2": ("fp8", 1),
    "c10::float8_e5m2fnuz": ("fp8", 1), "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
    "long int": ("int64", 8), "int": ("int32", 4), "short int": ("int16", 2), "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8), "c10::complex<double>": ("complex128", 16),
}


def dtype_name(trace_type: str) -> str:
    """``c10::BFloat16`` -> ``bf16``; an unknown name as it is."""
    hit = _DTYPES.get(trace_type.lower())
    return hit[0] if hit else trace_type


def bytes_per_element(trace_type: str) -> int | None:
    hit = _DTYPES.get(trace_type.lower())
    return hit[1] if hit else None


@dataclass(frozen=True)
class OpCall:
    """One distinct call: an operator name and its parsed ``Input Dims``, ``Input type``, ``Concrete Inputs``."""

    name: str
    dims: list[Any]
    types: list[str]
    concrete: list[str]

    @classmethod
    def parse(cls, name: str, dims: str, types: str, concrete: str) -> OpCall | None:
        """From the trace's JSON texts; ``None`` when the call has no shapes."""
        if not dims:
            return None
        try:
            d, t = orjson.loads(dims), orjson.loads(types) if types else []
            c = orjson.loads(concrete) if concrete else []
        except orjson.JSONDecodeError:
            return None
        if not isinstance(d, list):
            return None
        return cls(name, d, [str(x) for x in t] if isinstance(t, list) else [],
                   [str(x) for x in c] if isinstance(c, list) else [])

    def shape(self, i: int) -> tuple[int, ...] | None:
        """The shape of argument ``i``; ``None`` when it is absent, a scalar, or not one tensor's shape."""
        if i >= len(self.dims):
            return None
        d = self.dims[i]
        if not isinstance(d, list) or not d or not all(isinstance(x, int) for x in d):
            return None
        return tuple(d)

    def bpe(self, i: int) -> int | None:
        return bytes_per_element(self.types[i]) if i < len(self.types) else None

    def dtype(self, i: int) -> str:
        return dtype_name(self.types[i]) if i < len(self.types) else ""

    def text(self, i: int) -> str:
        return self.concrete[i] if i < len(self.concrete) else ""

    def ints(self, i: int, default: tuple[int, ...]) -> tuple[int, ...]:
        """A concrete int list (``"[1, 1]"``) or int (``"3"``), or ``default`` when absent."""
        raw = self.text(i).strip()
        if not raw:
            return default
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return default
        if isinstance(value, int):
            return (value,)
        return tuple(int(v) for v in value) if isinstance(value, list) else default

    def flag(self, i: int, default: bool = False) -> bool:
        raw = self.text(i).strip().lower()
        return raw == "true" if raw in ("true", "false") else default

    def flags(self, i: int, n: int) -> tuple[bool, ...]:
        """A concrete bool list (``"[True, False, True]"``); all True when absent."""
        raw = self.text(i).strip().strip("[]")
        parts = [p.strip().lower() for p in raw.split(",")] if raw else []
        return tuple(p == "true" for p in parts) if len(parts) == n else (True,) * n


@dataclass(frozen=True)
class OpCost:
    """What one call must do: ``flops`` and ``bytes`` (moved to or from memory), and the peak that bounds it."""

    category: str
    flops: float
    bytes: float
    #: the data type whose peak applies (``bf16``, ``fp32``, ...)
    dtype: str
    #: ``matrix`` (tensor / matrix cores) or ``vector`` (the ALUs)
    unit: str


Model = Callable[[OpCall], OpCost | None]
#: operator name -> its model
MODELS: dict[str, Model] = {}


def register(*names: str) -> Callable[[Model], Model]:
    def add(func: Model) -> Model:
        for n in names:
            MODELS[n] = func
        return func
    return add
