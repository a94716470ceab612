"""The ``advisor`` Typer app, the options several commands share, and the entry point.

Commands live in one module per group (``commands_*.py``); each registers
itself on :data:`app` when imported by :mod:`advisor.cli`.
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
from advisor.errors import AdvisorError

__all__ = ["FailOnOption", "OutOption", "RulesOption", "SeverityLevel", "WorkflowOption", "app", "err", "finish",
           "main"]

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
WorkflowOption = Annotated[
    Optional[Path],
    typer.Option("--workflow", help="Your own workflow graph (YAML; see `advisor workflow show`); "
                                    "also $ADVISOR_WORKFLOW."),
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


def finish(summary, fail_on: SeverityLevel | None, quiet: bool = False) -> None:  # noqa: ANN001
    from advisor.report.model import build_report_data
    from advisor.report.terminal import print_card

    if not quiet:
        print_card(build_report_data(summary.run, charts=False), str(summary.reports["html"]))
    code = summary.exit_code(fail_on.value if fail_on else None)
    if code:
        raise typer.Exit(code)


def main() -> None:
    """Console entry point: advisor errors become one line and an exit code."""
    try:
        app(prog_name="advisor")
    except AdvisorError as exc:
        if _state["debug"]:
            raise
        err.print(f"advisor: error: {exc}", style="red", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("advisor: interrupted")
        sys.exit(130)
