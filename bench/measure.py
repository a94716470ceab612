"""Running one measurement in its own process, and the statistics over several."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: where the measured processes keep their byte-compiled modules (see :func:`run_measured`)
PYCACHE = HERE / "out" / "pycache"
#: the interpreter that has Holistic Trace Analysis (see bench/README.md); --hta-python or $ADVISOR_BENCH_HTA_PYTHON
DEFAULT_HTA_PYTHON = os.environ.get("ADVISOR_BENCH_HTA_PYTHON", "/work/hta-venv/bin/python")


@dataclass
class Run:
    """One process: its own figures, plus its wall time and peak RSS as the parent saw them."""

    figures: dict[str, float]
    wall_s: float
    peak_rss_mb: float
    #: the most the process and its children held together (their Pss, sampled every 20 ms; ``tree=True`` only)
    tree_rss_mb: float = 0.0


@dataclass
class Series:
    runs: list[Run] = field(default_factory=list)
    #: one more run, untimed, with the process tree's memory sampled (``run_measured(..., tree=True)``)
    tree: Run | None = None

    def median(self, key: str) -> float:
        values = [getattr(r, key) if key in ("wall_s", "peak_rss_mb") else r.figures[key] for r in self.runs]
        return statistics.median(values)


def run_measured(tool: str, trace: Path, python: str, timeout_s: float = 3600, *,
                 env_extra: dict[str, str] | None = None, tree: bool = False) -> Run:
    """Run ``bench/children.py TOOL TRACE`` in a fresh process, from an empty folder (where no stray
    ``hta.py`` can shadow a package); its wall time, figures, and its own peak RSS (``wait4``).

    Every tool runs with its modules byte-compiled, as an installed package's are (pip compiles them at
    install): bytecode is written to and read from :data:`PYCACHE`, whatever ``$PYTHONDONTWRITEBYTECODE``
    says, and the scripts make one untimed warm-up run of each tool first (:func:`warm_up`).

    ``wait4`` gives the peak of the largest single process of the tree; ``tree=True`` also samples the memory of
    the process and all its descendants together (worker processes; :func:`tree_rss_kb`), every 20 ms, into
    ``Run.tree_rss_mb``.
    ``env_extra``: more environment variables for the process.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    env.update(env_extra or {})
    if tool.startswith("advisor"):  # this checkout's advisor, whichever one the interpreter has installed
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="bench-cwd-") as cwd, tempfile.TemporaryFile("w+") as out, \
            tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([python, str(HERE / "children.py"), tool, str(trace.resolve())], cwd=cwd, env=env,
                                stdout=out, stderr=err)
        deadline = started + timeout_s
        tree_kb = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if tree:
                tree_kb = max(tree_kb, tree_rss_kb(proc.pid))
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise RuntimeError(f"{tool} on {trace.name} took more than {timeout_s:.0f} s")
            time.sleep(0.02 if tree else 0.01)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} on {trace.name} failed ({proc.returncode}): {stderr.strip()[-2000:]}")
    line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"{tool} on {trace.name} printed no figures: {stdout[-500:]} {stderr[-500:]}")
    return Run(json.loads(line[6:]), wall, usage.ru_maxrss / 1024.0, tree_kb / 1024.0)


def tree_rss_kb(root: int) -> int:
    """The memory (kB) a process and all its descendants hold now, from /proc (0 where unreadable).

    Each process counts its proportional set size (``Pss``): a page that forked workers still share with their
    parent is counted once in all, not once per process as the plain RSS of each would.
    """
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue  # the process ended meanwhile
    return total


def warm_up(tool: str, trace: Path, python: str, **kwargs: Any) -> None:
    """One untimed run, which byte-compiles the tool's modules into :data:`PYCACHE`."""
    run_measured(tool, trace, python, **kwargs)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def machine() -> dict[str, Any]:
    return {"python": sys.version.split()[0], "cpus": os.cpu_count(), "loadavg_start": load_average()}
