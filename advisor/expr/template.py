"""Rule text templates: plain text with ``{{ expression }}`` holes.

The holes use the rule expression language (see :mod:`advisor.expr.expression`),
so a text can say ``{{ ms(phases.dataloader.ms) }}`` or
``{{ pct(ops.top[0].share) }}`` and nothing else: no loops, no attribute
access, no Python. A hole whose fact is absent renders as ``n/a``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from advisor.errors import ExpressionError
from advisor.expr.expression import Absent, Environment, Expression, compile_expression

__all__ = ["Template"]

_HOLE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
MAX_HOLES = 50


class Template:
    def __init__(self, text: str) -> None:
        self.text = text
        self.parts: list[str | Expression] = []
        pos = 0
        for m in _HOLE.finditer(text):
            self.parts.append(text[pos:m.start()])
            try:
                self.parts.append(compile_expression(m.group(1).strip()))
            except ExpressionError as exc:
                raise ExpressionError(f"`{{{{{m.group(1)}}}}}`: {exc.message}", exc.source, exc.position) from None
            pos = m.end()
        self.parts.append(text[pos:])
        if sum(isinstance(p, Expression) for p in self.parts) > MAX_HOLES:
            raise ExpressionError(f"a text has more than {MAX_HOLES} {{{{ }}}} holes")

    def expressions(self) -> list[Expression]:
        """The expressions in the holes, in order."""
        return [p for p in self.parts if isinstance(p, Expression)]

    def references(self) -> set[str]:
        out: set[str] = set()
        for part in self.parts:
            if isinstance(part, Expression):
                out |= part.references()
        return out

    def render(self, env: Environment | Mapping[str, Any], *, strict: bool = False) -> str:
        """The text with every hole filled in.

        A hole whose fact is absent shows ``n/a``. A hole that fails on this
        run's values (a type error) also shows ``n/a`` in a report, so one bad
        text never hides a diagnosis; with ``strict`` (rule test cases) it raises.
        """
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            try:
                value = part.evaluate(env)
            except Absent:
                value = None
            except ExpressionError:
                if strict:
                    raise
                value = None
            out.append(_show(value))
        return "".join(out).strip()


def _show(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, list):
        return ", ".join(_show(v) for v in value[:10])
    return str(value)
