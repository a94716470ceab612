"""Nsight Compute results as tables, whatever file they came from.

Every reader (:mod:`.ncu_csv` for CSV text, :mod:`.ncu_report` for ``.ncu-rep``
files) produces one :class:`NcuReport`:

``launches``
    One row per profiled kernel launch. Identity columns:

    =============  =======  =====================================================
    launch         int      ncu's result ID, unique within the file
    kernel         str      the kernel name as ncu printed it (demangled)
    function       str      the function name without namespace, templates or
                            parameters (ncu's ``function`` name base)
    mangled        str      the mangled name, where the source has it, else ""
    process        str      process name
    pid            int      process ID (-1 when absent)
    stream         int      CUDA stream (-1 when absent)
    block_dim      str      block shape, e.g. "(256, 1, 1)", where printed
    grid_dim       str      grid shape, where printed
    cc             str      compute capability, e.g. "8.6", where known
    report         str      the file's name
    =============  =======  =====================================================

    then one column per :data:`~advisor.load.ncu_metrics.CATALOGUE` entry, in
    its normalised unit (NaN where the file lacks it), and ``stall_<reason>``
    columns (cycles per issued instruction) where the file has warp-state data,
    and ``tensor_ops_<path>`` columns (tensor-core math ops) where it has them.
``metrics``
    Every metric of every launch, long form: launch, section, name (raw metric
    name or section label), unit (normalised), value (float, NaN for text),
    text (the printed value).
``rules``
    ncu's own rule results: launch, section, rule, type (OPT/WRN/INF/ERR/""),
    title, message, speedup_type, speedup (percent, NaN when absent).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.load.ncu_metrics import CATALOGUE, STALL_PATTERN, TENSOR_OPS_PATTERN, normalise

__all__ = ["IDENTITY", "NcuReport", "build_report", "function_name", "empty_rules"]

IDENTITY = ("launch", "kernel", "function", "mangled", "process", "pid", "stream", "block_dim", "grid_dim", "cc",
            "report")
RULE_COLUMNS = ("launch", "section", "rule", "type", "title", "message", "speedup_type", "speedup")
METRIC_COLUMNS = ("launch", "section", "name", "unit", "value", "text")


@dataclass
class NcuReport:
    """One Nsight Compute result file, as tables."""

    path: Path
    source: str
    launches: pd.DataFrame
    metrics: pd.DataFrame
    rules: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def kernel_names(self) -> list[str]:
        return list(dict.fromkeys(self.launches["kernel"]))


def empty_rules() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64" if c == "speedup" else ("int64" if c == "launch" else "object"))
                         for c in RULE_COLUMNS})


def function_name(kernel: str) -> str:
    """``void at::native::foo<float, 4>(int, T2)`` -> ``foo``: the name without scope, templates or parameters."""
    text = re.sub(r"^(void|static|__global__)\s+", "", kernel.strip())
    depth_angle = depth_paren = 0
    cut = len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            depth_angle += 1
        elif ch == ">":
            depth_angle = max(depth_angle - 1, 0)
        elif ch == "(" and depth_angle == 0:
            if depth_paren == 0 and not text[:i].rstrip().endswith("operator"):
                cut = i
                break
            depth_paren += 1
    head = text[:cut]
    # Drop template arguments, then keep the last scope component.
    out, depth = [], 0
    for ch in head:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    plain = "".join(out).strip()
    return plain.split("::")[-1].split()[-1] if plain else kernel


def _lookup(by_raw: Mapping[str, tuple[Any, str]], by_label: Mapping[str, list[tuple[Any, str]]], metric: Any
            ) -> Any:
    for name in metric.raw:
        if name in by_raw:
            value, unit = by_raw[name]
            if value is not None and (unit == metric.unit or metric.unit == "count" or unit == "count"):
                return value
    for label in metric.labels:
        for value, unit in by_label.get(label, []):
            # A label can name two quantities (SOL "Memory Throughput" in %, MWA in bytes/s): the unit decides.
            if value is not None and (unit == metric.unit or (metric.unit == "count" and unit != "text")):
                return value
    return None


def _row(launch: int, identity: Mapping[str, Any], rows: Iterable[tuple[str, str, Any, str]]) -> dict[str, Any]:
    """One launch's wide row from its (section, name, value, unit) metric rows (already normalised)."""
    by_raw: dict[str, tuple[Any, str]] = {}
    by_label: dict[str, list[tuple[Any, str]]] = {}
    patterned: dict[str, float] = {}  # stall_<reason>, tensor_ops_<path>
    for _section, name, value, unit in rows:
        by_raw.setdefault(name, (value, unit))
        by_label.setdefault(name, []).append((value, unit))
        m = STALL_PATTERN.match(name)
        if m and isinstance(value, float):
            patterned[f"stall_{m['reason']}"] = value
        t = TENSOR_OPS_PATTERN.match(name)
        if t and isinstance(value, float) and "sparsity" not in t["path"]:
            patterned[f"tensor_ops_{t['path']}"] = value
    out: dict[str, Any] = {"launch": launch, **identity}
    for metric in CATALOGUE:
        value = _lookup(by_raw, by_label, metric)
        if metric.unit == "text":
            out[metric.column] = "" if value is None else str(value)
        else:
            out[metric.column] = float(value) if isinstance(value, (int, float)) else np.nan
    out.update(patterned)
    return out


def build_report(path: Path, source: str, identities: Mapping[int, Mapping[str, Any]],
                 metric_rows: Mapping[int, list[tuple[str, str, str, str]]], rules: pd.DataFrame | None = None,
                 notes: list[str] | None = None) -> NcuReport:
    """Assemble an :class:`NcuReport` from per-launch identities and printed (section, name, value, unit) rows."""
    wide, long = [], []
    for launch, ident in identities.items():
        normalised = []
        for section, name, text, unit in metric_rows.get(launch, []):
            value, norm = normalise(text, unit)
            normalised.append((section, name, value, norm))
            long.append((launch, section, name, norm, value if isinstance(value, float) else np.nan, text))
        identity = {k: ident.get(k, "") for k in IDENTITY if k != "launch"}
        identity["function"] = identity["function"] or function_name(str(identity["kernel"]))
        identity["report"] = identity["report"] or path.name
        for key in ("pid", "stream"):
            identity[key] = _int(identity[key])
        wide.append(_row(launch, identity, normalised))
    launches = pd.DataFrame(wide)
    if len(launches) == 0:
        launches = pd.DataFrame({c: pd.Series(dtype="object") for c in IDENTITY})
    metrics = pd.DataFrame(long, columns=list(METRIC_COLUMNS))
    return NcuReport(path, source, launches, metrics, rules if rules is not None else empty_rules(), notes or [])


def _int(value: Any) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        return -1
