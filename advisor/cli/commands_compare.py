"""``advisor compare RUN_A RUN_B``: what changed between two runs, and whether a fix gave back its estimate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from advisor.cli.app import app, imports_done
from advisor.messages import plain
from advisor.units import fmt_ms, fmt_pct

if TYPE_CHECKING:
    from rich.console import Console


def _signed(value: float | None, fmt: Any = fmt_ms) -> str:
    if value is None:
        return "n/a"
    return ("+" if value > 0 else "") + fmt(value)


def _print(data: dict[str, Any], report: Path, console: Console) -> None:
    from rich.table import Table

    console.print(plain(data["headline"], "bold"))
    table = Table(box=None, pad_edge=False, show_edge=False)
    for name, justify in (("", "left"), ("before", "right"), ("after", "right"), ("change", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    step = data["step"]
    rows = [("step", step)] + [(f"  {row['phase']}", row) for row in data["phases"]]
    for label, row in rows:  # cells as text: a phase or label is never read as markup
        table.add_row(*(plain(cell) for cell in (label, fmt_ms(row["a"]) if row["a"] is not None else "n/a",
                                                 fmt_ms(row["b"]) if row["b"] is not None else "n/a",
                                                 _signed(row["delta"]))))
    console.print(table)
    for gain in data["gains"]:
        measured = fmt_ms(gain["step_gain_ms"]) if gain["step_gain_ms"] is not None else "n/a"
        line = (f"{gain['rule_id']} {gain['status']}: estimated {fmt_ms(gain['estimate_ms'] or 0.0)}, "
                f"measured {measured} per step ({gain['step_judgement']})")
        if gain["target"] and gain["target_gain_ms"] is not None:
            line += f"; {gain['target']['fact']} fell by {fmt_ms(gain['target_gain_ms'])}"
        console.print(plain(line, "green" if gain["status"] == "gone" else "yellow"))
    for note in data["notes"]:
        console.print(plain(f"Note: {note}", "yellow"))
    if data["step"]["ratio"] is not None:
        console.print(plain(f"Step time {_signed(data['step']['ratio'], fmt_pct)}", "dim"))
    console.print(plain("Report: ", "bold") + plain(str(report)))


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The run before the change.", show_default=False, metavar="RUN_A")],
    run_b: Annotated[Path, typer.Argument(help="The run after the change.", show_default=False, metavar="RUN_B")],
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Folder for compare.md/.html/.json (default: advisor-runs/<time>-compare-<RUN_B>/).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the path of the report.")] = False,
) -> None:
    """Compare two runs (before and after a change): per step, phase, operator and kernel, which diagnoses
    are gone, and whether each fix gave back the time that was estimated.

    Example: advisor compare advisor-runs/before advisor-runs/after
    """
    from advisor.report.compare import write_comparison

    imports_done()
    data, paths = write_comparison(run_a, run_b, out)
    if quiet:
        typer.echo(str(paths["html"]))
        return
    from rich.console import Console

    _print(data, paths["html"], Console(highlight=False))
