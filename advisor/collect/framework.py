"""The framework collector, parent side: run the user's script under torch.profiler.

The script runs unmodified in a child process (see :mod:`advisor.collect.bootstrap`)
in its own session, with the user's working directory and environment, and its
output goes straight to the terminal. This side only starts it, enforces
``--timeout``, forwards Ctrl-C, and gathers what the child left in the stage
folder. It never interprets the trace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.collect.config import CollectorConfig
from advisor.errors import UsageError

__all__ = ["FrameworkResult", "child_command", "run_framework"]

#: How long a stopped script gets to write what it captured before it is killed.
GRACE_S = 60.0

_STUB = "import sys; from advisor.collect.bootstrap import main; main(sys.argv[1])"


@dataclass
class FrameworkResult:
    """What the framework stage left behind."""

    outcome: str
    exit_code: int
    stage_dir: Path
    traces: list[Path] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    command: list[str] = field(default_factory=list)

    @property
    def step_method(self) -> str | None:
        return next((s.get("step_method") for s in self.statuses if s.get("step_method")), None)

    @property
    def error(self) -> dict[str, Any] | None:
        return next((s["error"] for s in self.statuses if s.get("error")), None)


def check_script(script: Path) -> Path:
    """One clear sentence for each way the script path can be wrong."""
    if not script.exists():
        raise UsageError(f"{script}: no such file; give the path of the training script to run")
    if script.is_dir():
        raise UsageError(f"{script}: is a directory; give the path of a Python script inside it")
    if not os.access(script, os.R_OK):
        raise UsageError(f"{script}: cannot be read (permission denied)")
    return script.resolve()


def child_command(config_path: Path, nproc_per_node: int = 1) -> list[str]:
    """The command that runs the bootstrap, directly or once per rank through torchrun."""
    if nproc_per_node > 1:
        return [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc_per_node}", "--no-python",
            sys.executable, "-c", _STUB, str(config_path),
        ]
    return [sys.executable, "-c", _STUB, str(config_path)]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The child imports advisor from wherever this process did, installed or not.
    root = str(Path(__file__).resolve().parents[2])
    paths = env.get("PYTHONPATH", "").split(os.pathsep) if env.get("PYTHONPATH") else []
    if root not in paths and not _installed(root):
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _installed(root: str) -> bool:
    import site

    dirs = {*site.getsitepackages(), site.getusersitepackages()}
    return root in dirs


def run_framework(cfg: CollectorConfig, stage_dir: Path, timeout_s: float | None = None,
                  nproc_per_node: int = 1) -> FrameworkResult:
    """Run the script under the collector; return when it has stopped, whatever the reason."""
    cfg.out_dir = str(stage_dir)
    config_path = stage_dir / "collector.json"
    config_path.write_text(cfg.to_json())
    cmd = child_command(config_path, nproc_per_node)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=_child_env(), start_new_session=True)
    stopped_by: str | None = None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stopped_by = "timeout"
        rc = _stop(proc, signal.SIGTERM)
    except KeyboardInterrupt:
        stopped_by = "interrupted"
        rc = _stop(proc, signal.SIGINT)
    finally:
        _kill_group(proc)
    wall = time.monotonic() - started
    statuses = _read_statuses(stage_dir)
    traces = sorted(stage_dir.glob("rank*.pt.trace.json.gz"), key=_rank_of)
    outcome = _outcome(rc, statuses, stopped_by)
    exit_code = _exit_code(rc, outcome, statuses)
    return FrameworkResult(outcome, exit_code, stage_dir, traces, statuses, round(wall, 3), cmd)


def _stop(proc: subprocess.Popen[Any], sig: int) -> int:
    """Ask the child to stop and save; kill it if it does not within the grace period."""
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _kill_group(proc)
        return proc.wait()


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """Remove what the script left running (DataLoader workers, torchrun ranks)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _rank_of(path: Path) -> int:
    digits = "".join(ch for ch in path.name.split(".")[0] if ch.isdigit())
    return int(digits) if digits else 0


def _read_statuses(stage_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(stage_dir.glob("status.rank*.json"), key=_rank_of):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def _outcome(rc: int, statuses: list[dict[str, Any]], stopped_by: str | None) -> str:
    if stopped_by:
        return stopped_by
    outcomes = [s.get("outcome") for s in statuses]
    for bad in ("error", "timeout", "interrupted"):
        if bad in outcomes:
            return bad
    if not statuses:
        return "crashed" if rc != 0 else "completed"
    if "captured" in outcomes:
        return "captured"
    return outcomes[0] or ("completed" if rc == 0 else "error")


def _exit_code(rc: int, outcome: str, statuses: list[dict[str, Any]]) -> int:
    if outcome in ("captured", "completed", "exited"):
        return 0
    if outcome == "timeout":
        return 124
    if outcome == "interrupted":
        return 130
    codes = [s.get("exit_code") for s in statuses if s.get("exit_code")]
    if codes:
        return int(codes[0])
    return rc if rc > 0 else (128 - rc if rc < 0 else 1)
