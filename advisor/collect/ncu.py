"""The kernel stage's collector: profile only the hot kernels with Nsight Compute.

The framework stage found which kernels hold the GPU time (fact
``kernels.top``: name, ms, share, calls_per_step, op, site, file, line,
module). This module

1. picks the few worth a closer look (:func:`select_kernels`),
2. builds, for each, an ``ncu`` command that profiles just that kernel
   (:func:`build_command`): the kernel name as a regex on the right name base,
   ``--launch-skip`` past the warm-up and autotuning steps, a small
   ``--launch-count``, the sections that answer "why is it slow", and
   optionally an NVTX filter on one of the collector's phase ranges;
3. runs them around the user's script, which the collector's child runs in
   ``nvtx`` mode and stops after the profiled steps (:func:`run_kernel_stage`),
   leaving ``kernel/<nn>-<function>.ncu-rep`` files in the run directory.

When it cannot run (no GPU, no ncu, profiling not permitted) the stage is
*skipped* with the reason and the commands to run by hand; it never fails the
run. It interprets nothing: :mod:`advisor.load.ncu_report` reads the reports.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from advisor.collect.config import CollectorConfig
from advisor.collect.framework import child_command
from advisor.tools.ncu import classify_failure, find_ncu, gpu_status, ncu_options
from advisor.tools.ncu_names import kernel_filter, kernel_identifier
from advisor.naming import CAPTURE_RANGE, PHASE_NAMES

__all__ = ["KernelStageResult", "KernelTarget", "build_command", "run_kernel_stage",
           "select_kernels", "SECTION_PLANS"]

#: Sections per question. "diagnose" answers what the kernel analyzers ask: bound class, roofline,
#: occupancy and its limiter, waves, stall reasons, coalescing and bank conflicts (SourceCounters), fp64.
SECTION_PLANS: dict[str, tuple[str, ...]] = {
    "overview": ("SpeedOfLight", "LaunchStats", "Occupancy"),
    "diagnose": ("SpeedOfLight", "SpeedOfLight_RooflineChart", "LaunchStats", "Occupancy",
                 "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
                 "SchedulerStats", "WarpStateStats", "InstructionStats", "SourceCounters"),
    "memory": ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis",
               "MemoryWorkloadAnalysis_Tables", "SourceCounters"),
}
#: Steps before the kernel is profiled: past the framework collector's default wait, where cuDNN/cuBLAS
#: autotuning and lazy initialisation launch extra kernels.
SKIP_STEPS = 5
@dataclass
class KernelTarget:
    """One kernel to profile, with where the framework stage saw it."""

    name: str
    share: float = 0.0
    ms: float = 0.0
    calls_per_step: float = 1.0
    op: str = ""
    site: str = ""
    file: str = ""
    line: int = -1
    module: str = ""
    #: the diagnoses that asked for this kernel (empty: chosen for its time)
    asked_by: list[str] = field(default_factory=list)

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> KernelTarget:
        known = cls.__dataclass_fields__
        values = {k: row[k] for k in known if k in row and row[k] is not None}
        return cls(**values)


def select_kernels(kernels_top: Sequence[Mapping[str, Any]], limit: int = 3, min_share: float = 0.05,
                   cover: float = 0.8, asked: Sequence[tuple[str, str]] = (),
                   candidates: Sequence[Mapping[str, Any]] = ()) -> list[KernelTarget]:
    """At most ``limit`` kernels to profile, in this order:

    1. the kernels a diagnosis names (``asked``: (kernel, rule id) pairs, in the diagnoses' rank order), each
       recording which diagnoses asked for it (``asked_by``): the kernel stage answers their question;
    2. ``candidates`` (``roofline.ncu_candidates``), in their own order (the time lost to the roofline);
    3. the kernels with the most GPU time (``kernels_top``), each at least ``min_share`` of it, until the
       chosen ones cover ``cover`` of it.
    """
    by_name = {str(r.get("name")): r for r in [*candidates, *kernels_top] if r.get("name")}
    chosen: dict[str, KernelTarget] = {}
    for name, rule_id in asked:
        if name not in chosen and len(chosen) >= limit:
            continue
        target = chosen.setdefault(name, KernelTarget.from_record(by_name.get(name, {"name": name})))
        if rule_id not in target.asked_by:
            target.asked_by.append(rule_id)
    for row in candidates:
        if len(chosen) >= limit:
            break
        chosen.setdefault(str(row["name"]), KernelTarget.from_record(_with_share(row, kernels_top)))
    covered = sum(t.share for t in chosen.values())
    for row in sorted((r for r in kernels_top if (r.get("share") or 0) >= min_share),
                      key=lambda r: r.get("share") or 0, reverse=True):
        if len(chosen) >= limit or covered >= cover:
            break
        if str(row.get("name")) not in chosen:
            chosen[str(row["name"])] = KernelTarget.from_record(row)
            covered += float(row.get("share") or 0)
    return list(chosen.values())


def _with_share(row: Mapping[str, Any], kernels_top: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """A roofline candidate with its kernels.top figures (calls per step, share of GPU time) where it has one."""
    top = next((r for r in kernels_top if r.get("name") == row.get("name")), None)
    return {**row, **{k: v for k, v in (top or {}).items() if k not in row or row[k] is None}}


def build_command(target: KernelTarget, output: Path, program: Sequence[str], *, ncu: str = "ncu",
                  skip_steps: int = SKIP_STEPS, launch_count: int = 1, plan: str = "diagnose",
                  nvtx_phase: str | None = None) -> list[str]:
    """The ncu command that profiles ``launch_count`` launches of ``target`` after ``skip_steps`` steps.

    ``--launch-skip`` counts only launches that match the filters, so it is the kernel's calls per
    step times the steps to skip. With ``nvtx_phase`` (forward, backward, optimizer, dataloader, or
    "capture" for the collector's profiled window) only launches inside that NVTX range count.
    """
    base, regex = kernel_filter(target.name)
    skip = math.ceil(max(target.calls_per_step, 1.0) * skip_steps)
    cmd = [ncu, "--target-processes", "all", "--kernel-name-base", base, "--kernel-name", regex,
           "--launch-skip", str(skip), "--launch-count", str(launch_count)]
    if plan == "full":
        cmd += ["--set", "full"]
    else:
        for section in SECTION_PLANS[plan]:
            cmd += ["--section", section]
    if nvtx_phase:
        rng = CAPTURE_RANGE if nvtx_phase == "capture" else PHASE_NAMES[nvtx_phase]
        cmd += ["--nvtx", "--nvtx-include", f"{rng}/"]  # a trailing slash: a push/pop range
    cmd += ["--import-source", "no", "-f", "-o", str(output), *program]
    return cmd


def unknown_options(cmd: Sequence[str], ncu: str) -> list[str]:
    """The options of ``cmd`` (up to the program) that the installed ncu does not list in ``--help``."""
    accepted = ncu_options(ncu)
    program_at = cmd.index("-o") + 2 if "-o" in cmd else len(cmd)
    return [a for a in cmd[1:program_at] if a.startswith("-") and a not in accepted]


@dataclass
class KernelStageResult:
    """What the kernel stage did: ``ran`` or ``skipped``, why, the commands and the reports it left."""

    status: str
    reason: str = ""
    code: str = ""
    commands: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slug(target: KernelTarget, index: int) -> str:
    func = kernel_identifier(target.name)
    return f"{index:02d}-{re.sub(r'[^A-Za-z0-9_]+', '_', func)[:60]}"


def _child_config(stage_dir: Path, slug: str, script: Path, args: Sequence[str], target: KernelTarget,
                  skip_steps: int, launch_count: int) -> Path:
    """The collector's settings for one ncu run: NVTX phase ranges only, stop after the profiled steps."""
    steps = math.ceil(launch_count / max(target.calls_per_step, 1e-9)) + 1
    cfg = CollectorConfig(script=str(script), args=list(args), out_dir=str(stage_dir / slug), wait=skip_steps,
                          warmup=0, active=max(steps, 1), mode="nvtx", source_lines=False,
                          source_roots=[str(script.parent)])
    (stage_dir / slug).mkdir(parents=True, exist_ok=True)
    path = stage_dir / slug / "collector.json"
    path.write_text(cfg.to_json())
    return path


def run_kernel_stage(run_dir: Path, script: Path, args: Sequence[str], kernels: Sequence[KernelTarget], *,
                     ncu: str | None = None, skip_steps: int = SKIP_STEPS, launch_count: int = 1,
                     plan: str = "diagnose", nvtx_phase: str | None = None, timeout_s: float | None = None,
                     runner: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
                     gpus: Callable[[], tuple[int, str]] = gpu_status) -> KernelStageResult:
    """Profile each target kernel with ncu into ``run_dir/kernel``; never raises for a missing tool or GPU."""
    stage_dir = run_dir / "kernel"
    stage_dir.mkdir(parents=True, exist_ok=True)
    binary = find_ncu(ncu)
    plans = []
    for i, target in enumerate(kernels, 1):
        slug = _slug(target, i)
        config = _child_config(stage_dir, slug, script, args, target, skip_steps, launch_count)
        cmd = build_command(target, stage_dir / slug, child_command(config), ncu=binary or "ncu",
                            skip_steps=skip_steps, launch_count=launch_count, plan=plan, nvtx_phase=nvtx_phase)
        by_hand = build_command(target, Path(f"{slug}"), [Path(sys.executable).name, str(script), *args],
                                skip_steps=skip_steps, launch_count=launch_count, plan=plan)
        plans.append((slug, target, cmd, by_hand))
    result = KernelStageResult("skipped", targets=[asdict(t) for _, t, _, _ in plans],
                               commands=[shlex.join(p[3]) for p in plans])
    if not plans:
        result.reason, result.code = "no kernel holds enough of the GPU time to be worth profiling", "no-kernels"
    elif binary is None:
        result.reason, result.code = ("Nsight Compute (ncu) is not installed here; install it and run the "
                                      "commands below"), "no-ncu"
    else:
        count, why = gpus()
        if count == 0:
            result.reason, result.code = f"no GPU to profile on: {why}; run the commands below on a GPU machine", \
                "no-gpu"
        else:
            _run_all(plans, result, stage_dir, runner, timeout_s)
    (stage_dir / "stage.json").write_text(json.dumps(result.to_dict(), indent=2))
    return result


def _run_all(plans: list[tuple[str, KernelTarget, list[str], list[str]]], result: KernelStageResult,
             stage_dir: Path, runner: Callable[..., subprocess.CompletedProcess[str]],
             timeout_s: float | None) -> None:
    for slug, target, cmd, _ in plans:
        log = stage_dir / f"{slug}.log"
        try:
            proc = runner(cmd, capture_output=True, text=True, timeout=timeout_s)
            said, rc = (proc.stdout or "") + (proc.stderr or ""), proc.returncode
        except subprocess.TimeoutExpired as exc:
            said, rc = f"{exc.stdout or ''}{exc.stderr or ''}\n==ERROR== stopped after {timeout_s} s", 124
        log.write_text(said if isinstance(said, str) else said.decode(errors="replace"))
        report = stage_dir / f"{slug}.ncu-rep"
        if report.exists():
            result.artifacts.append(str(report.relative_to(stage_dir.parent)))
            continue
        failure = classify_failure(said, rc)
        result.notes.append(f"{target.name[:80]}: {failure.message}")
        if failure.code == "permission":  # the same for every kernel: stop here
            result.reason, result.code = failure.message, failure.code
            return
    if result.artifacts:
        result.status, result.reason, result.code = "ran", f"profiled {len(result.artifacts)} kernel(s)", "ran"
    elif not result.reason:
        result.reason, result.code = "ncu wrote no report; see the notes and the logs in kernel/", "failed"
