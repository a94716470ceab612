"""The workflow inside ``advisor diagnose`` and ``advisor analyze``: walk, record, merge.

Every stage, the framework stage included, runs inside one walk of the graph:

- :func:`walk_script` for ``advisor diagnose``: the start stage runs the
  script under the PyTorch Profiler, then the stages the guards ask for run
  their tools.
- :func:`walk_files` for ``advisor analyze`` over the files given (Kineto
  traces, Nsight Systems reports, Nsight Compute results): stages with files
  run from them, stages the guards ask for but that have no files are skipped
  with the command that would make them.
- :func:`merge_into_run` takes extra files into an existing run directory
  (``advisor analyze RUN_DIR extra.sqlite``): each goes to the stage that
  reads it, the graph is walked again with the stages that ran before kept as
  they were, and the findings, diagnoses, trail and reports are updated. Rank
  traces given are analysed with the run's own, the ranks compared.

The caller records what is not sequencing (the script's outcome, what the run
is doing for Ctrl-C) in its :class:`~advisor.workflow.runner.StageHooks`.

All three write ``trail`` and ``workflow`` into run.json (shapes in
:mod:`advisor.workflow.walk`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from advisor.analyze.findings import Findings
from advisor.engine.rulebook import RuleBook
from advisor.errors import RunDirError, TraceError, UsageError
from advisor.rundir import RunDir
from advisor.workflow.graph import Workflow, load_workflow
from advisor.workflow.runner import StageHooks, StageRunner
from advisor.workflow.stages import StageSpec, stage_for_file
from advisor.workflow.walk import TrailEntry, walk

__all__ = ["check_inputs", "check_script_workflow", "merge_into_run", "split_inputs", "walk_files", "walk_script"]


def _diagnoser(book: RuleBook) -> Callable[[Findings, str | None], Any]:
    from advisor.pipeline import diagnose_findings

    return lambda findings, stopped_early: diagnose_findings(findings, book, stopped_early)


def _record(run: RunDir, result: Any, **extra: Any) -> None:
    run.update_metadata(**result.to_metadata(), **extra)


def check_script_workflow(workflow: Workflow) -> None:
    """``advisor diagnose`` runs the script in the framework stage: its workflow must start there."""
    if workflow.start != "framework":
        raise UsageError(f"{workflow.path}: `advisor diagnose` runs the script in the framework stage, so the "
                         f"workflow must start there, not at {workflow.start!r}")


def walk_script(run: RunDir, book: RuleBook, workflow: Workflow, *, config: Any, run_meta: Mapping[str, Any],
                hooks: StageHooks, hold: str | None = None, skip: Mapping[str, str] | None = None,
                timeout_s: float | None = None, progress: Callable[[str], None] | None = None) -> Any:
    """``advisor diagnose``: walk the graph from the framework stage, which runs the script, through the stages
    the guards ask for (none when ``hold`` says why not; not those ``skip`` names, with why); return the final
    diagnosis set."""
    check_script_workflow(workflow)
    runner = StageRunner(run, Findings(), _diagnoser(book), config=config, run_meta=run_meta, online=True,
                         hold=hold, skip=skip, timeout_s=timeout_s, progress=progress, hooks=hooks)
    _record(run, walk(workflow, runner.execute, runner.state))
    return runner.diagnosed


def split_inputs(paths: Sequence[Path]) -> dict[str, list[Path]]:
    """Stage -> the given paths it reads (folders are Kineto rank folders); bad input fails here."""
    out: dict[str, list[Path]] = {}
    for path in paths:
        path = _existing(path)
        spec = _stage_of(path)
        out.setdefault(spec.name, []).append(path)
    return out


def _existing(path: Path) -> Path:
    """The path, or for a missing ``X.nsys-rep`` the ``X.qdstrm`` an nsys without its importer left instead."""
    if path.exists():
        return path
    stream = path.with_suffix(".qdstrm")
    if path.suffix.lower() == ".nsys-rep" and stream.exists():
        return stream
    raise TraceError(path, "no such file or directory")


def _stage_of(path: Path) -> StageSpec:
    from advisor.workflow.stages import get_stage

    if path.is_dir():
        return get_stage("framework")
    spec = stage_for_file(path)
    if spec is None:
        raise TraceError(path, "is not a file advisor reads: Kineto traces (.json, .json.gz) and Nsight Systems "
                               "reports (.nsys-rep, .qdstrm, .sqlite)")
    return spec


def check_inputs(given: Mapping[str, list[Path]]) -> None:
    """Each stage's own check of the files it was given (before a run directory is made)."""
    from advisor.workflow.stages import get_stage

    for stage, paths in given.items():
        spec = get_stage(stage)
        for path in paths:
            if spec.check is not None:
                spec.check(path)


def _ingest(run: RunDir, given: Mapping[str, list[Path]]) -> dict[str, list[Path]]:
    from advisor.workflow.stages import get_stage

    out: dict[str, list[Path]] = {}
    for stage, paths in given.items():
        spec = get_stage(stage)
        if spec.ingest is None:
            raise TraceError(paths[0], f"the {stage} stage cannot take files")
        made = not run.file(stage).exists()
        for path in paths:
            out.setdefault(stage, []).extend(spec.ingest(path, run.stage(stage)))
        if made and not any(run.file(stage).iterdir()):  # files read where they are (Kineto traces): no folder
            run.file(stage).rmdir()
    return out


def walk_files(run: RunDir, book: RuleBook, workflow: Workflow, given: Mapping[str, list[Path]],
               hooks: StageHooks | None = None) -> Any:
    """``advisor analyze`` of fresh files: each stage given files loads them; the others are skipped."""
    ingested = _ingest(run, given)
    sources = {**given, **({"framework": ingested["framework"]} if "framework" in ingested else {})}
    runner = StageRunner(run, Findings(), _diagnoser(book), run_meta=run.read_metadata(), online=False,
                         given=ingested, sources=sources, hooks=hooks)
    _record(run, walk(workflow, runner.execute, runner.state, _given_reasons(given)))
    return runner.diagnosed


def merge_into_run(run: RunDir, book: RuleBook, files: Sequence[Path], workflow_path: Path | None = None) -> Any:
    """Add files to an existing run: load them into their stages, walk again, keep what ran before."""
    from advisor.collect.config import CollectorConfig

    given = split_inputs(files)
    meta = run.read_metadata()
    if not run.file("findings.json").exists():
        raise RunDirError(run.path, "has no findings.json to merge into; run `advisor diagnose` or "
                                    "`advisor analyze` to make a complete run first")
    findings = Findings.from_dict(run.read_json("findings.json"))
    previous = [TrailEntry.from_dict(e) for e in meta.get("trail", [])]
    done = {e.stage: e for e in previous if e.status == "ran"} or {
        "framework": TrailEntry("framework", "ran", "recorded before this merge")}
    config_path = run.file("framework") / "collector.json"
    config = CollectorConfig.read(config_path) if config_path.is_file() else None
    workflow = load_workflow(workflow_path or _recorded_workflow(meta))
    ingested = _ingest(run, given)
    sources = dict(given)
    if "framework" in ingested:  # the run's own rank traces and the ones given, analysed together
        ingested["framework"] = sources["framework"] = _with_recorded(run, done.get("framework"),
                                                                      ingested["framework"])
    runner = StageRunner(run, findings, _diagnoser(book), config=config, run_meta=meta, online=False,
                         given=ingested, sources=sources, done=done, stopped_early=_stopped_note(run))
    result = walk(workflow, runner.execute, runner.state, _given_reasons(given))
    merges = [*meta.get("merges", []), {"at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                        "files": [str(p.resolve()) for ps in given.values() for p in ps],
                                        "stages": sorted(given)}]
    _record(run, result, merges=merges)
    return runner.diagnosed


def _with_recorded(run: RunDir, entry: TrailEntry | None, given: list[Path]) -> list[Path]:
    """The Kineto traces the run's framework stage analysed (its trail entry's artifacts), then the ones given,
    each file once."""
    from advisor.pipeline import is_kineto_trace

    recorded = [p if p.is_absolute() else run.path / p for p in map(Path, entry.artifacts if entry else [])]
    out: dict[Path, Path] = {}
    for path in [*(p for p in recorded if is_kineto_trace(p)), *given]:
        out.setdefault(path.resolve(), path)
    return list(out.values())


def _given_reasons(given: Mapping[str, list[Path]]) -> dict[str, str]:
    return {stage: "given on the command line" for stage in given if stage != "framework"}


def _recorded_workflow(meta: Mapping[str, Any]) -> Path | None:
    recorded = (meta.get("workflow") or {})
    source = recorded.get("source")
    if source and not recorded.get("builtin", True) and Path(source).is_file():
        return Path(source)
    return None


def _stopped_note(run: RunDir) -> str | None:
    if not run.file("diagnoses.json").exists():
        return None
    verdict = run.read_json("diagnoses.json").get("verdict", {})
    return next((m for m in verdict.get("missing", []) if m.startswith("the script")), None)
