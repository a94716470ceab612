"""The built-in stages: framework (PyTorch Profiler), system (Nsight Systems), kernel (Nsight Compute), report.

Each is a :class:`~advisor.workflow.stages.StageSpec`; see that module for
the contract. The kernel stage's collector and loader are placeholders that
say the stage is not available yet; the Nsight Compute module replaces them
with :func:`~advisor.workflow.stages.register_stage`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor.errors import CollectError, ToolMissingError, TraceError
from advisor.workflow.stages import Collected, StageContext, StageSpec, register_stage

__all__: list[str] = []

NSYS_TYPES = (".nsys-rep", ".qdrep", ".qdstrm", ".sqlite")
KINETO_TYPES = (".json", ".json.gz")


# framework -------------------------------------------------------------------------
def _framework_collect(ctx: StageContext) -> Collected:
    from advisor.collect.framework import run_framework

    if ctx.config is None:
        raise CollectError("the framework stage needs a script to run; use `advisor diagnose SCRIPT`")
    result = run_framework(ctx.config, ctx.stage_dir, timeout_s=ctx.timeout_s)
    if not result.traces:
        raise CollectError(f"{ctx.stage_dir}: the script {result.outcome} before the profiled steps")
    return Collected(result.traces, [*result.traces, ctx.stage_dir / "collector.json"], shlex.join(result.command))


def _framework_command(ctx: StageContext) -> str | None:
    return ctx.run_meta.get("reproduce") or "advisor diagnose YOUR_SCRIPT.py -- YOUR_ARGS"


def _framework_ingest(path: Path, stage_dir: Path) -> list[Path]:
    from advisor.pipeline import find_kineto_traces

    return find_kineto_traces(path)  # kept where they are; run.json records the paths


def _framework_load(paths: Sequence[Path], run_meta: dict[str, Any]) -> Any:
    from advisor.analyze.view import TraceView
    from advisor.pipeline import load_traces

    traces = load_traces(paths)
    return TraceView(traces[0], run_meta)


# system ------------------------------------------------------------------------------
def _system_config(ctx: StageContext) -> Any:
    from advisor.collect.nsys import stage_config

    return stage_config(ctx.config, ctx.stage_dir, ctx.run_meta.get("step_method"))


def _system_timeout(ctx: StageContext) -> float:
    """The user's --timeout; else generous: three framework runs plus nsys's own start and stop."""
    if ctx.timeout_s:
        return float(ctx.timeout_s)
    return 3.0 * float(ctx.run_meta.get("wall_s") or 60.0) + 300.0


def _system_collect(ctx: StageContext) -> Collected:
    from advisor.collect.nsys import run_nsys

    if ctx.config is None:
        raise CollectError("advisor analyze does not run profilers")
    run = run_nsys(_system_config(ctx), ctx.stage_dir, cuda=ctx.cuda, timeout_s=_system_timeout(ctx),
                   progress=ctx.progress)
    return Collected([run.sqlite], run.artifacts, run.command, run.notes)


def _system_command(ctx: StageContext) -> str | None:
    from advisor.collect.nsys import manual_command
    from advisor.collect.nsys_tool import find_nsys

    if ctx.config is None:
        return ("nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --output=report python "
                f"YOUR_SCRIPT.py && advisor analyze {shlex.quote(str(ctx.run_dir))} report.nsys-rep")
    try:
        tool = find_nsys()
    except ToolMissingError:
        tool = None
    return manual_command(_system_config(ctx), ctx.stage_dir, ctx.run_dir, ctx.cuda, tool)


def _system_check(path: Path) -> None:
    from advisor.collect.nsys_tool import find_nsys
    from advisor.load.nsys_sqlite import is_nsys_sqlite

    if path.suffix.lower() == ".sqlite":
        if not is_nsys_sqlite(path):
            raise TraceError(path, "is not an Nsight Systems SQLite export (no StringIds or export metadata); "
                                   "make one with `nsys export --type sqlite REPORT.nsys-rep`")
        return
    try:
        find_nsys()
    except ToolMissingError as exc:
        raise ToolMissingError(f"{path}: reading a {path.suffix} report needs nsys to export it: {exc}; or export "
                               "it where nsys is installed and give the .sqlite",
                               f"nsys export --type sqlite {shlex.quote(str(path))}") from None


def _system_ingest(path: Path, stage_dir: Path) -> list[Path]:
    from advisor.collect.nsys_tool import report_to_sqlite

    _system_check(path)
    return [report_to_sqlite(path, stage_dir, stage_dir / "nsys.log")]


def _system_load(paths: Sequence[Path], run_meta: dict[str, Any]) -> Any:
    from advisor.analyze.system_view import SystemView
    from advisor.load.nsys_sqlite import load_nsys_sqlite

    return SystemView(load_nsys_sqlite(paths[-1]), run_meta)


# kernel (placeholder until the Nsight Compute stage registers itself) -----------------------
def _kernel_command(ctx: StageContext) -> str | None:
    from advisor.collect.framework import child_command
    from advisor.naming import CAPTURE_RANGE

    if ctx.config is None:
        return None
    cfg = replace(ctx.config, out_dir=str(ctx.stage_dir), mode="nvtx", run_to_end=False, source_lines=False,
                  step_method=ctx.run_meta.get("step_method") or ctx.config.step_method)
    config_path = ctx.stage_dir / "collector.json"
    config_path.write_text(cfg.to_json())
    cmd = ["ncu", "--nvtx", f"--nvtx-include={CAPTURE_RANGE}/", "--target-processes=all", "--set=full",
           f"--export={ctx.stage_dir / 'report'}", *child_command(config_path)]
    return shlex.join(cmd)


def _kernel_collect(ctx: StageContext) -> Collected:
    raise ToolMissingError("the Nsight Compute stage is not available yet in this version of advisor",
                           _kernel_command(ctx))


def _kernel_unavailable(*args: Any) -> Any:
    raise TraceError(Path(str(args[0]) if args else "?"),
                     "Nsight Compute reports cannot be loaded yet by this version of advisor")


register_stage(StageSpec("framework", "PyTorch Profiler", "framework", _framework_collect, _framework_command,
                         _framework_ingest, _framework_load, KINETO_TYPES))
register_stage(StageSpec("system", "Nsight Systems", "system", _system_collect, _system_command, _system_ingest,
                         _system_load, NSYS_TYPES, check=_system_check))
register_stage(StageSpec("kernel", "Nsight Compute", "kernel", _kernel_collect, _kernel_command,
                         _kernel_unavailable, _kernel_unavailable, ()), default=True)
register_stage(StageSpec("report", "advisor", terminal=True))
