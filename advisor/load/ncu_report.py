"""Nsight Compute report files (``.ncu-rep``) -> :class:`~advisor.load.ncu_tables.NcuReport`.

Two ways in, tried in this order:

1. NVIDIA's ``ncu_report`` Python module (``pip install ncu-report``, or the
   copy in an Nsight Compute install's ``extras/python``): every metric of
   every launch with its unit, the mangled name, and ncu's rule results.
2. The Nsight Compute CLI: ``ncu --import R.ncu-rep --csv --page raw`` for the
   metrics and ``--page details`` for the rule results, read by
   :mod:`advisor.load.ncu_csv`. This needs no GPU.

Both give the same tables (see ``tests/load/test_ncu_report.py``). When the
module has no rule API (versions before 2023), the rules come from the CLI
where it is installed.
"""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from advisor.tools.ncu import find_ncu
from advisor.errors import TraceError
from advisor.load.ncu_csv import merge_pages, parse_ncu_csv
from advisor.load.ncu_tables import RULE_COLUMNS, NcuReport, build_report, empty_rules

__all__ = ["import_module", "is_ncu_report", "load_ncu_report"]

IMPORT_TIMEOUT_S = 120
#: ncu_report's MsgType values, written the way ncu's CSV writes rule types
_MSG_TYPES = {0: "", 1: "OK", 2: "OPT", 3: "WRN", 4: "ERR"}
_SPEEDUP_TYPES = {0: "", 1: "local", 2: "global"}


def is_ncu_report(path: Path) -> bool:
    return path.suffix == ".ncu-rep"


def import_module() -> ModuleType | None:
    """NVIDIA's ``ncu_report`` module, if it can be imported here."""
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        return None


def load_ncu_report(path: Path, backend: str = "auto") -> NcuReport:
    """Read a ``.ncu-rep`` file; ``backend`` is ``auto``, ``module`` or ``cli``."""
    if not path.exists():
        raise TraceError(path, "no such file")
    module = import_module() if backend in ("auto", "module") else None
    if module is not None:
        return _from_module(module, path)
    if backend == "module":
        raise TraceError(path, "cannot be read: the ncu_report module is not installed (pip install ncu-report)")
    ncu = find_ncu()
    if ncu is None:
        raise TraceError(path, "cannot be read here: install NVIDIA's reader (pip install ncu-report) or Nsight "
                               "Compute (its `ncu --import` needs no GPU)")
    return _from_cli(ncu, path)


# --------------------------------------------------------------------------- the ncu_report module


def _value(metric: Any) -> tuple[str, str]:
    """A metric's value as printed text, and its unit."""
    unit = metric.unit() or ""
    kind = metric.kind()
    if kind == metric.ValueKind_STRING:
        return str(metric.as_string()), unit
    if kind in (metric.ValueKind_UINT32, metric.ValueKind_UINT64):
        return str(metric.as_uint64()), unit
    value = metric.as_double()
    return ("" if value is None else repr(float(value))), unit


def _from_module(module: ModuleType, path: Path) -> NcuReport:
    try:
        context = module.load_report(str(path))
    except Exception as exc:  # the SWIG layer raises plain exceptions for unreadable files
        raise TraceError(path, f"is not a readable Nsight Compute report ({exc})") from None
    identities: dict[int, dict[str, Any]] = {}
    metric_rows: dict[int, list[tuple[str, str, str, str]]] = {}
    rules: list[dict[str, Any]] = []
    launch = 0
    for r in range(context.num_ranges()):
        rng = context.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            identities[launch] = _module_identity(action, path)
            rows = []
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                if metric is None or not metric.has_value():
                    continue
                text, unit = _value(metric)
                rows.append(("raw", name, text, unit))
            metric_rows[launch] = rows
            rules.extend(_module_rules(action, launch))
            launch += 1
    notes = []
    rule_table = pd.DataFrame(rules, columns=list(RULE_COLUMNS)) if rules else empty_rules()
    report = build_report(path, "ncu-rep (ncu_report module)", identities, metric_rows, rule_table, notes)
    if not rules and not hasattr(module.IAction, "rule_results_as_dicts"):
        report = _rules_from_cli(report, path)
    return report


def _module_identity(action: Any, path: Path) -> dict[str, Any]:
    def metric_text(name: str) -> str:
        m = action.metric_by_name(name)
        return _value(m)[0] if m is not None and m.has_value() else ""

    def dims(prefix: str) -> str:
        parts = [metric_text(f"{prefix}_{axis}") for axis in "xyz"]
        return f"({', '.join(str(int(float(p))) for p in parts)})" if all(parts) else ""

    major, minor = metric_text("device__attribute_compute_capability_major"), metric_text(
        "device__attribute_compute_capability_minor")
    return {
        "kernel": action.name(action.NameBase_DEMANGLED), "function": action.name(action.NameBase_FUNCTION),
        "mangled": action.name(action.NameBase_MANGLED), "process": "", "pid": metric_text("launch__process_id") or -1,
        "stream": metric_text("launch__stream_id"), "block_dim": dims("launch__block_dim"),
        "grid_dim": dims("launch__grid_dim"), "cc": f"{major}.{minor}" if major and minor else "",
        "report": path.name,
    }


def _module_rules(action: Any, launch: int) -> list[dict[str, Any]]:
    if not hasattr(action, "rule_results_as_dicts"):
        return []
    out = []
    for result in action.rule_results_as_dicts():
        message = result.get("rule_message") or {}
        if not message.get("message"):
            continue
        speedup = result.get("speedup_estimation") or {}
        out.append({
            "launch": launch, "section": result.get("section_identifier", ""),
            "rule": result.get("rule_identifier", ""), "type": _MSG_TYPES.get(int(message.get("type", 0)), ""),
            "title": message.get("title", ""), "message": message.get("message", ""),
            "speedup_type": _SPEEDUP_TYPES.get(int(speedup.get("type", 0)), "") if speedup else "",
            "speedup": float(speedup["speedup"]) if speedup.get("speedup") is not None else np.nan,
        })
    return out


# --------------------------------------------------------------------------- the ncu CLI


def _export(ncu: str, path: Path, page: str) -> str:
    cmd = [ncu, "--import", str(path), "--csv", "--page", page]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TraceError(path, f"`{' '.join(cmd)}` took over {IMPORT_TIMEOUT_S} s; is the file complete?") from None
    if proc.returncode != 0 or not proc.stdout.strip():
        reason = (proc.stderr or proc.stdout).strip().splitlines()
        raise TraceError(path, f"`ncu --import` could not read it ({reason[-1] if reason else 'no output'})")
    return proc.stdout


def _from_cli(ncu: str, path: Path) -> NcuReport:
    raw = parse_ncu_csv(_export(ncu, path, "raw"), path)
    details = parse_ncu_csv(_export(ncu, path, "details"), path)
    merged = merge_pages(details, raw)
    merged.source = "ncu-rep (ncu --import)"
    return merged


def _rules_from_cli(report: NcuReport, path: Path) -> NcuReport:
    ncu = find_ncu()
    if ncu is None:
        report.notes.append("ncu's rule results are not shown: this ncu_report module has no rule API and the "
                            "ncu CLI is not installed")
        return report
    details = parse_ncu_csv(_export(ncu, path, "details"), path)
    report.rules = details.rules
    return report
