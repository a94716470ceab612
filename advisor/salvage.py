"""What a run keeps when Ctrl-C stops it.

``advisor diagnose`` and ``advisor analyze`` run inside a :class:`Salvage`,
which knows the run directory, the phase the run is in and the findings so
far. Ctrl-C at any moment after the run directory is made then ends the run
the same way: the findings until then (none, when it came before the
analysis finished) are saved with a note that says where the run was
stopped, the report of them is written (without charts, so that it is
quick), and :class:`~advisor.errors.Interrupted` carries the one line the CLI
prints: what was kept, and where. The exit code is 130.

Ctrl-C while the user's script runs is the collector's business (it stops the
script, which saves what it recorded, and the analysis goes on); this is for
the advisor's own work around it. A second Ctrl-C while the report is being
saved stops that too, and the CLI says only ``advisor: interrupted``.

A Ctrl-C that Python dropped (:class:`~advisor.errors.DroppedInterrupts`: it
landed in a weakref callback or the import machinery's lock clean-up) stops the
run at its next phase, or at the end, as it would have where it landed.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from advisor.analyze.findings import Findings
from advisor.engine.rulebook import RuleBook
from advisor.errors import DroppedInterrupts, Interrupted
from advisor.rundir import RunDir

__all__ = ["Salvage"]


class Salvage:
    """``with Salvage(run, book) as keep: keep.phase = "analysing the trace"; ...; keep.findings = f``."""

    def __init__(self, run: RunDir, book: RuleBook, phase: str = "starting") -> None:
        self.run = run
        self.book = book
        #: what the run is doing, as it reads after "interrupted while"
        self._phase = phase
        self._dropped = DroppedInterrupts()
        #: the findings so far (framework findings while the deeper stages run)
        self.findings: Findings | None = None
        #: findings.json and diagnoses.json are written: only the report is left
        self.saved = False

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, phase: str) -> None:
        if self._dropped.take():  # the interrupt came in the phase now ending: stop here
            raise KeyboardInterrupt
        self._phase = phase

    def __enter__(self) -> Salvage:
        self._dropped.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        self._dropped.__exit__(kind, exc, tb)
        if kind is None and self._dropped.take():
            raise self.keep() from None
        if kind is None or not issubclass(kind, KeyboardInterrupt):
            return False
        raise self.keep() from None

    def keep(self) -> Interrupted:
        """Save and report what there is; the error that says so."""
        from advisor.pipeline import diagnose_findings, render_run, save

        note = f"advisor was interrupted (Ctrl-C) while {self.phase}"
        if self.saved:
            findings = Findings.from_dict(self.run.read_json("findings.json"))
        else:
            findings = self.findings if self.findings is not None else Findings()
        tail = "the findings until then are reported" if len(findings) else "nothing was analysed"
        findings.notes.append(f"{note}; {tail}; the report has no charts")
        save(self.run, diagnose_findings(findings, self.book, stopped_early=note))
        reports = render_run(self.run, charts=False)
        nothing = "" if len(findings) else "nothing was analysed; "
        return Interrupted(f"interrupted while {self.phase}; {nothing}kept in {self.run.path}: {self._kept(reports)}")

    def _kept(self, reports: dict[str, Path]) -> str:
        """``the trace (framework/rank0.pt.trace.json.gz), the findings, report.html``."""
        traces = sorted(self.run.path.glob("*/*.pt.trace.json.gz"))
        parts = []
        if traces:
            names = ", ".join(self.run.relative(t) for t in traces[:2]) + (", ..." if len(traces) > 2 else "")
            parts.append(f"the trace{'s' if len(traces) > 1 else ''} ({names})")
        if self.findings is not None or self.saved:
            parts.append("the findings")
        else:
            parts.append("run.json")
        parts.append(Path(reports.get("html", self.run.file("report.html"))).name)
        return ", ".join(parts)
