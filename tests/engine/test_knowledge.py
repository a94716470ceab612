"""Knowledge entries: every built-in one is complete, and the check catches each way one can fall short."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.knowledge import NEEDS, SECTIONS, Detection, check_entry, load_entries, parse_entry
from advisor.errors import RuleError

ENTRIES = load_entries()

#: the areas the knowledge base must cover (issue 5)
AREAS = {
    "data loading", "host syncs", "launch overhead", "precision and tensor cores", "memory layout",
    "optimizer implementation", "memory and allocator", "torch.compile", "distributed communication",
    "stragglers", "CPU threading",
}

GOOD = """---
id: {id}
title: A title
category: data loading
summary: One sentence.
---

## What it looks like

Long waits.

## Why it slows training

Because.

## How to fix

```python
loader = DataLoader(ds, num_workers=4)
```

## Expected gain

Half, per [the docs](https://pytorch.org/docs/stable/data.html).

## References

- [DataLoader](https://pytorch.org/docs/stable/data.html)
"""


def _messages(text: str, name: str = "sample") -> list[str]:
    return [p.message for p in check_entry(parse_entry(text, Path(f"knowledge/{name}.md")))]


def test_builtin_entries_are_complete() -> None:
    problems = [str(p) for entry in ENTRIES.values() for p in check_entry(entry)]
    assert problems == []


def test_the_knowledge_base_is_broad() -> None:
    assert len(ENTRIES) >= 33
    categories = {entry.category for entry in ENTRIES.values()}
    assert AREAS <= categories, AREAS - categories
    for entry in ENTRIES.values():
        assert list(entry.sections)[: len(SECTIONS)] == list(SECTIONS), entry.id
        assert all(link.startswith("https://") for link in entry.links("References")), entry.id


def test_a_good_entry_passes() -> None:
    assert _messages(GOOD.format(id="sample")) == []


@pytest.mark.parametrize("section", SECTIONS)
def test_a_missing_section_fails(section: str) -> None:
    text = GOOD.format(id="sample").replace(f"## {section}\n", "## Something else\n")
    assert f"section `## {section}` is missing or empty" in _messages(text)


def test_the_fix_needs_code_the_gain_a_source_the_references_links() -> None:
    text = GOOD.format(id="sample")
    text = text.replace("```python\nloader = DataLoader(ds, num_workers=4)\n```", "Use workers.")
    text = text.replace("Half, per [the docs](https://pytorch.org/docs/stable/data.html).", "Half.")
    text = text.replace("- [DataLoader](https://pytorch.org/docs/stable/data.html)", "- the DataLoader docs")
    messages = _messages(text)
    assert "`## How to fix` needs a fenced code snippet" in messages
    assert any(m.startswith("`## Expected gain` must say where its number comes from") for m in messages)
    assert "`## References` needs links to primary documentation" in messages


def test_a_bundled_example_is_a_source_for_the_gain() -> None:
    text = GOOD.format(id="sample").replace("per [the docs](https://pytorch.org/docs/stable/data.html)",
                                            "as examples/slow_dataloader.py measures")
    assert _messages(text) == []


def test_id_front_matter_and_order() -> None:
    assert "`id: other` must match the file name (sample.md)" in _messages(GOOD.format(id="other"))
    no_title = GOOD.format(id="sample").replace("title: A title\n", "")
    assert "the front matter needs `title`" in _messages(no_title)
    swapped = GOOD.format(id="sample").replace("## What it looks like", "## TMP").replace(
        "## Why it slows training", "## What it looks like").replace("## TMP", "## Why it slows training")
    assert any(m.startswith("sections must come in this order") for m in _messages(swapped))
    with pytest.raises(RuleError, match="starts with YAML front matter"):
        parse_entry("# no front matter\n", Path("knowledge/x.md"))


def test_headings_inside_code_do_not_count() -> None:
    text = GOOD.format(id="sample").replace("loader = DataLoader(ds, num_workers=4)", "## References\nx = 1")
    entry = parse_entry(text, Path("knowledge/sample.md"))
    assert "x = 1" in entry.sections["How to fix"]
    assert check_entry(entry) == []


def test_section_lines_point_into_the_file() -> None:
    entry = ENTRIES["dataloader-starvation"]
    lines = Path(entry.path).read_text().splitlines()
    for section in SECTIONS:
        assert lines[entry.lines[section] - 1] == f"## {section}"


MARKER = """detection:
  needs: [gpu, ranks]
  rule: GPU011
  why: a CPU run has no kernel launches to count
"""


def _marked(marker: str) -> str:
    return GOOD.format(id="sample").replace("summary: One sentence.\n", "summary: One sentence.\n" + marker)


def test_a_detection_marker_is_read() -> None:
    entry = parse_entry(_marked(MARKER), Path("knowledge/sample.md"))
    assert check_entry(entry) == []
    assert entry.detection == Detection(("gpu", "ranks"), "GPU011", "a CPU run has no kernel launches to count")
    assert entry.detection.needs_text == f"{NEEDS['gpu']} and {NEEDS['ranks']}"


def test_a_detection_marker_with_an_unknown_word_names_its_line_and_the_closest_word() -> None:
    text = _marked(MARKER.replace("[gpu, ranks]", "[gpu, rank]"))
    (problem,) = check_entry(parse_entry(text, Path("knowledge/sample.md")))
    assert problem.line == text.splitlines().index("  needs: [gpu, rank]") + 1
    assert problem.message == "`detection.needs`: unknown word `rank`; did you mean `ranks`?"


def test_a_detection_marker_needs_every_field() -> None:
    text = _marked("detection:\n  needs: []\n  rule: ' '\n  wy: typo\n")
    messages = _messages(text)
    assert "`detection.wy` is not a field; the fields are needs, rule, why" in messages
    assert any(m.startswith("`detection.needs` must be a list of one or more of: gpu, nsys, ncu") for m in messages)
    assert any(m.startswith("`detection.rule` must say the rule that will use the data") for m in messages)
    assert any(m.startswith("`detection.why` must say why the data at hand cannot show") for m in messages)
    assert len(messages) == 4
    assert _messages(_marked("detection: gpu\n")) == ["`detection` must be a mapping with needs, rule and why"]

