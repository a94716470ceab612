"""What the derivations behind a :class:`~advisor.analyze.framework.view.TraceView` may read of it.

:mod:`.phases` and :mod:`.gpu_links` compute tables the view then offers (``phase_intervals``, ``gpu``), so the
view imports them; they are typed against this protocol, not the view, and so never import the view back.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pandas as pd

__all__ = ["TraceTables"]


class TraceTables(Protocol):
    """The view's loaded and derived tables, as :class:`~advisor.analyze.framework.view.TraceView` documents them."""

    @property
    def events(self) -> pd.DataFrame: ...

    @property
    def main_tid(self) -> int: ...

    @property
    def profiler_steps_present(self) -> bool: ...

    @property
    def steps(self) -> pd.DataFrame: ...

    @property
    def window(self) -> tuple[int, int]: ...

    @property
    def step_count(self) -> int: ...

    @property
    def host(self) -> pd.DataFrame: ...

    @property
    def phase_evidence(self) -> dict[str, tuple[str, pd.DataFrame]]: ...

    @property
    def phase_intervals(self) -> dict[str, tuple[np.ndarray, np.ndarray]]: ...

    def step_of(self, ts: np.ndarray) -> np.ndarray: ...

    def host_names(self, func: Any, dtype: Any = object) -> np.ndarray: ...
