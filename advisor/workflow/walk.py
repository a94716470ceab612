"""Walking the decision graph once per run, and recording why each step was or was not taken.

The walk visits the stages in topological order. The start stage is always
reached. A stage is reached when at least one edge into it was taken; it is
then *executed* (by the caller's ``execute``: run the tool, load, analyze,
re-evaluate the rules) and yields a :class:`TrailEntry` with status ``ran``
or ``skipped`` (a tool or a GPU missing, ``--no-escalate``, ``advisor
analyze``: with the reason and the command that would run it). A stage no
edge reached is ``not_needed``, with the guards that said no.

After a stage, each edge out of it is decided on the state *after* that
stage (its findings and diagnoses included). Each decision keeps its reason:
the edge's ``because`` and the values the guard read when taken; ``false``
with those values, or the fact the run lacks, when not. Edges out of a stage
that was not reached are not evaluated ("stage not reached").

``trail`` and ``workflow`` go into run.json; their shapes::

    trail:    [{"stage", "status": "ran"|"skipped"|"not_needed", "reason", "command", "artifacts"}]
    workflow: {"source", "builtin", "start", "nodes": [{"name", "title", "tool", "terminal", "status"}],
               "edges": [{"from", "to", "guard", "because", "taken", "reason"}]}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.errors import ExpressionError
from advisor.expr.expression import Absent, Environment
from advisor.units import fmt_num
from advisor.workflow.graph import Edge, Workflow

__all__ = ["Decision", "TrailEntry", "WalkResult", "decide", "guard_environment", "walk"]

STATUSES = ("ran", "skipped", "not_needed")


@dataclass
class TrailEntry:
    stage: str
    status: str
    reason: str
    command: str | None = None
    artifacts: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrailEntry:
        return cls(str(data["stage"]), str(data["status"]), str(data.get("reason", "")), data.get("command"),
                   list(data.get("artifacts", [])))


@dataclass
class Decision:
    edge: Edge
    taken: bool | None  # None: the stage it leaves was not reached, so the guard was not evaluated
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.edge.to_dict(), "taken": self.taken, "reason": self.reason}


@dataclass
class WalkResult:
    workflow: Workflow
    trail: list[TrailEntry]
    decisions: list[Decision]

    def entry(self, stage: str) -> TrailEntry:
        return next(e for e in self.trail if e.stage == stage)

    def path(self) -> list[str]:
        """The stages that ran, in order."""
        return [e.stage for e in self.trail if e.status == "ran"]

    def to_metadata(self) -> dict[str, Any]:
        graph = self.workflow.to_dict()
        status = {e.stage: e.status for e in self.trail}
        for node in graph["nodes"]:
            node["status"] = status.get(node["name"], "not_needed")
        graph["edges"] = [d.to_dict() for d in self.decisions]
        return {"trail": [e.to_dict() for e in self.trail], "workflow": graph}


def guard_environment(facts: Mapping[str, Any], diagnoses: Sequence[Any], ran: Sequence[str]) -> dict[str, Any]:
    """What a guard reads: every fact, plus ``diagnoses.ids``, ``diagnoses.escalate``, ``diagnoses.count``
    and ``stages.ran``. ``diagnoses`` are :class:`~advisor.engine.evaluate.Diagnosis` objects or their dicts."""
    rows = [d if isinstance(d, Mapping) else d.to_dict() for d in diagnoses]
    env = dict(facts)
    env["diagnoses.ids"] = [r["rule_id"] for r in rows]
    env["diagnoses.escalate"] = sorted({r["escalate"] for r in rows if r.get("escalate")})
    env["diagnoses.count"] = len(rows)
    env["diagnoses.asking"] = {tool: [r["rule_id"] for r in rows if r.get("escalate") == tool]
                               for tool in env["diagnoses.escalate"]}
    env["diagnoses.trials"] = sorted({r["knob"] for r in rows if r.get("knob")})
    env["stages.ran"] = list(ran)
    return env


def decide(edge: Edge, env: Mapping[str, Any]) -> tuple[bool, str]:
    """Evaluate an edge's guard; (taken, why)."""
    try:
        value = edge.expr.evaluate(Environment(env))
    except Absent as missing:
        return False, f"needs `{missing.name}`, which this run does not have"
    except ExpressionError as exc:
        return False, f"the guard could not be evaluated: {exc.message}"
    taken = bool(value)
    read = _values_read(edge, env)
    if taken:
        return True, "; ".join(p for p in (edge.because or f"`{edge.guard}` is true", read) if p)
    return False, f"`{edge.guard}` is false" + (f" ({read})" if read else "")


def _values_read(edge: Edge, env: Mapping[str, Any]) -> str:
    parts = []
    for name in sorted(edge.expr.references()):
        try:
            value, rest = Environment(env).resolve(tuple(name.split(".")))
        except Absent:
            continue
        if rest:
            continue
        if name == "diagnoses.trials":
            parts.append(f"settings to try: {', '.join(value) or 'none'}")
            continue
        if name == "diagnoses.escalate":
            asking = env.get("diagnoses.asking", {})
            value = ", ".join(f"{tool} (by {', '.join(asking.get(tool, []))})" for tool in value) or "none"
            parts.append(f"escalations asked for: {value}")
            continue
        parts.append(f"{name} = {_show(value)}")
    return ", ".join(parts)


def _show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return fmt_num(value) if abs(value) >= 1 else f"{value:.3g}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value[:5]) + (", ..." if len(value) > 5 else "") + "]"
    return str(value)


def walk(workflow: Workflow, execute: Callable[[str, list[str]], TrailEntry],
         state: Callable[[], Mapping[str, Any]], given: Mapping[str, str] | None = None) -> WalkResult:
    """Walk the graph once: execute each reached stage, decide the edges out of it.

    ``execute(stage, why)`` gets the reasons of the edges that reached the
    stage (empty for the start); ``state()`` returns the guard environment.
    ``given`` maps stages the user gave data for to why: they are reached
    whatever the guards say (the guards are still decided and recorded).
    """
    reached: dict[str, list[str]] = {workflow.start: []}
    for stage, why in (given or {}).items():
        reached.setdefault(stage, []).append(why)
    refused: dict[str, list[str]] = {}
    trail: list[TrailEntry] = []
    decisions: list[Decision] = []
    for name in workflow.order():
        if name not in reached:
            trail.append(TrailEntry(name, "not_needed", _not_needed(name, refused.get(name, []))))
            decisions += [Decision(e, None, f"{name} was not reached") for e in workflow.out_edges(name)]
            continue
        entry = execute(name, reached[name])
        if entry.status not in STATUSES:
            raise ValueError(f"stage {name}: unknown status {entry.status!r}")
        trail.append(entry)
        env = state()
        for edge in workflow.out_edges(name):
            taken, why = decide(edge, env)
            decisions.append(Decision(edge, taken, why))
            (reached if taken else refused).setdefault(edge.target, []).append(f"{edge.source} → {edge.target}: {why}")
    return WalkResult(workflow, trail, decisions)


def _not_needed(name: str, refusals: list[str]) -> str:
    if not refusals:
        return f"no stage that ran leads to {name}"
    return "no escalation to it: " + "; ".join(refusals)
