"""``advisor rules list|explain|lint|test|index`` and ``advisor facts``: for people who write rules."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli.app import RulesOption, SeverityLevel, app, err
from advisor.messages import say
from advisor.errors import RuleError, UsageError

rules_app = typer.Typer(
    help="List, explain, lint and test rules; build the rule index.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(rules_app, name="rules")


class Stage(str, Enum):
    framework = "framework"
    system = "system"
    kernel = "kernel"


StageOption = Annotated[Optional[Stage], typer.Option("--stage", help="Only this stage.")]
LintPaths = Annotated[Optional[list[Path]], typer.Argument(
    help="Rule files or folders, and knowledge entries (.md); default: the built-in rules and knowledge "
         "entries and your --rules folders.",
    show_default=False, metavar="PATHS")]
TestPaths = Annotated[Optional[list[Path]], typer.Argument(
    help="Rule files or folders; default: the active rules (built-in and your --rules folders).",
    show_default=False, metavar="PATHS")]


def _shown(path: Path | None) -> str:
    """A path as the user would type it: relative to the current folder when below it; built-ins as rules/..."""
    from advisor.resources import knowledge_dir, rules_dir

    if path is None:
        return ""
    resolved = path.resolve()
    for root in (Path.cwd().resolve(), rules_dir().resolve().parent, knowledge_dir().resolve().parent):
        if resolved.is_relative_to(root):
            return str(resolved.relative_to(root))
    return str(path)


def _problem_line(error: RuleError) -> str:
    where = _shown(error.path)
    if where:
        where = f"{where}:{error.line}: " if error.line else f"{where}: "
    return f"{where}{error.message}"


@rules_app.command("list")
def list_rules(
    stage: StageOption = None,
    severity: Annotated[Optional[SeverityLevel], typer.Option(
        "--severity", help="Only rules that can reach this severity or a higher one.")] = None,
    rules: RulesOption = None,
) -> None:
    """List the active rules (built-in and yours), with what overrides or disables what."""
    from advisor.engine.rulebook import RuleBook
    from advisor.engine.rule import SEVERITIES, Severity

    book = RuleBook.load(rules or [])
    shown = [("ID", "NAME", "STAGE", "SEVERITY", "STATUS", "FROM")]
    for loaded in sorted([*book.rules.values(), *book.disabled.values()], key=lambda r: r.rule.id):
        rule = loaded.rule
        if stage and rule.stage != stage.value:
            continue
        if severity and SEVERITIES.index(rule.base_severity.value) < SEVERITIES.index(severity.value):
            continue
        levels = ([rule.severity] if isinstance(rule.severity, Severity)
                  else sorted({t.level for t in rule.severity}, key=lambda s: s.rank))
        origin = "built-in" if loaded.builtin else _shown(loaded.path)
        if rule.id in book.overridden:
            origin += f", replacing {_shown(book.overridden[rule.id])}"
        severity_text = "-" if rule.status == "disabled" else "/".join(s.value for s in levels)
        shown.append((rule.id, rule.name or "-", rule.stage, severity_text, rule.status, origin))
    if len(shown) == 1:
        typer.echo("No rules match.")
        return
    widths = [max(len(row[i]) for row in shown) for i in range(5)]
    for row in shown:
        typer.echo("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)) + "  " + row[5])


@rules_app.command()
def explain(
    rule_id: Annotated[str, typer.Argument(help="A rule id, like DL001.", metavar="ID", show_default=False)],
    rules: RulesOption = None,
) -> None:
    """Show one rule: its condition, impact, texts, the facts it reads, and its knowledge entry."""
    from advisor.cli.explain import explain_rule
    from advisor.engine.rulebook import RuleBook

    book = RuleBook.load(rules or [])
    loaded = book.rules.get(rule_id.upper()) or book.disabled.get(rule_id.upper())
    if loaded is None:
        import difflib

        close = difflib.get_close_matches(rule_id.upper(), [*book.rules, *book.disabled], n=1)
        hint = f"; did you mean {close[0]}?" if close else "; `advisor rules list` shows them"
        raise UsageError(f"no rule with id {rule_id}{hint}")
    typer.echo(explain_rule(loaded, _shown(loaded.path)))


@rules_app.command()
def lint(
    paths: LintPaths = None,
    rules: RulesOption = None,
) -> None:
    """Check rule files and knowledge entries without running anything; exit 1 on any problem.

    Checks the schema, that every fact read exists (with a suggestion), regexes,
    ids and file names, texts, knowledge references, that the test cases sit
    just either side of every threshold, and that every built-in knowledge entry
    is detected by a rule or says which data a rule would need.
    """
    from advisor.engine.lint import lint as run_lint

    report = run_lint(paths or [], rules or [])
    for problem in report.problems:
        typer.echo(_problem_line(problem))
    counted = " and ".join(
        _plural(n, word) for n, word in ((report.rule_files, "rule file"), (report.entries, "knowledge entry")) if n
    ) or "nothing"
    if report.problems:
        typer.echo(f"{_plural(len(report.problems), 'problem')} in {counted}.")
        raise typer.Exit(1)
    typer.echo(f"Checked {counted}: no problems.")


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n:,} {word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


@rules_app.command("test")
def test_rules(
    paths: TestPaths = None,
    rules: RulesOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List every case, not just failures.")] = False,
) -> None:
    """Run each rule's own test cases; exit 1 when one fails."""
    from advisor.engine.rulebook import RuleBook, load_rule_file, rule_files
    from advisor.engine.testing import run_rule_tests

    if paths:
        loaded = []
        for path in paths:
            if not path.exists():
                raise RuleError(path, None, "no such file or folder")
            loaded += [load_rule_file(p) for p in rule_files(path)]
    else:
        loaded = list(RuleBook.load(rules or []).rules.values())
    failed = cases = 0
    for item in sorted(loaded, key=lambda r: r.rule.id):
        if item.rule.status == "disabled":
            continue
        results = run_rule_tests(item)
        bad = [r for r in results if not r.passed]
        cases += len(results)
        failed += len(bad)
        typer.echo(f"{item.rule.id} {item.rule.name}: "
                   f"{'FAILED' if bad else 'ok'} ({len(results) - len(bad)} of {_plural(len(results), 'case')} passed)")
        for r in results if verbose else bad:
            mark = "ok  " if r.passed else "FAIL"
            line = f"{_shown(Path(r.path))}:{r.line}" if r.line else _shown(Path(r.path))
            typer.echo(f"  {mark} {r.case}" + ("" if r.passed else f": {r.message} ({line})"))
    typer.echo(f"{cases - failed} of {_plural(cases, 'test case')} passed, in {_plural(len(loaded), 'rule')}.")
    if failed:
        raise typer.Exit(1)


@rules_app.command()
def index(
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the index to this file.")] = None,
    check: Annotated[Optional[Path], typer.Option(
        "--check", help="Exit 1 if this file differs from what would be generated (for CI).")] = None,
) -> None:
    """Generate the rule index (Markdown) from the built-in rules and knowledge entries.

    The rules and entries are linted first: an entry without a section or a rule without test cases
    fails here, with the problems listed, instead of producing an index. Entries that no rule detects
    are listed in the index, with the data a rule would need.
    """
    from advisor.knowledge import load_entries
    from advisor.engine.lint import lint as run_lint
    from advisor.engine.rule_index import render_index
    from advisor.engine.rulebook import RuleBook
    from advisor.resources import rules_dir

    report = run_lint(env=False)
    # An entry no rule detects yet is listed in the index as such; only malformed rules and entries stop it.
    problems = [p for p in report.problems if p not in report.coverage]
    if problems:
        for problem in problems:
            typer.echo(_problem_line(problem))
        say(err, "advisor: the index is built from complete rules and entries; fix the problems above first")
        raise typer.Exit(1)
    book = RuleBook.load(env=False)
    text = render_index([*book.rules.values()], load_entries(), rules_dir())
    if check is not None:
        current = check.read_text(encoding="utf-8") if check.exists() else ""
        if current != text:
            say(err, f"{check} is out of date; run: advisor rules index --out {check}")
            raise typer.Exit(1)
        typer.echo(f"{check} is up to date.")
    elif out is not None:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"Wrote {out}.")
    else:
        typer.echo(text, nl=False)


@app.command()
def facts(
    pattern: Annotated[Optional[str], typer.Argument(
        help="Only facts whose name or meaning contains this text.", show_default=False, metavar="WORD")] = None,
    stage: StageOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """List every fact the analyzers provide, with its unit and meaning: what rule expressions can read."""
    from advisor.analyze.registry import registered

    rows = []
    for analyzer in registered(stage.value if stage else None):
        for spec in analyzer.provides:
            text = f"{spec.name} {spec.meaning} {' '.join(spec.columns)}".lower()
            if pattern and pattern.lower() not in text:
                continue
            rows.append((analyzer, spec))
    if as_json:
        typer.echo(json.dumps([{"name": s.name, "unit": s.unit, "meaning": s.meaning, "columns": dict(s.columns),
                                "stage": a.stage, "analyzer": a.name} for a, s in rows], indent=2))
        return
    if not rows:
        typer.echo("No facts match.")
        return
    width = max(len(s.name) for _, s in rows)
    current = None
    for analyzer, spec in rows:
        if analyzer.name != current:
            typer.echo(("" if current is None else "\n") + f"{analyzer.stage} / {analyzer.name}: {analyzer.doc}".rstrip())
            current = analyzer.name
        typer.echo(f"  {spec.name:<{width}}  {spec.unit:<8}  {spec.meaning}")
        for column, meaning in spec.columns.items():
            unit, _, what = meaning.partition(":")
            typer.echo(f"  {'  .' + column:<{width}}  {unit.strip():<8}  {what.strip()}")
