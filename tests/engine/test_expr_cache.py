"""Checked expression trees kept between processes: a hit is the tree a parse gives, a broken text is never kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.errors import ExpressionError
from advisor.expr import expression
from advisor.expr.expression import Environment, compile_expression
from advisor.yamlio import yaml_cache

SOURCES = [
    'gpu.idle_fraction > 0.3 and steps.count >= 3',
    'any(k.share > 0.5 for k in kernels.top if k.name != "x")',
    '[1, 2.5, "a", null, true][0] if has(a.b) else -coalesce(c, 2) ** 2',
    'count(s for s in syncs.sites if matches(s.name, "item|_local_scalar_dense")) > 0',
]


def _new_process(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Save the caches as an exiting process does; then start as a new process: nothing in memory."""
    for cache in yaml_cache._named.values():
        cache.save()
    monkeypatch.setenv(yaml_cache.CACHE_ENV, str(folder))
    monkeypatch.setattr(yaml_cache, "_named", {})
    monkeypatch.setattr(expression, "_COMPILED", {})


def test_a_second_process_takes_the_checked_trees_without_parsing(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _new_process(monkeypatch, tmp_path)
    first = [compile_expression(s) for s in SOURCES]
    _new_process(monkeypatch, tmp_path)
    monkeypatch.setattr(expression, "parse", lambda source: pytest.fail(f"parsed {source!r} again"))
    second = [compile_expression(s) for s in SOURCES]
    assert [e.tree for e in second] == [e.tree for e in first]
    env = Environment({"gpu.idle_fraction": 0.5, "steps.count": 4, "kernels.top": [{"share": 0.6, "name": "k"}],
                       "c": 3, "syncs.sites": [{"name": "aten::item"}]})
    assert [e.evaluate(env) for e in second[:2]] == [True, True]
    assert second[2].evaluate(env) == -9 and second[3].evaluate(env) is True


def test_a_broken_expression_fails_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(2):
        _new_process(monkeypatch, tmp_path)
        with pytest.raises(ExpressionError):
            compile_expression("2 ** 100000 > a")  # a constant part that is too large: caught when checked
        with pytest.raises(ExpressionError):
            compile_expression("a >")
