"""What each benchmarked process runs: one tool's work on one trace, then its figures as one JSON line.

Run as ``python bench/children.py TOOL TRACE`` by :mod:`bench.measure`, one
process per measurement, so that the tools never share a heap and each
process's peak RSS is its own (the parent reads it with ``os.wait4``).

- ``advisor``: what ``advisor analyze TRACE`` does before it writes the run
  directory: load, analyze, evaluate the rules (no reports rendered). TRACE
  may be a folder of rank traces (analysed as ``advisor analyze`` does).
- ``hta``: Holistic Trace Analysis: ``TraceAnalysis`` on a folder holding
  only TRACE, then its temporal, idle-time and kernel breakdowns. Run it with
  HTA's interpreter.
- ``orjson``: the bare parse the loader is held against: ``orjson.loads`` of
  the trace's bytes, decompressed beforehand (not timed).
- ``advisor-cli``: ``advisor analyze TRACE --out DIR -q`` as a user runs it,
  reports included: the console script's own entry point, in this fresh
  process, ended as the console script ends it (the parent's wall time is
  the whole process). ``reports_s`` is the time that wrote the reports
  (the JSON files, then the report model, Markdown, HTML and charts).
- ``floor``: the least a Python tool reading the trace can take, as a whole
  process: ``import gzip, pandas, orjson`` and ``orjson.loads`` of the
  decompressed file.

Times are wall seconds inside the process, from after the imports;
``import_s`` is the imports.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def run_advisor(trace: Path) -> dict[str, float]:
    started = time.perf_counter()
    from advisor.engine.rulebook import RuleBook
    from advisor.pipeline import analyze_traces, diagnose_findings, load_traces

    if trace.is_dir():
        return _advisor_folder(trace, started)
    t0 = time.perf_counter()
    traces = load_traces([trace])
    t1 = time.perf_counter()
    findings = analyze_traces(traces)
    t2 = time.perf_counter()
    diagnosed = diagnose_findings(findings, RuleBook.load([]))
    t3 = time.perf_counter()
    window = traces[0].meta.get("advisor_window")  # a trace over the memory budget: a window of its steps
    return {"import_s": t0 - started, "load_s": t1 - t0, "analyze_s": t2 - t1, "rules_s": t3 - t2, "work_s": t3 - t0,
            "events": len(traces[0].events), "diagnoses": len(diagnosed.diagnoses),
            "window": window["note"] if window else None}


def _advisor_folder(folder: Path, started: float) -> dict[str, float]:
    """A folder of rank traces, as ``advisor analyze FOLDER`` analyses it (one trace per worker process, see
    advisor/rank_files.py): load and analysis are one step, so ``load_s`` is the whole analysis."""
    from advisor.engine.rulebook import RuleBook
    from advisor.pipeline import analyze_trace_files, diagnose_findings, find_kineto_traces
    from advisor.rank_files import worker_count

    paths = find_kineto_traces(folder)
    t0 = time.perf_counter()
    findings = analyze_trace_files(paths)
    t1 = time.perf_counter()
    diagnosed = diagnose_findings(findings, RuleBook.load([]))
    t2 = time.perf_counter()
    return {"import_s": t0 - started, "load_s": t1 - t0, "analyze_s": t1 - t0, "rules_s": t2 - t1, "work_s": t2 - t0,
            "events": None, "traces": len(paths), "workers": worker_count(paths),
            "diagnoses": len(diagnosed.diagnoses), "window": None}


def run_hta(trace: Path) -> dict[str, float]:
    import logging
    import tempfile

    started = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-hta-") as folder:
        (Path(folder) / trace.name).symlink_to(trace.resolve())
        t0 = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=folder)
        t1 = time.perf_counter()
        analysis.get_temporal_breakdown(visualize=False)
        t2 = time.perf_counter()
        analysis.get_idle_time_breakdown(visualize=False)
        t3 = time.perf_counter()
        analysis.get_gpu_kernel_breakdown(visualize=False)
        t4 = time.perf_counter()
    return {"import_s": t0 - started, "load_s": t1 - t0, "temporal_s": t2 - t1, "idle_s": t3 - t2,
            "kernel_s": t4 - t3, "work_s": t4 - t0}


def run_orjson(trace: Path) -> dict[str, float]:
    import gzip

    import orjson

    raw = trace.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    t0 = time.perf_counter()
    orjson.loads(raw)
    return {"work_s": time.perf_counter() - t0, "json_bytes": len(raw)}


def run_advisor_cli(trace: Path) -> dict[str, float]:
    import tempfile

    started = time.perf_counter()
    from advisor.cli.app import run

    t0 = time.perf_counter()
    reports = _time_reports()
    with tempfile.TemporaryDirectory(prefix="bench-run-") as folder:
        code = run(["analyze", str(trace), "--out", str(Path(folder) / "run"), "-q"])
    if code:
        raise SystemExit(f"advisor analyze {trace} ended with exit code {code}")
    return {"import_s": t0 - started, "work_s": time.perf_counter() - t0, "reports_s": reports["s"]}


def _time_reports() -> dict[str, float]:
    """Time what writes the reports inside the run: the JSON files (``save``), then the report model, Markdown,
    HTML and charts (``render_reports``, the report modules' imports included, as the command imports them).

    ``advisor.runs`` is wrapped when the command imports it, not imported here: the command starts work (the
    trace's decoding, on another core) before that import, as it does for a user.
    """
    import importlib.abc
    import importlib.machinery

    spent = {"s": 0.0}

    def timed(func):  # noqa: ANN001, ANN202 - a thin wrapper
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            t = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                spent["s"] += time.perf_counter() - t
        return call

    def wrap(runs) -> None:  # noqa: ANN001
        runs.save = timed(runs.save)
        name = "render_reports" if hasattr(runs, "render_reports") else "render_run"  # an older checkout
        setattr(runs, name, timed(getattr(runs, name)))

    class Wrapping(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201
            if fullname != "advisor.runs":
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            self.inner = spec.loader
            spec.loader = self
            return spec

        def create_module(self, spec):  # noqa: ANN001, ANN201
            return self.inner.create_module(spec)

        def exec_module(self, module):  # noqa: ANN001, ANN201
            sys.meta_path.remove(self)
            self.inner.exec_module(module)
            wrap(module)

    if "advisor.runs" in sys.modules:
        wrap(sys.modules["advisor.runs"])
    else:
        sys.meta_path.insert(0, Wrapping())
    return spent


def run_floor(trace: Path) -> dict[str, float]:
    import gzip

    import orjson
    import pandas  # noqa: F401 - a tool that tabulates the events imports it

    t0 = time.perf_counter()
    with gzip.open(trace) if trace.suffix == ".gz" else open(trace, "rb") as handle:
        orjson.loads(handle.read())
    return {"work_s": time.perf_counter() - t0}


def main() -> int:
    tool, trace = sys.argv[1], Path(sys.argv[2])
    result = {"advisor": run_advisor, "hta": run_hta, "orjson": run_orjson, "advisor-cli": run_advisor_cli,
              "floor": run_floor}[tool](trace)
    sys.stdout.write("BENCH " + json.dumps(result) + "\n")
    if tool == "advisor-cli":  # it ends as the console script does (advisor.cli.app.main), the exit included
        import advisor.cli.app

        end = getattr(sys.modules["advisor.cli.app"], "end_process", None)  # an older checkout: an ordinary exit
        if end is not None:
            end(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
