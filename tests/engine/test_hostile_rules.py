"""Hostile rule files are refused at lint time with a clear message, and nothing of them runs.

Each file below tries something a rule file must never do: run code, reach Python objects, make the
advisor do unbounded work, or blow up the YAML parser. Every one that tries to run a command would
create a canary file; the tests check that the canary never appears, whatever command reads the rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rulefiles import rule_data

from advisor.engine.lint import lint
from advisor.engine.rulebook import RuleBook, load_rule_file
from advisor.errors import RuleError


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=100_000)


def _billion_laughs() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\nid: BAD001\n"


def hostile_files(canary: Path) -> dict[str, tuple[str, str, int | None]]:
    """name -> (file text, the message lint must give, the line it must name)."""
    shell = f"touch {canary}"
    return {
        "import": (_dump(rule_data(id="BAD001", when=f"__import__('os').system('{shell}')")),
                   "names starting with `__` are not allowed", 5),
        "attribute-walk": (_dump(rule_data(id="BAD001", when="().__class__.__bases__[0].__subclasses__()")),
                           "is not a valid expression", 5),
        "dunder-in-text": (_dump(rule_data(id="BAD001", what="{{ steps.__class__ }}")),
                           "names starting with `__` are not allowed", 9),
        "eval-call": (_dump(rule_data(id="BAD001", when=f"eval(\"__import__('os').system('{shell}')\")")),
                      "unknown function `eval()`", 5),
        "huge-exponent": (_dump(rule_data(id="BAD001", when="2 ** 10 ** 10 > steps.time_ms")),
                          "exponent larger than 64", 5),
        "huge-power-chain": (_dump(rule_data(id="BAD001", impact={"ms_per_step": "9 ** 9 ** 9 ** 9", "basis": "x"})),
                             "exponent larger than 64", 7),
        "string-repetition": (_dump(rule_data(id="BAD001", where="{{ 'ab' * 1000000000 }}")),
                              "`*` needs numbers, got string and number", 10),
        "list-repetition": (_dump(rule_data(id="BAD001", evidence="[0] * 10 ** 9")),
                            "`*` needs numbers, got list and number", None),
        "deep-nesting": (_dump(rule_data(id="BAD001", when="(" * 500 + "steps.time_ms" + ")" * 500 + " > 1")),
                         "nested deeper than 32 levels", 5),
        "many-nots": (_dump(rule_data(id="BAD001", when="not " * 300 + "true")),
                      "nested deeper than 32 levels", 5),
        "too-long": (_dump(rule_data(id="BAD001", when=" + ".join(["steps.time_ms"] * 400) + " > 1")),
                     "longer than 2000 characters", 5),
        "billion-laughs": (_billion_laughs(), "YAML anchors and aliases (&name / *name) are not allowed", 1),
        "python-object-tag": (f'id: BAD001\nwhen: !!python/object/apply:os.system ["{shell}"]\n',
                              "would build a Python object", 2),
        "python-name-tag": ("id: BAD001\nwhen: !!python/name:os.system\n", "would build a Python object", 2),
        "custom-tag": ("id: BAD001\nwhen: !shell ls\n", "YAML tag '!shell' is not allowed", 2),
        "deep-yaml": ("id: BAD001\nwhen: " + "[" * 20_000 + "]" * 20_000 + "\n", "nests deeper than 40 levels", 2),
        "many-yaml-nodes": ("id: BAD001\ntests: [" + ", ".join(["1"] * 30_000) + "]\n",
                            "has more than 20,000 YAML nodes", 2),
        "huge-file": ("id: BAD001\n# " + "x" * 300_000 + "\n", "rule files are limited to 262,144", None),
        "duplicate-key": (_dump(rule_data(id="BAD001")) + f"when: \"__import__('os').system('{shell}')\"\n",
                          "`when` is given twice", None),
    }


@pytest.fixture()
def hostile(tmp_path: Path) -> tuple[Path, Path, dict[str, tuple[str, str, int | None]]]:
    folder = tmp_path / "hostile"
    folder.mkdir()
    canary = tmp_path / "pwned"
    files = hostile_files(canary)
    for name, (text, _, _) in files.items():
        (folder / f"BAD001-{name}.yaml").write_text(text)
    return folder, canary, files


@pytest.mark.timeout(120)
def test_each_hostile_file_is_refused_with_file_line_and_reason(hostile) -> None:  # noqa: ANN001
    folder, canary, files = hostile
    report = lint([folder], env=False)
    by_file: dict[str, list[RuleError]] = {}
    for problem in report.problems:
        by_file.setdefault(problem.path.name, []).append(problem)
    for name, (_, message, line) in files.items():
        found = by_file.get(f"BAD001-{name}.yaml")
        assert found, f"{name}: not refused"
        assert any(message in p.message for p in found), f"{name}: {[p.message for p in found]}"
        if line is not None:
            assert any(p.line == line for p in found if message in p.message), f"{name}: {[str(p) for p in found]}"
    assert not canary.exists(), "a hostile rule file ran a command"


@pytest.mark.timeout(120)
def test_loading_or_testing_hostile_rules_never_runs_them(hostile) -> None:  # noqa: ANN001
    folder, canary, files = hostile
    for path in sorted(folder.iterdir()):
        with pytest.raises(RuleError):
            load_rule_file(path)
    with pytest.raises(RuleError):
        RuleBook.load([folder], env=False)
    assert not canary.exists()


@pytest.mark.timeout(300)
def test_cli_refuses_them_in_one_line_each(hostile) -> None:  # noqa: ANN001
    from conftest import run_cli

    folder, canary, files = hostile
    lint_result = run_cli("rules", "lint", str(folder), cwd=folder.parent)
    test_result = run_cli("rules", "test", str(folder / "BAD001-import.yaml"), cwd=folder.parent)
    assert lint_result.code == 1 and "Traceback" not in lint_result.output
    assert lint_result.stdout.strip().splitlines()[-1].endswith(f"in {len(files)} rule files.")
    assert test_result.code == 2 and "Traceback" not in test_result.output
    assert test_result.stderr.strip() == (
        f"advisor: error: {folder}/BAD001-import.yaml:5: `when` is not a valid expression: "
        "names starting with `__` are not allowed (column 1)"
    )
    assert not canary.exists()


def test_record_keys_are_data_not_attributes() -> None:
    from advisor.errors import ExpressionError
    from advisor.expr.expression import Absent, compile_expression

    with pytest.raises(Absent):
        compile_expression("ops.top[0]['__class__']").evaluate({"ops.top": [{"name": "aten::mm"}]})
    with pytest.raises(ExpressionError, match="cannot index string with string"):
        compile_expression("trace.device['upper']").evaluate({"trace.device": "cpu"})
