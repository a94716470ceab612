"""The decision graph: stages and guarded escalations, read from YAML into a :class:`~advisor.workflow.dag.Dag`.

The built-in graph is ``rules/workflow.yaml``; ``--workflow FILE`` (or
``$ADVISOR_WORKFLOW``) replaces it. The file::

    version: 1
    start: framework
    stages:
      - {name: framework, title: Framework profile}
      - {name: system, title: System profile}
      - {name: report, title: Report}
    edges:
      - from: framework
        to: system
        guard: '"nsys" in diagnoses.escalate'
        because: a framework diagnosis asks for Nsight Systems

A guard is an expression of the rule language (:mod:`advisor.expr.expression`)
over the findings and diagnoses so far (see :func:`guard_names`). The graph
is validated on load, and every problem is a
:class:`~advisor.errors.RuleError` naming the file and line: the file's
shape, unknown or duplicate stages, edges to unknown stages, guards that do
not parse, cycles, stages that cannot be reached from ``start``, and stages
the stage registry cannot run (every stage needs a collector and a loader;
see :mod:`advisor.workflow.stages`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.errors import ExpressionError, RuleError
from advisor.expr.expression import Expression, compile_expression
from advisor.resources import rules_dir
from advisor.workflow.dag import Dag
from advisor.workflow.stages import registered_stages
from advisor.yamlio.safe_yaml import LineMap, load_yaml

__all__ = ["ENV_VAR", "GUARD_NAMES", "Edge", "Stage", "Workflow", "default_workflow_path", "load_workflow"]

ENV_VAR = "ADVISOR_WORKFLOW"
FILE_NAME = "workflow.yaml"

#: names a guard can read besides the facts
GUARD_NAMES = {
    "diagnoses.ids": "ids of the rules that fired so far, e.g. [\"DL001\"]",
    "diagnoses.escalate": "tools the fired rules ask for (their `escalate`), e.g. [\"nsys\"]",
    "diagnoses.count": "number of diagnoses so far",
    "diagnoses.asking": "tool -> ids of the rules asking for it, e.g. {\"nsys\": [\"DL001\"]}",
    "diagnoses.trials": "settings the fired rules ask to try (their `try`), e.g. [\"intra_op_threads\"]",
    "stages.ran": "stages that ran so far, e.g. [\"framework\"]",
}
_TOP_KEYS = {"version", "start", "stages", "edges"}
_STAGE_KEYS = {"name", "title", "tool"}
_EDGE_KEYS = {"from", "to", "guard", "because"}


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    tool: str
    terminal: bool
    line: int | None = None


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    guard: str
    because: str
    expr: Expression
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "guard": self.guard, "because": self.because}


@dataclass
class Workflow:
    """A validated decision graph."""

    path: Path
    start: str
    graph: Dag[str]
    builtin: bool = True

    def stage(self, name: str) -> Stage:
        return self.graph.node(name)

    def order(self) -> list[str]:
        """Stages in walking order: topological, ties broken by their order in the file."""
        return self.graph.topological_order()

    def out_edges(self, name: str) -> list[Edge]:
        return self.graph.out_edges(name)

    def in_edges(self, name: str) -> list[Edge]:
        return self.graph.in_edges(name)

    def edges(self) -> list[Edge]:
        return self.graph.edges()

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.path),
            "builtin": self.builtin,
            "start": self.start,
            "nodes": [{"name": s.name, "title": s.title, "tool": s.tool, "terminal": s.terminal}
                      for s in (self.stage(n) for n in self.order())],
            "edges": [e.to_dict() for e in self.edges()],
        }


def default_workflow_path() -> Path:
    return rules_dir() / FILE_NAME


def load_workflow(path: Path | None = None, *, env: bool = True) -> Workflow:
    """The given workflow file, else ``$ADVISOR_WORKFLOW``, else the built-in one; validated."""
    if path is None and env and os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
    builtin = path is None
    path = path or default_workflow_path()
    data, lines = load_yaml(path)
    return _build(data, lines, path, builtin)


def _fail(path: Path, lines: LineMap, where: tuple[Any, ...], message: str) -> RuleError:
    return RuleError(path, lines.line(where), message)


def _build(data: Any, lines: LineMap, path: Path, builtin: bool) -> Workflow:
    if not isinstance(data, dict):
        raise RuleError(path, 1, "a workflow file must be a mapping with `version`, `start`, `stages` and `edges`")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise _fail(path, lines, (key,), f"`{key}` is not a workflow field (known: {', '.join(sorted(_TOP_KEYS))})")
    if data.get("version") != 1:
        raise _fail(path, lines, ("version",), "`version` must be 1")
    graph: Dag[str] = Dag()
    _add_stages(graph, data.get("stages"), lines, path)
    _add_edges(graph, data.get("edges"), lines, path)
    start = data.get("start")
    if start not in graph:
        raise _fail(path, lines, ("start",), f"`start` must name one of the stages ({', '.join(graph.nodes)})")
    workflow = Workflow(path, start, graph, builtin)
    _check_shape(workflow, lines)
    return workflow


def _add_stages(graph: Dag[str], stages: Any, lines: LineMap, path: Path) -> None:
    if not isinstance(stages, list) or not stages:
        raise _fail(path, lines, ("stages",), "`stages` must be a non-empty list of {name, title, tool}")
    registry = registered_stages()
    for i, item in enumerate(stages):
        where = ("stages", i)
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _fail(path, lines, where, "each stage needs a `name`")
        extra = set(item) - _STAGE_KEYS
        if extra:
            raise _fail(path, lines, (*where, sorted(extra)[0]),
                        f"`{sorted(extra)[0]}` is not a stage field (known: {', '.join(sorted(_STAGE_KEYS))})")
        name = item["name"]
        if name in graph:
            raise _fail(path, lines, where, f"stage {name!r} is declared twice")
        spec = registry.get(name)
        if spec is None:
            raise _fail(path, lines, where, f"stage {name!r} is not a stage advisor can run "
                                            f"(known: {', '.join(sorted(registry))})")
        problems = spec.problems()
        if problems:
            raise _fail(path, lines, where, f"stage {name!r} {' and '.join(problems)}; it cannot be walked")
        stage = Stage(name, str(item.get("title") or name), str(item.get("tool") or spec.tool), spec.terminal,
                      lines.line(where))
        graph.add_node(name, stage)


def _add_edges(graph: Dag[str], edges: Any, lines: LineMap, path: Path) -> None:
    if not isinstance(edges, list):
        raise _fail(path, lines, ("edges",), "`edges` must be a list of {from, to, guard, because}")
    for i, item in enumerate(edges):
        where = ("edges", i)
        if not isinstance(item, dict):
            raise _fail(path, lines, where, "each edge must be a mapping with `from`, `to` and `guard`")
        extra = set(item) - _EDGE_KEYS
        if extra:
            key = sorted(extra)[0]
            raise _fail(path, lines, (*where, key), f"`{key}` is not an edge field (known: {', '.join(sorted(_EDGE_KEYS))})")
        source, target = item.get("from"), item.get("to")
        for key, value in (("from", source), ("to", target)):
            if value not in graph:
                raise _fail(path, lines, (*where, key), f"`{key}: {value}` is not a declared stage")
        if source == target:
            raise _fail(path, lines, where, f"edge {source} -> {target} loops on itself")
        if graph.has_edge(source, target):
            raise _fail(path, lines, where, f"edge {source} -> {target} is declared twice")
        guard = item.get("guard", "true")
        if isinstance(guard, bool):
            guard = "true" if guard else "false"
        if not isinstance(guard, str):
            raise _fail(path, lines, (*where, "guard"), "`guard` must be an expression (text)")
        try:
            expr = compile_expression(guard)
        except ExpressionError as exc:
            raise _fail(path, lines, (*where, "guard"), f"`guard` is not a valid expression: {exc.message}") from None
        edge = Edge(source, target, guard, str(item.get("because") or ""), expr, lines.line(where))
        graph.add_edge(source, target, edge)


def _check_shape(workflow: Workflow, lines: LineMap) -> None:
    graph, path = workflow.graph, workflow.path
    cycle = graph.find_cycle()
    if cycle is not None:
        loop = " -> ".join(cycle)
        edge = graph.edge(cycle[0], cycle[1])
        raise RuleError(path, edge.line, f"the edges form a cycle ({loop}); a run walks the graph once, so it "
                                         "must be acyclic")
    if graph.in_degree(workflow.start):
        first = workflow.in_edges(workflow.start)[0]
        raise RuleError(path, first.line, f"the start stage {workflow.start!r} cannot have an edge into it")
    reachable = graph.descendants(workflow.start) | {workflow.start}
    for name in graph.nodes:
        stage = workflow.stage(name)
        if name not in reachable:
            raise RuleError(path, stage.line, f"stage {name!r} cannot be reached from {workflow.start!r}; "
                                              "add an edge to it or remove it")
        if stage.terminal and graph.out_degree(name):
            raise RuleError(path, workflow.out_edges(name)[0].line, f"stage {name!r} ends the walk; it cannot "
                                                                    "have edges out of it")
    if not any(workflow.stage(n).terminal for n in graph.nodes):
        raise RuleError(path, lines.line(("stages",)), "the workflow needs a terminal stage (report)")
