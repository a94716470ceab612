"""Bad input gets one clear sentence naming the file, and a non-zero exit: never a traceback."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import re
from pathlib import Path

import pytest

from conftest import CliResult, fixture_path, run_cli


def _one_clear_line(result, *needles: str) -> None:
    assert result.code != 0
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_script(tmp_path) -> None:
    _one_clear_line(run_cli("diagnose", "nope.py", cwd=tmp_path), "nope.py", "no such file")


def test_script_is_a_directory(tmp_path) -> None:
    (tmp_path / "proj").mkdir()
    _one_clear_line(run_cli("diagnose", "proj", cwd=tmp_path), "proj", "is a directory")


def test_trace_not_json(tmp_path) -> None:
    (tmp_path / "trace.json").write_text("<html>not a trace</html>")
    _one_clear_line(run_cli("analyze", "trace.json", cwd=tmp_path), "trace.json", "not valid JSON")


def test_truncated_gz(tmp_path) -> None:
    raw = fixture_path("kineto", "a100_alexnet_cuda_sync.pt.trace.json.gz").read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(raw[: len(raw) // 2])
    _one_clear_line(run_cli("analyze", "cut.json.gz", cwd=tmp_path), "cut.json.gz", "truncated")


def test_missing_trace(tmp_path) -> None:
    _one_clear_line(run_cli("analyze", "missing.json.gz", cwd=tmp_path), "missing.json.gz", "no such file")


def test_out_dir_is_never_overwritten(tmp_path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("earlier run")
    trace = fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz")
    _one_clear_line(run_cli("analyze", str(trace), "--out", str(out), cwd=tmp_path), "run", "never overwritten")
    assert (out / "keep.txt").read_text() == "earlier run"


def test_broken_user_rule(tmp_path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bad.yaml").write_text("id: MY001\nname: my-rule\nseverity: huge\n")
    trace = fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz")
    result = run_cli("analyze", str(trace), "--rules", str(rules), cwd=tmp_path)
    _one_clear_line(result, "bad.yaml:3", "`severity` must be one of info, low, medium, high, critical")


@pytest.mark.parametrize("args", [["diagnose"], ["analyze"], ["report"]])
def test_usage_errors_exit_2(tmp_path, args) -> None:
    result = run_cli(*args, cwd=tmp_path)
    assert result.code == 2
    assert "Traceback" not in result.output


# Issue 19: bad input never lies. Each test names the case of the issue it reproduces. They run the real command
# line in this process (what the console script calls; a subprocess per test costs 3-5 s of imports), with the
# current folder and stdout/stderr as a user's: an exception that escaped would fail the test as a traceback would.

def _advisor(*args: str, cwd: Path) -> CliResult:
    from advisor.cli.app import run

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(list(args))
    finally:
        os.chdir(before)
    return CliResult(code, out.getvalue(), err.getvalue())


def _kineto_doc(name: str) -> dict:
    return json.loads(gzip.decompress(fixture_path("kineto", name).read_bytes()))


def test_empty_trace_is_an_error_naming_the_file(tmp_path) -> None:
    """Case 1: ``{"traceEvents": []}`` was an INCONCLUSIVE report with exit 0, never saying the trace is empty."""
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    _one_clear_line(_advisor("analyze", "empty.json", cwd=tmp_path), "empty.json", "traceEvents list is empty")
    assert not (tmp_path / "advisor-runs").exists()  # bad input leaves no run directory behind


def test_trace_without_any_time_names_the_missing_field(tmp_path) -> None:
    """Case 2: every ts/dur removed: the notes spoke of "no ProfilerStep ranges"; the missing field was never named."""
    doc = _kineto_doc("v100_resnet_single_rank.pt.trace.json.gz")
    for event in doc["traceEvents"]:
        event.pop("ts", None)
        event.pop("dur", None)
    (tmp_path / "no_times.json").write_text(json.dumps(doc))
    result = _advisor("analyze", "no_times.json", cwd=tmp_path)
    _one_clear_line(result, "no_times.json", "`ts` missing on 5 of 5 ProfilerStep, 23,910 of 23,910 cpu_op")


def test_half_the_durations_missing_is_no_confident_verdict(tmp_path) -> None:
    """Case 3: half the events without `dur` were dropped without a word, and the verdict was a confident SLOW
    with a 33.5 ms step (the real step is 78.8 ms)."""
    doc = _kineto_doc("v100_resnet_single_rank.pt.trace.json.gz")
    rng = random.Random(19)
    for event in doc["traceEvents"]:
        if event.get("ph") == "X" and rng.random() < 0.5:
            event.pop("dur", None)
    (tmp_path / "half.json").write_text(json.dumps(doc))
    result = _advisor("analyze", "half.json", "--out", "run", cwd=tmp_path)
    assert result.code == 0, result.output
    verdict = json.loads((tmp_path / "run" / "diagnoses.json").read_text())["verdict"]
    assert verdict["status"] == "inconclusive"
    assert "of the trace's events cannot be used as recorded (`dur` missing or not a number)" in verdict["headline"]
    assert "ProfilerStep range(s), so the step times are not known" in verdict["headline"]
    note = next(m for m in verdict["missing"] if m.startswith("data quality:"))
    assert re.search(r"`dur` missing or not a number on \d of 5 ProfilerStep, 1\d,\d{3} of 23,910 cpu_op", note)
    facts = {f["name"]: f["value"] for f in json.loads((tmp_path / "run" / "findings.json").read_text())["facts"]}
    assert 0.45 < facts["trace.bad_share"] < 0.55
    assert "INCONCLUSIVE" in result.stdout and "Note: data quality:" in " ".join(result.stdout.split())
    assert "Do next" not in result.stdout and "SLOW" not in result.stdout
    report = (tmp_path / "run" / "report.md").read_text()
    assert "data quality:" in report


@pytest.mark.parametrize("parts", [("in", "[", "foo].json"), ("[bold]x[", "bold].json"), ("[red]", "[/red].json")])
def test_names_with_brackets_are_printed_as_they_are(tmp_path, parts) -> None:
    """Case 4: a name with ``[`` and ``]`` in an error was a MarkupError traceback, or named the wrong file."""
    path = tmp_path.joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("<html>not a trace</html>")
    relative = str(path.relative_to(tmp_path))
    _one_clear_line(_advisor("analyze", relative, cwd=tmp_path), f"{relative}: is not valid JSON")


def test_a_good_trace_with_brackets_in_its_name_gets_its_card(tmp_path) -> None:
    """Case 4, the summary card: the title and the report path carry the name."""
    folder = tmp_path / "[b]runs" / "[/b]"
    folder.mkdir(parents=True)
    trace = folder / "[x]mi250.pt.trace.json.gz"
    trace.write_bytes(fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz").read_bytes())
    result = _advisor("analyze", str(trace.relative_to(tmp_path)), "--out", "[b]runs/[/b]/[out]", cwd=tmp_path)
    assert result.code == 0, result.output
    assert "advisor · [x]mi250.pt.trace.json.gz" in result.stdout
    assert "Report: [b]runs/[/b]/[out]/report.html" in result.stdout


def _read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write in: a chmod'ed one, or for root (whom modes do not stop) /sys."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    try:
        (Path("/sys") / "advisor-probe").mkdir()
    except OSError:
        return Path("/sys")
    pytest.skip("running as root where /sys takes new folders: no read-only folder to test with")


def test_analyze_out_in_proc(tmp_path) -> None:
    """Case 5: ``analyze ... --out /proc/x`` was a FileNotFoundError traceback."""
    trace = fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz")
    _one_clear_line(_advisor("analyze", str(trace), "--out", "/proc/x", cwd=tmp_path),
                    "/proc/x: cannot make the run directory: /proc does not take new folders")


def test_out_under_a_file(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    trace = fixture_path("kineto", "mi250_rocm_minitoy.pt.trace.json.gz")
    _one_clear_line(_advisor("analyze", str(trace), "--out", "notes.txt/run", cwd=tmp_path),
                    "notes.txt/run: cannot make the run directory: notes.txt is a file, not a folder")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    # it leaves a mark, not output: the child of an in-process run prints to the real terminal, not to the test
    path.write_text("from pathlib import Path\nPath(__file__).with_name('ran.txt').write_text('it ran')\n")
    return path


def test_diagnose_out_in_proc(tmp_path, script) -> None:
    """Case 8: ``diagnose ... --out /proc/x`` was a FileNotFoundError traceback; the script must not even start."""
    result = _advisor("diagnose", str(script), "--out", "/proc/x", cwd=tmp_path)
    _one_clear_line(result, "/proc/x: cannot make the run directory")
    assert not (script.parent / "ran.txt").exists()


def test_diagnose_in_a_read_only_current_folder(tmp_path, script) -> None:
    """Case 8: a read-only current folder without ``--out`` was a PermissionError traceback."""
    folder = _read_only_folder(tmp_path)
    result = _advisor("diagnose", str(script), cwd=folder)
    _one_clear_line(result, f"cannot make the run directory: the current folder {folder}", "pass --out DIR")
    assert not (script.parent / "ran.txt").exists()


def test_diagnose_out_inside_a_read_only_folder(tmp_path, script) -> None:
    """Case 8: ``--out`` inside a read-only folder was a PermissionError traceback."""
    folder = _read_only_folder(tmp_path)
    result = _advisor("diagnose", str(script), "--out", str(folder / "run"), cwd=tmp_path)
    _one_clear_line(result, f"{folder / 'run'}: cannot make the run directory: {folder} ")
    assert not (script.parent / "ran.txt").exists()
