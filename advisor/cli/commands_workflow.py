"""``advisor workflow show``: the decision graph, and the path a run took through it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from advisor.cli.app import WorkflowOption, app

workflow_app = typer.Typer(help="The decision graph: which profiling stage runs after which, and when.",
                           no_args_is_help=True)
app.add_typer(workflow_app, name="workflow")

STATUS_MARK = {"ran": "ran", "skipped": "SKIPPED", "not_needed": "not needed"}


@workflow_app.command("show")
def show(
    workflow: WorkflowOption = None,
    run: Annotated[Optional[Path], typer.Option(
        "--run", help="A run directory: also show the path its run took, and why.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the graph (and the run's trail) as JSON.")] = False,
) -> None:
    """Print the workflow graph (validated): stages, escalations and their guards.

    Example: advisor workflow show --run advisor-runs/20261130-153000-train
    """
    from advisor.rundir import RunDir
    from advisor.workflow.graph import load_workflow

    graph = load_workflow(workflow)
    recorded = RunDir.open(run).read_metadata() if run else None
    if as_json:
        data: dict[str, Any] = {"workflow": graph.to_dict()}
        if recorded is not None:
            data["run"] = {"trail": recorded.get("trail", []), "workflow": recorded.get("workflow", {})}
        typer.echo(json.dumps(data, indent=2))
        return
    typer.echo("\n".join(_graph_lines(graph)))
    if recorded is not None:
        typer.echo("")
        typer.echo("\n".join(_run_lines(run, recorded)))


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=100, initial_indent=indent, subsequent_indent=indent + "  ") or [indent]


def _graph_lines(graph: Any) -> list[str]:
    from advisor.analyze.registry import all_specs
    from advisor.workflow.graph import GUARD_NAMES

    known = all_specs()
    lines = [f"Workflow: {graph.path}" + (" (built-in)" if graph.builtin else ""), f"Starts at: {graph.start}", "",
             "Stages, in the order they are visited:"]
    for i, name in enumerate(graph.order(), 1):
        stage = graph.stage(name)
        end = "  (ends the walk)" if stage.terminal else ""
        lines.append(f"  {i}. {name:<10} {stage.title:<20} {stage.tool}{end}")
    lines += ["", "Escalations (an edge is taken when its guard is true):"]
    for edge in graph.edges():
        lines.append(f"  {edge.source} -> {edge.target}")
        lines += _wrap(f"guard:   {edge.guard}", "      ")
        if edge.because:
            lines += _wrap(f"because: {edge.because}", "      ")
        unknown = sorted(n for n in edge.expr.references() if n not in GUARD_NAMES
                         and not any(n == k or n.startswith(k + ".") for k in known))
        if unknown:
            lines += _wrap(f"note:    no analyzer of this version measures {', '.join(unknown)}; "
                           "that part of the guard stays false until one does", "      ")
    lines += ["", "Guards read every fact (see the findings of a run) and:"]
    lines += [f"  {name:<20} {meaning}" for name, meaning in GUARD_NAMES.items()]
    return lines


def _run_lines(run: Path, meta: dict[str, Any]) -> list[str]:
    trail = meta.get("trail") or []
    if not trail:
        return [f"{run}: this run has no recorded trail (made before the workflow was recorded)."]
    lines = [f"The path of {run}:"]
    for entry in trail:
        lines += _wrap(f"{entry['stage']:<10} {STATUS_MARK.get(entry['status'], entry['status'])}: {entry['reason']}",
                       "  ")
        if entry.get("command") and entry["status"] != "ran":
            lines += _wrap(f"to run it: {entry['command']}", "      ")
    lines += ["", "Edges:"]
    for edge in (meta.get("workflow") or {}).get("edges", []):
        mark = {True: "taken", False: "not taken", None: "not evaluated"}[edge.get("taken")]
        lines += _wrap(f"{edge['from']} -> {edge['to']}: {mark}: {edge.get('reason', '')}", "  ")
    return lines
