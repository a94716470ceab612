"""The tables the kernel-stage analyzers read: Nsight Compute launches, ncu's rule results, and where
the framework stage saw each kernel.

A :class:`KernelView` holds one or more :class:`~advisor.load.ncu_tables.NcuReport` (one per
``.ncu-rep`` or CSV file) and, optionally, the framework stage's ``kernels.top`` records (name,
ms, share, calls_per_step, op, site, file, line, module), which tie each profiled kernel back to
the PyTorch operator, source line and ``nn.Module`` that launched it, and its ``ops.efficiency`` records
(operator, shape, dtype, model GFLOP and MB per call, heaviest kernel), which put the model's FLOPs and
bytes beside the measured ones.

Tables, for ``needs``: ``launches`` (at least one profiled launch), ``rules`` (ncu's rule results),
``framework_kernels`` (the framework's kernel table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from advisor.load.ncu_tables import NcuReport, empty_rules

__all__ = ["KernelView"]


class KernelView:
    """Nsight Compute results, ready for the kernel analyzers."""

    def __init__(self, reports: Sequence[NcuReport], framework_kernels: Sequence[Mapping[str, Any]] = (),
                 framework_ops: Sequence[Mapping[str, Any]] = ()) -> None:
        self.reports = list(reports)
        self.framework_kernels = [dict(r) for r in framework_kernels]
        self.framework_ops = [dict(r) for r in framework_ops]

    @property
    def launches(self) -> pd.DataFrame:
        frames = [r.launches for r in self.reports if len(r.launches)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def rules(self) -> pd.DataFrame:
        frames = []
        for r in self.reports:
            if len(r.rules) == 0:
                continue
            names = r.launches.set_index("launch")["kernel"] if len(r.launches) else pd.Series(dtype=object)
            frame = r.rules.copy()
            frame["kernel"] = frame["launch"].map(names).fillna("")
            frame["report"] = r.path.name
            frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else empty_rules()

    def join_note(self) -> str | None:
        """What to tell the reader when no profiled kernel is one the framework stage saw (a report of another
        program, or of kernels outside the traced steps): the kernel findings then explain no diagnosis."""
        from advisor.tools.ncu_names import same_kernel

        launches = self.launches
        if len(launches) == 0 or not self.framework_kernels:
            return None
        pairs = dict.fromkeys(zip(launches["kernel"].astype(str), launches["function"].astype(str)))
        names = [str(r.get("name", "")) for r in self.framework_kernels]
        if any(same_kernel(n, k, f) for k, f in pairs for n in names):
            return None
        shown = ", ".join(sorted({f or k for k, f in pairs})[:3]) + (", ..." if len(pairs) > 3 else "")
        files = ", ".join(r.path.name for r in self.reports)
        return (f"none of the {len(pairs)} kernel(s) in {files} ({shown}) is among the "
                f"{len(names)} kernels of the framework trace: the report is of another program or of other "
                "steps, so its findings stand alone and explain no framework diagnosis")

    def has(self, table: str) -> bool:
        if table == "launches":
            return any(len(r.launches) for r in self.reports)
        if table == "rules":
            return any(len(r.rules) for r in self.reports)
        if table == "framework_kernels":
            return bool(self.framework_kernels)
        raise KeyError(f"unknown table {table!r}")
