"""`advisor analyze` on every real trace in ../shared/fixtures/kineto: it must not fail."""

from __future__ import annotations

import pytest

from conftest import KINETO_TRACES, fixture_path, run_cli


@pytest.mark.parametrize("name", KINETO_TRACES)
def test_analyze_fixture(tmp_path, name: str) -> None:
    trace = fixture_path("kineto", name)
    result = run_cli("analyze", str(trace), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert result.code == 0, result.output
    assert "Traceback" not in result.output
    for report in ("report.md", "report.html", "findings.json", "diagnoses.json"):
        assert (tmp_path / "run" / report).is_file()


def test_analyze_a_directory_of_ranks(tmp_path) -> None:
    folder = fixture_path("kineto", "a100_recsys_2of128_ranks")
    result = run_cli("analyze", str(folder), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert result.code == 0, result.output
