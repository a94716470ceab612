"""One report model per run: the Markdown, the HTML, the charts and the terminal card all read the same one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import advisor.cli  # noqa: F401 - registers the commands
from advisor.report import model
from conftest import fixture_path


@pytest.mark.parametrize("quiet", [False, True])
def test_analyze_builds_the_report_data_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,  # noqa: ANN001
                                             quiet: bool) -> None:
    built: list[bool] = []
    real = model.build_report_data

    def counted(run, charts: bool = True):  # noqa: ANN001, ANN202
        built.append(charts)
        return real(run, charts=charts)

    monkeypatch.setattr(model, "build_report_data", counted)
    trace = fixture_path("kineto", "v100_resnet_single_rank.pt.trace.json.gz")
    run = sys.modules["advisor.cli.app"].run
    code = run(["analyze", str(trace), "--out", str(tmp_path / "run"), *(["-q"] if quiet else [])])
    out = capsys.readouterr().out
    assert code == 0
    assert built == [True]  # once, with its charts; the card (when printed) reads that same data
    assert ("Report:" in out) is not quiet
    assert 'id="chart-phases"' in (tmp_path / "run" / "report.html").read_text()
