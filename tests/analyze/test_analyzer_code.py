"""Every analyzer records where its function is, so that a fact leads to its code in one step; builtin.py
imports every module that declares one."""

from __future__ import annotations


from conftest import REPO

from advisor.analyze.registry import find, registered


def test_each_analyzer_points_at_its_declaration() -> None:
    analyzers = registered()
    assert analyzers
    for a in analyzers:
        path = REPO / a.file
        assert path.is_file(), f"{a.name}: {a.file}"
        lines = path.read_text().splitlines()
        declaration = lines[a.line - 1].strip()
        assert declaration.startswith(f'@analyzer("{a.name}"'), f"{a.code}: {declaration}"
        after = next(line for line in lines[a.line - 1:] if line.startswith("def "))
        assert after.startswith(f"def {a.function}("), f"{a.code}: {after}"
        assert a.code == f"{a.file}:{a.line} ({a.function})"


def test_find_knows_registered_analyzers_only() -> None:
    step_split = find("step_split")
    assert step_split is not None and step_split.file == "advisor/analyze/framework/step_split.py"
    assert find("no_such_analyzer") is None


def test_builtin_imports_every_module_that_declares_an_analyzer() -> None:
    from advisor.analyze.builtin import MODULES
    from advisor.analyze.registry import registered

    root = REPO / "advisor" / "analyze"
    imported = {m for modules in MODULES.values() for m in modules}
    declaring = {".".join(p.relative_to(REPO).with_suffix("").parts) for p in root.rglob("*.py")
                 if "@analyzer(" in p.read_text()}
    assert len(declaring) > 30
    assert sorted(declaring - imported) == []
    # and each module is listed under the stage its analyzers declare, so loading a stage registers them all
    for analyzer in registered():
        assert analyzer.func.__module__ in MODULES[analyzer.stage], analyzer.name
