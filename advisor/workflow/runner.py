"""Running the stages the walk reaches, and keeping the run's findings and diagnoses current.

:class:`StageRunner` is the ``execute``/``state`` pair that
:func:`~advisor.workflow.walk.walk` calls. For each reached stage it either

- reuses what is already done (a stage that ran before
  ``advisor analyze RUN_DIR extra.sqlite``),
- loads the files the user gave for it (``advisor analyze``),
- or runs its collector (``advisor diagnose`` only: the start stage, which
  runs the script, and the deeper stages unless ``--no-escalate`` or the
  script failed),

then analyses the stage's output (its own ``analyze``, or its loader and
analyzers), replaces that stage's facts in the findings and evaluates every
rule again, so the next guards see the new diagnoses. A stage that cannot run
is *skipped* with the reason and the exact command that would run it; what
was collected is never lost.

What the caller does between those steps (record the script's outcome in
run.json, say what the run is doing for Ctrl-C) it does in its
:class:`StageHooks`; the sequence stays here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from advisor.analyze.findings import Findings
from advisor.analyze.registry import registered, run_analyzers
from advisor.engine.evaluate import Diagnosis
from advisor.errors import CollectError, InputError
from advisor.guard import analysing
from advisor.rundir import RunDir
from advisor.workflow.stages import Collected, StageContext, StageSpec, registered_stages
from advisor.workflow.walk import TrailEntry, guard_environment

__all__ = ["StageHooks", "StageRunner", "replace_stage_facts"]


def replace_stage_facts(findings: Findings, stage: str, new: Findings) -> None:
    """Drop the facts (and skip notes) of ``stage``'s analyzers, of every scope (a trace, the ranks compared),
    from ``findings``, then add ``new``."""
    names = {a.name for a in registered(stage)}
    findings.facts = {k: f for k, f in findings.facts.items() if f.source not in names}
    findings.skipped = {k: v for k, v in findings.skipped.items() if k not in names}
    findings.merge(new)


class StageHooks:
    """What the caller of a walk does around a stage; the defaults do nothing.

    Each is given the runner and may change what the later stages get: ``runner.run_meta`` (what the
    collectors and analyzers read), ``runner.hold`` (why deeper collectors must not run),
    ``runner.stopped_early`` (the verdict's note when the script stopped before the profiled window).
    """

    def collected(self, runner: StageRunner, spec: StageSpec, collected: Collected) -> None:
        """The stage's collector has finished, before its output is analysed."""

    def analysing(self, runner: StageRunner, spec: StageSpec) -> None:
        """The stage's files are about to be loaded and analysed."""

    def absorbed(self, runner: StageRunner, spec: StageSpec) -> None:
        """The stage's findings are in ``runner.findings``, and the rules evaluated over them."""


class StageRunner:
    """Executes stages for the walk; ``diagnose(findings, stopped_early)`` re-evaluates the rules after each."""

    def __init__(self, run: RunDir, findings: Findings, diagnose: Callable[[Findings, str | None], Any], *,
                 config: Any = None, run_meta: Mapping[str, Any] | None = None, online: bool = False,
                 given: Mapping[str, list[Path]] | None = None, sources: Mapping[str, list[Path]] | None = None,
                 done: Mapping[str, TrailEntry] | None = None,
                 hold: str | None = None, skip: Mapping[str, str] | None = None, timeout_s: float | None = None,
                 progress: Callable[[str], None] | None = None, stopped_early: str | None = None,
                 hooks: StageHooks | None = None) -> None:
        self.run = run
        self.findings = findings
        self._diagnose = diagnose
        self.stopped_early = stopped_early
        self.hooks = hooks or StageHooks()
        # the rules over the findings it starts with, evaluated when first read: `advisor analyze` starts with
        # none and replaces them before any guard reads them (56 rules evaluated for nothing: 10-20 ms)
        self._diagnosed: Any = None
        self._initial_stopped_early = stopped_early
        self.config = config
        self.run_meta = dict(run_meta or {})
        self.online = online
        self.given = dict(given or {})
        self.sources = dict(sources or self.given)  # the files as the user named them, for the trail
        self.done = dict(done or {})
        self.hold = hold  # why the deeper stages' collectors must not run (the script failed, Ctrl-C)
        self.skip = dict(skip or {})  # stage -> why its collector must not run (--no-escalate, --no-trial)
        self.timeout_s = timeout_s
        self.progress = progress
        self.ran: list[str] = []
        self.stages = registered_stages()

    @property
    def diagnosed(self) -> Any:
        """The rules evaluated over :attr:`findings` as the last stage left them (or as they were given)."""
        if self._diagnosed is None:
            self._diagnosed = self._diagnose(self.findings, self._initial_stopped_early)
        return self._diagnosed

    @diagnosed.setter
    def diagnosed(self, value: Any) -> None:
        self._diagnosed = value

    # the walk's callbacks -------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        diagnoses: list[Diagnosis] = self.diagnosed.diagnoses
        return guard_environment(self.findings.values(), diagnoses, self.ran)

    def execute(self, name: str, why: list[str]) -> TrailEntry:
        entry = self._execute(name, why)
        if entry.status == "ran":
            self.ran.append(name)
        return entry

    def _execute(self, name: str, why: list[str]) -> TrailEntry:
        because = "; ".join(why) if why else "every run starts here"
        if name in self.done and name not in self.given:
            return self.done[name]
        spec = self.stages[name]
        if spec.terminal:
            return TrailEntry(name, "ran", "the report brings together every stage that ran")
        if name in self.given:  # before the context: it makes the stage folder, which files read in place need not
            return self._from_files(spec, self.given[name], why)
        ctx = self.context(spec)
        if not self.online:
            return self._skipped(spec, ctx, f"advisor analyze only reads files and does not run {spec.tool}; run "
                                            f"it and add its output to this run (needed: {because})")
        if self.hold and why:  # the start stage runs the script itself: it is never held
            return self._skipped(spec, ctx, f"{self.hold} (needed: {because})")
        if name in self.skip and why:
            return self._skipped(spec, ctx, f"{self.skip[name]} (needed: {because})")
        return self._collect(spec, ctx, why)

    # ways a stage gets its data ----------------------------------------------------
    def context(self, spec: StageSpec) -> StageContext:
        return StageContext(self.run.path, self.run.stage(spec.name), self.config, self.run_meta, self.timeout_s,
                            self.progress, self.findings.values(), list(self.diagnosed.diagnoses))

    def _command(self, spec: StageSpec, ctx: StageContext) -> str | None:
        try:
            return spec.command(ctx) if spec.command else None
        except (CollectError, OSError) as exc:
            return f"(no command: {exc})"

    def _skipped(self, spec: StageSpec, ctx: StageContext, reason: str, command: str | None = None) -> TrailEntry:
        return TrailEntry(spec.name, "skipped", reason, command or self._command(spec, ctx))

    def _from_files(self, spec: StageSpec, paths: list[Path], why: list[str]) -> TrailEntry:
        try:
            self.absorb(spec, paths)
        except InputError as exc:  # name the file as the user gave it, not its copy in the run directory
            raise _as_given(exc, paths, self.sources.get(spec.name, paths)) from None
        names = ", ".join(p.name for p in self.sources.get(spec.name, paths))
        because = f" ({'; '.join(why)})" if why else ""
        return TrailEntry(spec.name, "ran", f"loaded from {names}{because}", None,
                          [self.run.relative(p) for p in paths])

    def _collect(self, spec: StageSpec, ctx: StageContext, why: list[str]) -> TrailEntry:
        because = "; ".join(why) if why else "every run starts here"
        try:
            collected = spec.collect(ctx) if spec.collect else None
        except CollectError as exc:
            return self._skipped(spec, ctx, f"{exc} (needed: {because})", getattr(exc, "command", None))
        except KeyboardInterrupt:
            if not why:  # the start stage: no stage before it found anything to keep, so the caller ends the run
                raise
            # Keep what the earlier stages found: the report is still written, and no later stage runs.
            self.hold = "the run was interrupted (Ctrl-C)"
            return self._skipped(spec, ctx, f"interrupted (Ctrl-C) while {spec.tool} ran (needed: {because})")
        if collected is None:
            return self._skipped(spec, ctx, f"{spec.name} has no collector (needed: {because})")
        self.hooks.collected(self, spec, collected)
        artifacts = [self.run.relative(p) for p in collected.artifacts if p.exists()]
        try:
            self.absorb(spec, collected.inputs, collected=True)
        except InputError as exc:
            return TrailEntry(spec.name, "skipped", f"{spec.tool} ran, but its output could not be read: {exc}",
                              collected.command, artifacts)
        notes = "".join(f"; {n}" for n in collected.notes)
        return TrailEntry(spec.name, "ran", f"{because}{notes}", collected.command, artifacts)

    # loading and analysing -------------------------------------------------------------
    def absorb(self, spec: StageSpec, paths: list[Path], collected: bool = False) -> None:
        """Analyse the stage's files, replace its facts, and evaluate the rules again.

        ``collected``: the files are this run's collector's output (see ``StageSpec.analyze``).
        """
        self.hooks.analysing(self, spec)
        if spec.analyze is not None:
            new = spec.analyze(paths, self.run_meta, self.findings.values(), collected)
        else:
            new = self._load_and_analyse(spec, paths)
        replace_stage_facts(self.findings, spec.analyzer_stage, new)
        self.diagnosed = self._diagnose(self.findings, self.stopped_early)
        self.hooks.absorbed(self, spec)

    def _load_and_analyse(self, spec: StageSpec, paths: list[Path]) -> Findings:
        if spec.load is None:
            raise InputError(paths[0] if paths else spec.name, f"the {spec.name} stage has no loader")
        view = spec.load(paths, self.run_meta, self.findings.values())
        evidence = ", ".join(self.run.relative(p) for p in paths)
        with analysing(", ".join(str(p) for p in paths)):
            new = run_analyzers(view, spec.analyzer_stage, evidence=evidence)
        new.notes.extend(getattr(view, "notes", []))
        return new


def _as_given(exc: InputError, copies: list[Path], given: list[Path]) -> InputError:
    """The same error, about the file the user named where it is about that file's copy."""
    if len(copies) != len(given) or exc.path not in copies:
        return exc
    return type(exc)(given[copies.index(exc.path)], exc.problem)
