"""The truth, measured without the advisor: plain ``python script.py`` runs of a variant and its twin, each
printing its step times (``VARIANT_STEP_MS``), alternating which runs first.

A run's step is the median of its steps after the first ``skip`` (start-up, first allocations); a script's step
is the median over its runs; the gain is the variant's step minus the twin's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

MARK = "VARIANT_STEP_MS "


class ScriptFailed(RuntimeError):
    """A generated script exited non-zero or printed no step times."""


def cores() -> int:
    return len(os.sched_getaffinity(0))


def script_env(extra: dict[str, str], steps: int) -> dict[str, str]:
    """The runner's environment, the variant's own variables ("{cores}" filled in) and the number of steps."""
    env = {**os.environ, **{k: v.replace("{cores}", str(cores())) for k, v in extra.items()}}
    env["VARIANT_STEPS"] = str(steps)
    return env


def step_times(script: Path, env: dict[str, str], timeout: float = 300) -> list[float]:
    """One plain run: the ms of each step, as the script printed them."""
    proc = subprocess.run([sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True,
                          text=True, timeout=timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            if proc.returncode != 0:
                break
            return [float(ms) for ms in json.loads(line[len(MARK):])]
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    raise ScriptFailed(f"{script.name} exited {proc.returncode} without its step times: " + " | ".join(tail))


def steady_ms(times: list[float], skip: int = 10) -> float:
    """The median step after the first ``skip`` (at least half the steps are kept)."""
    skip = min(skip, len(times) // 2)
    return statistics.median(times[skip:])


@dataclass
class Truth:
    variant_ms: float
    fixed_ms: float | None
    variant_runs: list[float] = field(default_factory=list)
    fixed_runs: list[float] = field(default_factory=list)

    @property
    def gain_ms(self) -> float | None:
        return None if self.fixed_ms is None else self.variant_ms - self.fixed_ms

    @property
    def gain_share(self) -> float | None:
        gain = self.gain_ms
        return None if gain is None or self.variant_ms <= 0 else gain / self.variant_ms

    def to_json(self) -> dict:
        return {**asdict(self), "gain_ms": self.gain_ms, "gain_share": self.gain_share}


def measure(variant: Path, fixed: Path | None, env: dict[str, str], fixed_env: dict[str, str], steps: int,
            repeats: int = 2) -> Truth:
    """``repeats`` runs of each, the variant first in even rounds and the twin first in odd ones (drift in the
    machine's load then falls on both alike); ``fixed`` None: the variant alone (a healthy program)."""
    runs: dict[str, list[float]] = {"variant": [], "fixed": []}
    for r in range(repeats):
        order = [("variant", variant, env), ("fixed", fixed, fixed_env)]
        if r % 2:
            order.reverse()
        for which, path, extra in order:
            if path is not None:
                runs[which].append(steady_ms(step_times(path, script_env(extra, steps))))
    return Truth(statistics.median(runs["variant"]), statistics.median(runs["fixed"]) if runs["fixed"] else None,
                 runs["variant"], runs["fixed"])
