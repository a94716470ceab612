"""The analyze path imports no heavy library it does not use: no torch, matplotlib or jinja2 before reports."""

from __future__ import annotations

import subprocess
import sys

from conftest import fixture_path


def test_analysis_imports_no_torch_matplotlib_or_jinja2() -> None:
    trace = fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz")
    code = (
        "import sys\n"
        "from advisor.engine.rulebook import RuleBook\n"
        "from advisor.pipeline import analyze_traces, diagnose_findings, load_traces\n"
        f"d = diagnose_findings(analyze_traces(load_traces([__import__('pathlib').Path({str(trace)!r})])), RuleBook.load([]))\n"
        "print(sorted(m for m in ('torch', 'matplotlib', 'jinja2') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
