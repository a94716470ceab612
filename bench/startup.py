"""The imports of the quick commands: ``advisor --help``, ``advisor rules --help`` and ``advisor rules list``.

Each runs as ``python -X importtime -m advisor ARGS`` in a fresh process, byte-compiled as the other
measurements are (see :func:`measure.run_measured`); its import time is the sum of the cumulative times of the
modules it imported at the top level (those ``-X importtime`` prints without indentation), so nothing is
counted twice. Target (issue 16): under 0.3 s each. tests/test_lazy_imports.py holds the cause (no tables,
analyzers or report libraries in these commands); this holds the figure, which a loaded machine moves.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

from measure import PYCACHE, REPO

COMMANDS = (("--help",), ("rules", "--help"), ("rules", "list"))
TARGET_S = 0.3


def import_seconds(stderr: str) -> float:
    """Total import time from ``-X importtime`` output: the top-level modules' cumulative microseconds."""
    total = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative_us, name = line.split("|")
        if cumulative_us.strip().isdigit() and name.startswith(" ") and not name.startswith("  "):
            total += int(cumulative_us)
    return total / 1e6


def measure_commands(runs: int, python: str = sys.executable) -> dict[str, dict[str, float]]:
    """Median import seconds of each quick command over ``runs`` fresh processes (one untimed run first)."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(PYCACHE),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cwd-") as cwd:
        for args in COMMANDS:
            figures = []
            for i in range(runs + 1):
                proc = subprocess.run([python, "-X", "importtime", "-m", "advisor", *args], cwd=cwd, env=env,
                                      capture_output=True, text=True, timeout=120)
                if proc.returncode != 0:
                    raise RuntimeError(f"advisor {' '.join(args)} failed: {proc.stderr[-1000:]}")
                if i:  # the first run byte-compiles
                    figures.append(import_seconds(proc.stderr))
            out[" ".join(args)] = {"import_s": statistics.median(figures)}
    return out


def report_lines(figures: dict[str, dict[str, float]]) -> list[str]:
    return [f"command line: imports of `advisor {name}` {f['import_s']:.3f} s   [target: < {TARGET_S} s]"
            for name, f in figures.items()]
