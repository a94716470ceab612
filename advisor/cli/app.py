"""The ``advisor`` Typer app, the options several commands share, and the entry point.

Commands live in one module per group (``commands_*.py``); each registers
itself on :data:`app` when imported by :mod:`advisor.cli`.

Messages go through :func:`advisor.messages.say`: text, never Rich markup.
:func:`run` is the whole command line in-process (the tests and the fuzz
harness call it); :func:`main` is the console script around it.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer

from advisor import __version__
from advisor.cli.coercion import install as _install_plain_coercion
from advisor.errors import EXIT_INTERRUPTED, AdvisorError, DroppedInterrupts, Interrupted
from advisor.messages import say

__all__ = ["FailOnOption", "GpuSpecOption", "OutOption", "RulesOption", "SeverityLevel", "WorkflowOption", "app",
           "end_process", "err", "finish", "imports_done", "main", "run"]

_install_plain_coercion()  # paths, numbers and enums parsed without pydantic (typer's adapters: 70-110 ms)

app = typer.Typer(
    name="advisor",
    help="Tells you why your PyTorch training is slow and what to change.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_state = {"debug": False}


class _StderrConsole:
    """The console for messages on stderr, made on first use: rich (some 30 ms of imports) is imported only
    when something is printed, so ``advisor analyze --quiet`` never pays for it."""

    def __init__(self) -> None:
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False)
        return getattr(self._console, name)


err = _StderrConsole()


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
GpuSpecOption = Annotated[
    Optional[Path],
    typer.Option("--gpu-spec", help="Your own table of GPU peaks (YAML, the format of the built-in "
                                    "advisor/analyze/framework/gpu_specs.yaml): the roof of the operators' roofline."),
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
    if not quiet:  # from the data the reports were rendered from: the report data is built once per run
        from advisor.report.model import build_report_data
        from advisor.report.terminal import print_card  # rich, only when the card is printed

        data = summary.report if summary.report is not None else build_report_data(summary.run, charts=False)
        print_card(data, str(summary.reports["html"]))
    code = summary.exit_code(fail_on.value if fail_on else None)
    if code:
        raise typer.Exit(code)


def run(args: Sequence[str] | None = None) -> int:
    """Run the command line (``args``, else ``sys.argv[1:]``) and return its exit code.

    An advisor error is one line on stderr (``--debug``: its traceback). Ctrl-C
    during a run is handled where the run knows what it kept (an
    :class:`~advisor.errors.Interrupted` naming it); anywhere else it is the
    line ``advisor: interrupted`` and exit code 130, also where Python dropped
    the interrupt (see :mod:`advisor.salvage`) and the command went on.
    """
    with DroppedInterrupts() as dropped:
        return _run(args, dropped)


def _run(args: Sequence[str] | None, dropped: DroppedInterrupts) -> int:
    try:
        app(args=None if args is None else list(args), prog_name="advisor")
    except SystemExit as exc:
        if exc.code == EXIT_INTERRUPTED and _from_ctrl_c(exc):
            # Typer turns a KeyboardInterrupt it sees into a silent exit 130; say it.
            say(err, "advisor: interrupted")
        elif exc.code in (0, None) and dropped.take():
            say(err, "advisor: interrupted")
            return EXIT_INTERRUPTED
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Interrupted as exc:  # Ctrl-C is no error: the line says what was kept
        say(err, f"advisor: {exc}", "yellow")
        return exc.exit_code
    except AdvisorError as exc:
        if _state["debug"]:
            raise
        say(err, f"advisor: error: {exc}", "red")
        return exc.exit_code
    except KeyboardInterrupt:
        say(err, "advisor: interrupted")
        return EXIT_INTERRUPTED
    if dropped.take():
        say(err, "advisor: interrupted")
        return EXIT_INTERRUPTED
    return 0


def _from_ctrl_c(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):  # SystemExit <- typer's Exit <- KeyboardInterrupt
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def main() -> None:
    """Console entry point: advisor errors become one line and an exit code.

    The cyclic garbage collector is paused until the command has imported what it needs (:func:`imports_done`;
    the quick commands that never call it, ``rules``, ``workflow``, ``--help``, end with it paused).
    """
    gc.disable()
    _state["gc_paused"] = True
    end_process(run())


def imports_done() -> None:
    """The command's modules are imported: collect garbage again, from here on, in the console script.

    Importing pandas and the analysis makes some 400,000 objects that live until the process ends; the collector
    walked them in 200 collections, one a full one, 40-70 ms of an ``advisor analyze`` of a fixture trace,
    and found nothing to free. They are frozen (:func:`gc.freeze`): later collections walk only what the work
    makes. In-process callers of :func:`run` (the tests) keep their collector as it is.
    """
    if _state.pop("gc_paused", False):
        gc.freeze()
        gc.enable()


def end_process(code: int) -> NoReturn:
    """End the console script with ``code`` once its work is written, without tearing the interpreter down.

    A run leaves the tables of its traces, the parsed rules and hundreds of modules behind; the interpreter
    would free them one by one at exit, which took 0.15-0.25 s of an ``advisor analyze`` on the fixture
    traces (a sixth of the process), after everything was written. The exit hooks still run first (the
    caches are saved, temporary folders removed) and the output streams are flushed. It exits as usual where
    another Python thread is still running, under a profiler or tracer (``python -m cProfile``, coverage: they
    write their results after the program returns), or where this interpreter cannot run the hooks alone.
    """
    run_exit_hooks = getattr(atexit, "_run_exitfuncs", None)
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    if run_exit_hooks is None or watched or threading.active_count() > 1:
        sys.exit(code)
    run_exit_hooks()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (advisor ... | head) or a closed stream: nothing to keep
            pass
    os._exit(code)
