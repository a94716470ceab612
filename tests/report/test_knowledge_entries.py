"""Knowledge entries load with their front matter and the five fixed sections."""

from __future__ import annotations

import pytest

from advisor.errors import InputError, RuleError
from advisor.knowledge import SECTIONS, load_entry, parse_entry
from advisor.resources import knowledge_dir

ENTRIES = sorted(p.stem for p in knowledge_dir().glob("*.md"))


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_builtin_entry_has_summary_and_every_section(entry_id: str) -> None:
    entry = load_entry(entry_id)
    assert entry.id == entry_id and entry.title and entry.summary
    assert list(entry.sections) == list(SECTIONS)
    assert all(entry.sections[name].strip() for name in SECTIONS)
    assert "```" in entry.sections["How to fix"]  # a code snippet (python, or bash for launch settings)


def test_heading_inside_a_code_block_is_not_a_section() -> None:
    entry = parse_entry("---\nid: x\ntitle: X\nsummary: s\n---\n\n## How to fix\n\n```python\n## not a heading\n```\n")
    assert list(entry.sections) == ["How to fix"]
    assert "## not a heading" in entry.sections["How to fix"]


def test_unknown_or_malformed_entries_say_which_file() -> None:
    with pytest.raises(InputError, match="no-such-entry.md: no such knowledge entry"):
        load_entry("no-such-entry")
    with pytest.raises(RuleError, match="front matter"):
        parse_entry("# no front matter\n")
