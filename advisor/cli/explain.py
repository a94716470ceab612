"""The text of ``advisor rules explain ID``: a rule, the facts it reads, and its knowledge entry."""

from __future__ import annotations

import textwrap
from collections import Counter

from advisor.engine.rulebook import LoadedRule

__all__ = ["explain_rule"]

WIDTH = 100


def _block(label: str, text: str) -> list[str]:
    text = " ".join(text.split())
    if not text:
        return []
    return textwrap.wrap(text, WIDTH, initial_indent=f"{label:<10}", subsequent_indent=" " * 10)


def _facts_read(loaded: LoadedRule) -> list[str]:
    from advisor.analyze.registry import all_specs, registered
    from advisor.engine.shapes import Catalog

    owner = {spec.name: a for a in registered() for spec in a.provides}
    catalog = Catalog(all_specs())
    specs = {}
    for name in sorted(loaded.rule.compiled().references()):
        found = catalog.resolve(tuple(name.split(".")))
        if found is not None:
            specs[found[0].name] = found[0]
    if not specs:
        return ["  (none)"]
    width = max(len(n) for n in specs)
    lines = []
    for name, spec in specs.items():
        source = owner[name]
        lines.append(f"  {name:<{width}}  {spec.unit:<8}  {spec.meaning} [{source.stage}/{source.name}]")
        lines.append(f"  {'':<{width}}  {'':<8}  computed in {source.code}")
    return lines


def _knowledge(loaded: LoadedRule) -> list[str]:
    from advisor.knowledge import parse_entry
    from advisor.resources import knowledge_dir

    lines = []
    for entry_id in loaded.rule.knowledge:
        path = knowledge_dir() / f"{entry_id}.md"
        if not path.is_file():
            lines.append(f"{entry_id}: (no entry knowledge/{entry_id}.md)")
            continue
        entry = parse_entry(path.read_text(encoding="utf-8"), path)
        lines += [f"{entry.title} ({entry_id}, {entry.category})", *textwrap.wrap(entry.summary, WIDTH), ""]
        for section, body in entry.sections.items():
            lines += [f"## {section}", "", body, ""]
    return lines


def explain_rule(loaded: LoadedRule, shown_path: str) -> str:
    from advisor.engine.rule_index import severity_text

    rule = loaded.rule
    origin = "built-in" if loaded.builtin else "your rule"
    out = [f"{rule.id} {rule.name}", f"{rule.status}, {rule.stage} stage; {shown_path} ({origin})", ""]
    if rule.status == "disabled":
        out.append("This rule is disabled by the file above.")
        return "\n".join(out)
    out += _block("When", rule.when)
    out += _block("Severity", severity_text(rule))
    if rule.impact is not None:
        out += _block("Impact", f"{rule.impact.ms_per_step} ms per step ({rule.impact.confidence} confidence): "
                                f"{rule.impact.basis}")
    if rule.impact is not None and rule.impact.phase:
        out += _block("Phase", f"{rule.impact.phase}: the gain comes from that phase, and is combined with the "
                               "other gains of that phase")
    if rule.escalate:
        out += _block("Next", f"escalates to {rule.escalate}")
    if rule.refines:
        out += _block("Refines", "; ".join(f"{r.rule} when {r.when}" for r in rule.refines)
                      + ": shown inside that diagnosis, not as its own")
    out.append("")
    for name in ("what", "where", "why", "fix"):
        out += _block(name.capitalize(), getattr(rule, name))
    if rule.fix_code.strip():
        out += ["", textwrap.indent(rule.fix_code.rstrip(), "    ")]
    out += ["", "Facts it reads:", *_facts_read(loaded)]
    counts = Counter(case.expect for case in rule.tests)
    out += ["", f"Test cases: {len(rule.tests)} ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))})"]
    if rule.references:
        out += ["", "References:", *(f"  {url}" for url in rule.references)]
    knowledge = _knowledge(loaded)
    if knowledge:
        out += ["", "Knowledge:", "", *knowledge]
    return "\n".join(out).rstrip() + "\n"
