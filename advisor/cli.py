"""The ``advisor`` command line. Thin: it parses options, calls :mod:`advisor.runs`, prints.

Errors: only the advisor's own :class:`~advisor.errors.AdvisorError` is
caught, and printed as one line; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from advisor import __version__
from advisor.collect.config import CollectorConfig
from advisor.errors import AdvisorError

__all__ = ["app", "main"]

app = typer.Typer(
    name="advisor",
    help="Tells you why your PyTorch training is slow and what to change.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_state = {"debug": False}
err = Console(stderr=True, highlight=False)


class StepMethod(str, Enum):
    auto = "auto"
    optimizer = "optimizer"
    dataloader = "dataloader"
    time = "time"


class SeverityLevel(str, Enum):
    info = "info"
    low = "low"
    medium = "medium"
    high = "high"
    critical = "critical"


RulesOption = Annotated[
    Optional[list[Path]],
    typer.Option("--rules", help="A folder of your own YAML rules (repeatable; also $ADVISOR_RULES)."),
]
OutOption = Annotated[
    Optional[Path],
    typer.Option("--out", help="Run directory to create (default: advisor-runs/<time>-<name>/)."),
]
FailOnOption = Annotated[
    Optional[SeverityLevel],
    typer.Option("--fail-on", help="Exit 1 when a diagnosis of this severity or higher is present (for CI)."),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"advisor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _state["debug"] = debug or bool(os.environ.get("ADVISOR_DEBUG"))


def _finish(summary, fail_on: SeverityLevel | None, quiet: bool = False) -> None:  # noqa: ANN001
    from advisor.report.model import build_report_data
    from advisor.report.terminal import print_card

    if not quiet:
        print_card(build_report_data(summary.run), str(summary.reports["html"]))
    code = summary.exit_code(fail_on.value if fail_on else None)
    if code:
        raise typer.Exit(code)


@app.command(context_settings={"ignore_unknown_options": False})
def diagnose(
    script: Annotated[Path, typer.Argument(help="The training script to run, unmodified.", show_default=False)],
    script_args: Annotated[Optional[list[str]], typer.Argument(
        help="Arguments for the script; put them after `--`.", show_default=False)] = None,
    out: OutOption = None,
    wait: Annotated[int, typer.Option(min=0, help="Steps to skip before profiling (start-up, autotuning).")] = 5,
    warmup: Annotated[int, typer.Option(min=0, help="Steps run with the profiler warming up, not recorded.")] = 3,
    active: Annotated[int, typer.Option(min=1, help="Steps recorded and analysed.")] = 5,
    steps: Annotated[StepMethod, typer.Option(
        "--steps", help="How a step is recognised: optimizer.step(), DataLoader batches, or a time window; "
                        "auto tries them in that order.")] = StepMethod.auto,
    window_start: Annotated[float, typer.Option(min=0, help="Time window: seconds to wait before recording.")] = 10.0,
    window: Annotated[float, typer.Option(min=0.1, help="Time window: seconds to record.")] = 5.0,
    run_to_end: Annotated[bool, typer.Option(help="Let the script run to its end after the profile is written.")] = False,
    timeout: Annotated[Optional[float], typer.Option(min=1, help="Stop the script after this many seconds, "
                                                               "keeping what was captured.")] = None,
    memory: Annotated[bool, typer.Option(help="Record memory allocations (profile_memory); adds overhead.")] = False,
    with_stack: Annotated[bool, typer.Option(help="Also record Python frames (torch.profiler with_stack).")] = False,
    source_lines: Annotated[bool, typer.Option(help="Label ops with the user's source line that called them.")] = True,
    rules: RulesOption = None,
    fail_on: FailOnOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the summary card.")] = False,
) -> None:
    """Run SCRIPT under the profiler for a few steady-state steps and explain what is slow.

    Example: advisor diagnose train.py -- --lr 0.1
    """
    from advisor.runs import diagnose_script

    cfg = CollectorConfig(
        script=str(script), wait=wait, warmup=warmup, active=active, step_method=steps.value,
        window_start_s=window_start, window_s=window, run_to_end=run_to_end, profile_memory=memory,
        with_stack=with_stack, source_lines=source_lines,
    )
    summary = diagnose_script(script, script_args or [], cfg, out=out, timeout_s=timeout, rule_dirs=rules,
                              argv=list(sys.argv))
    if summary.framework and summary.framework.outcome not in ("captured", "completed", "exited"):
        err.print(f"advisor: the script {summary.framework.outcome}; "
                  f"what was captured is in {summary.run.path}", style="yellow")
    _finish(summary, fail_on, quiet)


@app.command()
def analyze(
    paths: Annotated[list[Path], typer.Argument(help="Kineto traces (.json, .json.gz) or a folder of rank traces.",
                                                show_default=False)],
    out: OutOption = None,
    rules: RulesOption = None,
    fail_on: FailOnOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the summary card.")] = False,
) -> None:
    """Analyse traces recorded elsewhere: load, find, diagnose and report, without running anything."""
    from advisor.runs import analyze_files

    summary = analyze_files(paths, out=out, rule_dirs=rules, argv=list(sys.argv))
    _finish(summary, fail_on, quiet)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory made by advisor.", show_default=False)],
    rules: RulesOption = None,
    fail_on: FailOnOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the summary card.")] = False,
) -> None:
    """Re-evaluate the rules over a run's saved findings and render its reports again (no profiling)."""
    from advisor.runs import rerender

    _finish(rerender(run_dir, rules), fail_on, quiet)


def main() -> None:
    """Console entry point: advisor errors become one line and an exit code."""
    try:
        app()
    except AdvisorError as exc:
        if _state["debug"]:
            raise
        err.print(f"advisor: error: {exc}", style="red", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("advisor: interrupted")
        sys.exit(130)
