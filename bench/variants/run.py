"""Runs the variants benchmark: each variant and its fixed twin timed without the advisor (the truth) and
diagnosed by ``advisor diagnose --no-escalate``; prints a table per family and writes JSON.

    python -m bench.variants.run --per-family 2 --json variants.json
    python -m bench.variants.run --families loops,threads --per-family 5 --repeats 3
    python -m bench.variants.run --variants DIR --table-only variants.json   # print a saved run's table again

Per family: recall, the share of variants whose measured gain is 10% of the step or more on which one of the
family's rules fired; false alarms, the fixed twins and healthy programs with a diagnosis of medium severity or
higher; and the estimate against the measured gain, the share of detected variants whose rule's ``impact_ms`` is
within +-30% of it (raw, and divided by the run's profiler stretch, the recorded step over the unprofiled one);
and, where the rule's fix is a setting that the trial stage tried, the trial's measured gain against the fixed
twin's, the share within +-15% (``trial ±15%``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.variants import generate as gen
from bench.variants.families import NAMES
from bench.variants.measure import ScriptFailed, measure, script_env

SERIOUS = ("medium", "high", "critical")
JUDGED_SHARE = 0.10      # a variant whose fix gives back at least this share of its step is judged for recall
TOLERANCE = 0.30         # an estimate within this share of the measured gain is counted as right
TRIAL_TOLERANCE = 0.15   # a trial's measured gain within this share of the fixed twin's is counted as right
DIAGNOSE_STEPS = 400     # steps of the scripts advisor diagnoses (the truth runs the variant's own number)
REPO = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def diagnose(script: Path, out: Path, env: dict[str, str], extra: list[str], timeout: float) -> dict:
    """One ``advisor diagnose`` run: its exit code, diagnoses, the step split and the profiler's stretch."""
    cmd = [sys.executable, "-m", "advisor", "diagnose", str(script), "--no-escalate", "-q", "--out", str(out), *extra]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=script.parent, env=env, capture_output=True, text=True, timeout=timeout)
        code, tail = proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    except subprocess.TimeoutExpired:
        code, tail = -1, [f"timed out after {timeout:.0f} s"]
    result: dict = {"rc": code, "wall_s": round(time.monotonic() - start, 1), "run_dir": str(out)}
    diagnoses_path, findings_path = out / "diagnoses.json", out / "findings.json"
    if not diagnoses_path.exists():
        result["error"] = " | ".join(tail)
        return result
    # impact_ms is the rule's estimate; where the trial stage measured the gain, trial_ms is that measure
    result["diagnoses"] = [{"rule": d["rule_id"], "severity": d["severity"],
                            "impact_ms": d.get("estimate_ms") if trial else d.get("impact_ms"),
                            "trial_ms": d.get("impact_ms") if trial else None}
                           for d in json.loads(diagnoses_path.read_text())["diagnoses"]
                           for trial in [d.get("gain_source") == "trial"]]
    if findings_path.exists():
        facts = {f["name"]: f["value"] for f in json.loads(findings_path.read_text())["facts"]}
        result["steps"] = {k: facts.get(f"steps.{k}") for k in
                           ("method", "count", "time_ms_median", "unprofiled_ms", "profiler_overhead")}
        result["split_ms"] = {phase: facts.get(f"phases.{phase}.ms")
                              for phase in ("dataloader", "forward", "backward", "optimizer", "other")}
    if code != 0:
        result["error"] = " | ".join(tail)
    return result


def judge(entry: dict, truth: dict | None, run: dict) -> dict:
    """Detected, the estimate and its errors, for one variant's advisor run against the truth."""
    rules = entry["rules"]
    fired = [d for d in run.get("diagnoses", []) if d["rule"] in rules]
    out: dict = {"detected": bool(fired), "fired": [f"{d['rule']}:{d['severity']}" for d in run.get("diagnoses", [])]}
    gain = truth and truth.get("gain_ms")
    if fired and gain:
        best = max(fired, key=lambda d: d["impact_ms"] or 0)
        estimate = best["impact_ms"]
        out["estimate_ms"] = estimate
        if estimate is not None and gain > 0:
            out["error"] = (estimate - gain) / gain
            steps = run.get("steps") or {}
            recorded, bare = steps.get("time_ms_median"), steps.get("unprofiled_ms")
            if recorded and bare:  # the profiler's stretch of a step
                out["stretch"] = recorded / bare
                out["error_scaled"] = (estimate / out["stretch"] - gain) / gain
        tried = [d for d in fired if d.get("trial_ms") is not None]
        if tried and gain > 0:  # the trial's measure on the user's steps, against the fixed twin's gain
            out["trial_ms"] = max(d["trial_ms"] for d in tried)
            out["trial_error"] = (out["trial_ms"] - gain) / gain
    return out


def serious(run: dict | None) -> list[str]:
    return [f"{d['rule']}:{d['severity']}" for d in (run or {}).get("diagnoses", []) if d["severity"] in SERIOUS]


def one(entry: dict, root: Path, out: Path, repeats: int, timeout: float) -> dict:
    """Truth and advisor runs of one variant and its twin."""
    script, fixed = root / entry["script"], root / entry["fixed"]
    healthy = entry["healthy"]
    record: dict = {k: entry[k] for k in ("name", "family", "axes", "rules", "healthy")}
    start = time.monotonic()
    try:
        truth = measure(script, None if healthy else fixed, entry["env"], entry["fixed_env"], entry["steps"],
                        repeats).to_json()
    except (ScriptFailed, subprocess.TimeoutExpired) as e:
        truth = {"error": str(e)}
    record["truth"] = truth
    extra = list(entry["diagnose_args"])
    # The truth times a short run; a training script runs far longer than the profile, and the trial stage
    # tries its settings on the steps after it: the diagnosed runs get the steps a trial needs (the collector
    # stops the script once it has what it came for, so the extra steps cost nothing where no trial runs).
    steps = max(entry["steps"], DIAGNOSE_STEPS)
    record["advisor"] = diagnose(script, out / entry["name"] / "variant", script_env(entry["env"], steps),
                                 extra, timeout)
    if not healthy:
        record["advisor_fixed"] = diagnose(fixed, out / entry["name"] / "fixed",
                                           script_env(entry["fixed_env"], steps), extra, timeout)
    record["judged"] = judge(entry, truth if "error" not in truth else None, record["advisor"])
    record["false_alarms"] = serious(record["advisor"]) if healthy else serious(record.get("advisor_fixed"))
    record["wall_s"] = round(time.monotonic() - start, 1)
    return record


def describe(r: dict) -> str:
    t = r["truth"]
    if "error" in t:
        truth = f"truth failed ({t['error'][:120]})"
    elif t.get("fixed_ms") is None:
        truth = f"step {t['variant_ms']:.1f} ms"
    else:
        truth = f"{t['variant_ms']:.1f} -> {t['fixed_ms']:.1f} ms (gain {t['gain_share']:+.0%})"
    adv = r["advisor"]
    if "diagnoses" not in adv:
        said = f"advisor failed ({adv.get('error', '')[:120]})"
    else:
        j = r["judged"]
        said = "fired " + (", ".join(j["fired"]) or "nothing")
        if "estimate_ms" in j:
            said += f", estimate {j['estimate_ms']:.1f} ms"
        if "trial_ms" in j:
            said += f", tried {j['trial_ms']:.1f} ms"
        if r["rules"] and not j["detected"]:
            said += f" (expected {'/'.join(r['rules'])})"
    alarms = f"; false alarms {', '.join(r['false_alarms'])}" if r["false_alarms"] else ""
    return f"{r['name']}: {truth}; {said}{alarms} ({r['wall_s']:.0f} s)"


def summarize(records: list[dict]) -> dict[str, dict]:
    """The per-family figures."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r["family"] for r in records):
        rs = [r for r in records if r["family"] == name]
        judged = [r for r in rs if not r["healthy"] and r["rules"] and (r["truth"].get("gain_share") or 0) >= JUDGED_SHARE]
        detected = [r for r in judged if r["judged"]["detected"]]
        errors = [r["judged"]["error"] for r in detected if "error" in r["judged"]]
        scaled = [r["judged"]["error_scaled"] for r in detected if "error_scaled" in r["judged"]]
        trials = [r["judged"]["trial_error"] for r in detected if "trial_error" in r["judged"]]
        # the runs that could raise a false alarm: healthy programs, and the fixed twins
        checked = [r for r in rs if (r["advisor"] if r["healthy"] else r.get("advisor_fixed") or {}).get("diagnoses")
                   is not None]
        split = [r for r in rs if (r["advisor"].get("steps") or {}).get("count")]
        out[name] = {
            "variants": len(rs),
            "failed": sum(1 for r in rs if "diagnoses" not in r["advisor"] or "error" in r["truth"]),
            "rules": sorted({rule for r in rs for rule in r["rules"]}),
            "judged": len(judged),
            "detected": len(detected),
            "recall": len(detected) / len(judged) if judged else None,
            "false_alarm_runs": sum(1 for r in checked if r["false_alarms"]),
            "quiet_runs": len(checked),
            "within_tolerance": sum(1 for e in errors if abs(e) <= TOLERANCE),
            "estimated": len(errors),
            "median_error": statistics.median(errors) if errors else None,
            "within_tolerance_scaled": sum(1 for e in scaled if abs(e) <= TOLERANCE),
            "median_error_scaled": statistics.median(scaled) if scaled else None,
            "step_split": len(split),
            "tried": len(trials),
            "trial_within": sum(1 for e in trials if abs(e) <= TRIAL_TOLERANCE),
            "median_trial_error": statistics.median(trials) if trials else None,
            "median_gain_share": statistics.median(g) if (g := [r["truth"]["gain_share"] for r in rs
                                                                if r["truth"].get("gain_share") is not None]) else None,
        }
    return out


def table(summary: dict[str, dict]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:+.0%}"

    head = (f"{'family':16} {'rules':13} {'n':>2} {'fail':>4} {'split':>5} {'gain':>5} {'judged':>6} {'recall':>9} "
            f"{'false alarms':>12} {'est ±30%':>8} {'med err':>7} {'scaled':>6} {'med':>6} {'trial ±15%':>10} "
            f"{'med':>6}")
    lines = [head, "-" * len(head)]
    for name, s in summary.items():
        recall = "-" if s["recall"] is None else f"{s['detected']}/{s['judged']}"
        rules = "/".join(s["rules"]) or "(none)"
        lines.append(
            f"{name:16} {rules[:13]:13} {s['variants']:>2} {s['failed']:>4} {s['step_split']:>5} "
            f"{pct(s['median_gain_share']):>5} {s['judged']:>6} {recall:>9} "
            f"{str(s['false_alarm_runs']) + '/' + str(s['quiet_runs']):>12} "
            f"{str(s['within_tolerance']) + '/' + str(s['estimated']):>8} {pct(s['median_error']):>7} "
            f"{str(s['within_tolerance_scaled']) + '/' + str(s['estimated']):>6} {pct(s['median_error_scaled']):>6} "
            f"{str(s.get('trial_within', 0)) + '/' + str(s.get('tried', 0)):>10} {pct(s.get('median_trial_error')):>6}")
    return "\n".join(lines)


def retable(paths: list[Path], out: Path | None) -> int:
    """The table of saved runs, each variant judged again from its recorded truth and diagnoses."""
    merged: dict[str, dict] = {}
    for path in paths:
        for record in json.loads(path.read_text())["records"]:
            merged[record["name"]] = record
    records = list(merged.values())
    for r in records:
        r["judged"] = judge(r, r["truth"] if "error" not in r["truth"] else None, r["advisor"])
    summary = summarize(records)
    print(table(summary))
    if out:
        out.write_text(json.dumps({"merged_from": [str(p) for p in paths], "summary": summary, "records": records},
                                  indent=1) + "\n")
    return 0


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def commit() -> str | None:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() or None


def select(manifest: dict, families: list[str] | None, per_family: int | None) -> list[dict]:
    picked, counts = [], {}
    for entry in manifest["variants"]:
        fam = entry["family"]
        if families and fam not in families:
            continue
        if per_family is not None and counts.get(fam, 0) >= per_family:
            continue
        counts[fam] = counts.get(fam, 0) + 1
        picked.append(entry)
    return picked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", type=Path, help="a folder written by bench.variants.generate "
                                                      "(default: generate one under --out with --seed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", help=f"comma-separated, default all: {','.join(NAMES)}")
    parser.add_argument("--per-family", type=int, help="the first N variants of each family (default all)")
    parser.add_argument("--repeats", type=int, default=2, help="plain runs of each script for the truth")
    parser.add_argument("--jobs", type=int, default=1, help="variants at once (timing wants a quiet machine: 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one advisor run")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for every run (default: the runner's own); "
                                                   "scripts that set their own threads keep theirs")
    parser.add_argument("--out", type=Path, default=Path("bench/out") / time.strftime("variants-%Y%m%d-%H%M%S"))
    parser.add_argument("--json", type=Path, help="write every record and the summary here")
    parser.add_argument("--table-only", type=Path, nargs="+", metavar="JSON",
                        help="print the table of saved --json files, judged again (a later file's runs of a "
                             "variant replace an earlier one's); with --json, write the merged records there")
    args = parser.parse_args(argv)
    if args.table_only:
        return retable(args.table_only, args.json)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    families = args.families.split(",") if args.families else None
    if families and (unknown := [f for f in families if f not in NAMES]):
        log(f"no family {', '.join(unknown)}; the families are: {', '.join(NAMES)}")
        return 2
    root = args.variants
    if root is None:
        root = args.out / "scripts"
        gen.write(gen.generate(args.seed, families), root, args.seed)
    manifest = json.loads((root / "manifest.json").read_text())
    entries = select(manifest, families, args.per_family)
    out = args.out.resolve()
    root = root.resolve()
    started, load_start = time.time(), load_average()
    log(f"{len(entries)} variants from {root} (seed {manifest['seed']}), runs under {out}; load average "
        f"{load_start}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    records: list[dict] = []

    def task(i_entry: tuple[int, dict]) -> dict:
        i, entry = i_entry
        record = one(entry, root, out, args.repeats, args.timeout)
        log(f"[{i + 1}/{len(entries)}] {describe(record)}")
        return record

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        records = list(pool.map(task, enumerate(entries)))
    summary = summarize(records)
    print(table(summary))
    load_end = load_average()
    print(f"load average {load_start} at the start, {load_end} at the end; {len(os.sched_getaffinity(0))} cores; "
          f"{(time.time() - started) / 60:.0f} min")
    if args.json:
        args.json.write_text(json.dumps({"seed": manifest["seed"], "commit": commit(), "load_start": load_start,
                                         "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                                         "load_end": load_end, "summary": summary, "records": records}, indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
