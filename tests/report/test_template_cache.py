"""The report templates are compiled once per machine, and a cache that cannot be written costs nothing else."""

from __future__ import annotations

import shutil

import pytest

from advisor.report import render


@pytest.fixture(autouse=True)
def fresh_environments():
    render._environment.cache_clear()  # each test builds its environments under its own cache setting
    yield
    render._environment.cache_clear()


def test_compiled_templates_are_kept_per_escaping(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path))
    render._environment(False).get_template("report.md.j2")
    render._environment(True).get_template("report.html.j2")
    assert list((tmp_path / "templates" / "text").glob("*.cache"))
    assert list((tmp_path / "templates" / "html").glob("*.cache"))


def test_no_cache_when_turned_off_or_unwritable(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_CACHE_DIR", "")
    assert render._compiled_templates(False) is None
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(blocker))
    assert render._compiled_templates(False) is None  # the folder cannot be made: compile, never fail
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    environment = render._environment(False)
    shutil.rmtree(tmp_path / "cache")  # removed after the cache was set up: writing it fails, quietly
    assert environment.get_template("report.md.j2") is not None
