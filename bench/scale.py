"""advisor on synthetic traces of growing size: time and peak RSS against size.

The traces are the real v100 fixture repeated with shifted timestamps and ids
(bench/synth.py), generated on first use into ``--workdir`` (default
bench/out/, ignored by git) and reused after. Each size runs in its own
process; the report gives seconds, MB/s, peak RSS, and how time and memory
grow relative to the smallest size (linear growth keeps the per-MB figures flat).

    python bench/scale.py                      # 100MB, 500MB and 2GB
    python bench/scale.py --size 100MB --size 500MB --runs 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import DEFAULT_HTA_PYTHON, HERE, Series, load_average, machine, run_measured, warm_up  # noqa: E402
from synth import DEFAULT_SOURCE, parse_size, size_label, synthetic_trace  # noqa: E402

DEFAULT_SIZES = ("100MB", "500MB", "2GB")
#: target of issue 9: the 2 GB trace within this peak RSS
RSS_TARGET_MB = 3 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, action="append", help="JSON size (repeatable; default 100MB, "
                                                                         "500MB and 2GB)")
    parser.add_argument("--runs", type=int, default=1, help="runs per size (median reported)")
    parser.add_argument("--workdir", type=Path, default=HERE / "out", help="where synthetic traces are made and kept")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real trace to repeat")
    parser.add_argument("--peer", action="store_true", help="also run HTA on each size (slow, memory-hungry)")
    parser.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = sorted(args.size or [parse_size(s) for s in DEFAULT_SIZES])
    started = machine()
    for tool in ["advisor"] + (["hta"] if args.peer else []):  # untimed: byte-compiles the modules
        warm_up(tool, args.source, args.hta_python if tool == "hta" else sys.executable)
    rows = []
    for size in sizes:
        trace = synthetic_trace(size, args.workdir, args.source, log=lambda m: print(m, file=sys.stderr))
        tools = ["advisor"] + (["hta"] if args.peer else [])
        for tool in tools:
            series = Series()
            for i in range(args.runs):
                python = args.hta_python if tool == "hta" else sys.executable
                run = run_measured(tool, trace, python, timeout_s=4 * 3600)
                series.runs.append(run)
                print(f"  {size_label(size):>6} {tool:8} run {i + 1}: work {run.figures['work_s']:.1f} s, peak "
                      f"{run.peak_rss_mb:.0f} MB (load {load_average()})", file=sys.stderr)
            first = series.runs[0].figures
            rows.append({"size": size_label(size), "tool": tool, "json_mb": size / 1e6,
                         "gzip_mb": trace.stat().st_size / 1e6, "events": first.get("events"),
                         "window": first.get("window"),
                         **{k: series.median(k) for k in ("work_s", "load_s", "wall_s", "peak_rss_mb")},
                         **({"analyze_s": series.median("analyze_s"), "rules_s": series.median("rules_s")}
                            if tool == "advisor" else {})})
    result = {"machine": started | {"loadavg_end": load_average()}, "runs": args.runs, "rows": rows}
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


def report(result: dict) -> str:
    m = result["machine"]
    lines = [f"machine: {m['cpus']} CPUs, load average {m['loadavg_start']} at start, {m['loadavg_end']} at end; "
             f"medians of {result['runs']} run(s)",
             f"{'size':>6} {'tool':8} {'events':>10} {'work s':>8} {'load s':>8} {'MB/s':>7} {'s per 100MB':>11} "
             f"{'peak RSS MB':>11} {'RSS/JSON':>8}"]
    for r in result["rows"]:
        per = r["work_s"] / r["json_mb"] * 100
        lines.append(f"{r['size']:>6} {r['tool']:8} {r['events'] or 0:>10,} {r['work_s']:>8.1f} {r['load_s']:>8.1f} "
                     f"{r['json_mb'] / r['work_s']:>7.1f} {per:>11.2f} {r['peak_rss_mb']:>11.0f} "
                     f"{r['peak_rss_mb'] / r['json_mb']:>8.2f}")
    for r in result["rows"]:
        if r.get("window"):
            lines.append(f"{r['size']}: {r['window']}")
    adv = [r for r in result["rows"] if r["tool"] == "advisor"]
    if len(adv) > 1:
        small, big = adv[0], adv[-1]
        growth = (big["work_s"] / small["work_s"]) / (big["json_mb"] / small["json_mb"])
        lines.append(f"time grows {growth:.2f}x as fast as size from {small['size']} to {big['size']} "
                     "(1.00 = linear)")
    biggest = adv[-1] if adv else None
    if biggest and biggest["size"] == "2GB":
        ok = biggest["peak_rss_mb"] < RSS_TARGET_MB
        lines.append(f"2GB peak RSS {biggest['peak_rss_mb']:.0f} MB: {'within' if ok else 'over'} the "
                     f"{RSS_TARGET_MB} MB target")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
