"""The trial stage's record, ``trial/trial.json``: the plan, and each rank's blocks of timed steps.

Written by :mod:`advisor.collect.trial` from the ranks' status files. The loader checks its shape and gives the
first rank's record that has blocks (every rank follows the same plan, counted in steps; the first rank's
steps are the ones the framework stage's figures describe).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.errors import InputError

__all__ = ["TrialRecord", "load_trial"]


@dataclass
class TrialRecord:
    path: Path
    #: the trial run's outcome (captured when the collector stopped it after the trials, error, timeout, ...)
    outcome: str
    plan: dict[str, Any]
    #: the rank whose blocks are read (its script outcome, step method, error)
    rank: dict[str, Any] = field(default_factory=dict)
    #: how that rank's trial ended: complete, nothing to try, the script ended, no steps, not begun, ...
    trial_outcome: str = "not begun"
    blocks: list[dict[str, Any]] = field(default_factory=list)
    knobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def has(self, table: str) -> bool:
        return table == "trial" or (table == "blocks" and bool(self.blocks))


def load_trial(path: Path) -> TrialRecord:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, f"is not JSON (line {exc.lineno}: {exc.msg}); it should be a trial record that "
                               "`advisor diagnose` wrote") from None
    if not isinstance(data, dict) or not isinstance(data.get("ranks"), list) or not isinstance(data.get("plan"), dict):
        raise InputError(path, "is not a trial record: it needs `plan` and `ranks` (written by `advisor diagnose`)")
    ranks = [r for r in data["ranks"] if isinstance(r, dict)]
    rank = next((r for r in ranks if isinstance(r.get("trial"), dict) and r["trial"].get("blocks")),
                ranks[0] if ranks else {})
    trial = rank.get("trial") if isinstance(rank.get("trial"), dict) else {}
    blocks = [b for b in trial.get("blocks") or [] if isinstance(b, dict) and isinstance(b.get("ms"), list)]
    knobs = {str(k): v for k, v in (trial.get("knobs") or {}).items() if isinstance(v, dict)}
    return TrialRecord(path, str(data.get("outcome") or "unknown"), data["plan"], rank,
                       str(trial.get("outcome") or "not begun"), blocks, knobs, float(data.get("wall_s") or 0.0))
