"""Each diagnosis as one story across the stages: what / where (framework) → how (system) → why (kernel).

:func:`chain` gives a diagnosis three parts, one per stage, each with the
stage and tool, and one of

- ``found``: the diagnosis itself (its own stage) or a deeper stage's
  diagnosis folded into it (``refinements`` in diagnoses.json), with its
  rule, texts, evidence rows and the stage's raw files;
- ``examined``: the stage ran, and none of its rules explains this
  diagnosis further;
- ``not examined``: the stage did not run; why (from the trail), and the
  command that would run it and add it to this run.

:func:`combined_line` is the sentence on what all the fixes give back together.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.engine.story import STAGE_ORDER, STAGE_TOOLS
from advisor.units import fmt_ms, fmt_pct

__all__ = ["PARTS", "chain", "combined_line"]

#: the question each stage answers about a diagnosis
PARTS = {"framework": "What / where", "system": "How", "kernel": "Why"}
_ASKS = {"system": "nsys", "kernel": "ncu"}


def _own(diag: Mapping[str, Any], files: list[str]) -> dict[str, Any]:
    return {"rule_id": diag.get("rule_id"), "name": diag.get("name"), "what": diag.get("what", ""),
            "where": diag.get("where", ""), "evidence": [], "files": files, "own": True}


def _manual_command(stage: str, meta: Mapping[str, Any], run_dir: str) -> str | None:
    """A command that would run a stage the trail has none for, and merge its output into this run."""
    program = meta.get("script_command")
    if not program:
        return None
    here = shlex.quote(run_dir)
    if stage == "system":
        out = f"{run_dir}/system/report"
        return (f"nsys profile --trace=nvtx,osrt,cuda --sample=none --cpuctxsw=none --output={shlex.quote(out)} "
                f"{shlex.join(program)} && advisor analyze {here} {shlex.quote(out + '.nsys-rep')}")
    if stage == "kernel":
        out = f"{run_dir}/kernel/report"
        return (f"ncu --set full -o {shlex.quote(out)} {shlex.join(program)} && advisor analyze {here} "
                f"{shlex.quote(out + '.ncu-rep')}")
    return None


def _not_examined(stage: str, entry: Mapping[str, Any] | None, diag: Mapping[str, Any],
                  meta: Mapping[str, Any], run_dir: str) -> dict[str, Any]:
    tool = STAGE_TOOLS[stage]
    if entry is None:
        reason = f"{tool} did not run on this run"
    elif entry.get("status") == "skipped":
        reason = f"skipped: {str(entry.get('reason', '')).split(' (needed: ', 1)[0]}"
    elif diag.get("escalate") == _ASKS.get(stage):
        reason = f"{tool} was not run: {entry.get('reason', '')}"
    else:
        reason = f"this diagnosis does not ask for {tool}, and no other stage led to it"
    command = (entry or {}).get("command") or _manual_command(stage, meta, run_dir)
    return {"status": "not examined", "reason": reason, "command": command}


#: the Nsight Compute figures a kernel part shows first: the table keeps its first columns when the page is narrow
#: (the model's bytes and FLOPs beside the measured ones come right after the duration: they are what the
#: framework stage's roofline asked the kernel stage to confirm; bytes first, since reports nearly always
#: measure DRAM bytes and often no FLOPs; empty columns are left out)
_KERNEL_FIRST = ("function", "bound", "duration_us", "model_mb", "ncu_mb", "bytes_ratio", "model_gflop", "ncu_gflop",
                 "flop_ratio", "sm_pct", "mem_pct", "dram_pct", "achieved_occ_pct",
                 "theoretical_occ_pct", "occ_limiter", "top_stall", "excess_sector_fraction", "fp64_share",
                 "type", "rule", "message", "speedup", "op", "share", "model_op")


def _kernel_first(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        first = {k: row[k] for k in _KERNEL_FIRST if k in row}
        out.append({**first, **{k: v for k, v in row.items() if k not in first}})
    return out


def _found(part: Mapping[str, Any], section: Mapping[str, Any], files: list[str],
           units: Mapping[str, str]) -> dict[str, Any]:
    rows = [{"name": k, "value": v, "unit": units.get(k, "")} for k, v in (section.get("facts") or {}).items()]
    extra = {k: v for k, v in section.items() if k not in part}
    if section.get("stage") == "kernel" and extra.get("evidence"):
        extra["evidence"] = _kernel_first(extra["evidence"])
    return {**part, **extra, "status": "found", "own": False, "files": section.get("files") or files,
            "fact_rows": rows}


def chain(diag: Mapping[str, Any], trail: Sequence[Mapping[str, Any]], meta: Mapping[str, Any],
          run_dir: str, units: Mapping[str, str] | None = None, gpu: bool | None = None) -> list[dict[str, Any]]:
    """The three parts of one diagnosis's story, in stage order; a deeper stage's part has ``fact_rows``
    (name, value, unit) for its numbers. ``gpu=False`` (the trace has no GPU activity): no kernel to examine."""
    by_stage = {str(e.get("stage")): e for e in trail}
    sections: dict[str, list[Mapping[str, Any]]] = {}
    for section in diag.get("refinements") or []:
        sections.setdefault(str(section.get("stage")), []).append(section)
    parts = []
    for stage in STAGE_ORDER:
        entry = by_stage.get(stage)
        files = [str(a) for a in (entry or {}).get("artifacts") or []]
        part: dict[str, Any] = {"stage": stage, "tool": STAGE_TOOLS[stage], "part": PARTS[stage]}
        if stage == diag.get("stage"):
            part.update(status="found", **_own(diag, files))
        elif stage in sections:  # one part per deeper diagnosis folded in (two system rules may explain it)
            parts += [_found(part, section, files, units or {}) for section in sections[stage]]
            continue
        elif entry is not None and entry.get("status") == "ran":
            part.update(status="examined", reason=f"{STAGE_TOOLS[stage]} ran; none of its rules explains this "
                                                  "diagnosis further", files=files)
        elif STAGE_ORDER.index(stage) < STAGE_ORDER.index(str(diag.get("stage", "framework"))):
            part.update(status="examined", reason=f"{STAGE_TOOLS[stage]} ran; none of its rules names this problem",
                        files=files)
        elif stage == "kernel" and gpu is False:
            part.update(status="not examined", command=None,
                        reason="the run launched no GPU kernels, so there is no kernel to examine")
        else:
            part.update(_not_examined(stage, entry, diag, meta, run_dir))
        parts.append(part)
    return parts


def combined_line(verdict: Mapping[str, Any], diagnoses: Sequence[Mapping[str, Any]],
                  step_ms: float | None) -> str | None:
    """``All 3 fixes together: 61.2 ms per step (65% of the step), overlaps counted once.``; None for fewer
    than two estimated gains (one fix's own gain says it all)."""
    combined = verdict.get("combined_impact_ms")
    estimated = [d for d in diagnoses if isinstance(d.get("impact_ms"), (int, float))]
    if not isinstance(combined, (int, float)) or len(estimated) < 2:
        return None
    share = f" ({fmt_pct(combined / step_ms)} of the step)" if step_ms else ""
    total = sum(float(d["impact_ms"]) for d in estimated)
    overlap = (f"; their own gains add up to {fmt_ms(total)}, the overlap is counted once"
               if total > combined + 1e-6 else "")
    return f"All {len(estimated)} fixes together: {fmt_ms(combined)} per step{share}{overlap}."
