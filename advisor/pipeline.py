"""The per-stage functions the workflow calls: traces -> findings -> diagnoses -> files in the run directory.

Loading and analysing traces (the framework stage), loading and analysing
Nsight Compute reports (the kernel stage), evaluating the rules over
findings, saving them and rendering the reports. Each takes and returns plain
data, so each can be run and tested alone; none calls another stage. Which
stage runs when is the workflow's business (:mod:`advisor.workflow`): the
stages' specs (:mod:`advisor.workflow.builtin_stages`) call these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.analyze.findings import Findings
from advisor.analyze.framework.view import TraceView
from advisor.analyze.ranks.rankset import RankSet
from advisor.analyze.registry import run_analyzers
from advisor.engine.evaluate import Diagnosis, Outcome, evaluate_rules
from advisor.engine.rulebook import RuleBook
from advisor.engine.story import attach_files
from advisor.errors import TraceError
from advisor.guard import analysing
from advisor.load.kineto import KinetoTrace, load_kineto
from advisor.load.kineto_shapes import META_KEY as SHAPES_KEY
from advisor.progress import Progress
from advisor.report.verdict import Verdict, judge
from advisor.rundir import RunDir

if TYPE_CHECKING:  # the Nsight Compute tables load only for a kernel stage
    from advisor.load.ncu_tables import NcuReport

__all__ = ["Diagnosed", "Rendered", "analyze_kernel_reports", "analyze_trace_files", "analyze_traces", "analyze_views",
           "compare_kernel_reports", "diagnose_findings", "find_kineto_traces", "is_kernel_file", "is_kineto_trace",
           "load_collected_traces", "load_kernel_reports", "load_traces", "rediagnose", "render_reports", "render_run",
           "save"]


@dataclass
class Diagnosed:
    findings: Findings
    diagnoses: list[Diagnosis]
    outcomes: list[Outcome]
    verdict: Verdict


def is_kineto_trace(path: Path) -> bool:
    """A file named as a Kineto trace, not as one of the JSON files advisor writes beside the traces."""
    return (path.is_file() and path.name.endswith((".json", ".json.gz"))
            and not path.name.startswith(("status.", "collector", "run.", "findings", "diagnoses")))


def find_kineto_traces(path: Path) -> list[Path]:
    """A trace file, or the Kineto traces in a directory (one per rank)."""
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_file():
        return [path]
    found = sorted(p for p in path.iterdir() if is_kineto_trace(p))
    if not found:
        raise TraceError(path, "is a directory with no Kineto trace (*.json or *.json.gz) in it")
    return found


def load_traces(paths: Iterable[Path]) -> list[KinetoTrace]:
    """Load each trace (a progress bar on a terminal when it takes more than a second).

    A trace over the memory budget is read twice: once to pick a window of steps that fits, then for the
    window's events only (see :mod:`advisor.load.kineto_window`).
    """
    from advisor.load.kineto_window import plan_window

    traces = []
    for p in paths:
        with Progress(f"Scanning {p.name} (over the memory budget)") as bar:
            window = plan_window(p, on_progress=bar.update)
        with Progress(f"Loading {p.name}") as bar:
            traces.append(load_kineto(p, on_progress=bar.update, window=window))
    return sorted(traces, key=lambda t: t.rank)


def load_collected_traces(paths: Iterable[Path]) -> tuple[list[KinetoTrace], list[str]]:
    """The traces a run collected; one that cannot be read is a note for the report, not the end of the run
    (what was collected is kept, and the script's outcome is still reported)."""
    traces, notes = [], []
    for path in paths:
        try:
            traces.extend(load_traces([path]))
        except TraceError as exc:
            notes.append(f"the collected trace could not be analysed: {exc}")
    return sorted(traces, key=lambda t: t.rank), notes


def analyze_traces(traces: Sequence[KinetoTrace], run_meta: dict[str, Any] | None = None) -> Findings:
    """Framework-stage findings: the first rank's, and with several ranks the ``ranks.*`` comparison."""
    if not traces:
        return Findings(notes=["no trace was captured, so nothing could be analysed"])
    return analyze_views([TraceView(t, run_meta) for t in traces], run_meta)


def analyze_trace_files(paths: Sequence[Path], run_meta: dict[str, Any] | None = None,
                        workers: int | None = None) -> Findings:
    """:func:`analyze_traces` of trace files; several rank traces are analysed one per core, with memory
    bounded (:mod:`advisor.rank_files`)."""
    if len(paths) < 2:
        return analyze_traces(load_traces(paths), run_meta)
    from advisor.rank_files import analyze_rank_files

    return analyze_rank_files(paths, run_meta, workers)


def analyze_views(members: Sequence[Any], run_meta: dict[str, Any] | None = None) -> Findings:
    """The findings of rank traces ordered by rank: the first a loaded :class:`TraceView` (its findings are the
    run's), the others views or :class:`~advisor.analyze.ranks.digest.RankDigest` (compared as ranks)."""
    primary = members[0]
    with Progress(f"Analysing {primary.trace.path.name}") as bar:
        with analysing(str(primary.trace.path)):
            findings = run_analyzers(primary, "framework", evidence=str(primary.trace.path), on_progress=bar.update,
                                     two_cores=True)
    note = findings.get("roofline.note")
    if note and findings.get("ops.modelled_share"):  # operators were modelled, but their shares cannot be given
        findings.notes.append(f"roofline: {note}")
    shapes = primary.trace.meta.get(SHAPES_KEY)
    if isinstance(shapes, dict) and shapes.get("note"):  # shapes recorded apart that not every operator got
        findings.notes.append(f"{primary.trace.path.name}: {shapes['note']}")
    for member in members:  # traces over the memory budget were analysed on a window of steps: say so
        path, window, quality = _about(member)
        if window:
            findings.notes.append(f"{path.name}: {window['note']}")
        if quality and member is not primary:  # the first rank's quality is a fact, shown with the verdict
            findings.notes.append(f"{path.name}: {quality}")
    if len(members) > 1:
        # Ranks compared: host side in advisor.analyze.ranks.host, GPU side in advisor.analyze.ranks.gpu
        rank_set = RankSet(members)
        evidence = ", ".join(str(p) for p in rank_set.paths)
        with analysing(evidence):
            findings.merge(run_analyzers(rank_set, "framework", evidence=evidence, scope="ranks"))
        findings.notes.append(
            f"{len(members)} rank traces: the ranks.* facts compare them all; the other findings are for rank "
            f"{rank_set.ranks[rank_set.views.index(primary)]} ({primary.trace.path.name})"
        )
        if rank_set.numbered_by_order:
            findings.notes.append("the traces carry no distinct rank numbers, so ranks are numbered in file order")
    return findings


def _about(member: Any) -> tuple[Path, dict[str, Any] | None, str | None]:
    """A rank trace's file, its window (over the memory budget) and its data-quality note when material."""
    from advisor.analyze.ranks.digest import RankDigest
    from advisor.load.kineto_window import META_KEY

    if isinstance(member, RankDigest):
        return member.path, member.window, member.quality_note
    trace = member.trace
    return trace.path, trace.meta.get(META_KEY), trace.quality.note() if trace.quality.material else None


def is_kernel_file(path: Path) -> bool:
    """A Nsight Compute result: a ``.ncu-rep`` file, or a text file holding ncu CSV output."""
    from advisor.load.ncu_csv import is_ncu_csv

    return path.is_file() and (path.suffix == ".ncu-rep" or (path.suffix in (".csv", ".log", ".txt")
                                                             and is_ncu_csv(path)))


def load_kernel_reports(paths: Iterable[Path]) -> list[NcuReport]:
    """Read each Nsight Compute file with the loader for its type."""
    from advisor.load.ncu_csv import load_ncu_csv
    from advisor.load.ncu_report import load_ncu_report

    return [load_ncu_report(p) if p.suffix == ".ncu-rep" else load_ncu_csv(p) for p in paths]


def analyze_kernel_reports(reports: Sequence[NcuReport], framework_kernels: Sequence[dict[str, Any]] = (),
                           framework_ops: Sequence[dict[str, Any]] = ()) -> Findings:
    """Kernel-stage findings; ``framework_kernels`` (the run's ``kernels.top``) ties kernels to the code, and
    ``framework_ops`` (its ``ops.efficiency``) puts the model's FLOPs and bytes beside the measured ones."""
    from advisor.analyze.kernel.view import KernelView

    evidence = ", ".join(str(r.path) for r in reports)
    with analysing(evidence):
        view = KernelView(reports, framework_kernels, framework_ops)
        findings = run_analyzers(view, "kernel", evidence=evidence)
    for report in reports:
        findings.notes.extend(report.notes)
    joined = view.join_note()
    if joined:
        findings.notes.append(joined)
    return findings


def compare_kernel_reports(before: NcuReport, after: NcuReport, book: RuleBook) -> dict[str, Any]:
    """Before/after figures of the paired kernels, and the kernel rules each side fires: fixed, remaining, new."""
    from advisor.analyze.kernel.compare import compare_kernels

    sides = [diagnose_findings(analyze_kernel_reports([r]), book) for r in (before, after)]
    fired = [{d.rule_id: d.name for d in side.diagnoses if d.stage == "kernel"} for side in sides]
    rows = compare_kernels(*(side.findings.get("ncu.kernels", []) for side in sides))
    duration = next((r for r in rows if r["figure"] == "duration_us"), None)
    return {
        "before": str(before.path), "after": str(after.path), "figures": rows,
        "speedup": (duration["before"] / duration["after"]) if duration and duration["after"] else None,
        "fixed": {i: n for i, n in fired[0].items() if i not in fired[1]},
        "remaining": {i: n for i, n in fired[0].items() if i in fired[1]},
        "new": {i: n for i, n in fired[1].items() if i not in fired[0]},
    }


def diagnose_findings(findings: Findings, book: RuleBook, stopped_early: str | None = None) -> Diagnosed:
    values = findings.values()
    step_ms = values.get("steps.time_ms")
    diagnoses, outcomes = evaluate_rules(book.active(), values, step_ms if isinstance(step_ms, float) else None)
    attach_files(diagnoses, {name: fact.evidence for name, fact in findings.facts.items()})
    return Diagnosed(findings, diagnoses, outcomes, judge(diagnoses, values, stopped_early))


def save(run: RunDir, diagnosed: Diagnosed) -> None:
    run.write_json("findings.json", diagnosed.findings.to_dict())
    run.write_json("diagnoses.json", {
        "verdict": diagnosed.verdict.to_dict(),
        "diagnoses": [d.to_dict() for d in diagnosed.diagnoses],
        "outcomes": [o.__dict__ for o in diagnosed.outcomes],
    })


@dataclass
class Rendered:
    """The reports written into a run directory, and the report data they were rendered from."""

    paths: dict[str, Path]
    #: built once per run (:func:`advisor.report.model.build_report_data`): the terminal card reads it too
    data: dict[str, Any]


def render_reports(run: RunDir, charts: bool = True) -> Rendered:
    """Write report.md and report.html from the run directory's own files (``charts=False``: without charts)."""
    # The report modules (jinja2, markdown-it) only when reports are written: the work before needs none.
    from advisor.report.model import build_report_data
    from advisor.report.render import write_reports

    data = build_report_data(run, charts=charts)
    return Rendered(write_reports(data, run.path), data)


def render_run(run: RunDir, charts: bool = True) -> dict[str, Path]:
    """:func:`render_reports`, the paths only."""
    return render_reports(run, charts).paths


def rediagnose(run: RunDir, book: RuleBook) -> Diagnosed:
    """Re-evaluate the rules over a run's saved findings (after a rule was edited)."""
    findings = Findings.from_dict(run.read_json("findings.json"))
    previous = run.read_json("diagnoses.json").get("verdict", {}) if run.file("diagnoses.json").exists() else {}
    stopped = next((m for m in previous.get("missing", []) if m.startswith("the script")), None)
    return diagnose_findings(findings, book, stopped)
