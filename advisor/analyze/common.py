"""Small helpers shared by the analyzers: per-step scaling and site formatting."""

from __future__ import annotations

import pandas as pd

from advisor.analyze import names as by_name
from advisor.analyze.view import TraceView
from advisor.naming import SOURCE_PREFIX, parse_source_label

__all__ = ["NS_PER_MS", "call_site_of", "in_steps", "per_step_ms", "site", "step_ms"]

NS_PER_MS = 1e6


def step_ms(view: TraceView) -> float:
    """Mean wall time of an analysed step, in ms."""
    return float(view.steps["dur"].mean()) / NS_PER_MS if view.step_count else 0.0


def per_step_ms(view: TraceView, total_ns: float) -> float:
    return float(total_ns) / max(view.step_count, 1) / NS_PER_MS


def in_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of a host table that fall inside an analysed step."""
    return frame[frame["step"] >= 0]


def site(file: str, line: int, func: str = "") -> str:
    """``train.py:57 (augment)``, or "" when unknown."""
    if not file or line < 0:
        return ""
    return f"{file}:{line}" + (f" ({func})" if func and func != "<module>" else "")


def call_site_of(view: TraceView, ranges: pd.DataFrame) -> tuple[str, int, str] | None:
    """The user's line that opened the given ranges (the collector's label right around or inside them).

    A hook opens the phase range and its source label at the same instant, so
    either can come out as the parent of the other.
    """
    host = view.host
    is_label = by_name.where(host["name"], lambda n: n.startswith(SOURCE_PREFIX))
    inside = host["parent"].isin(ranges.index)
    around = host.index.isin(ranges["parent"])
    labels = host[is_label & (inside | around)]
    if len(labels) == 0:
        return None
    return parse_source_label(labels["name"].mode().iloc[0])
