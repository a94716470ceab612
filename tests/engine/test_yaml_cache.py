"""The cache of parsed rule files: a hit gives what a parse gives, an edit or a problem is never served from it."""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest

from advisor.engine.rulebook import RuleBook, load_rule_file
from advisor.errors import RuleError
from advisor.yamlio import yaml_cache
from advisor.yamlio.safe_yaml import parse_yaml
from rulefiles import line_of, rule_data, write_rule



@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh process-wide cache in tmp_path, as a new process would have."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(yaml_cache.CACHE_ENV, str(folder))
    monkeypatch.setattr(yaml_cache, "_shared", None)
    return folder


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Save the cache as the exiting process would, and forget it as the next process starts without it."""
    yaml_cache.shared_cache().save()
    monkeypatch.setattr(yaml_cache, "_shared", None)


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = yaml_cache.YamlCache.get_or_parse

    def counting(self, text, parse):  # noqa: ANN001, ANN202
        if self is not yaml_cache._shared:  # the other caches (expressions, rendered texts) are not YAML parses
            return real(self, text, parse)

        def counted():  # noqa: ANN202
            calls[0] += 1
            return parse()
        return real(self, text, counted)

    monkeypatch.setattr(yaml_cache.YamlCache, "get_or_parse", counting)
    return calls


def test_a_second_run_reads_the_builtin_rules_from_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = RuleBook.load([], env=False)
    _new_process(monkeypatch)
    assert len(list(cache.glob("yaml-py*.marshal"))) == 1
    parses = _count_parses(monkeypatch)
    second = RuleBook.load([], env=False)
    assert parses[0] == 0
    assert list(second.rules) == list(first.rules)
    for rid, loaded in first.rules.items():
        again = second.rules[rid]
        assert again.rule == loaded.rule
        assert again.lines.lines == loaded.lines.lines  # file:line in errors and lint stays right


def test_an_edited_file_is_parsed_again(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rule = write_rule(tmp_path, when="phases.dataloader.share >= 0.5")
    assert load_rule_file(rule).rule.when.endswith("0.5")
    _new_process(monkeypatch)
    write_rule(tmp_path, when="phases.dataloader.share >= 0.25")
    parses = _count_parses(monkeypatch)
    assert load_rule_file(rule).rule.when.endswith("0.25")
    assert parses[0] == 1


def test_a_file_with_a_problem_is_never_cached(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rule = write_rule(tmp_path)
    rule.write_text(rule.read_text() + "extra: &anchor 1\n")
    for _ in range(2):
        with pytest.raises(RuleError, match="anchors and aliases") as caught:
            load_rule_file(rule)
        assert caught.value.line == line_of(rule, "extra")
        _new_process(monkeypatch)
    assert not list(cache.glob("*.marshal"))  # nothing was parsed cleanly, so nothing was written


def test_a_damaged_cache_is_ignored_and_replaced(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    RuleBook.load([], env=False)
    _new_process(monkeypatch)
    (stored,) = cache.glob("*.marshal")
    stored.write_bytes(b"\x00not marshal data")
    assert "DL001" in RuleBook.load([], env=False)
    _new_process(monkeypatch)
    assert isinstance(marshal.loads(stored.read_bytes()), dict)


def test_an_unwritable_cache_folder_only_costs_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv(yaml_cache.CACHE_ENV, str(blocker / "cache"))
    monkeypatch.setattr(yaml_cache, "_shared", None)
    assert "DL001" in RuleBook.load([], env=False)
    _new_process(monkeypatch)
    assert "DL001" in RuleBook.load([], env=False)


def test_an_empty_setting_turns_the_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(yaml_cache.CACHE_ENV, "")
    monkeypatch.setattr(yaml_cache, "_shared", None)
    assert yaml_cache.shared_cache().path is None
    assert "DL001" in RuleBook.load([], env=False)


def test_cached_values_are_the_parsed_values(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What YAML can hold in a rule survives the round trip: NaN, infinities, nested lists, unicode."""
    text = "a: .nan\nb: -.inf\nc: [1, [2.5, null, true]]\nd: 'µs ≥ 5'\n"
    store = yaml_cache.shared_cache()
    parse = lambda: (lambda d, lines: (d, lines.lines))(*parse_yaml(text))  # noqa: E731
    fresh, lines = store.get_or_parse(text, parse)
    _new_process(monkeypatch)
    again, lines_again = yaml_cache.shared_cache().get_or_parse(text, lambda: pytest.fail("parsed again"))
    assert again["a"] != again["a"] and again["b"] == float("-inf")  # NaN is NaN
    assert again["c"] == fresh["c"] and again["d"] == "µs ≥ 5"
    assert lines_again == lines

