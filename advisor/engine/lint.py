"""``advisor rules lint``: everything about a rule file that can be checked without a run.

Beyond the schema (:mod:`advisor.engine.schema`, which already refuses
unsafe YAML and expressions that do not parse), lint checks:

- every fact an expression reads is declared by an analyzer, with the
  closest known name suggested (:mod:`advisor.engine.shapes`);
- regex literals compile (done when the expression compiles);
- rule ids and names are unique; the file name starts with the id; a
  built-in rule sits in the folder of its stage;
- an enabled rule has non-empty what / where / why / fix texts;
- it has test cases that fire and that stay quiet, whose facts are known
  facts of the right type, and which put every threshold's fact just either
  side of the threshold;
- the knowledge entries it names exist, and built-in rules name at least one;
- each rule a ``refines`` entry names exists among the rules loaded with it,
  is enabled, and belongs to an earlier stage; the ``refines.when``
  condition reads only facts and ``refined.*`` (:data:`REFINED_NAMES`);
- knowledge entries have every section (:mod:`advisor.knowledge`);
- every built-in knowledge entry is detected (a built-in rule names it in
  its ``knowledge`` list) or says, in a ``detection`` marker, which data a
  rule would need; a marker on an entry that a rule now names is stale.
  These *coverage* problems are also kept apart in
  :attr:`LintReport.coverage`: the rule index can still be built with them.

Each problem is a :class:`~advisor.errors.RuleError` naming file and line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.analyze.findings import FactSpec
from advisor.analyze.registry import all_specs
from advisor.engine.rulebook import LoadedRule, parse_rule_file, rule_files, user_rule_dirs
from advisor.engine.rule import REFINED_NAMES
from advisor.engine.shapes import Catalog, Threshold, check_expression
from advisor.errors import RuleError
from advisor.expr.values import is_number
from advisor.knowledge import Entry, check_entry, entry_files, parse_entry
from advisor.resources import knowledge_dir, rules_dir

__all__ = ["LintReport", "check_rule", "lint"]

STAGES = ("framework", "system", "kernel")
TEXTS = ("what", "where", "why", "fix")


@dataclass
class LintReport:
    problems: list[RuleError] = field(default_factory=list)
    rules: list[LoadedRule] = field(default_factory=list)
    rule_files: int = 0
    entries: int = 0
    #: the problems of entries that no rule detects and no marker explains (also in ``problems``)
    coverage: list[RuleError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Group:
    """Rule files that must not share ids: one folder of rules, or the paths given on the command line."""

    files: list[Path]
    builtin: bool


def lint(paths: Iterable[Path] = (), user_dirs: Iterable[Path] = (), *, env: bool = True) -> LintReport:
    """Lint the given rule files, folders and knowledge entries, or by default everything the advisor would load."""
    paths = list(paths)
    if paths:
        groups, entry_paths = _explicit(paths)
    else:
        groups = [_Group(rule_files(rules_dir()), True)]
        groups += [_Group(rule_files(d), False) for d in user_rule_dirs(user_dirs, env=env)]
        entry_paths = entry_files(knowledge_dir())
    report = LintReport()
    entries = _lint_entries(entry_paths, report)
    known_entries = set(_builtin_entry_ids()) | set(entries)
    catalog = Catalog(all_specs())
    for group in groups:
        loaded = []
        for path in group.files:
            report.rule_files += 1
            rule, errors = parse_rule_file(path, group.builtin or _is_builtin(path))
            report.problems += errors
            if rule is not None:
                loaded.append(rule)
                report.problems += check_rule(rule, catalog, known_entries)
        report.problems += _duplicates(loaded)
        report.rules += loaded
    report.problems += refinement_problems(report.rules, _builtin_rules() if paths else [])
    if not paths:
        named = {name for item in report.rules if item.builtin for name in item.rule.knowledge}
        report.coverage = coverage_problems(entries, named)
        report.problems += report.coverage
    report.problems.sort(key=lambda e: (str(e.path), e.line or 0))
    return report


def _explicit(paths: list[Path]) -> tuple[list[_Group], list[Path]]:
    files: list[Path] = []
    entries: list[Path] = []
    for path in paths:
        if not path.exists():
            raise RuleError(path, None, "no such file or folder")
        if path.is_file() and path.suffix == ".md":
            entries.append(path)
        elif path.is_file():
            files.append(path)
        else:
            files += rule_files(path)
            entries += [p for p in entry_files(path) if p.read_text(encoding="utf-8").startswith("---\n")]
    return [_Group(files, False)], entries


def _is_builtin(path: Path) -> bool:
    return path.resolve().is_relative_to(rules_dir().resolve())


def _builtin_entry_ids() -> list[str]:
    return [p.stem for p in entry_files(knowledge_dir())]


def _lint_entries(paths: list[Path], report: LintReport) -> dict[str, Entry]:
    entries = {}
    for path in paths:
        report.entries += 1
        try:
            entry = parse_entry(path.read_text(encoding="utf-8"), path)
        except RuleError as exc:
            report.problems.append(exc)
            continue
        report.problems += check_entry(entry)
        entries[entry.id or path.stem] = entry
    return entries


def coverage_problems(entries: Mapping[str, Entry], named: Iterable[str]) -> list[RuleError]:
    """Entries that no rule names and no ``detection`` marker explains, and markers a rule has made stale."""
    named = set(named)
    problems = []
    for entry_id, entry in sorted(entries.items()):
        marked = "detection" in entry.meta
        if entry_id in named and marked:
            problems.append(RuleError(entry.path, entry.lines.get("detection", 2),
                                      "a rule names this entry in its `knowledge` list, so it is detected: "
                                      "remove the `detection` marker"))
        elif entry_id not in named and not marked:
            problems.append(RuleError(entry.path, entry.lines.get("id", 2),
                                      "no rule detects this entry: add a rule that names it in its `knowledge` "
                                      "list, or a `detection` marker saying which data a rule would need "
                                      "(docs/rule-schema.md, Knowledge entries)"))
    return problems


def _duplicates(loaded: list[LoadedRule]) -> list[RuleError]:
    problems = []
    by_id: dict[str, LoadedRule] = {}
    by_name: dict[str, LoadedRule] = {}
    for item in loaded:
        rule = item.rule
        if rule.id in by_id:
            problems.append(RuleError(item.path, item.line_of("id"),
                                      f"rule id {rule.id} is also used by {by_id[rule.id].path}"))
        by_id.setdefault(rule.id, item)
        if rule.status != "disabled" and rule.name:
            if rule.name in by_name:
                problems.append(RuleError(item.path, item.line_of("name"),
                                          f"rule name {rule.name} is also used by {by_name[rule.name].path}"))
            by_name.setdefault(rule.name, item)
    return problems


def check_rule(loaded: LoadedRule, catalog: Catalog, known_entries: Iterable[str] | None = None) -> list[RuleError]:
    """Every lint problem of one schema-valid rule."""
    rule, path = loaded.rule, loaded.path
    problems = []
    if not path.stem.startswith(rule.id):
        problems.append(RuleError(path, loaded.line_of("id"),
                                  f"the file name must start with the rule id: {rule.id}-{rule.name or 'name'}.yaml"))
    if loaded.builtin and path.parent.name in STAGES and path.parent.name != rule.stage:
        problems.append(RuleError(path, loaded.line_of("stage"),
                                  f"`stage: {rule.stage}` but the file is in rules/{path.parent.name}/"))
    if rule.status == "disabled":
        return problems
    for name in TEXTS:
        if not getattr(rule, name).strip():
            problems.append(RuleError(path, loaded.line_of(name), f"`{name}` must not be empty"))
    problems += expression_problems(loaded, catalog)
    problems += _test_problems(loaded, catalog)
    if known_entries is not None:
        known = set(known_entries)
        for i, entry in enumerate(rule.knowledge):
            if entry not in known:
                problems.append(RuleError(path, loaded.line_of("knowledge", i),
                                          f"knowledge entry `{entry}` does not exist (no knowledge/{entry}.md)"))
    if loaded.builtin and not rule.knowledge:
        problems.append(RuleError(path, loaded.line_of("id"), "a built-in rule must name a knowledge entry"))
    return problems


def _builtin_rules() -> list[LoadedRule]:
    """The built-in rules, which a user's rule may refine, when only the user's files are linted."""
    return [r for r in (parse_rule_file(p, True)[0] for p in rule_files(rules_dir())) if r is not None]


def refinement_problems(loaded: Iterable[LoadedRule], also: Iterable[LoadedRule] = ()) -> list[RuleError]:
    """``refines`` entries that name no enabled rule of an earlier stage among ``loaded`` and ``also``."""
    loaded = list(loaded)
    by_id = {item.rule.id: item.rule for item in [*also, *loaded]}
    problems = []
    for item in loaded:
        rule = item.rule
        if rule.status == "disabled":
            continue
        for i, entry in enumerate(rule.refines):
            line = item.line_of("refines", i, "rule") or item.line_of("refines")
            target = by_id.get(entry.rule)
            if target is None or target.status == "disabled":
                problems.append(RuleError(item.path, line, f"`refines[{i}].rule`: no enabled rule {entry.rule} "
                                                           "is loaded with this one"))
            elif STAGES.index(target.stage) >= STAGES.index(rule.stage):
                problems.append(RuleError(item.path, line, f"`refines[{i}].rule`: {entry.rule} is a {target.stage} "
                                                           f"rule; a {rule.stage} rule can only refine a diagnosis "
                                                           "of an earlier stage"))
    return problems


_REFINED_SPECS = {n: FactSpec(n, "texts" if n == "refined.kernels" else "text", meaning)
                  for n, meaning in REFINED_NAMES.items()}


def _with_refined(catalog: Catalog) -> Catalog:
    return Catalog({**catalog.specs, **_REFINED_SPECS})


def expression_problems(loaded: LoadedRule, catalog: Catalog) -> list[RuleError]:
    """Unknown facts, columns and misused tables in every expression and text of the rule."""
    problems = []
    refined = _with_refined(catalog) if loaded.rule.refines else catalog
    for loc, expr in loaded.rule.compiled().expressions():
        scope = refined if loc[0] == "refines" else catalog
        found, _ = check_expression(expr.tree, scope, evidence=loc == ("evidence",))
        for problem in found:
            problems.append(RuleError(loaded.path, loaded.line_of(*loc), f"`{_dotted(loc)}`: {problem.message}"))
    return problems


def _dotted(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc))


def _test_problems(loaded: LoadedRule, catalog: Catalog) -> list[RuleError]:
    rule, path = loaded.rule, loaded.path
    problems = []
    expects = {case.expect for case in rule.tests}
    for needed in ("fires", "quiet"):
        if needed not in expects:
            line = loaded.line_of("tests") or loaded.line_of("id")
            problems.append(RuleError(path, line, f"needs a test case that {'fires' if needed == 'fires' else 'stays quiet'}"
                                                  f" (tests: - {{name: ..., expect: {needed}, facts: {{...}}}})"))
    if rule.refines and not {"yes", "no"} <= {"yes" if c.refines else "no" for c in rule.tests
                                               if c.refines is not None}:
        problems.append(RuleError(path, loaded.line_of("refines"), "needs a test case that refines "
                                  f"{rule.refines[0].rule} (refines: {rule.refines[0].rule}) and one that fires "
                                  "on its own (refines: \"\")"))
    for i, case in enumerate(rule.tests):
        if case.refines and case.refines not in {r.rule for r in rule.refines}:
            problems.append(RuleError(path, loaded.line_of("tests", i, "refines"),
                                      f"`tests[{i}].refines`: the rule's `refines` does not name {case.refines}"))
        for name, value in case.facts.items():
            line = loaded.line_of("tests", i, "facts", name)
            spec = catalog.specs.get(name) or (_REFINED_SPECS.get(name) if rule.refines else None)
            if spec is None:
                problems.append(RuleError(path, line, f"`tests[{i}].facts`: unknown fact `{name}`"
                                                      f"{catalog.suggest(name)}"))
                continue
            message = _value_problem(spec, value)
            if message:
                problems.append(RuleError(path, line, f"`tests[{i}].facts.{name}`: {message}"))
    compiled = rule.compiled()
    checked = [(("when",), compiled.when)] + [(("severity", i, "when"), e) for i, (_, e) in enumerate(compiled.tiers)]
    for loc, expr in checked:
        _, thresholds = check_expression(expr.tree, catalog)
        for threshold in _unique(thresholds):
            for message in _coverage(threshold, rule.tests):
                problems.append(RuleError(path, loaded.line_of(*loc), f"`{_dotted(loc)}`: {message}"))
    return problems


def _value_problem(spec: FactSpec, value: Any) -> str | None:
    if value is None:
        return "null never occurs in a run; leave the fact out to test a run without it"
    if spec.is_table:
        if not isinstance(value, list) or not all(isinstance(row, Mapping) for row in value):
            return "is a table: give a list of rows, like [{" + ", ".join(list(spec.columns)[:2]) + ": ...}]"
        for row in value:
            unknown = [k for k in row if k not in spec.columns]
            if unknown:
                return f"rows have no column `{unknown[0]}` (columns: {', '.join(spec.columns)})"
        return None
    if spec.unit == "bool":
        return None if isinstance(value, bool) else f"must be true or false, not {value!r}"
    if spec.unit == "text":
        return None if isinstance(value, str) else f"must be text, not {value!r}"
    if spec.unit == "texts":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else f"must be a list of strings, not {value!r}"
    return None if is_number(value) else f"must be a number ({spec.unit}), not {value!r}"


def _unique(thresholds: list[Threshold]) -> list[Threshold]:
    seen, out = set(), []
    for t in thresholds:
        key = (t.kind.subject, t.op, t.value)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def tolerance(threshold: Threshold) -> float:
    """How close to a threshold "just either side" is: 1% of it, at least one unit for counts."""
    floor = 1.0 if threshold.kind.unit == "count" else 1e-3
    return max(abs(threshold.value) * 0.01, floor)


def _case_values(threshold: Threshold, tests: Iterable[Any]) -> list[float]:
    spec, column = threshold.kind.spec, threshold.kind.column
    assert spec is not None
    values = []
    for case in tests:
        value = case.facts.get(spec.name)
        if column is None:
            values.append(value)
        elif isinstance(value, list):
            values += [row.get(column) for row in value if isinstance(row, Mapping)]
    return [float(v) for v in values if is_number(v)]


def _coverage(threshold: Threshold, tests: Iterable[Any]) -> list[str]:
    """What the test cases miss around one threshold: a value just on the side where it holds, and just off it."""
    t, op = threshold.value, threshold.op
    tol = tolerance(threshold) * (1 + 1e-9)
    values = _case_values(threshold, tests)
    sides = {  # (low, high, low included, high included, words) where the comparison holds, then fails
        ">=": ((t, t + tol, True, True, "at or just above"), (t - tol, t, True, False, "just below")),
        ">": ((t, t + tol, False, True, "just above"), (t - tol, t, True, True, "at or just below")),
        "<=": ((t - tol, t, True, True, "at or just below"), (t, t + tol, False, True, "just above")),
        "<": ((t - tol, t, True, False, "just below"), (t, t + tol, True, True, "at or just above")),
    }[op]
    out = []
    for lo, hi, lo_in, hi_in, words in sides:
        if not any(_inside(v, lo, hi, lo_in, hi_in) for v in values):
            interval = f"{'[' if lo_in else '('}{_fmt(lo)}, {_fmt(hi)}{']' if hi_in else ')'}"
            out.append(f"no test case has `{threshold.kind.subject}` {words} {_fmt(t)} (`{threshold.text}`); "
                       f"add one with a value in {interval}")
    return out


def _inside(v: float, lo: float, hi: float, lo_in: bool, hi_in: bool) -> bool:
    return (v > lo or (lo_in and v == lo)) and (v < hi or (hi_in and v == hi))


def _fmt(value: float) -> str:
    return f"{round(value, 9):g}"
