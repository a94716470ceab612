"""What ``advisor diagnose``, ``analyze`` and ``report`` do, without the command line.

Each function makes or opens a run directory, has the workflow walk the
stages (:mod:`advisor.workflow.session`), writes the reports, and returns a
:class:`RunSummary`; the CLI only parses options and prints. What is here is
what the walk does not decide: the run's metadata, the script's outcome and
the note when it stopped early, what the run is doing when Ctrl-C comes.
Whatever was collected is written to the run directory before anything can
fail on it, and Ctrl-C at any moment after the run directory is made writes
the report of what there is (:mod:`advisor.salvage`).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.engine.rulebook import RuleBook
from advisor.engine.rule import SEVERITIES
from advisor.errors import AdvisorError, UsageError
from advisor.pipeline import Diagnosed, compare_kernel_reports, find_kineto_traces, load_kernel_reports, rediagnose
from advisor.pipeline import Rendered, render_reports, save
from advisor.rundir import RunDir
from advisor.salvage import Salvage
from advisor.workflow.graph import load_workflow
from advisor.workflow.runner import StageHooks, StageRunner
from advisor.workflow.session import check_inputs, check_script_workflow, merge_into_run, split_inputs, walk_files
from advisor.workflow.session import walk_script
from advisor.workflow.stages import Collected, StageSpec

if TYPE_CHECKING:  # the collectors only where a script is run: `advisor analyze` reads files and never needs them
    from advisor.collect.config import CollectorConfig
    from advisor.collect.framework import FrameworkResult

__all__ = ["OUTCOME_PHRASES", "RunSummary", "analyze_files", "diagnose_script", "merge_files", "outcome_sentence",
           "rerender"]


@dataclass
class RunSummary:
    run: RunDir
    diagnosed: Diagnosed
    reports: dict[str, Path]
    framework: FrameworkResult | None = None
    script_exit_code: int = 0
    notes: list[str] = field(default_factory=list)
    #: the report data the reports were rendered from (the terminal card reads it rather than building it again)
    report: dict[str, Any] | None = None

    @classmethod
    def rendered(cls, run: RunDir, diagnosed: Diagnosed, rendered: Rendered, **kwargs: Any) -> RunSummary:
        return cls(run, diagnosed, rendered.paths, report=rendered.data, **kwargs)

    def exit_code(self, fail_on: str | None = None) -> int:
        """Non-zero when the script failed, or when a diagnosis reaches ``fail_on``."""
        if self.script_exit_code:
            return self.script_exit_code
        if fail_on:
            threshold = SEVERITIES.index(fail_on)
            if any(d.severity_rank >= threshold for d in self.diagnosed.diagnoses):
                return 1
        return 0


#: how each outcome reads after "the script"
OUTCOME_PHRASES = {
    "captured": "was profiled, then stopped", "completed": "finished", "exited": "exited",
    "error": "raised an error", "timeout": "was stopped by --timeout", "interrupted": "was interrupted (Ctrl-C)",
    "terminated": "was terminated (SIGTERM)",
    "crashed": "ended without a status (killed, or a native crash)",
}


def outcome_sentence(result: FrameworkResult) -> str:
    """One sentence on how the script ended: ``the script raised RuntimeError: boom (train.py:57), exit code 1``.

    A crash in a DataLoader worker names the worker and its line; the worker's whole traceback is in a file of
    the run directory (``framework/worker_traceback.rank<R>.txt``), which the sentence names.
    """
    error = result.error
    kept = ""
    if result.outcome == "error" and error and error.get("type") == "SystemExit":
        how = "exited with an error"
    elif result.outcome == "error" and error:
        where = f" ({Path(error['file']).name}:{error['line']})" if error.get("file") and error.get("line") else ""
        message = " ".join(str(error.get("message", "")).split())
        worker = f" in DataLoader worker {error['worker']}" if error.get("worker") is not None else ""
        how = f"raised {error['type']}{worker}: {message}{where}"
        if error.get("traceback_file"):
            kept = f"; the worker's traceback is in {result.stage_dir / error['traceback_file']}"
    else:
        how = OUTCOME_PHRASES.get(result.outcome, result.outcome)
    return f"the script {how}, exit code {result.exit_code}{kept}"


def _stopped_note(result: FrameworkResult, cfg: CollectorConfig) -> str | None:
    """A sentence for the report when the script did not reach the end of the profiled window."""
    profile = result.profile
    if profile == "complete":
        return None
    how = OUTCOME_PHRASES.get(result.outcome, result.outcome)
    if result.step_method == "time":
        window = f"the {cfg.window_s:g} s time window"
    else:
        plan = next((st["schedule"] for st in result.statuses if st.get("schedule")), cfg.schedule())
        first = plan["wait"] + plan["warmup"]
        window = f"the profiled window (steps {first} to {first + plan['active'] - 1})"
    if profile == "partial":
        return f"the script {how} during {window}; the steps it finished until then were analysed"
    # After an error or a crash the advice is to fix that, not to profile differently.
    failed = result.outcome in ("error", "crashed")
    if result.step_method is None:
        # The time window opens --window-start seconds after the first nn.Module call (or the script's start with
        # --steps time): for a script shorter than that, lowering it is what records something.
        advice = "" if failed else (f"; the time window opens {cfg.window_start_s:g} s after the first nn.Module "
                                    "call: lower --window-start (or use --steps time) to record one")
        return (f"the script {how} before any step was recognised (no optimizer.step(), backward(), DataLoader "
                f"batch or inference call of a model){advice}")
    steps = max((s.get("steps_seen") or 0 for s in result.statuses), default=0)
    advice = "" if failed else "; lower --wait/--warmup to profile earlier steps"
    return f"the script {how} after {steps} step(s), before {window} began{advice}"


def _profiler_settings(cfg: CollectorConfig, timeout_s: float | None, nproc_per_node: int) -> dict[str, object]:
    return cfg.schedule() | {
        "step_method": cfg.step_method, "window_start_s": cfg.window_start_s, "window_s": cfg.window_s,
        "run_to_end": cfg.run_to_end, "record_shapes": cfg.record_shapes, "profile_memory": cfg.profile_memory,
        "with_stack": cfg.with_stack, "source_lines": cfg.source_lines, "mode": cfg.mode, "timeout_s": timeout_s,
        "nproc_per_node": nproc_per_node, "trial_budget_s": cfg.trial_budget_s, "trial_numerics": cfg.trial_numerics,
    }


def diagnose_script(script: Path, script_args: list[str], cfg: CollectorConfig, *, out: Path | None = None,
                    timeout_s: float | None = None, rule_dirs: list[Path] | None = None,
                    nproc_per_node: int = 1, argv: list[str] | None = None, workflow: Path | None = None,
                    escalate: bool = True, trial: bool = True, progress: Callable[[str], None] | None = None,
                    gpu_spec: Path | None = None) -> RunSummary:
    from advisor.collect.framework import check_script

    resolved = check_script(script)
    book = RuleBook.load(rule_dirs or [])  # rule errors surface before the script runs
    spec_path = _gpu_spec(gpu_spec)  # and so does a bad GPU spec table
    graph = load_workflow(workflow)  # and so do workflow errors
    check_script_workflow(graph)
    run = RunDir.create(resolved.stem, out)  # and a run directory that cannot be made
    with Salvage(run, book, "starting the script") as keep:
        if spec_path:
            run.update_metadata(gpu_spec=spec_path)  # the analyzers read it from run.json
        return _diagnose(run, book, graph, keep, resolved, script, script_args, cfg, timeout_s=timeout_s,
                         nproc_per_node=nproc_per_node, argv=argv, escalate=escalate, trial=trial,
                         progress=progress)


def _gpu_spec(path: Path | None) -> str:
    """A user's GPU spec table, checked now (one clear error before anything runs); its absolute path or ""."""
    if path is None:
        return ""
    from advisor.analyze.framework.gpu_spec import load_specs

    load_specs(path.resolve())
    return str(path.resolve())


def _diagnose(run: RunDir, book: RuleBook, graph: Any, keep: Salvage, resolved: Path, script: Path,
              script_args: list[str], cfg: CollectorConfig, *, timeout_s: float | None, nproc_per_node: int,
              argv: list[str] | None, escalate: bool, trial: bool,
              progress: Callable[[str], None] | None) -> RunSummary:
    cfg.script = str(script)  # as typed: it becomes the script's sys.argv[0]
    cfg.args = list(script_args)
    cfg.source_roots = cfg.source_roots or [str(resolved.parent)]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc_per_node}"]
    run.update_metadata(
        kind="diagnose", title=resolved.name, script=str(resolved), args=cfg.args, cwd=str(Path.cwd()),
        command=argv or [], script_command=[*(launcher if nproc_per_node > 1 else [sys.executable]), str(script),
                                            *cfg.args],
        reproduce=shlex.join(["advisor", *(argv or [])[1:]]) if argv else "",
        started_at=time.strftime("%Y-%m-%d %H:%M:%S"), profiler=_profiler_settings(cfg, timeout_s, nproc_per_node),
        source_roots=cfg.source_roots, nproc_per_node=nproc_per_node,
    )
    hooks = _ScriptRun(run, keep, cfg)
    skip = {} if escalate else {name: "--no-escalate was given" for name in graph.order()
                                 if name not in ("trial", graph.start)}
    if not trial:
        skip["trial"] = "--no-trial was given"
    diagnosed = walk_script(run, book, graph, config=cfg, run_meta=run.read_metadata(), hooks=hooks,
                            skip=skip, timeout_s=timeout_s, progress=progress)
    keep.findings, keep.phase = diagnosed.findings, "writing the report"
    save(run, diagnosed)
    keep.saved = True
    rendered = render_reports(run)
    result = hooks.result
    return RunSummary.rendered(run, diagnosed, rendered, framework=result,
                               script_exit_code=result.exit_code if result else 0)


class _ScriptRun(StageHooks):
    """What ``advisor diagnose`` records as the walk goes: the script's outcome in run.json once the framework
    stage has run it, and what the run is doing, for Ctrl-C."""

    def __init__(self, run: RunDir, keep: Salvage, cfg: CollectorConfig) -> None:
        self.run, self.keep, self.cfg = run, keep, cfg
        self.result: FrameworkResult | None = None

    def collected(self, runner: StageRunner, spec: StageSpec, collected: Collected) -> None:
        from advisor.collect.framework import SUCCESS

        if spec.name != "framework":
            return
        result = self.result = collected.result
        self.keep.phase = "analysing the trace"
        first = result.statuses[0] if result.statuses else {}
        self.run.update_metadata(
            outcome=result.outcome, exit_code=result.exit_code, outcome_text=outcome_sentence(result),
            stopped_by=result.stopped_by, profile=result.profile, wall_s=result.wall_s,
            finished_at=time.strftime("%Y-%m-%d %H:%M:%S"), step_method=result.step_method, error=result.error,
            steps_skipped=first.get("steps_skipped"), schedule=first.get("schedule"),
            closure_unit=first.get("closure_unit"),
            environment=first.get("environment", {}), threads_at_capture=first.get("threads_at_capture"),
            host_costs=first.get("host_costs"), unprofiled_step_ms=first.get("unprofiled_step_ms") or [],
            heap=first.get("heap"),
            dataloader_fetch=first.get("dataloader_fetch"), dataloader_handover=first.get("dataloader_handover"),
            timings={"total_s": result.wall_s, **first.get("timings", {})}, ranks=result.rank_summary(),
            traces=[self.run.relative(t) for t in result.traces], child_command=result.command,
        )
        if result.ctrl_c_after:
            raise KeyboardInterrupt  # pressed as the script ended: stop here, with its outcome recorded
        # the analyzers and the deeper stages read the whole run.json (the host analyzers its environment)
        runner.run_meta = {**self.run.read_metadata(), "host_costs": first.get("host_costs") or {}}
        runner.stopped_early = _stopped_note(result, self.cfg)
        if result.outcome not in SUCCESS:
            runner.hold = f"the script {result.outcome} in the framework stage, so it is not run again"

    def absorbed(self, runner: StageRunner, spec: StageSpec) -> None:
        if spec.name == "framework":
            self.keep.findings, self.keep.phase = runner.findings, "running the deeper stages of the workflow"


def analyze_files(paths: list[Path], *, out: Path | None = None, rule_dirs: list[Path] | None = None,
                  argv: list[str] | None = None, workflow: Path | None = None,
                  gpu_spec: Path | None = None) -> RunSummary:
    """Traces and reports recorded elsewhere, each read by its stage's loader: Kineto traces (framework),
    Nsight Systems reports (system), Nsight Compute results (kernel; two are also compared). With a run
    directory first, the other files are merged into it. ``gpu_spec``: a user's table of GPU peaks."""
    if paths and RunDir.looks_like(paths[0]):
        return merge_files(paths[0], paths[1:], rule_dirs=rule_dirs, workflow=workflow)
    book = RuleBook.load(rule_dirs or [])
    graph = load_workflow(workflow)
    spec_path = _gpu_spec(gpu_spec)
    given = split_inputs(paths)
    check_inputs(given)  # bad input fails here, before a run directory is made
    trace_paths = [t for p in given.pop("framework", []) for t in find_kineto_traces(p)]  # folders: their ranks
    inputs = trace_paths + [p for stage_paths in given.values() for p in stage_paths]
    run = RunDir.create(inputs[0].name.split(".")[0], out)  # before the work: a folder that cannot be made fails now
    run.update_metadata(kind="analyze", title=", ".join(p.name for p in paths), inputs=[str(p.resolve()) for p in inputs],
                        command=argv or [], started_at=time.strftime("%Y-%m-%d %H:%M:%S"),
                        source_roots=[str(p.resolve().parent) for p in inputs],
                        **({"gpu_spec": spec_path} if spec_path else {}))
    with Salvage(run, book, "loading the traces" if trace_paths else "reading the other files") as keep:
        hooks = _FilesRun(keep)
        try:
            diagnosed = walk_files(run, book, graph, {"framework": trace_paths, **given} if trace_paths else given,
                                   hooks)
        except AdvisorError:
            if hooks.loading == "framework":  # bad input: no run directory is left behind
                run.file("run.json").unlink(missing_ok=True)
                run.discard_if_empty()
            raise
        notes = []
        if len(given.get("kernel", [])) == 2:  # before and after a fix: compare the two
            reports = load_kernel_reports(given["kernel"])
            notes.append(_comparison_note(run, compare_kernel_reports(reports[0], reports[1], book)))
        keep.findings, keep.phase = diagnosed.findings, "writing the report"
        save(run, diagnosed)
        keep.saved = True
        return RunSummary.rendered(run, diagnosed, render_reports(run), notes=notes)


class _FilesRun(StageHooks):
    """What ``advisor analyze`` is doing, for Ctrl-C, and the stage whose files are being read."""

    def __init__(self, keep: Salvage) -> None:
        self.keep = keep
        self.loading: str | None = None

    def analysing(self, runner: StageRunner, spec: StageSpec) -> None:
        self.loading = spec.name

    def absorbed(self, runner: StageRunner, spec: StageSpec) -> None:
        self.loading = None
        self.keep.findings = runner.findings
        if spec.name == "framework":
            self.keep.phase = "reading the other files"


def merge_files(run_dir: Path, files: list[Path], *, rule_dirs: list[Path] | None = None,
                workflow: Path | None = None) -> RunSummary:
    """``advisor analyze RUN_DIR extra.sqlite``: load the files into their stages of that run and report again."""
    if not files:
        raise UsageError(f"{run_dir}: is a run directory; give the files to add to it after it "
                         "(advisor analyze RUN_DIR report.nsys-rep), or use `advisor report RUN_DIR`")
    run = RunDir.open(run_dir)
    book = RuleBook.load(rule_dirs or [])
    check_inputs(split_inputs(files))
    diagnosed = merge_into_run(run, book, files, workflow)
    save(run, diagnosed)
    return RunSummary.rendered(run, diagnosed, render_reports(run))


def _comparison_note(run: RunDir, comparison: dict) -> str:
    """Save comparison.json; one line for the terminal."""
    run.write_json("comparison.json", comparison)
    speed = f"{comparison['speedup']:.2f}x the speed" if comparison.get("speedup") else "no duration to compare"
    fixed = ", ".join(f"{i} {n}" for i, n in comparison["fixed"].items()) or "nothing"
    left = ", ".join(f"{i} {n}" for i, n in comparison["remaining"].items()) or "nothing"
    return (f"{Path(comparison['after']).name} against {Path(comparison['before']).name}: {speed}; "
            f"fixes {fixed}; still {left} (comparison.json)")


def rerender(run_dir: Path, rule_dirs: list[Path] | None = None) -> RunSummary:
    run = RunDir.open(run_dir)
    diagnosed = rediagnose(run, RuleBook.load(rule_dirs or []))
    save(run, diagnosed)
    return RunSummary.rendered(run, diagnosed, render_reports(run))
