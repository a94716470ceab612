"""Loading rule packs: built-in rules, user folders, overrides by id.

Rules are read from the built-in ``rules/`` folder (every ``*.yaml`` below
a stage folder), then from each user folder given with ``--rules DIR`` or
listed in ``ADVISOR_RULES`` (separated by ``:``), in that order. A later
rule with the same id replaces the earlier one; one with
``status: disabled`` switches it off.

Every problem is a :class:`~advisor.errors.RuleError` that names the file,
the line and the field.

A file's data is checked by the pydantic schema (:mod:`advisor.engine.schema`)
and the engine gets the plain :class:`~advisor.engine.rule.Rule` built from it.
A text that passed is kept, as that plain data, in advisor's cache folder
(``rules-pyXY.marshal``, see :mod:`advisor.yamlio.yaml_cache`), keyed by the
text together with the source of the schema, of the rule classes and of the
expression parser that the schema's checks use: reading
the built-in rules back from it takes a few ms, where importing pydantic and
checking them took 100-150 ms of every run. Only texts that passed are kept,
so ``advisor rules lint`` always sees the problems.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.engine.rule import Rule
from advisor.errors import RuleError
from advisor.resources import rules_dir
from advisor.yamlio.safe_yaml import LineMap, parse_yaml_cached, read_yaml_text
from advisor.yamlio.yaml_cache import named_cache

__all__ = ["ENV_VAR", "LoadedRule", "RuleBook", "load_rule_file", "parse_rule_file", "rule_files", "user_rule_dirs"]

ENV_VAR = "ADVISOR_RULES"
#: files in the rules folder that are not rules
NOT_RULES = {"workflow.yaml", "workflow.yml"}


@dataclass
class LoadedRule:
    rule: Rule
    path: Path
    lines: LineMap
    builtin: bool

    def line_of(self, *path: Any) -> int | None:
        return self.lines.line(tuple(path))


@dataclass
class RuleBook:
    """The active rules after overrides, plus where each came from."""

    rules: dict[str, LoadedRule] = field(default_factory=dict)
    disabled: dict[str, LoadedRule] = field(default_factory=dict)
    overridden: dict[str, Path] = field(default_factory=dict)

    def active(self, stage: str | None = None) -> list[LoadedRule]:
        return [r for r in self.rules.values() if stage is None or r.rule.stage == stage]

    def __getitem__(self, rule_id: str) -> LoadedRule:
        return self.rules[rule_id]

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self.rules

    @classmethod
    def load(cls, user_dirs: Iterable[Path] = (), *, builtin: bool = True, env: bool = True) -> RuleBook:
        """The built-in rules, then each user folder (``--rules``, then ``$ADVISOR_RULES``), later ids winning.

        User rules must read only facts that analyzers declare: a misspelt
        fact would make a rule that silently never applies, so it is an
        error here, before anything runs.
        """
        dirs: list[tuple[Path, bool]] = [(rules_dir(), True)] if builtin else []
        dirs += [(d, False) for d in user_rule_dirs(user_dirs, env=env)]
        book = cls()
        for folder, is_builtin in dirs:
            seen: dict[str, Path] = {}
            for path in rule_files(folder):
                loaded = load_rule_file(path, is_builtin)
                rid = loaded.rule.id
                if rid in seen:
                    raise RuleError(path, loaded.line_of("id"), f"rule id {rid} is also used by {seen[rid]}")
                seen[rid] = path
                if not is_builtin:
                    _check_facts(loaded)
                book._add(loaded)
        return book

    def _add(self, loaded: LoadedRule) -> None:
        rid = loaded.rule.id
        previous = self.rules.pop(rid, None) or self.disabled.pop(rid, None)
        if previous is not None:
            self.overridden[rid] = previous.path
        if loaded.rule.status == "disabled":
            self.disabled[rid] = loaded
        else:
            self.rules[rid] = loaded


def user_rule_dirs(user_dirs: Iterable[Path] = (), *, env: bool = True) -> list[Path]:
    """The user's rule folders: those given with ``--rules``, then those in ``$ADVISOR_RULES``."""
    dirs = [Path(d) for d in user_dirs]
    if env and os.environ.get(ENV_VAR):
        dirs += [Path(p) for p in os.environ[ENV_VAR].split(os.pathsep) if p]
    unique: list[Path] = []
    for d in dirs:
        if not d.exists():
            raise RuleError(d, None, f"no such rules folder (from --rules or ${ENV_VAR})")
        if all(d.resolve() != u.resolve() for u in unique):  # given twice: load it once
            unique.append(d)
    return unique


def _check_facts(loaded: LoadedRule) -> None:
    from advisor.analyze.registry import all_specs  # the analyzers import pandas; only user rules need them here
    from advisor.engine.lint import expression_problems
    from advisor.engine.shapes import Catalog

    if loaded.rule.status != "disabled":
        problems = expression_problems(loaded, Catalog(all_specs()))
        if problems:
            raise problems[0]


def rule_files(folder: Path) -> list[Path]:
    """The rule files under a folder (or the file itself), in a stable order."""
    if folder.is_file():
        return [folder]
    files = [p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and p.name not in NOT_RULES]
    return sorted(files)


def load_rule_file(path: Path, builtin: bool = False) -> LoadedRule:
    """Read and validate one rule file; the first problem is raised as a :class:`RuleError`."""
    loaded, errors = parse_rule_file(path, builtin)
    if errors:
        raise errors[0]
    assert loaded is not None
    return loaded


def parse_rule_file(path: Path, builtin: bool = False) -> tuple[LoadedRule | None, list[RuleError]]:
    """Read and validate one rule file, returning every schema problem (for lint), each with its line."""
    try:
        text = read_yaml_text(path)
        data, lines = parse_yaml_cached(text, path)
    except RuleError as exc:
        return None, [exc]
    if not isinstance(data, dict):
        return None, [RuleError(path, 1, "a rule file must be a YAML mapping with `id`, `name`, `when`, ...")]
    try:
        checked, _ = named_cache("rules", _schema_key()).get_or_parse(text, lambda: (_check(data, path, lines), {}))
    except _SchemaErrors as exc:
        return None, exc.errors
    return LoadedRule(Rule.from_dict(checked), path, lines, builtin), []


class _SchemaErrors(Exception):
    """The schema's problems with one file, each as a RuleError (raised through the cache: nothing is kept)."""

    def __init__(self, errors: list[RuleError]) -> None:
        super().__init__(errors[0] if errors else "invalid rule")
        self.errors = errors


def _check(data: dict[str, Any], path: Path, lines: LineMap) -> dict[str, Any]:
    """The schema's dump of a file's data; its problems raised as :class:`_SchemaErrors`."""
    from pydantic import ValidationError  # here: a run whose rule texts were all checked before never needs it

    from advisor.engine import schema

    try:
        return schema.dump(schema.Rule.model_validate(data))
    except ValidationError as exc:
        raise _SchemaErrors([_error(err, path, lines) for err in exc.errors()]) from None


#: the modules whose code decides whether a text passes and what it is read as (with the expression parser's)
_CHECKED_BY = ("engine/schema.py", "engine/rule.py", "expr/template.py", "knobs.py")
_key: list[bytes] = []


def _schema_key() -> bytes:
    if not _key:
        from advisor.expr.tree_cache import parser_key

        digest = hashlib.sha256(parser_key())
        for name in _CHECKED_BY:
            digest.update(Path(__file__).parent.parent.joinpath(name).read_bytes())
        _key.append(digest.digest())
    return _key[0]


#: pydantic's names for union branches and validators, which are not part of a field's path
_NOT_PATH = ("function-", "list[", "Severity", "str-enum")
_BRANCH_TAGS = {("severity", "level"), ("severity", "tiers")}


def _location(raw: tuple[Any, ...]) -> tuple[Any, ...]:
    loc = tuple(p for p in raw if not (isinstance(p, str) and p.startswith(_NOT_PATH)))
    if loc[:2] in _BRANCH_TAGS:
        loc = loc[:1] + loc[2:]
    return loc


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "rule"


def _did_you_mean(word: Any, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1) if isinstance(word, str) else []
    return f"; did you mean `{close[0]}`?" if close else ""


def _error(err: Any, path: Path, lines: LineMap) -> RuleError:
    """One pydantic error as ``file:line: `field` what is wrong``."""
    loc = _location(tuple(err["loc"]))
    name = _dotted(loc)
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "missing":
        text = f"`{name}` is required"
    elif kind == "extra_forbidden":
        field = loc[-1] if loc else name
        model = _model_at(loc[:-1])
        text = f"`{name}` is not a known field{_did_you_mean(field, model.model_fields)} " \
               f"(known: {', '.join(model.model_fields)})"
    elif kind in ("literal_error", "enum"):
        expected = [e.strip(" '") for e in re.split(r",| or ", err.get("ctx", {}).get("expected", "")) if e.strip()]
        text = f"`{name}` must be one of {', '.join(expected)}{_did_you_mean(err.get('input'), expected)}"
    elif kind == "value_error" and not loc:
        text = msg
    elif kind == "value_error" and msg.startswith("`"):
        text = f"`{name}`: {msg}"
    else:
        text = f"`{name}` {msg[0].lower() + msg[1:] if msg else 'is invalid'}"
    return RuleError(path, lines.line(loc), text)


def _model_at(loc: tuple[Any, ...]) -> Any:
    """The schema model that holds the field at ``loc`` (for the list of known fields)."""
    from advisor.engine.schema import Impact, Rule, RuleTest, SeverityTier

    if loc[:1] == ("impact",):
        return Impact
    if loc[:1] == ("tests",):
        return RuleTest
    if loc[:1] == ("severity",):
        return SeverityTier
    return Rule
