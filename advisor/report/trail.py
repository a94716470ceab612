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

from advisor.report import svg
from advisor.report.charts import Chart, label
from advisor.workflow.dag import Dag

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
    graph = Dag(nodes, ((e["from"], e["to"]) for e in edges))
    layers = graph.generations() if graph.is_acyclic() else [graph.nodes]
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
    chart.svg = _graph_svg(pos, edges, status, chart.title)
    return chart


#: layout units (3 between layers, 1 between the stages of a layer) to pixels; a stage's box; room above for arcs
_PX_X, _PX_Y, _BOX_W, _BOX_H, _ARC = 100.0, 78.0, 136.0, 44.0, 46.0
#: characters of a guard that fit between two layers' boxes at the 9 px font
_GUARD_CHARS = int((3 * _PX_X - _BOX_W - 8) / 5.4)


def _graph_svg(pos: Mapping[str, tuple[float, float]], edges: list[dict[str, Any]], status: Mapping[str, str],
               title: str) -> str:
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    width = (max(xs) - min(xs)) * _PX_X + _BOX_W + 40
    height = (max(ys) - min(ys)) * _PX_Y + _BOX_H + 40 + _ARC

    def at(node: str) -> tuple[float, float]:
        x, y = pos[node]
        return 20 + _BOX_W / 2 + (x - min(xs)) * _PX_X, 20 + _ARC + _BOX_H / 2 + (max(ys) - y) * _PX_Y

    body = [_edge_svg(at(e["from"]), at(e["to"]), e) for e in edges]
    for node in pos:
        x, y = at(node)
        state = status.get(node, "")
        body.append(svg.rect(x - _BOX_W / 2, y - _BOX_H / 2, _BOX_W, _BOX_H, _FILL.get(state, "#ffffff"),
                             extra=' rx="8" stroke="#555555"'))
        body.append(svg.text(x, y - (7 if state else 0), label(node, 18), size=12, anchor="middle"))
        if state:
            body.append(svg.text(x, y + 9, STATUS_TEXT.get(state, state), size=10, anchor="middle", fill="#444444"))
    defs = "".join(f'<marker id="{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                   f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{color}"/></marker>'
                   for name, color in (("arrow", "#999999"), ("arrow-taken", "#2b8a3e")))
    return svg.document(width, height, body, title, defs)


def _edge_svg(start: tuple[float, float], end: tuple[float, float], edge: Mapping[str, Any]) -> str:
    """An arrow from box to box, with its guard above it: straight to the next layer, an arc over the boxes
    between when it skips one."""
    (x0, y0), (x1, y1) = start, end
    taken = edge["taken"]
    style = (f'stroke="{"#2b8a3e" if taken else "#999999"}" stroke-width="{2.2 if taken else 1.0}" fill="none" '
             + ('marker-end="url(#arrow-taken)"' if taken else 'stroke-dasharray="5 4" marker-end="url(#arrow)"'))
    skips = abs(x1 - x0) > 3 * _PX_X + 1
    if skips:
        sx, sy, ex, ey = x0 + _BOX_W / 4, y0 - _BOX_H / 2, x1 - _BOX_W / 4, y1 - _BOX_H / 2 - 2
        peak = min(sy, ey) - _ARC + 16
        # a quadratic's highest point is a quarter of each end and half of its control point
        control = 2 * peak - (sy + ey) / 2
        path = f'<path d="M {sx:.1f} {sy:.1f} Q {(sx + ex) / 2:.1f} {control:.1f} {ex:.1f} {ey:.1f}" {style}>'
        label_at = ((sx + ex) / 2, peak - 8)
    else:
        length = max(((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5, 1.0)
        ux, uy = (x1 - x0) / length, (y1 - y0) / length
        # from the edge of one box to the edge of the other, along the line between their centres
        cut = min(_BOX_W / 2 / max(abs(ux), 1e-9), _BOX_H / 2 / max(abs(uy), 1e-9)) + 4
        path = (f'<path d="M {x0 + ux * cut:.1f} {y0 + uy * cut:.1f} L {x1 - ux * cut:.1f} {y1 - uy * cut:.1f}" '
                f'{style}>')
        label_at = ((x0 + x1) / 2, (y0 + y1) / 2 - 10)
    path += (f"<title>{svg.esc(edge['guard'])}</title>" if edge["guard"] else "") + "</path>"
    guard = svg.text(*label_at, label(edge["guard"], _GUARD_CHARS), size=9, anchor="middle", fill="#444444") \
        if edge["guard"] else ""
    return path + guard


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
