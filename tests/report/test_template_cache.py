"""The report templates are compiled once per machine, and a cache that cannot be written costs nothing else."""

from __future__ import annotations

import jinja2
import pytest

from advisor.report import render
from advisor.resources import templates_dir


def _environment(cache: jinja2.BytecodeCache | None) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), bytecode_cache=cache)


def test_compiled_templates_are_kept_per_escaping(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path))
    for autoescape in (False, True):
        _environment(render._compiled_templates(autoescape)).get_template("report.md.j2")
    assert list((tmp_path / "templates" / "text").glob("*.cache"))
    assert list((tmp_path / "templates" / "html").glob("*.cache"))


def test_no_cache_when_turned_off_or_unwritable(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADVISOR_CACHE_DIR", "")
    assert render._compiled_templates(False) is None
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(blocker))
    assert render._compiled_templates(False) is None  # the folder cannot be made: compile, never fail
    cache = render._CompiledTemplates(str(tmp_path / "gone"))  # a folder removed after the cache was made
    _environment(cache).get_template("report.md.j2")
