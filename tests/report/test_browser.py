"""Reports in a real browser: headless Chromium loads them with no console error and no request leaving
file://, shows the charts and the ranked summary, and runs nothing that came from a trace."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from conftest import IN_CI, run_cli
from report_helpers import EVIL_FILE, EVIL_OP, enriched_run, hostile_trace

pytestmark = pytest.mark.slow

if not IN_CI:  # in CI the `test` extra is installed, so a missing driver is a failure
    pytest.importorskip("websocket", reason="websocket-client (the `test` extra) drives Chromium")
from headless_chromium import Chromium, find_chromium  # noqa: E402

IMAGES_LOADED = "Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if find_chromium() is None:
        if IN_CI:
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed")
    with Chromium(tmp_path_factory.mktemp("chromium") / "profile") as chromium:
        yield chromium


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def _open_clean(browser: Chromium, report: Path, shot: Path):
    page = browser.open(report.resolve().as_uri())
    assert page.errors == [], page.errors
    assert page.external_requests == [], page.external_requests
    assert page.dialogs == [], page.dialogs
    assert browser.evaluate("document.scripts.length") == 0
    browser.screenshot(shot)
    width, height = _png_size(shot)
    assert width == 1200 and height > 900
    return page


def test_real_report_loads_clean_with_charts_and_ranking(browser, diagnosed_examples, tmp_path) -> None:
    report = diagnosed_examples["slow_dataloader"].path / "report.html"
    _open_clean(browser, report, tmp_path / "report.png")
    images = browser.evaluate("document.images.length")
    assert images >= 3 and browser.evaluate(IMAGES_LOADED) == images
    assert browser.evaluate("document.querySelectorAll('#ranked li').length") >= 1
    ranked = browser.evaluate("document.querySelector('#ranked').innerText")
    assert "DL001" in ranked and "Fix:" in ranked
    # the step breakdown chart sits in the summary, above the ranking
    assert browser.evaluate("!!document.querySelector('#summary #chart-phases img')")


def test_hostile_names_from_a_real_trace_run_nothing(browser, diagnosed_examples, tmp_path) -> None:
    trace = hostile_trace(diagnosed_examples["slow_dataloader"].path / "framework" / "rank0.pt.trace.json.gz",
                          tmp_path / "hostile.pt.trace.json.gz")
    result = run_cli("analyze", str(trace), "--out", str(tmp_path / "run"), "-q", cwd=tmp_path)
    assert result.code == 0, result.output
    _open_clean(browser, tmp_path / "run" / "report.html", tmp_path / "hostile.png")
    body = browser.evaluate("document.body.innerText")
    assert EVIL_OP in body and EVIL_FILE in body
    assert browser.evaluate("document.querySelectorAll('img:not([src^=\"data:image/svg+xml\"])').length") == 0


def test_report_with_gpu_ranks_and_trail_loads_clean(browser, diagnosed_examples, tmp_path) -> None:
    run, rules = enriched_run(diagnosed_examples["slow_dataloader"].path, tmp_path / "run")
    assert run_cli("report", str(run), "--rules", str(rules), "-q", cwd=tmp_path).code == 0
    _open_clean(browser, run / "report.html", tmp_path / "enriched.png")
    for chart in ("phases", "gpu", "kernels", "operators", "ranks", "workflow"):
        assert browser.evaluate(f"document.querySelector('#chart-{chart} img').naturalWidth") > 0, chart
    assert EVIL_OP in browser.evaluate("document.querySelector('#KRN901').innerText")
