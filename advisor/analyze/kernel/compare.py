"""Two profiles of a kernel, before and after a change: which figures moved, and which problems went away.

:func:`compare_kernels` pairs the kernels of two ``ncu.kernels`` tables (same name first; a
single kernel on each side otherwise, as when a fix renames the kernel) and lists the figures
that matter for the diagnosis with their change. Which *rules* stop firing is decided by the
engine over each side's findings (see :func:`advisor.pipeline.compare_kernel_reports`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["COMPARED", "compare_kernels", "pair_kernels"]

#: (column, unit, what it is), in the order a reader wants them
COMPARED: tuple[tuple[str, str, str], ...] = (
    ("duration_us", "us", "duration of one launch"),
    ("bound", "text", "bound class"),
    ("mem_pct", "%", "memory throughput, % of peak"),
    ("dram_pct", "%", "DRAM throughput, % of peak"),
    ("sm_pct", "%", "compute (SM) throughput, % of peak"),
    ("sectors_per_request", "ratio", "sectors per global request"),
    ("excess_sector_fraction", "fraction", "excess (uncoalesced) global sectors"),
    ("smem_excess_fraction", "fraction", "shared-memory bank-conflict wavefronts"),
    ("achieved_occ_pct", "%", "achieved occupancy"),
    ("waves_per_sm", "ratio", "waves per SM"),
    ("top_stall", "text", "main stall reason"),
    ("top_stall_share", "fraction", "its share of the cycles"),
    ("arithmetic_intensity", "ratio", "FLOPs per DRAM byte"),
    ("gflops", "ratio", "achieved GFLOP/s"),
    ("ncu_mb", "ratio", "DRAM MB read and written per launch"),
    ("ncu_gflop", "ratio", "GFLOP per launch, as counted"),
)


def pair_kernels(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
                 ) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Kernels of the same name; or the only kernel of each side."""
    by_name = {k["kernel"]: k for k in after}
    pairs = [(k, by_name[k["kernel"]]) for k in before if k["kernel"] in by_name]
    if not pairs and len(before) == 1 and len(after) == 1:
        pairs = [(before[0], after[0])]
    return pairs


def compare_kernels(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (kernel pair, figure): before, after, and after/before for numbers."""
    rows = []
    for a, b in pair_kernels(before, after):
        for column, unit, meaning in COMPARED:
            x, y = a.get(column), b.get(column)
            if x is None and y is None:
                continue
            numeric = isinstance(x, (int, float)) and isinstance(y, (int, float))
            rows.append({
                "before_kernel": a["function"], "after_kernel": b["function"], "figure": column, "unit": unit,
                "meaning": meaning, "before": x, "after": y,
                "ratio": (y / x) if numeric and x else None,
            })
    return rows
