"""Nsight Compute CSV output -> :class:`~advisor.load.ncu_tables.NcuReport`.

The forms met in practice, all read by :func:`load_ncu_csv`:

- ``--csv --page details`` (the default page): one row per (launch, section
  metric), with or without rule rows (``Rule Name``, ``Rule Type``,
  ``Rule Description``, and since 2023 ``Estimated Speedup Type`` /
  ``Estimated Speedup``), and with or without ``Block Size``, ``Grid Size``,
  ``Device`` and ``CC`` columns;
- the older layout with a ``Kernel Time`` column (a timestamp) in place of the
  launch columns, as written by ncu up to 2022 (and by ``--import`` there);
- ``--csv --page raw``: a header of metric names, a row of units, then one row
  per launch;
- metrics given with ``--metrics`` (section "Command line profiler metrics");
- the stdout of ``ncu --csv app``: ``==PROF==`` lines and the program's own
  output before or between the CSV rows, rows with a trailing comma (one cell
  more than the header), and repeated headers when several processes were
  profiled;
- units scaled by ``--print-units auto`` (usecond, Mbyte, Gbyte/second) or
  ``base`` (ns, byte, hz).

The reader knows file formats, not performance.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.errors import TraceError
from advisor.load.ncu_metrics import parse_number
from advisor.load.ncu_tables import RULE_COLUMNS, NcuReport, build_report, empty_rules

__all__ = ["is_ncu_csv", "load_ncu_csv", "parse_ncu_csv"]

_IDENTITY_HEADERS = {
    "ID": "launch", "Process ID": "pid", "Process Name": "process", "Host Name": "", "Kernel Name": "kernel",
    "Kernel Time": "", "Context": "", "Stream": "stream", "Block Size": "block_dim", "Grid Size": "grid_dim",
    "Device": "", "CC": "cc", "Function Name": "function", "Demangled Name": "kernel", "Mangled Name": "mangled",
}
_DETAIL_HEADERS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
_RULE_HEADERS = {"Rule Name": "rule", "Rule Type": "type", "Rule Description": "message",
                 "Estimated Speedup Type": "speedup_type", "Estimated Speedup": "speedup"}


def is_ncu_csv(path: Path) -> bool:
    """Whether a text file holds ncu CSV output (a header row starting with "ID" and naming "Kernel Name")."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            head = fh.read(256 * 1024)
    except OSError:
        return False
    return _header_index(head.splitlines()) is not None


def _header_index(lines: list[str]) -> int | None:
    for i, line in enumerate(lines):
        if line.startswith('"ID",') and '"Kernel Name"' in line:
            return i
    return None


def _rows(text: str, path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and data rows, with tool chatter, program output and repeated headers left out."""
    lines = text.splitlines()
    start = _header_index(lines)
    if start is None:
        raise TraceError(path, "has no Nsight Compute CSV header (a row starting with \"ID\" and naming "
                               "\"Kernel Name\"); write it with `ncu --csv ...` or `ncu --import R.ncu-rep --csv`")
    # Lines from the tool (==PROF==, ==WARNING==) or the program may come between results; CSV rows
    # always start with a quoted field.
    kept = [line for line in lines[start:] if line.startswith('"')]
    reader = csv.reader(io.StringIO("\n".join(kept)))
    header = next(reader)
    rows = []
    for row in reader:
        if row == header or not row:
            continue
        # ncu ends some rows with a comma (a cell more than the header) and may leave cells off.
        rows.append((row + [""] * len(header))[: len(header)])
    return header, rows


def _identity(header: list[str], row: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in zip(header, row):
        key = _IDENTITY_HEADERS.get(name)
        if key and not out.get(key):
            out[key] = value
    return out


def _parse_details(header: list[str], rows: list[list[str]], path: Path) -> NcuReport:
    col = {name: i for i, name in enumerate(header)}
    identities: dict[int, dict[str, Any]] = {}
    metric_rows: dict[int, list[tuple[str, str, str, str]]] = {}
    rules = []
    for row in rows:
        launch = _launch_id(row[col["ID"]], path)
        identities.setdefault(launch, _identity(header, row))
        section = row[col["Section Name"]]
        rule = row[col["Rule Name"]] if "Rule Name" in col else ""
        if rule:
            record = {"launch": launch, "section": section, "title": ""}
            for name, key in _RULE_HEADERS.items():
                record[key] = row[col[name]] if name in col else ""
            speedup = parse_number(str(record["speedup"]))
            record["speedup"] = np.nan if speedup is None else speedup
            rules.append(record)
            continue
        name = row[col["Metric Name"]]
        if name:
            metric_rows.setdefault(launch, []).append((section, name, row[col["Metric Value"]],
                                                       row[col["Metric Unit"]]))
    rule_table = pd.DataFrame(rules, columns=list(RULE_COLUMNS)) if rules else empty_rules()
    return build_report(path, "ncu csv (details page)", identities, metric_rows, rule_table)


def _parse_raw(header: list[str], rows: list[list[str]], path: Path) -> NcuReport:
    units = rows[0] if rows and not rows[0][0].strip() else [""] * len(header)
    data = rows[1:] if rows and not rows[0][0].strip() else rows
    identities: dict[int, dict[str, Any]] = {}
    metric_rows: dict[int, list[tuple[str, str, str, str]]] = {}
    for row in data:
        launch = _launch_id(row[0], path)
        identities[launch] = _identity(header, row)
        metric_rows[launch] = [("raw", name, value, unit) for name, unit, value in zip(header, units, row)
                               if name not in _IDENTITY_HEADERS]
    return build_report(path, "ncu csv (raw page)", identities, metric_rows)


def _launch_id(text: str, path: Path) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise TraceError(path, f"has a result row whose ID is {text!r}, not a number; is it ncu CSV output?") from None


def parse_ncu_csv(text: str, path: Path = Path("<ncu csv>")) -> NcuReport:
    """Parse ncu CSV text (details or raw page, with or without tool and program output around it)."""
    header, rows = _rows(text, path)
    if all(h in header for h in _DETAIL_HEADERS):
        report = _parse_details(header, rows, path)
    else:
        report = _parse_raw(header, rows, path)
    if len(report.launches) == 0:
        raise TraceError(path, "has an Nsight Compute CSV header but no profiled kernel; was any kernel matched "
                               "by the ncu filters (-k, --launch-skip, --nvtx-include)?")
    return report


def load_ncu_csv(path: Path) -> NcuReport:
    """Read an ncu CSV file (or a log holding ncu CSV output)."""
    if not path.exists():
        raise TraceError(path, "no such file")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TraceError(path, f"cannot be read ({exc.strerror})") from None
    return parse_ncu_csv(text, path)


def merge_pages(details: NcuReport, raw: NcuReport) -> NcuReport:
    """One report from the details and raw pages of the same file: raw metrics first, details fill the gaps."""
    from advisor.load.ncu_tables import IDENTITY

    launches = raw.launches.set_index("launch")
    other = details.launches.set_index("launch").reindex(launches.index)
    for column in other.columns:
        if column in IDENTITY:
            continue
        if column not in launches.columns:
            launches[column] = other[column]
        elif launches[column].dtype != object:
            launches[column] = launches[column].fillna(other[column])
    metrics = pd.concat([raw.metrics, details.metrics], ignore_index=True)
    return NcuReport(raw.path, raw.source, launches.reset_index(), metrics, details.rules,
                     [*raw.notes, *details.notes])
