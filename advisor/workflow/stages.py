"""The stage registry: for each stage of the workflow, how to collect, take in and load its data.

A stage is what the workflow graph names (``framework``, ``system``,
``kernel``, ``report``). Its :class:`StageSpec` says:

``collect(ctx) -> Collected``
    run the tool for this run (the script again, under nsys or ncu), leaving
    its raw output in the stage folder. Raises
    :class:`~advisor.errors.CollectError` (``ToolMissingError`` when the tool
    or a GPU is missing, with the command that would run it); the walk records
    the stage as skipped, with that reason and command.
``command(ctx) -> str | None``
    the exact command that would run the stage by hand, for the report when it
    is skipped.
``ingest(path, stage_dir) -> list[Path]``
    take a file the user gives (``advisor analyze RUN_DIR extra.sqlite``) into
    the stage folder, converted to what ``load`` reads.
``load(paths, run_meta, facts) -> view``
    the tables, as an object with ``has(table)`` that the stage's analyzers
    (``@analyzer(stage=analyzer_stage)``) read; ``facts`` are the findings so
    far (the kernel stage ties its kernels to the framework's ``kernels.top``).
    A view with a ``notes`` list adds them to the findings' notes.
``analyze(paths, run_meta, facts, collected) -> Findings``
    optional, in place of ``load`` and the stage's analyzers: the stage's
    findings from its files, for a stage whose analysis is more than one view
    (the framework stage compares rank traces). ``collected``: the files are
    this run's collector's output, not files the user gave; one that cannot be
    read is then a note, not the end of the run.
``file_types``, ``file_names``, ``accepts(path)``
    the file name endings ``advisor analyze`` sends to this stage, whole
    file names it takes before any ending (``trial.json``), and, optionally,
    a check of the content for endings several tools use (CSV).
``check(path)``
    optional: raise :class:`~advisor.errors.InputError` (or ``ToolMissingError``)
    for a file ``ingest`` could not take, before a run directory is made.

A *terminal* stage (``report``) has none of these: reaching it ends the walk.

The built-in stages are registered in :mod:`advisor.workflow.builtin_stages`;
other parts plug in with :func:`register_stage`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.errors import UsageError

__all__ = ["Collected", "StageContext", "StageSpec", "get_stage", "register_stage", "registered_stages",
           "stage_for_file"]


@dataclass
class StageContext:
    """What a collector needs to run its stage for this run."""

    run_dir: Path
    stage_dir: Path
    config: Any = None  # the framework run's CollectorConfig; None for ``advisor analyze`` runs
    run_meta: dict[str, Any] = field(default_factory=dict)
    timeout_s: float | None = None
    progress: Callable[[str], None] | None = None
    facts: Mapping[str, Any] = field(default_factory=dict)  # the findings so far (``kernels.top``, ...)
    diagnoses: Sequence[Any] = ()  # the diagnoses so far: the kernels they name are what the kernel stage is asked

    @property
    def cuda(self) -> bool:
        """The framework run saw a GPU."""
        env = self.run_meta.get("environment") or {}
        return bool(env.get("gpus"))


@dataclass
class Collected:
    """What a collector left: the files to load, everything it wrote, and the command it ran."""

    inputs: list[Path]
    artifacts: list[Path]
    command: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the collector's own account of the run, for the caller of the walk (the framework stage's FrameworkResult)
    result: Any = None


@dataclass(frozen=True)
class StageSpec:
    name: str
    tool: str
    analyzer_stage: str = ""
    collect: Callable[[StageContext], Collected] | None = None
    command: Callable[[StageContext], str | None] | None = None
    ingest: Callable[[Path, Path], list[Path]] | None = None
    load: Callable[[Sequence[Path], dict[str, Any], Mapping[str, Any]], Any] | None = None
    file_types: tuple[str, ...] = ()
    terminal: bool = False
    check: Callable[[Path], None] | None = None
    accepts: Callable[[Path], bool] | None = None
    analyze: Callable[[Sequence[Path], dict[str, Any], Mapping[str, Any], bool], Any] | None = None
    #: whole file names this stage reads (``trial.json``), matched before any ending
    file_names: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """What this stage lacks to be walked: every non-terminal stage needs a collector and a loader
        (``load``, or its own ``analyze``)."""
        if self.terminal:
            return []
        missing = [part for part in ("collect", "load", "ingest") if getattr(self, part) is None]
        if self.analyze is not None:
            missing = [part for part in missing if part != "load"]
        return [f"has no {part}" for part in missing]


_STAGES: dict[str, StageSpec] = {}


def register_stage(spec: StageSpec, *, default: bool = False) -> None:
    """Add or replace a stage; ``default=True`` adds it only if no stage of that name is registered yet."""
    if default and spec.name in _STAGES:
        return
    _STAGES[spec.name] = spec


def _load_builtin() -> None:
    from advisor.workflow import builtin_stages  # noqa: F401 - registers the built-in stages


def registered_stages() -> dict[str, StageSpec]:
    _load_builtin()
    return dict(_STAGES)


def get_stage(name: str) -> StageSpec:
    stages = registered_stages()
    if name not in stages:
        raise UsageError(f"no stage named {name!r}; known stages: {', '.join(sorted(stages))}")
    return stages[name]


def stage_for_file(path: Path) -> StageSpec | None:
    """The stage whose loader takes this file: by the end of its name (longest ending wins), then by content."""
    name = path.name.lower()
    exact = next((s for s in registered_stages().values() if name in s.file_names), None)
    if exact is not None:
        return exact
    best: tuple[int, StageSpec] | None = None
    for spec in registered_stages().values():
        for ending in spec.file_types:
            if name.endswith(ending) and (best is None or len(ending) > best[0]):
                best = (len(ending), spec)
    if best:
        return best[1]
    return next((s for s in registered_stages().values() if s.accepts is not None and s.accepts(path)), None)
