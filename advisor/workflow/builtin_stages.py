"""The built-in stages: framework (PyTorch Profiler), system (Nsight Systems), kernel (Nsight Compute), report.

Each is a :class:`~advisor.workflow.stages.StageSpec`; see that module for
the contract. The functions here only adapt each tool's own modules
(``advisor.collect.*``, ``advisor.load.*``) and the per-stage functions of
:mod:`advisor.pipeline` to it; the walk decides when each runs.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.errors import CollectError, ToolMissingError, TraceError
from advisor.workflow.stages import Collected, StageContext, StageSpec, register_stage

__all__: list[str] = []

NSYS_TYPES = (".nsys-rep", ".qdrep", ".qdstrm", ".sqlite")
KINETO_TYPES = (".json", ".json.gz")


# framework -------------------------------------------------------------------------
def _framework_collect(ctx: StageContext) -> Collected:
    """Run the script under the PyTorch Profiler; the outcome, whatever it is, is the caller's to record
    (``Collected.result``): a script that failed or stopped before the profiled steps still ran this stage."""
    from advisor.collect.framework import run_framework

    if ctx.config is None:
        raise CollectError("the framework stage needs a script to run; use `advisor diagnose SCRIPT`")
    result = run_framework(ctx.config, ctx.stage_dir, timeout_s=ctx.timeout_s, nproc_per_node=_ranks(ctx))
    return Collected(result.traces, sorted(ctx.stage_dir.iterdir()), ctx.run_meta.get("reproduce") or None,
                     [f"the script {result.outcome}"], result=result)


def _framework_command(ctx: StageContext) -> str | None:
    return ctx.run_meta.get("reproduce") or "advisor diagnose YOUR_SCRIPT.py -- YOUR_ARGS"


def _framework_ingest(path: Path, stage_dir: Path) -> list[Path]:
    from advisor.pipeline import find_kineto_traces

    return find_kineto_traces(path)  # kept where they are; run.json records the paths


def _framework_analyze(paths: Sequence[Path], run_meta: dict[str, Any], facts: Mapping[str, Any],
                       collected: bool) -> Any:
    """The traces' findings, the ranks compared (:func:`advisor.pipeline.analyze_traces`), wherever the stage
    runs: collected by ``advisor diagnose``, given to ``advisor analyze``, or merged into a run."""
    from advisor.pipeline import analyze_trace_files, analyze_traces, load_collected_traces

    if not collected:
        return analyze_trace_files(paths, run_meta)  # a file the user gave must be readable
    traces, unreadable = load_collected_traces(paths)
    findings = analyze_traces(traces, run_meta)
    findings.notes.extend(unreadable)
    return findings


# system ------------------------------------------------------------------------------
def _system_config(ctx: StageContext) -> Any:
    from advisor.collect.nsys import stage_config

    return stage_config(ctx.config, ctx.stage_dir, ctx.run_meta.get("step_method"))


def _system_timeout(ctx: StageContext) -> float:
    """The user's --timeout; else generous: three framework runs plus nsys's own start and stop."""
    if ctx.timeout_s:
        return float(ctx.timeout_s)
    return 3.0 * float(ctx.run_meta.get("wall_s") or 60.0) + 300.0


def _ranks(ctx: StageContext) -> int:
    return int(ctx.run_meta.get("nproc_per_node") or 1)


def _system_collect(ctx: StageContext) -> Collected:
    if ctx.config is None:
        raise CollectError("advisor analyze does not run profilers")
    from advisor.collect.nsys import run_nsys

    run = run_nsys(_system_config(ctx), ctx.stage_dir, cuda=ctx.cuda, timeout_s=_system_timeout(ctx),
                   progress=ctx.progress, nproc_per_node=_ranks(ctx))
    return Collected([run.sqlite], run.artifacts, run.command, run.notes)


def _system_command(ctx: StageContext) -> str | None:
    if ctx.config is None:  # files read elsewhere (advisor analyze): no script to name, and no collector imported
        return ("nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --output=report python "
                f"YOUR_SCRIPT.py && advisor analyze {shlex.quote(str(ctx.run_dir))} report.nsys-rep")
    from advisor.collect.nsys import manual_command
    from advisor.tools.nsys import find_nsys

    try:
        tool = find_nsys()
    except ToolMissingError:
        tool = None
    return manual_command(_system_config(ctx), ctx.stage_dir, ctx.run_dir, ctx.cuda, tool, _ranks(ctx))


def _system_check(path: Path) -> None:
    from advisor.load.nsys_sqlite import is_nsys_sqlite
    from advisor.tools.nsys import find_nsys

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
    from advisor.tools.nsys import report_to_sqlite

    _system_check(path)
    return [report_to_sqlite(path, stage_dir, stage_dir / "nsys.log")]


def _system_load(paths: Sequence[Path], run_meta: dict[str, Any], facts: Mapping[str, Any]) -> Any:
    from advisor.analyze.system.view import SystemView
    from advisor.load.nsys_sqlite import load_nsys_sqlite

    trace = load_nsys_sqlite(paths[-1])
    view = SystemView(trace, run_meta)
    view.notes = list(trace.notes)  # the loader's data-quality notes, for the report (the runner adds them)
    return view


# trial (advisor.collect.trial runs the script again and tries settings, advisor.load.trial reads its record) ----
def _trial_asked(ctx: StageContext) -> list[tuple[str, str]]:
    """(knob, rule id) of each diagnosis whose fix is a setting, in the diagnoses' order."""
    return [(d.knob, d.rule_id) for d in ctx.diagnoses if getattr(d, "knob", None)]


def _trial_collect(ctx: StageContext) -> Collected:
    if ctx.config is None:
        raise CollectError("advisor analyze does not run the script, so it cannot try settings")
    from advisor.collect.trial import plan_trial, run_trial, steps_left, trial_wait, unprofiled_step_ms

    left = steps_left(ctx.run_meta, trial_wait(ctx.config))
    plan = plan_trial(_trial_asked(ctx), unprofiled_step_ms(ctx.run_meta, ctx.facts),
                      budget_s=ctx.config.trial_budget_s, numerics=ctx.config.trial_numerics, cuda=ctx.cuda,
                      steps_left=left, step_method=ctx.run_meta.get("step_method"))
    if not plan.knobs:
        why = "; ".join(f"{k}: {reason}" for k, reason in plan.not_tried.items()) or "no rule asked for a setting"
        raise CollectError(f"no setting was tried ({why})")
    if ctx.progress:
        ctx.progress(f"trying {', '.join(plan.knobs)} on the script's steps (blocks of {plan.block_steps} steps)")
    path, result = run_trial(ctx.config, ctx.stage_dir, plan, timeout_s=_system_timeout(ctx),
                             nproc_per_node=_ranks(ctx))
    return Collected([path], sorted(ctx.stage_dir.iterdir()), _trial_command(ctx),
                     [f"tried {', '.join(plan.knobs)}; the trial run {result.outcome}"])


def _trial_command(ctx: StageContext) -> str | None:
    """The run again, with the trial: the command as given, less --no-trial before the script's own arguments."""
    command = ctx.run_meta.get("command") or []
    if not command:
        return "advisor diagnose YOUR_SCRIPT.py -- YOUR_ARGS"
    ours = command.index("--") if "--" in command else len(command)
    return shlex.join(["advisor", *[a for a in command[1:ours] if a != "--no-trial"], *command[ours:]])


def _trial_ingest(path: Path, stage_dir: Path) -> list[Path]:
    from advisor.load.trial import load_trial

    load_trial(path)  # a file that is not a trial record fails here, before it is copied
    return _kernel_ingest(path, stage_dir)


def _trial_load(paths: Sequence[Path], run_meta: dict[str, Any], facts: Mapping[str, Any]) -> Any:
    from advisor.load.trial import load_trial

    return load_trial(paths[-1])


# kernel (Nsight Compute: advisor.collect.ncu runs it, advisor.load.ncu_* read it) ----------------
def _kernel_targets(ctx: StageContext) -> list[Any]:
    """The kernels the diagnoses so far name, in their rank order, then those the roofline says lose the most
    time, then the ones with the most of it."""
    from advisor.collect.ncu import select_kernels

    asked = [(name, d.rule_id) for d in ctx.diagnoses for name in getattr(d, "kernels", ()) or ()]
    return select_kernels(ctx.facts.get("kernels.top") or [], asked=asked,
                          candidates=ctx.facts.get("roofline.ncu_candidates") or [])


def _kernel_command(ctx: StageContext) -> str | None:
    """One ncu command per hot kernel, for running by hand, then the merge into this run."""
    if ctx.config is None:  # files read elsewhere (advisor analyze): no script to name, and no collector imported
        return (f"ncu --set full -o report python YOUR_SCRIPT.py && advisor analyze "
                f"{shlex.quote(str(ctx.run_dir))} report.ncu-rep")
    from advisor.collect.ncu import build_command

    targets = _kernel_targets(ctx)
    program = [sys.executable, ctx.config.script, *ctx.config.args]
    lines = [shlex.join(build_command(t, ctx.stage_dir / f"{i:02d}", program)) for i, t in enumerate(targets, 1)]
    if not lines:
        return None
    reports = " ".join(shlex.quote(str(ctx.stage_dir / f"{i:02d}.ncu-rep")) for i in range(1, len(lines) + 1))
    return "\n".join(lines) + f"\nadvisor analyze {shlex.quote(str(ctx.run_dir))} {reports}"


def _kernel_collect(ctx: StageContext) -> Collected:
    if ctx.config is None:
        raise CollectError("advisor analyze does not run profilers")
    from advisor.collect.ncu import run_kernel_stage

    result = run_kernel_stage(ctx.run_dir, Path(ctx.config.script), ctx.config.args, _kernel_targets(ctx),
                              timeout_s=ctx.timeout_s)
    commands = "\n".join(result.commands) or None
    if result.status != "ran":
        raise ToolMissingError(result.reason, commands)
    reports = [ctx.run_dir / a for a in result.artifacts]
    return Collected(reports, [*reports, ctx.stage_dir / "stage.json"], commands, result.notes)


def _kernel_accepts(path: Path) -> bool:
    from advisor.pipeline import is_kernel_file

    return is_kernel_file(path)


def _kernel_ingest(path: Path, stage_dir: Path) -> list[Path]:
    target = stage_dir / path.name
    if path.resolve() != target.resolve():
        shutil.copy2(path, target)
    return [target]


class _KernelFiles:
    """The kernel analyzers' view of Nsight Compute files, with the files' own notes."""

    def __init__(self, paths: Sequence[Path], facts: Mapping[str, Any]) -> None:
        from advisor.analyze.kernel.view import KernelView
        from advisor.pipeline import load_kernel_reports

        reports = load_kernel_reports(paths)
        self.view = KernelView(reports, facts.get("kernels.top") or [], facts.get("ops.efficiency") or [])
        self.notes = [n for r in reports for n in r.notes]
        joined = self.view.join_note()
        if joined:
            self.notes.append(joined)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)


def _kernel_load(paths: Sequence[Path], run_meta: dict[str, Any], facts: Mapping[str, Any]) -> Any:
    return _KernelFiles(paths, facts)


register_stage(StageSpec("framework", "PyTorch Profiler", "framework", _framework_collect, _framework_command,
                         _framework_ingest, None, KINETO_TYPES, analyze=_framework_analyze))
register_stage(StageSpec("system", "Nsight Systems", "system", _system_collect, _system_command, _system_ingest,
                         _system_load, NSYS_TYPES, check=_system_check))
register_stage(StageSpec("kernel", "Nsight Compute", "kernel", _kernel_collect, _kernel_command, _kernel_ingest,
                         _kernel_load, (".ncu-rep",), accepts=_kernel_accepts))
register_stage(StageSpec("trial", "advisor (A/B trial)", "trial", _trial_collect, _trial_command, _trial_ingest,
                         _trial_load, file_names=("trial.json",)))
register_stage(StageSpec("report", "advisor", terminal=True))
