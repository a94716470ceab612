"""The framework collector, parent side: run the user's script under torch.profiler.

The script runs unmodified in a child process (see :mod:`advisor.collect.bootstrap`),
directly or once per rank through torchrun, in its own session, in the user's
working directory and environment; its output goes straight to the terminal.
This side only starts it, enforces ``--timeout`` (SIGTERM, then SIGKILL after
a grace period), forwards Ctrl-C (SIGINT) and its own SIGTERM, cleans up what a stopped script
left running, and gathers the ``status.rank<R>.json`` and
``rank<R>.pt.trace.json.gz`` files the child wrote into the stage folder. It
never interprets a trace.

Outcomes of the whole run (one word, in ``run.json``): ``captured``,
``completed``, ``exited`` (all success), ``error``, ``timeout``,
``interrupted``, ``terminated`` (SIGTERM from someone else, e.g. torchrun
stopping the other ranks), ``crashed`` (a process ended without a status:
killed, or a native crash).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the parent never imports the bootstrap: it imports torch, which only the child needs
from advisor.collect.config import BOOTSTRAP_PATH_ENV, EXIT_INTERRUPTED, EXIT_STOPPED, CollectorConfig
from advisor.errors import UsageError

__all__ = ["FrameworkResult", "SUCCESS", "child_command", "run_framework"]

#: How long a stopped script gets to write what it captured before it is killed.
GRACE_S = 60.0
EXIT_TIMEOUT = 124
#: outcomes that mean the script did what it should
SUCCESS = ("captured", "completed", "exited")
#: worst first: the outcome of a multi-rank run is that of its worst rank
_SEVERITY = ("error", "crashed", "timeout", "interrupted", "terminated", "captured", "exited", "completed")

#: Ctrl-C while the child still imports torch (seconds, on a cold start) ends it quietly with 130, as it
#: ends the script later: nothing was recorded yet, and the parent says so in one line. The interrupt does not
#: always surface as KeyboardInterrupt: inside numpy's extension module, which torch imports, it came out as
#: "ImportError: cannot load module more than once per process" (CI); so whatever the import raises after a
#: SIGINT is that interrupt; and a SIGINT the import swallowed (it came through, once, as a finished import and a
#: script that then ran to its end) ends the child before the script starts.
_STUB = ("import signal, sys\n_hit = []\n"
         "def _interrupted(signum, frame):\n    _hit.append(signum)\n    raise KeyboardInterrupt\n"
         "_before = signal.getsignal(signal.SIGINT)\n"
         "if _before is signal.default_int_handler:\n    signal.signal(signal.SIGINT, _interrupted)\n"
         "try:\n    from advisor.collect.bootstrap import main\nexcept BaseException:\n"
         "    if _hit:\n        sys.exit(130)\n    raise\n"
         "if _hit:\n    sys.exit(130)\n"
         "signal.signal(signal.SIGINT, _before)\nmain(sys.argv[1])")


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
    #: "timeout", "interrupted" or "terminated" when this side stopped the script
    stopped_by: str | None = None
    #: Ctrl-C came as the script ended by itself: the caller stops too, after recording this result
    ctrl_c_after: bool = False

    @property
    def step_method(self) -> str | None:
        return next((s.get("step_method") for s in self.statuses if s.get("step_method")), None)

    @property
    def error(self) -> dict[str, Any] | None:
        return next((s["error"] for s in self.statuses if s.get("error")), None)

    @property
    def profile(self) -> str:
        """What the profiled window recorded, over all ranks: complete, partial or none."""
        recorded = [s.get("profile", "none") for s in self.statuses]
        for level in ("partial", "complete"):
            if level in recorded:
                return level
        return "none"

    def rank_summary(self) -> list[dict[str, Any]]:
        """One line per rank for run.json: outcome, exit code, steps, threads."""
        keys = ("rank", "pid", "outcome", "exit_code", "profile", "step_method", "steps_seen", "schedule", "trace",
                "threads_at_capture", "timings", "unprofiled_step_ms", "heap")
        return [{k: s.get(k) for k in keys} for s in self.statuses]


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


def child_env() -> dict[str, str]:
    """The user's environment, plus the advisor package on PYTHONPATH where Python would not find it.

    When the path had to be added, the bootstrap takes it off again before the
    script runs (``BOOTSTRAP_PATH_ENV`` names it), so the script sees the
    import path it would see without us.
    """
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    paths = env.get("PYTHONPATH", "").split(os.pathsep) if env.get("PYTHONPATH") else []
    if root not in paths and not _importable_without(root):
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
        env[BOOTSTRAP_PATH_ENV] = root
    return env


def _importable_without(root: str) -> bool:
    """Whether a fresh interpreter finds this advisor package without help.

    Asked of a fresh interpreter (about 20 ms), because site-packages is not
    the only way in: an editable install puts the checkout on ``sys.path``
    through a ``.pth`` file, and adding it to ``PYTHONPATH`` as well would
    make the bootstrap take it off the script's path.
    """
    probe = "import importlib.util as u; s = u.find_spec('advisor'); print(s.origin if s and s.origin else '')"
    env = {k: v for k, v in os.environ.items() if k != BOOTSTRAP_PATH_ENV}
    try:
        # in a folder of its own, so a package named advisor in the working directory does not answer
        with tempfile.TemporaryDirectory(prefix="advisor-probe-") as empty:
            out = subprocess.run([sys.executable, "-c", probe], cwd=empty, env=env, capture_output=True,
                                 text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    origin = out.stdout.strip()
    return bool(origin) and Path(origin).resolve().parent.parent == Path(root)


def run_framework(cfg: CollectorConfig, stage_dir: Path, timeout_s: float | None = None,
                  nproc_per_node: int = 1) -> FrameworkResult:
    """Run the script under the collector; return when it has stopped, whatever the reason."""
    cfg.out_dir = str(stage_dir.resolve())
    config_path = stage_dir / "collector.json"
    config_path.write_text(cfg.to_json())
    cmd = child_command(config_path.resolve(), nproc_per_node)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=child_env(), start_new_session=True)
    stopped_by: str | None = None
    ctrl_c = False
    previous = _catch_sigterm()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stopped_by = "timeout"
        rc = _stop(proc, signal.SIGTERM)
    except KeyboardInterrupt:
        if proc.poll() is not None:  # the script had ended by itself: the Ctrl-C is for what comes next
            rc, ctrl_c = proc.returncode, True
        else:
            stopped_by = "interrupted"
            rc = _stop(proc, signal.SIGINT)
    except _Terminated:
        stopped_by = "terminated"
        rc = _stop(proc, signal.SIGTERM)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    wall = time.monotonic() - started
    statuses = _read_statuses(stage_dir)
    statuses += _missing_ranks(statuses, nproc_per_node)
    if stopped_by or any(s.get("outcome") not in ("completed", "exited", "error") for s in statuses):
        # The collector stopped the script, or a process died: remove what it left running
        # (DataLoader workers, ranks in their own sessions under torchrun).
        _kill_leftovers(proc, statuses)
    traces = sorted(stage_dir.glob("rank*.pt.trace.json.gz"), key=_rank_of)
    outcome = _outcome(statuses, stopped_by)
    exit_code = _exit_code(rc, outcome, statuses)
    return FrameworkResult(outcome, exit_code, stage_dir, traces, statuses, round(wall, 3), cmd, stopped_by,
                           ctrl_c_after=ctrl_c)


class _Terminated(Exception):
    """This process got SIGTERM (a CI job cancelled, ``timeout`` around advisor) while the script ran."""


def _catch_sigterm() -> Any:
    """Turn SIGTERM into :class:`_Terminated` while we wait, so the script (in its own session) is
    stopped and saved rather than left running. Returns the previous handler (None off the main thread)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def raise_terminated(signum: int, frame: Any) -> None:
        raise _Terminated()

    return signal.signal(signal.SIGTERM, raise_terminated)


def _stop(proc: subprocess.Popen[Any], sig: int) -> int:
    """Ask the child to stop and save; kill it if it does not within the grace period."""
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _killpg(proc.pid)
        return proc.wait()


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_leftovers(proc: subprocess.Popen[Any], statuses: list[dict[str, Any]]) -> None:
    """Kill the child's process group, and each rank's (torchrun starts ranks in their own sessions)."""
    _killpg(proc.pid)
    for status in statuses:
        pid = status.get("pid")
        if isinstance(pid, int) and pid != proc.pid and _is_group_leader(pid):
            _killpg(pid)


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except (ProcessLookupError, PermissionError):
        return False


def _rank_of(path: Path) -> int:
    """``rank3.pt.trace.json.gz`` and ``status.rank3.json`` -> 3."""
    name = path.name
    at = name.find("rank")
    digits = ""
    for ch in name[at + 4:] if at >= 0 else "":
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def _read_statuses(stage_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(stage_dir.glob("status.rank*.json"), key=_rank_of):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            out.append({"rank": _rank_of(path), "outcome": "crashed", "profile": "none",
                        "error": {"type": "status", "message": f"{path.name} could not be read"}})
    return out


def _missing_ranks(statuses: list[dict[str, Any]], nproc: int) -> list[dict[str, Any]]:
    """A rank that left no status ended before the collector could write one (killed, native crash)."""
    seen = {s.get("rank") for s in statuses}
    return [{"rank": r, "outcome": "crashed", "profile": "none", "steps_seen": 0}
            for r in range(nproc) if r not in seen]


def _outcome(statuses: list[dict[str, Any]], stopped_by: str | None) -> str:
    """One outcome for the run: the parent's reason to stop, else the worst rank's outcome."""
    if stopped_by:
        return stopped_by
    outcomes = {_rank_outcome(s.get("outcome")) for s in statuses}
    if not outcomes:
        return "crashed"
    return min(outcomes, key=lambda o: _SEVERITY.index(o) if o in _SEVERITY else 0)


def _rank_outcome(outcome: Any) -> str:
    # A rank that got SIGTERM from someone other than this process (torchrun, after
    # another rank failed; the OOM handling of a cluster) was terminated.
    if outcome == "stopped":
        return "terminated"
    if outcome in _SEVERITY:
        return str(outcome)
    return "crashed"  # "running": the process ended after its start was noted, without a status


def _exit_code(rc: int, outcome: str, statuses: list[dict[str, Any]]) -> int:
    if outcome in SUCCESS:
        return 0
    if outcome == "timeout":
        return EXIT_TIMEOUT
    if outcome == "interrupted":
        return EXIT_INTERRUPTED
    if outcome == "terminated" and not any(s.get("exit_code") for s in statuses):
        return EXIT_STOPPED
    codes = [s.get("exit_code") for s in statuses if s.get("outcome") == outcome and s.get("exit_code")]
    if codes:
        return int(codes[0])
    return rc if rc > 0 else (128 - rc if rc < 0 else 1)
