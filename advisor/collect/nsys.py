"""The system-stage collector: the same script, with the same arguments, under ``nsys profile``.

The script runs through the framework collector's bootstrap in ``nvtx`` mode
(:class:`~advisor.collect.backends.NvtxBackend`): no torch.profiler (CUPTI
cannot serve both), the same step detection and schedule as the framework
run, every phase as an NVTX range (``advisor::forward``, ...), each step as
``ProfilerStep#N``, and the active steps inside one ``advisor::capture``
range. nsys is pointed at that range (``--capture-range=nvtx``), so it
records only the steady-state steps, and stops there
(``--capture-range-end=stop``) while the bootstrap ends the script. Where
NVTX cannot reach nsys (no ``nvtx`` package, or nvtx 0.2.12+ with nsys
2022.x) a GPU run uses ``--capture-range=cudaProfilerApi`` instead (the
bootstrap also calls ``cudaProfilerStart``/``Stop`` around the steps), and a
CPU run is recorded whole.

Options, and why:

- ``--trace``: ``nvtx,osrt`` always; ``cuda`` (plus ``cudnn``, ``cublas``
  where this nsys knows them) only when the framework run saw a GPU: tracing
  CUDA without one fails.
- ``--sample=none --cpuctxsw=none``: no CPU sampling and no context-switch
  trace. Both need perf privileges, and the context-switch trace alone made a
  186 MB stream for a 5-step CPU script here, and could hang when two
  sessions ran at once.
- ``NSYS_NVTX_PROFILER_REGISTER_ONLY=0``: let capture ranges match NVTX
  messages that are not registered strings (nvtx releases differ in that).

Outputs in the stage folder: ``collector.json``, ``report.nsys-rep``,
``report.sqlite``, ``nsys.log`` (nsys's and the script's output) and the
bootstrap's ``status.rank0.json``. The raw ``.qdstrm`` is deleted once
imported (it is often a hundred times larger than the report).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from advisor.collect.config import CollectorConfig
from advisor.collect.framework import child_command, child_env  # the same child, run under nsys
from advisor.tools.nsys import NsysTool, export_sqlite, find_nsys, import_qdstrm
from advisor.errors import CollectError, ToolMissingError
from advisor.naming import CAPTURE_RANGE

__all__ = ["NsysRun", "nsys_command", "run_nsys"]

REPORT = "report"
LOG = "nsys.log"
GRACE_S = 60.0
NVTX_ENV = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}


@dataclass
class NsysRun:
    """What the system stage left behind."""

    sqlite: Path
    command: str
    artifacts: list[Path] = field(default_factory=list)
    outcome: str = ""
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def stage_config(cfg: CollectorConfig, stage_dir: Path, step_method: str | None) -> CollectorConfig:
    """The framework run's settings, in nvtx mode, writing into the system stage folder."""
    method = step_method if step_method in ("optimizer", "dataloader", "module", "time") else cfg.step_method
    return replace(cfg, out_dir=str(stage_dir), mode="nvtx", step_method=method, run_to_end=False,
                   source_lines=False, profile_memory=False, with_stack=False)


def _capture_options(tool: NsysTool, cuda: bool) -> tuple[list[str], str | None]:
    """The capture-range options, and a note when NVTX cannot mark the profiled steps for this nsys."""
    from advisor.collect.labels import nvtx_available

    why = None
    if not nvtx_available():
        why = "the nvtx package is not importable"
    else:
        try:
            version = tuple(int(p) for p in metadata.version("nvtx").split(".")[:3])
        except (metadata.PackageNotFoundError, ValueError):
            version = (0, 0, 0)
        if version >= (0, 2, 12) and tool.year < 2023:
            # Ranges from nvtx 0.2.12+ never reach nsys 2022.x, so the capture range would never open.
            why = (f"nvtx {'.'.join(map(str, version))} does not reach nsys {tool.version} "
                   "(pip install 'nvtx<0.2.12')")
    if why is None:
        return ["--capture-range=nvtx", f"--nvtx-capture={CAPTURE_RANGE}", "--capture-range-end=stop"], None
    if cuda:  # the collector also brackets the profiled steps with cudaProfilerStart/Stop
        return (["--capture-range=cudaProfilerApi", "--capture-range-end=stop"],
                f"{why}, so nsys was pointed at cudaProfilerStart/Stop and the phases are not named")
    return [], f"{why}, so nsys recorded the whole run, and the phases are not named"


def nsys_command(tool: NsysTool, config_path: Path, out_base: Path, cuda: bool,
                 nproc_per_node: int = 1) -> tuple[list[str], list[str]]:
    """The ``nsys profile`` command line for the bootstrap's config (through torchrun for several ranks),
    and notes on what it cannot do."""
    capture, note = _capture_options(tool, cuda)
    cmd = [str(tool.path), "profile", f"--trace={','.join(tool.trace_options(cuda))}", "--sample=none",
           "--cpuctxsw=none", *capture, "--force-overwrite=true", f"--output={out_base}",
           *child_command(config_path, nproc_per_node)]
    return cmd, [note] if note else []


def shell_line(cmd: list[str], env: dict[str, str]) -> str:
    """A command a person can paste: the environment the tool needs, then the command."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join([*prefix, shlex.join(cmd)])


def manual_command(cfg: CollectorConfig, stage_dir: Path, run_dir: Path, cuda: bool, tool: NsysTool | None,
                   nproc_per_node: int = 1) -> str:
    """The exact commands that run the system stage by hand and merge it into the run."""
    config_path = stage_dir / "collector.json"
    config_path.write_text(cfg.to_json())
    nsys = tool or NsysTool(Path("nsys"), "", frozenset())
    cmd, _ = nsys_command(nsys, config_path, stage_dir / REPORT, cuda, nproc_per_node)
    env = dict(NVTX_ENV)
    pythonpath = child_env().get("PYTHONPATH")
    if pythonpath and pythonpath != os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = pythonpath
    report = stage_dir / f"{REPORT}.nsys-rep"
    return f"{shell_line(cmd, env)} && advisor analyze {shlex.quote(str(run_dir))} {shlex.quote(str(report))}"


def run_nsys(cfg: CollectorConfig, stage_dir: Path, *, cuda: bool, timeout_s: float,
             progress: Callable[[str], None] | None = None, tool: NsysTool | None = None,
             nproc_per_node: int = 1) -> NsysRun:
    """Run the script under nsys and export SQLite; :class:`CollectError` when nothing usable came out."""
    tool = tool or find_nsys()
    config_path = stage_dir / "collector.json"
    config_path.write_text(cfg.to_json())
    out_base = stage_dir / REPORT
    cmd, notes = nsys_command(tool, config_path, out_base, cuda, nproc_per_node)
    env = {**child_env(), **NVTX_ENV}
    log = stage_dir / LOG
    line = shell_line(cmd, NVTX_ENV)
    if progress:
        progress(f"system stage: running the script again under Nsight Systems {tool.version} (output in {log})")
    started = time.monotonic()
    rc, stopped = _profile(cmd, env, log, timeout_s)
    wall = round(time.monotonic() - started, 3)
    report = _report(tool, out_base, log, rc, stopped, line)
    sqlite = export_sqlite(tool, report, out_base.with_suffix(".sqlite"), log)
    status = _status(stage_dir)
    run = NsysRun(sqlite, line, [config_path, report, sqlite, log], status.get("outcome", ""), notes, wall)
    if (stage_dir / "status.rank0.json").exists():
        run.artifacts.append(stage_dir / "status.rank0.json")
    if stopped:
        run.notes.append(f"the script was stopped after {timeout_s:.0f} s; nsys kept what it had recorded")
    return run


def _profile(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float) -> tuple[int, bool]:
    """Run nsys; on timeout or Ctrl-C ask it to stop and write, then end what is left."""
    with log.open("ab") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        stopped = False
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stopped = True
            rc = _stop(proc)
        except KeyboardInterrupt:
            _stop(proc)
            raise
        finally:
            _end_leftovers(proc)
    return rc, stopped


def _stop(proc: subprocess.Popen[Any]) -> int:
    try:
        os.killpg(proc.pid, signal.SIGINT)  # nsys stops collecting and writes the report on SIGINT
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def _end_leftovers(proc: subprocess.Popen[Any]) -> None:
    """Kill what this nsys started and left behind: its process group, and its daemonised agent.

    The agent runs in its own session, named after the nsys process
    (``--session-name=profile-<app>-<nsys pid>``), so it is found by that id.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    marker = f"-{proc.pid}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--start-agent" in args and any(a.startswith(b"--session-name=") and a.endswith(marker) for a in args):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _report(tool: NsysTool, out_base: Path, log: Path, rc: int, stopped: bool, line: str) -> Path:
    """The ``.nsys-rep`` of the capture, importing the ``.qdstrm`` when nsys could not."""
    report = out_base.with_suffix(".nsys-rep")
    qdstrm = out_base.with_suffix(".qdstrm")
    if not report.exists() and qdstrm.exists():
        report = import_qdstrm(tool, qdstrm, log, report)
    if report.exists():
        if qdstrm.exists():
            qdstrm.unlink()
        return report
    tail = _tail(log)
    if _not_allowed(tail):
        raise ToolMissingError("profiling is not allowed here: " + _last_line(tail), line)
    if "capture range" not in tail.lower() and "--capture-range" in line:
        why = (f"the script never opened the {CAPTURE_RANGE} NVTX range (it stopped before the profiled steps, "
               "or NVTX ranges do not reach this nsys)")
    elif stopped:
        why = "the script was stopped by the time limit before nsys had anything to write"
    else:
        why = f"nsys exited with code {rc} and wrote no report" + (": " + _last_line(tail) if tail else "")
    raise CollectError(f"{log}: {why}")


def _not_allowed(text: str) -> bool:
    low = text.lower()
    return any(s in low for s in ("permission denied", "not permitted", "insufficient privilege", "paranoid",
                                  "err_nvgpuctrperm"))


def _tail(log: Path, size: int = 4000) -> str:
    try:
        data = log.read_bytes()[-size:]
    except OSError:
        return ""
    return data.decode(errors="replace")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _status(stage_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((stage_dir / "status.rank0.json").read_text())
    except (OSError, ValueError):
        return {}
