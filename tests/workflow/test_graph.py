"""The workflow graph: the built-in one loads, and every kind of broken file is refused with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from advisor.errors import RuleError
from advisor.workflow.graph import default_workflow_path, load_workflow
from advisor.workflow import stages
from advisor.workflow.stages import StageSpec, registered_stages
from conftest import run_cli

BASE = """\
version: 1
start: framework
stages:
  - {name: framework}
  - {name: system}
  - {name: report}
edges:
"""


def _write(tmp_path: Path, edges: str, base: str = BASE) -> Path:
    path = tmp_path / "workflow.yaml"
    path.write_text(base + textwrap.dedent(edges))
    return path


def test_builtin_graph() -> None:
    wf = load_workflow(env=False)
    assert wf.path == default_workflow_path() and wf.builtin
    assert wf.order() == ["framework", "system", "kernel", "trial", "report"]
    assert {(e.source, e.target) for e in wf.edges()} == {
        ("framework", "system"), ("framework", "kernel"), ("system", "kernel"), ("framework", "trial"),
        ("framework", "report"), ("system", "report"), ("kernel", "report"), ("trial", "report")}
    assert wf.stage("report").terminal and not wf.stage("system").terminal
    data = wf.to_dict()
    assert [n["name"] for n in data["nodes"]] == wf.order()
    assert all({"from", "to", "guard", "because"} <= set(e) for e in data["edges"])


def test_every_stage_has_a_collector_and_a_loader() -> None:
    for name, spec in registered_stages().items():
        assert spec.problems() == [], name
        if not spec.terminal:
            assert spec.collect and (spec.load or spec.analyze) and spec.ingest and spec.command, name


def test_a_users_workflow(tmp_path) -> None:
    path = _write(tmp_path, """\
      - {from: framework, to: system, guard: "true", because: always look at the system}
      - {from: system, to: report}
    """)
    wf = load_workflow(path)
    assert not wf.builtin and wf.order() == ["framework", "system", "report"]
    assert wf.out_edges("system")[0].guard == "true"  # a missing guard means "always"


@pytest.mark.parametrize("edges, line, message", [
    ("  - {from: system, to: report}\n  - {from: framework, to: system, guard: 'nsys in ('}\n", 9,
     "`guard` is not a valid expression"),
    ("  - {from: framework, to: system}\n  - {from: system, to: framework}\n  - {from: system, to: report}\n", 8,
     "cycle (framework -> system -> framework)"),
    ("  - {from: framework, to: gpu}\n", 8, "`to: gpu` is not a declared stage"),
    ("  - {from: framework, to: report}\n", 5, "stage 'system' cannot be reached"),
    ("  - {from: framework, to: framework}\n", 8, "loops on itself"),
    ("  - {from: framework, to: system}\n  - {from: framework, to: system}\n", 9, "declared twice"),
    ("  - {from: framework, to: system, when: x}\n", 8, "`when` is not an edge field"),
])
def test_broken_edges(tmp_path, edges: str, line: int, message: str) -> None:
    path = _write(tmp_path, edges)
    with pytest.raises(RuleError) as err:
        load_workflow(path)
    assert message in str(err.value)
    assert str(err.value).startswith(f"{path}:{line}: ")


def test_edge_out_of_the_report(tmp_path) -> None:
    path = _write(tmp_path, """\
      - {from: framework, to: report}
      - {from: report, to: system}
    """)
    with pytest.raises(RuleError, match="'report' ends the walk"):
        load_workflow(path)


def test_unknown_and_unrunnable_stages(tmp_path, monkeypatch) -> None:
    path = _write(tmp_path, "  - {from: framework, to: report}\n", BASE.replace("{name: system}", "{name: gpu}"))
    with pytest.raises(RuleError, match="'gpu' is not a stage advisor can run") as err:
        load_workflow(path)
    assert f"{path}:5:" in str(err.value)
    registered_stages()  # the built-in stages first, so the one below is added to them
    monkeypatch.setitem(stages._STAGES, "half", StageSpec("half", "a tool without a loader", collect=lambda ctx: None))
    path = _write(tmp_path, "  - {from: framework, to: half}\n  - {from: half, to: report}\n",
                  BASE.replace("{name: system}", "{name: half}"))
    with pytest.raises(RuleError, match="stage 'half' has no load and has no ingest; it cannot be walked"):
        load_workflow(path)


def test_shape_errors(tmp_path) -> None:
    for text, message in (
        ("- a\n", "must be a mapping"),
        ("version: 2\nstart: framework\nstages: []\nedges: []\n", "`version` must be 1"),
        (BASE.replace("start: framework", "start: kernel") + "  - {from: framework, to: system}\n", "`start` must name"),
        (BASE + "  - {from: framework, to: system}\n  - {from: system, to: report}\nextra: 1\n", "`extra` is not"),
    ):
        path = tmp_path / "wf.yaml"
        path.write_text(text)
        with pytest.raises(RuleError, match=message.replace("`", ".")):
            load_workflow(path)


def test_workflow_show_prints_the_graph(tmp_path) -> None:
    result = run_cli("workflow", "show", cwd=tmp_path)
    assert result.code == 0, result.output
    out = result.stdout
    assert "Starts at: framework" in out
    assert "framework -> system" in out and 'guard:   "nsys" in diagnoses.escalate' in out
    assert "1. framework" in out and "4. trial" in out and "5. report" in out and "(ends the walk)" in out
    assert "framework -> trial" in out and "guard:   len(diagnoses.trials) > 0" in out
    assert "diagnoses.escalate" in out and "diagnoses.trials" in out


def test_workflow_show_of_a_broken_file(tmp_path) -> None:
    path = _write(tmp_path, "  - {from: framework, to: system, guard: 'a +'}\n  - {from: system, to: report}\n")
    result = run_cli("workflow", "show", "--workflow", str(path), cwd=tmp_path)
    assert result.code == 2
    assert "Traceback" not in result.output
    assert f"{path}:8:" in result.stderr and "`guard` is not a valid expression" in result.stderr
