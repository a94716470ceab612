"""Bad input gets one clear sentence naming the file, and a non-zero exit: never a traceback."""

from __future__ import annotations

import pytest

from conftest import fixture_path, run_cli


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
