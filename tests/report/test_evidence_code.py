"""The evidence of a diagnosis names, for each fact, the analyzer function that computed it and where it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO, fixture_path, run_cli

from advisor.analyze.registry import find


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz")
    out = tmp_path_factory.mktemp("evidence") / "run"
    result = run_cli("analyze", str(trace), "--out", str(out), "--quiet", cwd=out.parent)
    assert result.code == 0, result.output
    return out


def test_markdown_names_each_facts_function_file_and_line(run: Path) -> None:
    markdown = (run / "report.md").read_text()
    named = re.findall(r"^- `(\w+)` in `(advisor/analyze/[\w/]+\.py):(\d+)`$", markdown, re.M)
    assert named
    for function, file, line in named:
        lines = (REPO / file).read_text().splitlines()[int(line) - 1:]
        assert any(text.startswith(f"def {function}(") for text in lines[:20]), (function, file, line)
    # every fact a diagnosis used is computed by one of the functions listed under its table
    sources = {f["name"]: f["source"] for f in json.loads((run / "findings.json").read_text())["facts"]}
    functions = {f for f, _, _ in named}
    for diagnosis in json.loads((run / "diagnoses.json").read_text())["diagnoses"]:
        for fact in diagnosis["facts"]:
            analyzer = find(sources[fact])
            assert analyzer is not None and analyzer.function in functions, fact


def test_html_names_them_too(run: Path) -> None:
    html = (run / "report.html").read_text()
    assert "<th>Computed by</th>" in html
    assert re.search(r"<code>\w+</code> in <code>advisor/analyze/\w+/\w+\.py:\d+</code>", html)
