"""``advisor diagnose``, ``advisor analyze`` and ``advisor report``."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli.app import (FailOnOption, GpuSpecOption, OutOption, RulesOption, WorkflowOption, app, err, finish,
                              imports_done)
from advisor.messages import say


class StepMethod(str, Enum):
    auto = "auto"
    optimizer = "optimizer"
    dataloader = "dataloader"
    backward = "backward"
    module = "module"
    time = "time"


@app.command(context_settings={"ignore_unknown_options": False})
def diagnose(
    script: Annotated[Path, typer.Argument(help="The training script to run, unmodified.", show_default=False,
                                           metavar="SCRIPT")],
    script_args: Annotated[Optional[list[str]], typer.Argument(
        help="Arguments for the script; put them after `--`.", show_default=False, metavar="ARGS")] = None,
    out: OutOption = None,
    wait: Annotated[Optional[int], typer.Option(min=0, show_default=False, help=(
        "Steps to skip before profiling (start-up, autotuning) [default: 5]. Where the recorded steps would "
        "take longer than --window, the advisor fits the schedule to the steps' length (fewer skipped, warmed "
        "up and recorded steps), unless one of --wait, --warmup or --active is given."))] = None,
    warmup: Annotated[Optional[int], typer.Option(min=0, show_default=False, help=(
        "Steps run with the profiler warming up, not recorded [default: 3].") )] = None,
    active: Annotated[Optional[int], typer.Option(min=1, show_default=False, help=(
        "Steps recorded and analysed [default: 5]; as many again then run without the profiler, timed (at most "
        "as long again), to say what profiling added."))] = None,
    steps: Annotated[StepMethod, typer.Option(
        "--steps", help="How a step is recognised: optimizer.step(), DataLoader batches, the model's first call "
                        "after each backward() (updates written by hand), calls of the model (inference: under "
                        "no_grad or in eval mode, or called again with no backward() in a program with no optimizer; "
                        "with --steps module, any call of the first module called), or a "
                        "time window; auto tries them in that order, skips an evaluation run before the "
                        "first optimizer step, and makes each closure evaluation a step where one "
                        "optimizer.step(closure) outlasts --window.")] = StepMethod.auto,
    window_start: Annotated[float, typer.Option(
        min=0, help="Time window: seconds before recording, counted from the script's start (--steps time) "
                    "or from the return of its first nn.Module call (auto).")] = 10.0,
    window: Annotated[float, typer.Option(min=0.1, help=(
        "Time window: seconds to record; also how long the recorded steps may take before the schedule is "
        "fitted to long steps."))] = 5.0,
    run_to_end: Annotated[bool, typer.Option(help="Let the script run to its end after the profile is written.")] = False,
    timeout: Annotated[Optional[float], typer.Option(min=1, help="Stop the script after this many seconds, "
                                                               "keeping what was captured.")] = None,
    nproc_per_node: Annotated[int, typer.Option(
        "--nproc-per-node", min=1, help="Launch this many processes through torchrun (one trace per rank) "
                                        "and compare the ranks.")] = 1,
    memory: Annotated[bool, typer.Option(help="Record memory allocations (profile_memory); adds overhead.")] = False,
    with_stack: Annotated[bool, typer.Option(help="Also record Python frames (torch.profiler with_stack).")] = False,
    source_lines: Annotated[bool, typer.Option(help="Label ops with the user's source line that called them.")] = True,
    rules: RulesOption = None,
    workflow: WorkflowOption = None,
    gpu_spec: GpuSpecOption = None,
    escalate: Annotated[bool, typer.Option(
        help="Run the deeper stages the workflow asks for (Nsight Systems, Nsight Compute); with "
             "--no-escalate they are only listed, with the command that would run them.")] = True,
    trial: Annotated[bool, typer.Option(
        help="Where a diagnosis's fix is a setting (threads, grad mode, anomaly detection, the optimizer's "
             "foreach, zero_grad's set_to_none, TF32), run the script again and try it A/B on its own steps: "
             "the report gives the measured gain beside the estimate. Every setting is undone before the "
             "trial run stops.")] = True,
    trial_budget: Annotated[float, typer.Option(
        min=1, help="Seconds of steps the trial may spend, all settings together (the script's start-up and "
                    "wait steps come on top).")] = 60.0,
    trial_numerics: Annotated[bool, typer.Option(
        help="Also try settings that may change the results in the last bits (TF32, a fused optimizer).")] = False,
    fail_on: FailOnOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the summary card.")] = False,
) -> None:
    """Run SCRIPT under the profiler for a few steady-state steps and explain what is slow.

    When a diagnosis needs a closer look, the workflow (`advisor workflow show`) runs the
    script again under Nsight Systems or Nsight Compute, and the report says why; where
    its fix is a setting, the script runs once more to try it on its own steps.

    Example: advisor diagnose train.py -- --lr 0.1
    """
    from advisor.collect.config import CollectorConfig
    from advisor.collect.framework import SUCCESS
    from advisor.runs import diagnose_script, outcome_sentence

    imports_done()

    schedule = {k: v for k, v in (("wait", wait), ("warmup", warmup), ("active", active)) if v is not None}
    cfg = CollectorConfig(
        script=str(script), **schedule, fit_schedule=not schedule, step_method=steps.value,
        window_start_s=window_start, window_s=window, run_to_end=run_to_end, profile_memory=memory,
        with_stack=with_stack, source_lines=source_lines, trial_budget_s=trial_budget,
        trial_numerics=trial_numerics,
    )
    summary = diagnose_script(script, script_args or [], cfg, out=out, timeout_s=timeout, rule_dirs=rules,
                              nproc_per_node=nproc_per_node, argv=list(sys.argv), workflow=workflow,
                              escalate=escalate, trial=trial, gpu_spec=gpu_spec,
                              progress=None if quiet else lambda m: say(err, f"advisor: {m}", "dim"))
    result = summary.framework
    if result and result.outcome not in SUCCESS:
        kept = {"complete": "the profile", "partial": "the profile captured until then"}.get(result.profile)
        where = f"{kept} is in {summary.run.path}" if kept else f"nothing was profiled; see {summary.run.path}"
        say(err, f"advisor: {outcome_sentence(result)}; {where}", "yellow")
    finish(summary, fail_on, quiet)


@app.command()
def analyze(
    paths: Annotated[list[Path], typer.Argument(
        help="Kineto traces (.json, .json.gz) or folders of rank traces, Nsight Systems reports (.nsys-rep, "
             ".qdstrm, .sqlite), Nsight Compute results (.ncu-rep, ncu --csv output; two are also compared, "
             "the first as before); or a run directory followed by files to add to it.", show_default=False)],
    out: OutOption = None,
    rules: RulesOption = None,
    workflow: WorkflowOption = None,
    gpu_spec: GpuSpecOption = None,
    fail_on: FailOnOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the summary card.")] = False,
) -> None:
    """Analyse traces and reports recorded elsewhere: load, find, diagnose and report, without running anything.

    `advisor analyze RUN_DIR report.nsys-rep` adds a stage that was skipped (run by hand with
    the command the report gives) to that run, and writes its report again.

    A folder of rank traces is read one trace per worker process ($ADVISOR_WORKERS, default: the cores; 1: all in
    this process); one trace is decoded and analysed on a second core too. $ADVISOR_MEMORY_MB (default 3072)
    bounds the memory: a trace too big for it is analysed on a window of its steps.
    """
    from advisor.load.kineto_prefetch import start

    start(paths)  # decoding begins on another core while this one imports the analysis
    from advisor.runs import analyze_files

    imports_done()

    summary = analyze_files(paths, out=out, rule_dirs=rules, argv=list(sys.argv), workflow=workflow,
                            gpu_spec=gpu_spec)
    if not quiet:
        for note in summary.notes:
            typer.echo(note)
    finish(summary, fail_on, quiet)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory made by advisor.", show_default=False)],
    rules: RulesOption = None,
    fail_on: FailOnOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the summary card.")] = False,
) -> None:
    """Re-evaluate the rules over a run's saved findings and render its reports again (no profiling)."""
    from advisor.runs import rerender

    imports_done()

    finish(rerender(run_dir, rules), fail_on, quiet)


