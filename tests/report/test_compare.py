"""`advisor compare` on two real runs of the data-loading example, before and after the advisor's own fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.report.markdown import WIDTH
from conftest import EXAMPLES, IN_CI, run_cli
from html_checks import assert_inert

pytestmark = pytest.mark.slow
# --no-escalate: the comparison is of the framework stage; escalating would also run the "before" script under
# Nsight Systems and add the system stage's view of the same wait (SYS001) to what the fix removes.
# --wait 8: four freshly started workers deliver their first batches in bursts; after a few steps the fixed run
# is in its steady state, where the loader keeps ahead of the model (with --wait 2 a burst could keep DL001 alive).
SCHEDULE = ["--wait", "8", "--warmup", "1", "--active", "4", "--no-escalate", "--no-trial"]


@pytest.fixture(scope="module")
def before_after(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(before, after, where the comparison was written): num_workers=0, then the fix DL001 proposes."""
    base = tmp_path_factory.mktemp("compare")
    script = str(EXAMPLES / "slow_dataloader.py")
    for name, extra in (("before", []), ("after", ["--", "--workers", "4"])):
        result = run_cli("diagnose", script, "--out", str(base / name), "-q", *SCHEDULE, *extra, cwd=base)
        assert result.code == 0, result.output
    if "DL001" not in _diagnoses(base / "before") and not IN_CI:
        # The planted wait is a fixed sleep; on a machine busy with other work the model's compute can grow
        # until the wait drops under DL001's threshold. CI runs alone, so there this is a failure.
        pytest.skip("this machine was too busy for the planted data-loading wait to show (DL001 did not fire)")
    result = run_cli("compare", str(base / "before"), str(base / "after"), "--out", str(base / "cmp"), cwd=base)
    assert result.code == 0, result.output
    assert "DL001 gone" in result.stdout and "Report:" in result.stdout
    return base / "before", base / "after", base / "cmp"


def _diagnoses(run: Path) -> dict[str, dict]:
    return {d["rule_id"]: d for d in json.loads((run / "diagnoses.json").read_text())["diagnoses"]}


def test_the_planted_problem_is_gone_with_its_gain_measured(before_after) -> None:
    before, after, out = before_after
    assert "DL001" in _diagnoses(before) and "DL001" not in _diagnoses(after)
    data = json.loads((out / "compare.json").read_text())
    assert data["gone"] == ["DL001"] and not data["new"]
    gain = next(g for g in data["gains"] if g["rule_id"] == "DL001")
    assert gain["estimate_ms"] == pytest.approx(_diagnoses(before)["DL001"]["impact_ms"])
    # the time DL001 pointed at is the data-loading wait, and the workers removed most of it
    assert gain["target"]["fact"] == "phases.dataloader.ms"
    assert gain["target_gain_ms"] > 0.5 * gain["estimate_ms"]
    # the measured step change sits next to the estimate, whatever the machine's noise made of it
    facts = {name: {f["name"]: f["value"] for f in json.loads((run / "findings.json").read_text())["facts"]}
             for name, run in (("a", before), ("b", after))}
    assert gain["step_gain_ms"] == pytest.approx(facts["a"]["steps.time_ms"] - facts["b"]["steps.time_ms"])
    assert gain["step_judgement"] in ("as estimated", "less than estimated", "more than estimated", "no gain")
    phases = {p["phase"]: p for p in data["phases"]}
    assert phases["dataloader"]["delta"] < 0 and data["step"]["steps"] == [4, 4]


def test_the_reports_put_measured_next_to_estimated(before_after) -> None:
    _, _, out = before_after
    data = json.loads((out / "compare.json").read_text())
    gain = next(g for g in data["gains"] if g["rule_id"] == "DL001")
    markdown = (out / "compare.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| DL001"))
    from advisor.units import fmt_ms

    assert fmt_ms(gain["estimate_ms"]) in row and fmt_ms(abs(gain["step_gain_ms"])) in row and "gone" in row
    assert max(len(line) for line in markdown.splitlines() if line.startswith("|")) <= WIDTH
    assert (out / "charts" / "compare_phases.svg").is_file()
    html = (out / "compare.html").read_text()
    assert_inert(html)
    assert "DL001" in html and 'src="data:image/svg+xml;base64,' in html


def test_a_run_compared_with_itself_changes_nothing(before_after, tmp_path) -> None:
    before, _, _ = before_after
    result = run_cli("compare", str(before), str(before), "--out", str(tmp_path / "same"), "-q", cwd=tmp_path)
    assert result.code == 0, result.output
    data = json.loads((tmp_path / "same" / "compare.json").read_text())
    assert data["step"]["delta"] == 0 and not data["gone"] and not data["new"]
    assert data["remaining"] == list(_diagnoses(before))
    assert all(p["delta"] == 0 for p in data["phases"])


def test_comparing_a_folder_that_is_not_a_run_is_one_clear_line(before_after, tmp_path) -> None:
    before, _, _ = before_after
    result = run_cli("compare", str(before), str(tmp_path), cwd=tmp_path)
    assert result.code == 2 and "Traceback" not in result.output
    assert "has no run.json" in result.stderr and len(result.stderr.strip().splitlines()) == 1
