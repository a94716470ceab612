"""Loading rule packs: built-in rules, user folders, overrides by id.

Rules are read from the built-in ``rules/`` folder (every ``*.yaml`` below
a stage folder), then from each user folder given with ``--rules DIR`` or
listed in ``ADVISOR_RULES`` (separated by ``:``), in that order. A later
rule with the same id replaces the earlier one; one with
``status: disabled`` switches it off.

Every problem is a :class:`~advisor.errors.RuleError` that names the file,
the line and the field.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from advisor.engine.safe_yaml import LineMap, load_yaml
from advisor.engine.schema import Rule
from advisor.errors import RuleError
from advisor.resources import rules_dir

__all__ = ["ENV_VAR", "LoadedRule", "RuleBook", "load_rule_file", "rule_files"]

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
        dirs: list[tuple[Path, bool]] = [(rules_dir(), True)] if builtin else []
        extra = list(user_dirs)
        if env and os.environ.get(ENV_VAR):
            extra += [Path(p) for p in os.environ[ENV_VAR].split(os.pathsep) if p]
        for d in extra:
            if not d.exists():
                raise RuleError(d, None, "no such rules folder")
            dirs.append((d, False))
        book = cls()
        for folder, is_builtin in dirs:
            seen: dict[str, Path] = {}
            for path in rule_files(folder):
                loaded = load_rule_file(path, is_builtin)
                rid = loaded.rule.id
                if rid in seen:
                    raise RuleError(path, loaded.line_of("id"), f"rule id {rid} is also used by {seen[rid]}")
                seen[rid] = path
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


def rule_files(folder: Path) -> list[Path]:
    """The rule files under a folder (or the file itself), in a stable order."""
    if folder.is_file():
        return [folder]
    files = [p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and p.name not in NOT_RULES]
    return sorted(files)


def load_rule_file(path: Path, builtin: bool = False) -> LoadedRule:
    data, lines = load_yaml(path)
    if not isinstance(data, dict):
        raise RuleError(path, 1, "a rule file must be a YAML mapping with `id`, `name`, `when`, ...")
    try:
        rule = Rule.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, path, lines) from None
    return LoadedRule(rule, path, lines, builtin)


def _first_error(exc: ValidationError, path: Path, lines: LineMap) -> RuleError:
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "list[", "Severity"))))
    name = ".".join(str(p) for p in loc) or "rule"
    kind = err["type"]
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind == "missing":
        text = f"`{name}` is required"
    elif kind == "extra_forbidden":
        known = ", ".join(Rule.model_fields) if len(loc) == 1 else "see the rule schema"
        text = f"`{name}` is not a rule field (known fields: {known})"
    elif kind in ("literal_error", "enum"):
        expected = err.get("ctx", {}).get("expected", "")
        text = f"`{name}` must be one of {expected.replace(' or ', ', ').replace(chr(39), '')}"
    elif kind == "value_error" and not loc:
        text = msg
    else:
        text = f"`{name}` {msg[0].lower() + msg[1:] if msg else 'is invalid'}"
    return RuleError(path, lines.line(loc), text)
