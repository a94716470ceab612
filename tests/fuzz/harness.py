"""Runs ``advisor analyze`` in-process on one damaged file and checks the promise of issue 19 on it.

The promise, for any input: an analysis with honest notes (exit 0, the run directory complete, the events the
file lost counted by the data-quality check), or one sentence naming the file and a non-zero exit; never a
traceback, never a hang, never a file written outside the run directory.

The command line is the real one (:func:`advisor.cli.app.run`, what the console script calls), run in this
process so that hundreds of cases take a minute, with the summary card printed. Writing report.md and
report.html (jinja2 and the charts, a fraction of a second) is left out of most cases: ``report=True`` does it too.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
import typer.main

import advisor.cli  # noqa: F401  (registers the commands)
import advisor.runs
from advisor.cli.app import app, run
from advisor.pipeline import Rendered
from advisor.report.model import build_report_data

from mutate import Case

#: a line that is an exception as Python prints it (``KeyError: 'ts'``), not inside the advisor's sentence
_RAW_EXCEPTION = re.compile(r"^\w*(Error|Exception|Warning): ", re.M)
#: an analysis of these small files takes well under a second; this long is a hang
CASE_LIMIT_S = 60.0
#: the exit code of AnalysisError: one sentence, but a bug in advisor
EXIT_BUG = 3


class Hang(BaseException):
    """Raised by the alarm: an analysis ran past CASE_LIMIT_S (BaseException, so no handler swallows it)."""


@dataclass
class Outcome:
    case: Case
    code: int
    stdout: str
    stderr: str
    seconds: float
    run_dir: Path
    warned: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (f"{self.case.path.name} ({'; '.join(self.case.what)}): exit {self.code} in {self.seconds:.1f} s\n"
                f"stderr: {self.stderr[-2000:]}\nstdout: {self.stdout[-1000:]}")


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise Hang(f"no answer in {seconds:.0f} s")

    # pytest-timeout's own alarm (the test's 600 s) is put back afterwards, less the time this case took
    previous = signal.signal(signal.SIGALRM, ring)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001))


@contextlib.contextmanager
def _without_reports(report: bool) -> Iterator[None]:
    if report:
        yield
        return
    real = advisor.runs.render_reports

    def paths_only(run_dir: Any, charts: bool = True) -> Rendered:
        # no report files; the terminal card still gets its data (without charts, as nothing is drawn)
        return Rendered({"markdown": run_dir.file("report.md"), "html": run_dir.file("report.html")},
                        build_report_data(run_dir, charts=False))

    advisor.runs.render_reports = paths_only
    try:
        yield
    finally:
        advisor.runs.render_reports = real


_BUILT: list[Any] = []


@contextlib.contextmanager
def _one_command() -> Iterator[None]:
    """Typer builds the click command from the functions' signatures on every call (50 ms, a fifth of a case);
    it is the same command each time, so it is built once."""
    real = typer.main.get_command
    if not _BUILT:
        _BUILT.append(real(app))

    def get_command(typer_instance: typer.Typer) -> Any:
        return _BUILT[0] if typer_instance is app else real(typer_instance)

    typer.main.get_command = get_command
    try:
        yield
    finally:
        typer.main.get_command = real


def analyze(case: Case, workdir: Path, *, report: bool = False) -> Outcome:
    """``advisor analyze FILE --out run``, run in a fresh current folder ``workdir/cwd``."""
    cwd = workdir / "cwd"
    cwd.mkdir(parents=True)
    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    started = time.monotonic()
    os.chdir(cwd)
    try:
        with warnings.catch_warnings(record=True) as caught, _without_reports(report), _one_command(), \
                _alarm(CASE_LIMIT_S), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            try:
                code = run(["analyze", str(case.path), "--out", "run"])
            except Exception:  # noqa: BLE001 - what a user would see as a traceback: recorded, and judged by check()
                err.write(traceback.format_exc())
                code = -1
    finally:
        os.chdir(before)
    warned = [f"{w.category.__name__}: {w.message} ({Path(w.filename).name}:{w.lineno})" for w in caught]
    return Outcome(case, code, out.getvalue(), err.getvalue(), time.monotonic() - started, cwd / "run", warned)


def check(outcome: Outcome, *, report: bool = False) -> list[str]:
    """What of the promise this outcome breaks (nothing: an empty list)."""
    problems = []
    text = outcome.stdout + outcome.stderr
    if "Traceback (most recent call last)" in text or _RAW_EXCEPTION.search(text):
        problems.append("a traceback or a raw exception was printed")
    stray = [p for p in outcome.run_dir.parent.rglob("*") if outcome.run_dir not in (p, *p.parents)]
    if stray:
        problems.append(f"files outside the run directory: {[str(p) for p in stray[:5]]}")
    siblings = [p for p in outcome.case.path.parent.iterdir() if p != outcome.case.path]
    if siblings:
        problems.append(f"files written beside the input: {[p.name for p in siblings]}")
    if outcome.code == 0:
        problems += _check_analysis(outcome, report)
    else:
        lines = [ln for ln in outcome.stderr.splitlines() if ln.strip()]
        if len(lines) != 1 or not lines[0].startswith("advisor: error: "):
            problems.append(f"not one sentence: {lines[:3]}")
        elif outcome.case.path.name not in lines[0]:
            problems.append(f"the sentence does not name the file: {lines[0][:200]}")
    return problems


def _check_analysis(outcome: Outcome, report: bool) -> list[str]:
    run_dir = outcome.run_dir
    needed = ["run.json", "findings.json", "diagnoses.json"] + (["report.md", "report.html"] if report else [])
    missing = [name for name in needed if not (run_dir / name).is_file()]
    if missing:
        return [f"exit 0 but the run directory lacks {missing}"]
    problems = []
    findings = json.loads((run_dir / "findings.json").read_text())
    facts = {f["name"]: f["value"] for f in findings["facts"]}
    verdict = json.loads((run_dir / "diagnoses.json").read_text())["verdict"]
    damaged = outcome.case.damaged
    if damaged and (facts.get("trace.bad_events") or 0) < damaged:
        problems.append(f"{damaged} events lost ts or dur but the data-quality check counted "
                        f"{facts.get('trace.bad_events')}")
    if (facts.get("trace.bad_share") or 0) >= 0.1 and verdict["status"] != "inconclusive":
        problems.append(f"{facts['trace.bad_share']:.0%} bad events, yet the verdict is {verdict['status']}")
    if "advisor · " not in outcome.stdout:
        problems.append("no summary card")
    return problems
