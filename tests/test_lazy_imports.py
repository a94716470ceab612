"""The analyze path imports no heavy library it does not use: no torch or jinja2 before reports.

``advisor analyze`` loads, analyses and evaluates the rules before it writes any report; those steps (what
bench/children.py times) must not pay for the report's libraries. The reports still render afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import CliResult, fixture_path, run_cli

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


#: what `advisor analyze` never imports: it reads files recorded elsewhere, and only a run of a script needs these
NEVER_IN_ANALYZE = ("torch", "nvtx", "advisor.collect")
#: what analysing a Kineto trace alone never imports: the other stages' analyzers and tables (advisor.analyze.builtin)
NEVER_FOR_A_KINETO_TRACE = ("sqlite3", "advisor.analyze.system", "advisor.analyze.kernel", "advisor.load.nsys_sqlite",
                            "advisor.load.ncu_tables")
#: what it imports only for what it has not seen before: pydantic checks a rule text not checked before
#: (advisor.engine.rulebook keeps what passed), and typer's pydantic adapters are not used for plain values
#: (advisor.cli.coercion)
NEVER_IN_A_SECOND_ANALYZE = ("pydantic", "pydantic_core", "typer._adapters", "yaml", "advisor.engine.schema")
#: what the help and the rule listing never import: the tables, the analyzers, the loaders and the report libraries
NEVER_IN_HELP = ("pandas", "numpy", "jinja2", "markdown_it", "pygments", "networkx", "msgspec", "orjson", "torch",
                 "typer._adapters",
                 "advisor.analyze", "advisor.load", "advisor.report.model", "advisor.report.render", "advisor.pipeline")


def _imported(*args: str, cwd) -> tuple[set[str], CliResult]:  # noqa: ANN001
    """The modules ``python -X importtime -m advisor ARGS`` imported (its stderr lists each one), and the run."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "advisor", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
    result = CliResult(proc.returncode, proc.stdout, proc.stderr)
    names = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    names.discard("package")  # the header line's last column
    return names, result


def _matching(names: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == r or n.startswith(r + ".") for r in roots))


@pytest.mark.parametrize("trace", ["v100_resnet_single_rank.pt.trace.json.gz", "a100_ddp_nccl_rank0.pt.trace.json.gz"])
def test_analyze_never_imports_torch_nvtx_or_the_collectors(tmp_path, trace: str) -> None:  # noqa: ANN001
    names, result = _imported("analyze", str(fixture_path("kineto", trace)), "--out", str(tmp_path / "run"),
                              "--quiet", cwd=tmp_path)
    assert result.code == 0, result.stderr[-2000:]
    assert "advisor.analyze.registry" in names and "advisor.report.render" in names  # the list is the real one
    assert _matching(names, NEVER_IN_ANALYZE) == []
    assert _matching(names, NEVER_FOR_A_KINETO_TRACE) == []
    assert (tmp_path / "run" / "report.html").is_file()


def test_a_second_analyze_imports_no_pydantic_or_yaml(tmp_path) -> None:  # noqa: ANN001
    trace = str(fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz"))
    run_cli("analyze", trace, "--out", str(tmp_path / "first"), "--quiet", cwd=tmp_path)  # fills the caches
    names, result = _imported("analyze", trace, "--out", str(tmp_path / "run"), "--quiet", "--fail-on", "critical",
                              cwd=tmp_path)
    assert result.code == 0, result.stderr[-2000:]
    assert "advisor.engine.rulebook" in names and "typer" in names  # the list is the real one
    assert _matching(names, NEVER_IN_A_SECOND_ANALYZE) == []
    assert (tmp_path / "run" / "report.html").is_file()


@pytest.mark.parametrize("args", [("--help",), ("rules", "--help"), ("rules", "list")])
def test_help_and_rule_listing_import_no_tables_analyzers_or_report_libraries(tmp_path, args) -> None:  # noqa: ANN001
    """Speed itself is bench/peer.py's (its "command line" line, target 0.3 s of imports); this holds its cause."""
    names, result = _imported(*args, cwd=tmp_path)
    assert result.code == 0, result.stderr[-2000:]
    assert "advisor.cli.app" in names
    assert _matching(names, NEVER_IN_HELP) == []
