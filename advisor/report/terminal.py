"""The short card printed after every run: verdict, why, what to do next, the step as a tree.

Every string in it comes from a run (file names, op names, messages), so it goes to Rich as text, never
markup (:mod:`advisor.messages`).

The path to the full report comes last, so it is the line left on screen.
"""

from __future__ import annotations

import textwrap
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text
from rich.tree import Tree

from advisor.messages import plain
from advisor.report.verdict import untrusted
from advisor.units import fmt_ms, fmt_pct

__all__ = ["print_card"]

_STYLE = {"slow": "bold red", "healthy": "bold green", "inconclusive": "bold yellow"}
_SEVERITY = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}
_BAR = 24


def _phase_tree(facts: dict[str, Any]) -> Tree | None:
    table = facts.get("phases.table")
    step = facts.get("steps.time_ms")
    if not table or not step:
        return None
    count = facts.get("steps.count") or 0
    label = f"step {fmt_ms(step)}" + (f" (mean of {count})" if count else " (whole trace)")
    if facts.get("ranks.count"):
        label += f", rank {facts.get('trace.rank', 0)} of {facts['ranks.count']}"
    tree = Tree(plain(label, "bold"))
    inference = facts.get("workload.kind") == "inference"
    for row in table:
        share = row.get("share") or 0.0
        if inference and row["phase"] in ("backward", "optimizer") and not row.get("ms"):
            continue  # an inference loop has neither; a row of zeros says nothing
        bar = "█" * max(int(round(share * _BAR)), 1 if share > 0 else 0)
        line = plain(f"{row['phase']:<11}{fmt_ms(row['ms']):>10} {fmt_pct(share):>5} ")
        line.append(bar, style="cyan")
        tree.add(line)
    return tree


def print_card(data: dict[str, Any], report_path: str, console: Console | None = None) -> None:
    console = console or Console(stderr=False, highlight=False)
    verdict = data.get("verdict", {})
    status = verdict.get("status", "unknown")
    parts: list[Any] = [Text.assemble((status.upper() + "  ", _STYLE.get(status, "bold")), verdict.get("headline", ""))]
    diagnoses = data.get("diagnoses", [])
    listed = diagnoses[1:4]
    if diagnoses and status != "inconclusive":
        top = diagnoses[0]
        if top.get("where"):
            parts.append(Text.assemble(("Where: ", "bold"), top["where"]))
        if top.get("why"):
            parts.append(Text.assemble(("Why: ", "bold"), _first_sentence(top["why"])))
        gain = f" (gives back ~{fmt_ms(top['impact_ms'])} per step)" if top.get("impact_ms") else ""
        if top.get("gain_source") == "trial":  # measured on the script's own steps, not estimated
            gain = f" (gave back {fmt_ms(top['impact_ms'] or 0)} per step when tried)"
        parts.append(Text.assemble(("Do next: ", "bold"), _first_sentence(top.get("fix", "")) + gain))
        parts += _chain_lines(top)
    else:  # the data cannot support a verdict: what fired is listed, with no advice to act on
        listed = diagnoses[:4]
    for d in listed:
        parts.append(Text.assemble(
            ("  • ", "dim"), (f"{d['severity']:<8}", _SEVERITY.get(d["severity"], "")),
            f"{d['rule_id']} {textwrap.shorten(_first_sentence(d['what']), 100, placeholder=' ...')}",
        ))
    combined = (data.get("summary") or {}).get("combined")
    if combined and status != "inconclusive":
        parts.append(plain(combined))
    for note in verdict.get("missing", [])[:2]:
        parts.append(plain(f"Note: {note}", "yellow"))
    title = data.get("run", {}).get("title", "advisor")
    console.print(Panel(Group(*parts), title=plain(f"advisor · {title}"), title_align="left", expand=False))
    facts = data.get("facts", {})
    tree = None if untrusted(facts) else _phase_tree(facts)  # a step split from data largely missing is not shown
    if tree is not None:
        console.print(tree)
    for note in ("loop", "profiler"):
        text = (data.get("summary") or {}).get(note)
        if text:
            console.print(plain(text, "dim"))
    stages = _stages_line((data.get("trail") or {}).get("stages", []))
    if stages is not None:
        console.print(stages)
    console.print(Text.assemble(("Report: ", "bold"), report_path))


def _chain_lines(diag: dict[str, Any]) -> list[Text]:
    """The deeper parts of the top diagnosis's story, one line each: found (with the rule), examined, or not."""
    lines = []
    for part in diag.get("chain") or []:
        if part.get("own") or part["stage"] == "framework":
            continue
        label = f"  {part['part']} ({part['tool']}"
        if part["status"] == "found":  # its where says how in few words; its what is in the report
            text = part.get("where") or _first_sentence(part.get("what", ""))
            lines.append(Text.assemble((f"{label}, {part['rule_id']}): ", "bold"),
                                       textwrap.shorten(text, 100, placeholder=" ...")))
        elif part["status"] == "examined":
            lines.append(Text.assemble((f"{label}): ", "bold"), ("examined, nothing further", "dim")))
        else:
            why = "the report has the command" if part.get("command") else str(part.get("reason", "")).split(",")[0]
            why = f" ({why})"
            lines.append(Text.assemble((f"{label}): ", "bold"), (f"not examined{why}", "dim")))
    return lines


def _stages_line(trail: list[dict[str, Any]]) -> Text | None:
    """``Stages: framework → system; skipped: kernel (why)``, when the workflow went past the framework."""
    ran = [e["stage"] for e in trail if e["status"] == "ran" and e["stage"] != "report"]
    skipped = [e for e in trail if e["status"] == "skipped"]
    if len(ran) < 2 and not skipped:
        return None
    line = Text.assemble(("Stages: ", "bold"), " → ".join(ran))
    for entry in skipped:
        reason = entry.get("reason", "").split(" (needed: ", 1)[0].split("; ", 1)[0]
        line.append(f"; skipped {entry['stage']}: {reason[:120]}", style="yellow")
    if skipped:
        line.append(" (the report has the command to run it)", style="yellow")
    return line


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]
