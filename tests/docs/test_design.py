"""docs/DESIGN.md names every package of advisor/, and names no folder that is not there."""

from __future__ import annotations

import re

from conftest import REPO

DESIGN = REPO / "docs" / "DESIGN.md"
PACKAGE = REPO / "advisor"


def _packages() -> set[str]:
    """``advisor/analyze/framework/``-style paths of every package below advisor/."""
    return {f"{p.parent.relative_to(REPO).as_posix()}/" for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE}


def test_design_names_every_package() -> None:
    packages = _packages()
    assert "advisor/analyze/framework/" in packages, "no packages found"
    text = DESIGN.read_text()
    assert sorted(p for p in packages if f"`{p}`" not in text) == [], "add them to the folder table of docs/DESIGN.md"


def test_design_names_no_package_that_is_gone() -> None:
    named = set(re.findall(r"`(advisor/[\w/]+/)`", DESIGN.read_text()))
    assert named, "the folder table was not found"
    assert sorted(named - _packages()) == []


def test_the_package_docstring_and_readme_point_at_the_design() -> None:
    assert "docs/DESIGN.md" in (PACKAGE / "__init__.py").read_text()
    assert "docs/DESIGN.md" in (REPO / "README.md").read_text()
