"""The escalation trail: which stages ran, why each ran or was skipped, and the decision graph.

The workflow records, in ``run.json``:

- ``trail``: a list of ``{"stage", "status": "ran" | "skipped" | "not_needed",
  "reason", "command", "artifacts": [paths]}``, in the order the stages were considered;
- ``workflow``: the decision graph, ``{"nodes": [...], "edges": [...]}`` (``links`` is
  accepted for ``edges``); a node is a name or ``{"id"|"name"|"stage", ...}``, an edge
  ``{"from"|"source", "to"|"target", "guard"|"when", "taken": bool}``.

A run made before the workflow existed has neither. Its trail is rebuilt from
what ``run.json`` does hold (the framework stage ran, with the script's
command line), and each escalation a diagnosis asked for is listed as
``not_run``: the report says so instead of inventing a decision.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
from matplotlib.figure import Figure

from advisor.report.charts import Chart, draw, label

__all__ = ["STATUS_TEXT", "build_trail"]

STATUS_TEXT = {"ran": "ran", "skipped": "skipped", "not_needed": "not needed", "not_run": "not run"}
_FILL = {"ran": "#c7e9c0", "skipped": "#eeeeee", "not_needed": "#f7f7f7", "not_run": "#fdd0a2"}
_TOOLS = {"nsys": "system", "ncu": "kernel"}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _stage(raw: Mapping[str, Any]) -> dict[str, Any]:
    artifacts = raw.get("artifacts") or []
    return {
        "stage": _text(raw.get("stage")) or "?", "status": _text(raw.get("status")) or "unknown",
        "reason": _text(raw.get("reason")), "command": _text(raw.get("command")) or None,
        "artifacts": [str(a) for a in artifacts] if isinstance(artifacts, list) else [],
    }


def _fallback_stages(meta: Mapping[str, Any], diagnoses: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The trail of a run that recorded none: the framework stage, and the escalations diagnoses asked for."""
    if meta.get("kind") == "diagnose":
        command = shlex.join(meta["script_command"]) if meta.get("script_command") else None
        stages = [{"stage": "framework", "status": "ran", "command": command, "artifacts": list(meta.get("traces", [])),
                   "reason": "the first stage always runs: PyTorch Profiler over the steady-state steps"}]
    else:
        stages = [{"stage": "framework", "status": "ran", "command": None, "artifacts": [],
                   "reason": "the Kineto traces given to `advisor analyze` were analysed"}]
    asked: dict[str, list[str]] = {}
    for diag in diagnoses:
        if diag.get("escalate"):
            asked.setdefault(str(diag["escalate"]), []).append(str(diag.get("rule_id")))
    for tool, rules in asked.items():
        stages.append({
            "stage": _TOOLS.get(tool, tool), "status": "not_run", "command": None, "artifacts": [],
            "reason": f"{', '.join(rules)} asked for {tool}; this run has no workflow record, so it was not run",
        })
    return stages


def _node_id(node: Any) -> str:
    if isinstance(node, Mapping):
        return _text(node.get("id") or node.get("name") or node.get("stage"))
    return _text(node)


def _graph(workflow: Any, stages: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(node ids, edges) of the recorded graph, or a star from framework to the other stages."""
    if isinstance(workflow, Mapping) and workflow.get("nodes"):
        nodes = [n for n in (_node_id(x) for x in workflow.get("nodes", [])) if n]
        edges = []
        for e in workflow.get("edges") or workflow.get("links") or []:
            if not isinstance(e, Mapping):
                continue
            src, dst = _text(e.get("from", e.get("source"))), _text(e.get("to", e.get("target")))
            if src and dst:
                edges.append({"from": src, "to": dst, "guard": _text(e.get("guard", e.get("when"))),
                              "taken": bool(e.get("taken"))})
        return nodes, edges
    nodes = [s["stage"] for s in stages]
    edges = [{"from": nodes[0], "to": s["stage"], "guard": "asked for by a diagnosis", "taken": s["status"] == "ran"}
             for s in stages[1:]] if nodes else []
    return nodes, edges


def _layout(nodes: list[str], edges: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from((e["from"], e["to"]) for e in edges)
    layers = list(nx.topological_generations(graph)) if nx.is_directed_acyclic_graph(graph) else [list(graph)]
    pos = {}
    for x, layer in enumerate(layers):
        for i, node in enumerate(sorted(layer)):
            pos[node] = (x * 3.0, (len(layer) - 1) / 2 - i)
    return pos


def graph_chart(nodes: list[str], edges: list[dict[str, Any]], status: Mapping[str, str]) -> Chart:
    chart = Chart("workflow", "The decision graph",
                  "Stages as boxes (green: ran, grey: skipped or not needed, orange: not run); "
                  "bold arrows are the escalations taken, dashed ones were not.")
    if not nodes:
        chart.missing = "no stages were recorded"
        return chart
    pos = _layout(nodes, edges)
    rows = max(sum(1 for p in pos.values() if p[0] == x) for x in {p[0] for p in pos.values()})

    def paint(fig: Figure) -> None:
        ax = fig.add_subplot()
        ax.set_axis_off()
        for e in edges:
            (x0, y0), (x1, y1) = pos[e["from"]], pos[e["to"]]
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops={
                "arrowstyle": "-|>", "lw": 2.2 if e["taken"] else 1.0, "color": "#2b8a3e" if e["taken"] else "#999999",
                "linestyle": "solid" if e["taken"] else "dashed", "shrinkA": 38, "shrinkB": 38})
            if e["guard"]:
                ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, label(e["guard"], 34), ha="center", fontsize=7,
                        color="#444444")
        for node, (x, y) in pos.items():
            state = status.get(node, "")
            text = label(node, 18) + (f"\n{STATUS_TEXT.get(state, state)}" if state else "")
            ax.text(x, y, text, ha="center", va="center", fontsize=9, bbox={
                "boxstyle": "round,pad=0.5", "fc": _FILL.get(state, "#ffffff"), "ec": "#555555"})
        xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
        ax.set_xlim(min(xs) - 1.4, max(xs) + 1.4)
        ax.set_ylim(min(ys) - 0.7, max(ys) + 0.7)

    layers = len({p[0] for p in pos.values()})
    chart.svg = draw(paint, 0.8 + 0.9 * rows, width_in=min(2.6 * layers + 0.8, 8.0))
    return chart


def build_trail(meta: Mapping[str, Any], diagnoses: Sequence[Mapping[str, Any]],
                draw_graph: bool = True) -> dict[str, Any]:
    """The trail for a report: stages, the graph's edges, its chart, and whether it was recorded."""
    raw = meta.get("trail")
    recorded = isinstance(raw, list) and any(isinstance(s, Mapping) for s in raw)
    stages = [_stage(s) for s in raw if isinstance(s, Mapping)] if recorded else _fallback_stages(meta, diagnoses)
    for stage in stages:
        stage["status_text"] = STATUS_TEXT.get(stage["status"], stage["status"].replace("_", " "))
    nodes, edges = _graph(meta.get("workflow"), stages)
    status = {s["stage"]: s["status"] for s in stages}
    chart = graph_chart(nodes, edges, status) if draw_graph else Chart("workflow", "The decision graph", "",
                                                                        missing="not drawn")
    return {"recorded": recorded, "stages": stages, "edges": edges, "chart": chart}
