"""The analyze path imports no heavy library it does not use: no torch or jinja2 before reports.

``advisor analyze`` loads, analyses and evaluates the rules before it writes any report; those steps (what
bench/children.py times) must not pay for the report's libraries. The reports still render afterwards.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import fixture_path, run_cli

#: libraries and report modules the work before the reports must not import
HEAVY = ("torch", "networkx", "jinja2", "advisor.report.model", "advisor.report.charts",
         "advisor.report.trail", "advisor.report.render")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own print of a list of names


def test_importing_the_pipeline_and_rulebook_imports_no_report_library() -> None:
    assert _loaded_after("import advisor.pipeline, advisor.engine.rulebook") == []


def test_the_command_line_and_the_run_imports_no_torch() -> None:
    """Only the child that runs the script needs torch (seconds of import); the parent that starts it, reads
    the trace and writes the report never does."""
    loaded = _loaded_after("import advisor.cli.app, advisor.runs, advisor.cli.commands_run, advisor.collect.framework")
    assert "torch" not in loaded, loaded


def test_load_analyze_and_rules_import_no_report_library() -> None:
    trace = fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")
    code = (
        "from pathlib import Path\n"
        "from advisor.engine.rulebook import RuleBook\n"
        "from advisor.pipeline import analyze_traces, diagnose_findings, load_traces\n"
        f"d = diagnose_findings(analyze_traces(load_traces([Path({str(trace)!r})])), RuleBook.load([]))\n"
        "assert d.diagnoses\n"
    )
    assert _loaded_after(code) == []


def test_analyze_still_renders_the_reports(tmp_path) -> None:  # noqa: ANN001
    trace = fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")
    result = run_cli("analyze", str(trace), "--out", str(tmp_path / "run"), "--quiet", cwd=tmp_path)
    assert result.code == 0, result.output
    charts = sorted((tmp_path / "run" / "charts").glob("*.svg"))
    assert charts and all(p.read_text().lstrip().startswith("<?xml") for p in charts)  # the charts were drawn
    assert 'id="chart-phases"' in (tmp_path / "run" / "report.html").read_text()
    assert "# " in (tmp_path / "run" / "report.md").read_text()
