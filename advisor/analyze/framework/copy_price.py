"""A layout copy priced by its bytes and pattern at what the collector measured copies cost in the run's process.

The collector times ``.contiguous()`` of two kinds of strided view at a few
sizes, without the profiler (:mod:`advisor.collect.copy_costs`; ``host_costs.copy_us``
in run.json). A copy of the trace is priced from its input's dims, strides
and dtype (recorded in the shape steps): its pattern (*gather* when the
innermost dimension is strided, *rows* when it is contiguous) picks the probe,
and its bytes are placed between the probe's sizes on a log-log line: per-byte
cost changes with the cache level a size fits in. Below the smallest size a
copy costs what the smallest did (the call's dispatch dominates there); above
the largest, the largest's cost per byte.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from advisor.analyze.framework.op_call import OpCall
from advisor.analyze.framework.view import TraceView

__all__ = ["copy_pattern", "copy_prices_us", "price_us"]


def copy_pattern(dims: Sequence[int], strides: Sequence[int]) -> str | None:
    """``gather`` or ``rows`` for a tensor of these dims and strides; None when it is already dense (no copy) or
    the two do not fit together."""
    if len(dims) != len(strides):
        return None
    kept = [(d, s) for d, s in zip(dims, strides) if d != 1]
    if not kept:
        return None
    expected = 1
    for d, s in reversed(kept):
        if s != expected:
            return "rows" if kept[-1][1] == 1 else "gather"
        expected *= d
    return None


def price_us(nbytes: float, points: Sequence[Sequence[float]]) -> float | None:
    """Microseconds for a copy of ``nbytes`` from the probe's ``[[bytes, us], ...]``; None without a usable point."""
    known = sorted((float(b), float(t)) for b, t in points if b > 0 and t > 0)
    if not known:
        return None
    if nbytes <= known[0][0]:
        return known[0][1]
    for (b0, t0), (b1, t1) in zip(known, known[1:]):
        if nbytes <= b1:
            f = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
    b, t = known[-1]
    return t * nbytes / b


def _price_text(probe: Mapping[str, Any], dims_text: str, strides_text: str, types_text: str) -> float:
    call = OpCall.parse("", dims_text, types_text, "")
    shape, bpe = (call.shape(0), call.bpe(0)) if call is not None else (None, None)
    try:
        stride = orjson.loads(strides_text)[0]
    except (orjson.JSONDecodeError, TypeError, IndexError, KeyError):
        return math.nan
    if shape is None or bpe is None or not (isinstance(stride, list) and all(isinstance(x, int) for x in stride)):
        return math.nan
    pattern = copy_pattern(shape, stride)
    if pattern is None or not probe.get(pattern):
        return math.nan
    price = price_us(math.prod(shape) * bpe, probe[pattern])
    return math.nan if price is None else price


def copy_prices_us(view: TraceView, rows: np.ndarray) -> np.ndarray | None:
    """Per row of ``view.host`` in ``rows`` (layout copies), its price in µs without the profiler (NaN where
    its input's dims, strides or dtype are unknown); None when the run has no copy probe or no strides."""
    probe = (view.run_meta.get("host_costs") or {}).get("copy_us")
    columns = ("input_dims", "input_strides", "input_types")
    if not isinstance(probe, Mapping) or not probe or any(c not in view.events for c in columns):
        return None
    cache: dict[tuple[str, ...], float] = {}
    out = np.empty(len(rows))
    for i, key in enumerate(zip(*(map(str, view.host_column(c)[rows]) for c in columns))):
        if key not in cache:  # a few distinct copies, called every step
            cache[key] = _price_text(probe, *key)
        out[i] = cache[key]
    return out
