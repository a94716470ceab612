"""advisor against Holistic Trace Analysis on the same traces, side by side.

For each trace and run, in turn, each in a fresh process: ``advisor-cli``
(``advisor analyze TRACE`` as a user runs it, reports included), ``advisor``
(its work alone: load, analyze, rules), HTA (``TraceAnalysis`` load plus
temporal, idle-time and kernel breakdowns), the ``floor`` process (import
gzip, pandas and orjson, parse the file) and the bare ``orjson.loads`` parse.
Prints the medians, the ratios and the targets, and writes them as JSON with
``--json``.

    python bench/peer.py --runs 5
    python bench/peer.py --trace /path/to/rank0.pt.trace.json.gz --hta-python /path/to/hta-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import DEFAULT_HTA_PYTHON, REPO, Series, load_average, machine, run_measured, warm_up  # noqa: E402
from startup import measure_commands, report_lines  # noqa: E402

FIXTURES = REPO.parent / "shared" / "fixtures" / "kineto"
DEFAULT_TRACES = ("v100_resnet_single_rank.pt.trace.json.gz", "a100_ddp_nccl_rank0.pt.trace.json.gz")
#: targets of issue 9 (the work) and issue 16 (the whole process, reports included)
SPEEDUP_TARGET = 5.0
MEMORY_TARGET = 0.5
THROUGHPUT_TARGET = 2.0
FLOOR_TARGET = 1.5
PROCESS_SPEEDUP_TARGET = 2.0
REPORTS_TARGET_S = 1.0


def measure(traces: list[Path], runs: int, hta_python: str, with_peer: bool) -> dict:
    started = machine()
    tools = ["advisor-cli", "advisor", "floor", "orjson"] + (["hta"] if with_peer else [])
    series = {(t.name, tool): Series() for t in traces for tool in tools}
    for tool in tools:  # untimed: byte-compiles each tool's modules, as an installed package has them
        warm_up(tool, traces[0], hta_python if tool == "hta" else sys.executable)
    for i in range(runs):
        for trace in traces:  # interleaved: every tool sees the same machine state, run after run
            for tool in tools:
                python = hta_python if tool == "hta" else sys.executable
                run = run_measured(tool, trace, python)
                series[(trace.name, tool)].runs.append(run)
                print(f"  run {i + 1}/{runs} {trace.name[:32]:32} {tool:8} work {run.figures['work_s']:7.3f} s "
                      f"process {run.wall_s:7.3f} s  peak {run.peak_rss_mb:7.1f} MB  (load {load_average()})",
                      file=sys.stderr)
    # Memory of the command with the processes it forks, in one more, untimed run: sampling /proc every 20 ms
    # takes CPU time from a command that uses both cores
    for trace in traces:
        series[(trace.name, "advisor-cli")].tree = run_measured("advisor-cli", trace, sys.executable, tree=True)
    commands = measure_commands(runs)
    return {"machine": started | {"loadavg_end": load_average()}, "runs": runs,
            "traces": {t.name: _summary(t, series, with_peer) for t in traces}, "commands": commands}


def _summary(trace: Path, series: dict, with_peer: bool) -> dict:
    adv, raw = series[(trace.name, "advisor")], series[(trace.name, "orjson")]
    mb = raw.runs[0].figures["json_bytes"] / 1e6
    out = {
        "json_mb": mb, "events": adv.runs[0].figures["events"],
        "advisor": {k: adv.median(k) for k in ("work_s", "load_s", "analyze_s", "rules_s", "import_s", "wall_s",
                                                 "peak_rss_mb")},
        "orjson_loads_s": raw.median("work_s"),
    }
    cli, floor = series[(trace.name, "advisor-cli")], series[(trace.name, "floor")]
    out["advisor_cli"] = {k: cli.median(k) for k in ("import_s", "work_s", "reports_s", "wall_s", "peak_rss_mb")}
    out["advisor_cli"]["wall_runs_s"] = [r.wall_s for r in cli.runs]
    # the command and the processes it forks (the trace decoded while it imports, its analyzers' second core),
    # together: their Pss, sampled in the untimed run, so that pages a forked child shares with its parent count
    # once
    tree = cli.tree
    out["advisor_cli"]["tree_rss_mb"] = max(tree.peak_rss_mb, tree.tree_rss_mb)
    out["floor"] = {k: floor.median(k) for k in ("work_s", "wall_s", "peak_rss_mb")}
    out["floor"]["wall_runs_s"] = [r.wall_s for r in floor.runs]
    out["process_vs_floor"] = out["advisor_cli"]["wall_s"] / out["floor"]["wall_s"]
    out["load_vs_orjson"] = out["advisor"]["load_s"] / out["orjson_loads_s"]
    out["work_vs_orjson"] = out["advisor"]["work_s"] / out["orjson_loads_s"]
    if with_peer:
        hta = series[(trace.name, "hta")]
        out["hta"] = {k: hta.median(k) for k in ("work_s", "load_s", "temporal_s", "idle_s", "kernel_s", "import_s",
                                                 "wall_s", "peak_rss_mb")}
        out["speedup_work"] = out["hta"]["work_s"] / out["advisor"]["work_s"]
        out["speedup_process"] = out["hta"]["wall_s"] / out["advisor"]["wall_s"]
        out["memory_ratio"] = out["advisor"]["peak_rss_mb"] / out["hta"]["peak_rss_mb"]
        out["speedup_user_process"] = out["hta"]["wall_s"] / out["advisor_cli"]["wall_s"]
        out["user_memory_ratio"] = out["advisor_cli"]["peak_rss_mb"] / out["hta"]["peak_rss_mb"]
        out["user_memory_ratio_tree"] = out["advisor_cli"]["tree_rss_mb"] / out["hta"]["peak_rss_mb"]
    return out


def report(result: dict) -> str:
    lines = [f"machine: {result['machine']['cpus']} CPUs, Python {result['machine']['python']}, load average "
             f"{result['machine']['loadavg_start']} at start, {result['machine']['loadavg_end']} at end; "
             f"medians of {result['runs']} run(s)"]
    for name, s in result["traces"].items():
        a, c, f = s["advisor"], s["advisor_cli"], s["floor"]
        lines += ["", f"{name}: {s['json_mb']:.1f} MB of JSON, {s['events']:,} events",
                  f"  advisor analyze, as a user runs it (reports included): process {c['wall_s']:.3f} s (imports "
                  f"{c['import_s']:.3f}, reports {c['reports_s']:.3f} [target: < {REPORTS_TARGET_S:.0f} s]), peak RSS "
                  f"{c['peak_rss_mb']:.0f} MB (with the processes it forks: {c['tree_rss_mb']:.0f} MB); "
                  f"runs {_runs(c['wall_runs_s'])}",
                  f"  floor    process {f['wall_s']:.3f} s (parse {f['work_s']:.3f}), peak RSS {f['peak_rss_mb']:.0f} MB: "
                  f"advisor analyze takes {s['process_vs_floor']:.2f}x the floor   [target: <= {FLOOR_TARGET}x]; "
                  f"runs {_runs(f['wall_runs_s'])}",
                  f"  advisor  work {a['work_s']:.3f} s (load {a['load_s']:.3f}, analyze {a['analyze_s']:.3f}, rules "
                  f"{a['rules_s']:.3f}); process {a['wall_s']:.3f} s (imports {a['import_s']:.3f}); peak RSS "
                  f"{a['peak_rss_mb']:.0f} MB"]
        if "hta" in s:
            h = s["hta"]
            lines += [f"  HTA      work {h['work_s']:.3f} s (load {h['load_s']:.3f}, temporal {h['temporal_s']:.3f}, "
                      f"idle {h['idle_s']:.3f}, kernel {h['kernel_s']:.3f}); process {h['wall_s']:.3f} s (imports "
                      f"{h['import_s']:.3f}); peak RSS {h['peak_rss_mb']:.0f} MB",
                      f"  ratio    {s['speedup_work']:.1f}x faster (work), {s['speedup_process']:.1f}x (whole process); "
                      f"memory {s['memory_ratio']:.2f} of HTA's peak   [targets: >= {SPEEDUP_TARGET:.0f}x, "
                      f"<= {MEMORY_TARGET}]",
                      f"  user     advisor analyze is {s['speedup_user_process']:.2f}x faster than HTA's process, "
                      f"peak RSS {s['user_memory_ratio']:.2f} of HTA's ({s['user_memory_ratio_tree']:.2f} with the processes "
                      f"it forks)   [targets: >= {PROCESS_SPEEDUP_TARGET:.0f}x, <= 1]"]
        lines.append(f"  orjson.loads of the decompressed file {s['orjson_loads_s']:.3f} s: advisor's load is "
                     f"{s['load_vs_orjson']:.2f}x that, its whole work {s['work_vs_orjson']:.2f}x   "
                     f"[target: load within {THROUGHPUT_TARGET:.0f}x]")
    if result.get("commands"):
        lines += ["", *report_lines(result["commands"])]
    return "\n".join(lines)


def _runs(walls: list[float]) -> str:
    return " ".join(f"{w:.2f}" for w in walls) + " s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, action="append", help="a trace file (repeatable; default: the two "
                                                                    "fixture traces of the targets)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each tool on each trace (median reported)")
    parser.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON,
                        help="Python with holistictraceanalysis installed (default $ADVISOR_BENCH_HTA_PYTHON or "
                             "/work/hta-venv/bin/python)")
    parser.add_argument("--no-peer", action="store_true", help="skip HTA")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    traces = args.trace or [FIXTURES / n for n in DEFAULT_TRACES]
    missing = [str(t) for t in traces if not t.is_file()]
    if missing:
        parser.error(f"no such trace: {', '.join(missing)}")
    with_peer = not args.no_peer
    if with_peer and not Path(args.hta_python).exists():
        parser.error(f"{args.hta_python} does not exist; create HTA's venv (bench/README.md) or pass --no-peer")
    result = measure(traces, args.runs, args.hta_python, with_peer)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
