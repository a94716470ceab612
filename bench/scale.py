"""advisor on synthetic traces of growing size, and on a folder of many rank traces: time and peak RSS.

The traces are the real v100 fixture repeated with shifted timestamps and ids
(bench/synth.py), generated on first use into ``--workdir`` (default
bench/out/, ignored by git) and reused after. For each size and run, in turn,
each in a fresh process: ``advisor analyze TRACE`` as a user runs it, reports
included (the *whole* process); advisor's work alone (load, analyze, rules);
the *floor* process (import gzip, pandas and orjson, parse the file); the bare
``orjson.loads`` of the decompressed text (the parse the load is held
against); and with ``--peer`` HTA's load plus three breakdowns. Medians,
ratios and the peak-RSS ratio are printed, with how time grows with size.
The memory of advisor with the processes it forks is sampled (Pss of the
tree, every 20 ms) in one more, untimed run of each: sampling takes CPU time
from a command that uses both cores, so the timed runs are not sampled.

``--ranks N`` adds a folder of N rank traces (bench/ranks.py: the two recsys
fixture ranks repeated), analysed by ``advisor analyze FOLDER`` with each
``--workers`` count (``$ADVISOR_WORKERS``), its time and (in one more,
untimed run) the peak memory of the whole process tree.

    python bench/scale.py                      # 10MB, 100MB and 500MB
    python bench/scale.py --size 100MB --peer --runs 3
    python bench/scale.py --size 10MB --ranks 128 --workers 1 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import DEFAULT_HTA_PYTHON, HERE, Series, load_average, machine, run_measured, warm_up  # noqa: E402
from ranks import rank_folder  # noqa: E402
from synth import DEFAULT_SOURCE, parse_size, size_label, synthetic_trace  # noqa: E402

DEFAULT_SIZES = ("10MB", "100MB", "500MB")
#: targets of issue 9 (2 GB under 3 GB) and issue 16 (load within 2x of the parse; 5x HTA with half its memory)
RSS_TARGET_MB = 3 * 1024
LOAD_TARGET = 2.0
SPEEDUP_TARGET = 5.0
MEMORY_TARGET = 0.5
#: per size, the tools run, each run; the figures taken from each
TOOLS = ("advisor-cli", "advisor", "floor", "orjson")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, action="append", help="JSON size (repeatable; default 10MB, "
                                                                         "100MB and 500MB; 2GB takes minutes)")
    parser.add_argument("--runs", type=int, default=1, help="runs per size (median reported)")
    parser.add_argument("--workdir", type=Path, default=HERE / "out", help="where synthetic traces are made and kept")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real trace to repeat")
    parser.add_argument("--peer", action="store_true", help="also run HTA on each size (slow, memory-hungry)")
    parser.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--ranks", type=int, help="also analyse a folder of this many rank traces")
    parser.add_argument("--workers", type=int, action="append",
                        help="$ADVISOR_WORKERS for the rank folder (repeatable; default 1 and the cores)")
    parser.add_argument("--no-sizes", action="store_true", help="only the rank folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = [] if args.no_sizes else sorted(args.size or [parse_size(s) for s in DEFAULT_SIZES])
    started = machine()
    tools = TOOLS + (("hta",) if args.peer else ())
    for tool in tools:  # untimed: byte-compiles the modules (and fills advisor's rule cache)
        warm_up(tool, args.source, args.hta_python if tool == "hta" else sys.executable)
    rows = [_size_row(size, tools, args) for size in sizes]
    if args.ranks:
        folder = rank_folder(args.ranks, args.workdir, log=lambda m: print(m, file=sys.stderr))
        for workers in args.workers or sorted({1, os.cpu_count() or 1}):
            rows.append(_ranks_row(folder, args.ranks, workers, args.runs))
    result = {"machine": started | {"loadavg_end": load_average()}, "runs": args.runs, "rows": rows}
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


def _size_row(size: int, tools: tuple[str, ...], args: argparse.Namespace) -> dict:
    trace = synthetic_trace(size, args.workdir, args.source, log=lambda m: print(m, file=sys.stderr))
    series = {tool: Series() for tool in tools}
    failed: dict[str, str] = {}
    for i in range(args.runs):
        for tool in tools:  # interleaved: every tool sees the same machine state, run after run
            if tool in failed:
                continue
            try:
                run = run_measured(tool, trace, args.hta_python if tool == "hta" else sys.executable,
                                   timeout_s=4 * 3600)
            except RuntimeError as exc:
                if tool.startswith("advisor"):
                    raise
                # A yardstick that cannot run at this size (a bare parse of 2 GB needs more memory than the
                # machine has) is said, and the row goes on without its ratios.
                failed[tool] = str(exc).strip().splitlines()[-1]
                print(f"  {size_label(size):>6} {tool:11} could not run: {failed[tool]}", file=sys.stderr)
                continue
            series[tool].runs.append(run)
            print(f"  {size_label(size):>6} {tool:11} run {i + 1}: work {run.figures['work_s']:7.2f} s, process "
                  f"{run.wall_s:7.2f} s, peak {run.peak_rss_mb:6.0f} MB (load {load_average()})", file=sys.stderr)
    # The memory of advisor with its load helpers, in one more, untimed run of each: sampling /proc every 20 ms
    # takes CPU time from a process that uses both cores (0.2-0.3 s of 2.6 at 100MB), so the timed runs are not
    # sampled, as in bench/peer.py
    for tool in ("advisor-cli", "advisor"):
        series[tool].tree = run_measured(tool, trace, sys.executable, timeout_s=4 * 3600, tree=True)
    adv, cli = series["advisor"], series["advisor-cli"]
    first = adv.runs[0].figures
    from advisor.load.kineto_window import json_size  # the bench runs from a checkout: advisor is importable

    row = {"size": size_label(size), "json_mb": json_size(trace) / 1e6,
           "gzip_mb": trace.stat().st_size / 1e6, "events": first.get("events"), "window": first.get("window"),
           "whole_s": cli.median("wall_s"), "whole_rss_mb": _memory(cli),
           **{k: adv.median(k) for k in ("work_s", "load_s", "analyze_s", "rules_s")}, "peak_rss_mb": _memory(adv),
           "orjson_s": _or_none(series["orjson"], "work_s"), "floor_s": _or_none(series["floor"], "wall_s"),
           "floor_rss_mb": _or_none(series["floor"], "peak_rss_mb"), "failed": failed}
    if "hta" in series and series["hta"].runs:
        row |= {"hta_s": series["hta"].median("wall_s"), "hta_work_s": series["hta"].median("work_s"),
                "hta_rss_mb": series["hta"].median("peak_rss_mb")}
    return row


def _or_none(series: Series, key: str) -> float | None:
    return series.median(key) if series.runs else None


def _ranks_row(folder: Path, ranks: int, workers: int, runs: int) -> dict:
    """``advisor analyze FOLDER`` (whole process) and its work, with ``$ADVISOR_WORKERS`` set; tree peak RSS."""
    env = {"ADVISOR_WORKERS": str(workers)}
    series = {tool: Series() for tool in ("advisor-cli", "advisor")}
    for i in range(runs):
        for tool, s in series.items():
            run = run_measured(tool, folder, sys.executable, env_extra=env)
            s.runs.append(run)
            print(f"  {ranks} ranks, {workers} worker(s) {tool:11} run {i + 1}: process {run.wall_s:7.2f} s, "
                  f"largest process {run.peak_rss_mb:6.0f} MB (load {load_average()})", file=sys.stderr)
    for tool, s in series.items():  # the memory of all the processes together, in one more, untimed run
        s.tree = run_measured(tool, folder, sys.executable, env_extra=env, tree=True)
        print(f"  {ranks} ranks, {workers} worker(s) {tool:11} untimed: tree peak {s.tree.tree_rss_mb:6.0f} MB",
              file=sys.stderr)
    cli, adv = series["advisor-cli"], series["advisor"]
    return {"size": f"{ranks} ranks", "ranks": ranks, "workers": workers,
            "processes": adv.runs[0].figures.get("workers"), "json_mb": _folder_json_mb(folder),
            "whole_s": cli.median("wall_s"), "whole_rss_mb": _memory(cli),
            "work_s": adv.median("work_s"), "peak_rss_mb": _memory(adv),
            "largest_process_mb": cli.median("peak_rss_mb")}


def _memory(series: Series) -> float:
    """advisor's memory: the larger of its own peak RSS (median of the timed runs) and the peak of it and its
    helpers together (Pss, in the untimed run)."""
    tree = series.tree.tree_rss_mb if series.tree is not None else 0.0
    return max(series.median("peak_rss_mb"), tree)


def _folder_json_mb(folder: Path) -> float:
    from advisor.load.kineto_window import json_size  # the bench runs from a checkout: advisor is importable

    return sum(json_size(p) for p in folder.glob("*.json.gz")) / 1e6


def report(result: dict) -> str:
    m = result["machine"]
    lines = [f"machine: {m['cpus']} CPUs, load average {m['loadavg_start']} at start, {m['loadavg_end']} at end; "
             f"medians of {result['runs']} run(s). whole = `advisor analyze` as a user runs it, reports included; "
             "work = load + analyze + rules; floor = import gzip, pandas, orjson + parse, whole process",
             f"{'size':>6} {'events':>9} {'whole s':>8} {'work s':>7} {'load s':>7} {'orjson s':>8} {'load/orj':>8} "
             f"{'floor s':>7} {'whl/flr':>7} {'HTA s':>7} {'HTA/whl':>7} {'RSS MB':>7} {'HTA MB':>7} {'RSS/HTA':>7} "
             f"{'MB/s':>6}"]
    sized = [r for r in result["rows"] if "ranks" not in r]

    def cell(value: float | None, width: int, digits: int = 2) -> str:
        return f"{value:>{width}.{digits}f}" if value is not None else f"{'n/a':>{width}}"

    for r in sized:
        hta = "hta_s" in r
        orj, floor = r["orjson_s"], r["floor_s"]
        lines.append(
            f"{r['size']:>6} {r['events'] or 0:>9,} {r['whole_s']:>8.2f} {r['work_s']:>7.2f} {r['load_s']:>7.2f} "
            f"{cell(orj, 8)} {cell(r['load_s'] / orj if orj else None, 8)} {cell(floor, 7)} "
            f"{cell(r['whole_s'] / floor if floor else None, 7)} "
            + (f"{r['hta_s']:>7.1f} {r['hta_s'] / r['whole_s']:>7.1f} " if hta else f"{'-':>7} {'-':>7} ")
            + f"{r['whole_rss_mb']:>7.0f} " + (f"{r['hta_rss_mb']:>7.0f} {r['whole_rss_mb'] / r['hta_rss_mb']:>7.2f} "
                                               if hta else f"{'-':>7} {'-':>7} ")
            + f"{r['json_mb'] / r['work_s']:>6.1f}")
    lines.append(f"targets: load/orjson <= {LOAD_TARGET}; at 100MB and more HTA/whole >= {SPEEDUP_TARGET} and "
                 f"RSS/HTA <= {MEMORY_TARGET}")
    for r in sized:
        if r.get("window"):
            lines.append(f"{r['size']}: {r['window']}")
        for tool, why in (r.get("failed") or {}).items():
            lines.append(f"{r['size']}: {tool} could not run ({why}); its ratios are n/a")
    if len(sized) > 1:
        small, big = sized[0], sized[-1]
        growth = (big["work_s"] / small["work_s"]) / (big["json_mb"] / small["json_mb"])
        lines.append(f"work grows {growth:.2f}x as fast as size from {small['size']} to {big['size']} (1.00 = linear)")
    if sized and sized[-1]["size"] == "2GB":
        ok = sized[-1]["peak_rss_mb"] < RSS_TARGET_MB
        lines.append(f"2GB peak RSS {sized[-1]['peak_rss_mb']:.0f} MB: {'within' if ok else 'over'} the "
                     f"{RSS_TARGET_MB} MB target")
    for r in (r for r in result["rows"] if "ranks" in r):
        lines.append(f"{r['size']} ({r['json_mb']:.0f} MB of JSON), ADVISOR_WORKERS={r['workers']} "
                     f"({r['processes']} worker processes): whole {r['whole_s']:.2f} s, work {r['work_s']:.2f} s; "
                     f"peak memory of all its processes together (Pss) {r['whole_rss_mb']:.0f} MB (work "
                     f"{r['peak_rss_mb']:.0f} MB), largest single process's peak RSS {r['largest_process_mb']:.0f} MB")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
