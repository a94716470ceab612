"""Are the advisor's estimated gains right? Each planted example against its fixed twin.

    PYTHONPATH=$PWD python bench/calibrate.py [--repeat 3] [--only python_loop.py] [--json cal.json]
                                              [--threads 1] [--prefault-gib 4]

For every row of ``examples/calibration.yaml`` (an example with a planted
bottleneck, the rule that must fire on it, the arguments of its fixed twin,
any extra ``advisor diagnose`` options and any environment both runs need),
and ``--repeat`` times over (or the row's ``pairs``, where it asks for more):
run ``advisor diagnose --no-escalate`` on the slow example and on the fixed
twin with the same options, the slow one first in odd pairs and the twin
first in even ones, then ``advisor compare`` on the pair. Per row it
prints whether the rule fired on every slow run and stayed quiet on every
fixed one, the estimated gain (the rule's ``impact_ms`` on the slow run), the
measured gain, the error and PASS/FAIL against +-30% (a rule that did not
fire fails; one that fires again after the fix is shown, not failed: the
fixed twin may hold a smaller problem of the same kind).

The measured gain is the fall of the mean step time from the slow run to the
fixed one (compare.json ``step.delta``, negated): that is what the user gets
back. compare.json also gives, per diagnosis, the fall of "the time the
diagnosis pointed at" (its largest millisecond fact that both runs measured,
``target_gain_ms``), printed beside it where there is one; it is not what the
estimate is judged against, because a fix moves time between phases (four
DataLoader workers remove the wait but share the cores with the training
process, so the step gains less than the wait fell), and a rule that reads a
table (CPU001) points at no single fact.

Medians over the pairs are reported. The error judged is the median of the
pairs' errors, (estimate - measured) / measured (+inf for a pair whose fix
gave nothing back: an overestimate, ranked with its gain): the two runs of a pair run
back to back and share the machine's state, while the machine's speed drifts
between pairs (on this 2-core machine a fixed loop's time varies by 30% from
minute to minute), so a ratio of medians taken over different pairs mixes that
drift into the error; it is printed beside (``of medians``). The order
alternates because the drift also runs within a pair: always running the slow
one first adds to every gain while the machine speeds up and takes from it
while it slows down. What is left moves a whole run's speed, and a row whose
gain is small against it needs more pairs: a row may ask for a least number
(``pairs: 7``), and after that pairs are added while the standard error of
the judged error (from the spread of the pairs' errors) is over ``--noise``
(default 0.15, 15 points; at most ``--max-pairs``, default 12), or while
the judged error lies within one standard error of +-30%, a pass or a fail
that one more fast or slow pair could turn. The ``noise`` column prints that
standard error; a row that ends with it near 30 points is decided by the
machine as much as by its estimate. Beside it,
*bare*: the same without the profiler, from the steps each run timed after its window (``compare.json``
``step.unprofiled``), the estimate taken as the same share of the slow run's
unprofiled step. The profiler's own cost grows with the operators a step
records, so it inflates a slow version with more operators more than its
fix, and the two gains can differ. A row is judged on the recorded steps'
gain unless it says ``judge: bare``: a rule whose estimate is priced from
measurements made without the profiler (INF001's host-cost probes, CPU002's
copy probe) is judged where it was measured, and so is one whose fix removes
so many recorded operators that the recorded gain holds the profiler's cost
of recording them (OPT001's fused step removes the for-loop's per-parameter
calls; CPU004's builtin GELU removes the hand-written one's operators), or
one whose slow version hides the profiler's cost in waits that its fix
removes (DIST002's ranks wait for each other's all-reduce).
``--pool A.json B.json ...`` runs nothing: it judges each row over the pairs of several
earlier runs of the same code together.
Not part of the test suite: it takes minutes, and
figures taken on a busy machine are noisy (it prints the load average).
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLES = REPO / "examples"
TABLE = EXAMPLES / "calibration.yaml"
TOLERANCE = 0.30
#: what a row's estimate is judged against: the recorded steps' gain (the default), or the gain without the
#: profiler, for a rule whose estimate is priced from measurements made without it (INF001's host-cost probes) or
#: whose fix removes many recorded operators besides the ones it prices (CPU002, OPT001, CPU004)
JUDGES = ("recorded", "bare")


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The calibration table, checked: each row names an existing example and a rule."""
    try:
        rows = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SystemExit(f"{path}: cannot read the calibration table ({exc})") from exc
    if not isinstance(rows, list):
        raise SystemExit(f"{path}: expected a list of rows (example, rule, fixed_args, diagnose_args)")
    out = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not row.get("example") or not row.get("rule"):
            raise SystemExit(f"{path}: row {i} needs at least `example` and `rule`")
        for key in ("fixed_args", "diagnose_args"):
            value = row.get(key) or []
            if not isinstance(value, list):
                raise SystemExit(f"{path}: row {i} ({row['example']}): `{key}` must be a list of arguments")
            row[key] = [str(v) for v in value]
        env = row.get("env") or {}
        if not isinstance(env, dict):
            raise SystemExit(f"{path}: row {i} ({row['example']}): `env` must map variable names to values")
        row["env"] = {str(k): str(v) for k, v in env.items()}
        pairs = row.get("pairs") or 0
        if not isinstance(pairs, int) or isinstance(pairs, bool) or pairs < 0:
            raise SystemExit(f"{path}: row {i} ({row['example']}): `pairs` must be a whole number of pairs")
        row["pairs"] = pairs
        row["judge"] = row.get("judge") or "recorded"
        if row["judge"] not in JUDGES:
            raise SystemExit(f"{path}: row {i} ({row['example']}): `judge` must be one of {', '.join(JUDGES)}")
        if not (EXAMPLES / row["example"]).is_file():
            raise SystemExit(f"{path}: row {i}: examples/{row['example']} does not exist")
        out.append(row)
    return out


def prefault(gib: float) -> None:
    """Touch ``gib`` GiB of fresh memory and give it back. On a VM whose host takes back memory the guest
    leaves idle, memory the guest has not touched lately faults in several times slower; a recording that grows
    (the profiler holds every operator's inputs) then slows down mid-window at random. Memory touched just
    before a run is fast to fault in again for the next seconds (bench/README.md)."""
    if gib <= 0:
        return
    size = int(gib * (1 << 30))
    page = mmap.PAGESIZE
    with mmap.mmap(-1, size) as memory:
        for offset in range(0, size, page):
            memory[offset] = 1


def _advisor(*args: str, log: Path, env: dict[str, str] | None = None) -> None:
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log.open("a") as out:
        proc = subprocess.run([sys.executable, "-m", "advisor", *args], cwd=REPO, env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"advisor {' '.join(args[:2])} failed ({proc.returncode}); see {log}")


def _diagnoses(run: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((run / "diagnoses.json").read_text())
    return {d["rule_id"]: d for d in data.get("diagnoses", [])}


def run_pair(row: dict[str, Any], folder: Path, extra: list[str], prefault_gib: float = 0.0,
             fixed_first: bool = False) -> dict[str, Any]:
    """One slow run, its fixed twin and their comparison; the figures of ``row['rule']``. ``fixed_first``: run
    the twin first, so that over pairs of both orders a machine that speeds up or slows down within a pair biases
    the gain neither way."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "advisor.log"
    script = str(EXAMPLES / row["example"])
    options = ["--no-escalate", "-q", *extra, *row["diagnose_args"]]
    slow, fixed, compared = folder / "slow", folder / "fixed", folder / "compare"
    runs = [(slow, []), (fixed, ["--", *row["fixed_args"]])]
    for out, args in reversed(runs) if fixed_first else runs:
        prefault(prefault_gib)
        _advisor("diagnose", script, *options, "--out", str(out), *args, log=log, env=row["env"])
    _advisor("compare", str(slow), str(fixed), "-q", "--out", str(compared), log=log)
    data = json.loads((compared / "compare.json").read_text())
    rule = row["rule"]
    gain = next((g for g in data["gains"] if g["rule_id"] == rule), None)
    bare = data["step"].get("unprofiled") or {}
    fixed_diagnoses = _diagnoses(fixed)
    return {
        "folder": str(folder), "order": "fixed first" if fixed_first else "slow first",
        "fired": gain is not None, "quiet_after": rule not in fixed_diagnoses,
        "estimate_ms": gain["estimate_ms"] if gain else None,
        # what the trial stage measured on the slow run, where the rule tries a setting
        "trial_ms": gain.get("trial_ms") if gain else None,
        "step_gain_ms": -data["step"]["delta"] if data["step"]["delta"] is not None else None,
        "step_ms": [data["step"]["a"], data["step"]["b"]],
        "target": gain["target"]["fact"] if gain and gain["target"] else None,
        "target_gain_ms": gain["target_gain_ms"] if gain else None,
        "significant": data["step"]["significant"],
        # without the profiler: the steps each run timed after its window, and the estimate as the same share
        # of the slow run's unprofiled step
        "bare_step_ms": [bare.get("a"), bare.get("b")],
        "bare_gain_ms": -bare["delta"] if bare.get("delta") is not None else None,
        "bare_estimate_ms": (gain["estimate_ms"] * bare["a"] / data["step"]["a"]
                             if gain and gain["estimate_ms"] is not None and bare.get("a") and data["step"]["a"]
                             else None),
    }


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(row: dict[str, Any], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    estimate = _median([p["estimate_ms"] for p in pairs])
    measured = _median([p["step_gain_ms"] for p in pairs])
    of_medians = (estimate - measured) / measured if estimate is not None and measured else None
    errors = [_error(p["estimate_ms"], p["step_gain_ms"]) for p in pairs]
    error = _median(errors)
    fired = all(p["fired"] for p in pairs)
    quiet = all(p["quiet_after"] for p in pairs)
    # Firing again after the fix is reported, not failed: the fixed twin may still hold a smaller problem of
    # the same kind (a fused optimizer over 800 tiny tensors is still most of a tiny model's step).
    bare_estimate = _median([p.get("bare_estimate_ms") for p in pairs])
    bare_measured = _median([p.get("bare_gain_ms") for p in pairs])
    bare_errors = [_error(p.get("bare_estimate_ms"), p.get("bare_gain_ms")) for p in pairs]
    bare_error = _median(bare_errors)
    judged = bare_error if row["judge"] == "bare" else error
    ok = fired and judged is not None and abs(judged) <= TOLERANCE
    noise = _noise(bare_errors if row["judge"] == "bare" else errors)
    trial = _median([p.get("trial_ms") for p in pairs])
    trial_error = _median([_error(p.get("trial_ms"), p["step_gain_ms"]) for p in pairs if p.get("trial_ms") is not None])
    return {"example": row["example"], "rule": row["rule"], "judge": row["judge"], "pairs": pairs, "fired": fired,
            "trial_ms": trial, "trial_error": trial_error,
            "quiet_after": quiet,
            "estimate_ms": estimate, "measured_ms": measured,
            "bare_estimate_ms": bare_estimate, "bare_measured_ms": bare_measured, "bare_error": bare_error,
            "target": next((p["target"] for p in pairs if p["target"]), None),
            "target_gain_ms": _median([p["target_gain_ms"] for p in pairs]),
            "error": error, "error_of_medians": of_medians, "noise": noise, "result": "PASS" if ok else "FAIL"}


def _noise(errors: list[float | None]) -> float | None:
    """The standard error of the judged error (the median of the pairs' errors), in the same units: how far the
    machine alone can move it. From the pairs' errors, not their gains: an estimate made in the same run follows a
    gain the machine moved (a slow disk slows the checkpoint and prices it higher alike). Robust (from the median
    absolute deviation), as one pair whose process ran slow throughout would otherwise set it alone."""
    known = [e for e in errors if e is not None]
    if len(known) < 3:
        return None
    median = statistics.median(known)
    if math.isinf(median):  # most pairs gained nothing: no spread to speak of
        return None
    spread = 1.4826 * statistics.median(abs(e - median) for e in known)  # a normal distribution's sigma
    return 1.2533 * spread / len(known) ** 0.5


def needs_more(row: dict[str, Any], pairs: list[dict[str, Any]], target: float, most: int) -> bool:
    """Another pair, while fewer than ``most`` ran, when the row's judged error is still noisier than ``target``
    (its standard error, in the error's units) or lies within one standard error of the tolerance, on either side:
    a row is then decided by its estimate, not by how the machine moved. The second test runs both ways, so it
    adds pairs to a row that looks like a narrow pass as much as to one that looks like a narrow fail."""
    if len(pairs) >= most or not all(p["fired"] for p in pairs):
        return False
    summary = summarise(row, pairs)
    noise = summary["noise"]
    judged = summary["bare_error"] if row["judge"] == "bare" else summary["error"]
    if noise is None or judged is None or noise > target:
        return True
    return abs(abs(judged) - TOLERANCE) < noise


def _error(estimate: float | None, measured: float | None) -> float | None:
    """One pair's error: (estimate - measured) / measured; +inf where the fix gave nothing back or cost time.

    A pair whose fixed run came out slower (or no faster) than its slow run overestimated its gain, whatever the
    estimate: as (estimate - measured) / measured its error would be negative, the lower the nearer the gain was to
    zero, and would pull the median towards underestimating (a noisy row with two such pairs of twelve, OPT002 in
    the calibration of 2026-12-07: -50% where the pairs' errors in the order of their gains give -30%). As +inf it
    ranks where its gain does, past every pair that gained something, so the median of the errors stays the error at
    the median gain."""
    if estimate is None or measured is None:
        return None
    if measured <= 0:
        return math.inf if estimate > 0 else None
    return (estimate - measured) / measured


def _ms(value: float | None) -> str:
    return f"{value:8.1f}" if value is not None else "     n/a"


def print_pair(n: int, pair: dict[str, Any]) -> None:
    a, b = pair["step_ms"]
    first = " (fixed twin first)" if pair.get("order") == "fixed first" else ""
    tried = f", tried {_ms(pair['trial_ms'])}" if pair.get("trial_ms") is not None else ""
    print(f"    pair {n}{first}: step {_ms(a)} -> {_ms(b)} ms, estimated {_ms(pair['estimate_ms'])}{tried}, measured "
          f"{_ms(pair['step_gain_ms'])}" + (f", {pair['target']} fell {_ms(pair['target_gain_ms'])}"
                                           if pair["target"] else "")
          + ("" if pair["fired"] else ", rule did NOT fire") + ("" if pair["quiet_after"] else ", fired after fix"))
    if pair.get("bare_gain_ms") is not None:
        c, d = pair["bare_step_ms"]
        print(f"            without the profiler {_ms(c)} -> {_ms(d)} ms, estimated {_ms(pair['bare_estimate_ms'])}, "
              f"measured {_ms(pair['bare_gain_ms'])}")


def print_table(results: list[dict[str, Any]]) -> None:
    print(f"\n{'example':<22} {'rule':<7} {'fired':<6} {'quiet':<6} {'pairs':>5} {'est ms':>8} {'meas ms':>8} "
          f"{'target ms':>9} {'error':>7}  result  {'of medians':>10}  {'bare est':>8} {'bare ms':>8} {'error':>7}  "
          f"{'noise':>6}")
    for r in results:
        error = f"{r['error']:+7.0%}" if r["error"] is not None else "    n/a"
        bare = f"{r['bare_error']:+7.0%}" if r.get("bare_error") is not None else "    n/a"
        medians = f"{r['error_of_medians']:+10.0%}" if r.get("error_of_medians") is not None else "       n/a"
        if r.get("judge") == "bare":  # the judged error is marked
            bare += "*"
        else:
            error += "*"
        print(f"{r['example']:<22} {r['rule']:<7} {str(r['fired']).lower():<6} {str(r['quiet_after']).lower():<6} "
              f"{len(r['pairs']):>5} "
              f"{_ms(r['estimate_ms'])} {_ms(r['measured_ms'])} {_ms(r['target_gain_ms']):>9} {error}  "
              f"{r['result']:<6}  {medians}  {_ms(r.get('bare_estimate_ms'))} {_ms(r.get('bare_measured_ms'))} {bare}  "
              + (f"{r['noise']:>6.0%}" if r.get("noise") is not None else "   n/a"))
    tried = [r for r in results if r.get("trial_ms") is not None]
    if tried:
        print("\nthe trial stage's measured gain on the slow run, against the fixed twin's gain:")
        for r in tried:
            error = f"{r['trial_error']:+7.0%}" if r.get("trial_error") is not None else "    n/a"
            print(f"  {r['example']:<22} {r['rule']:<7} tried {_ms(r['trial_ms'])} ms, measured "
                  f"{_ms(r['measured_ms'])} ms, error {error}")
    print(f"(medians of the pairs; measured = fall of the mean step time; error = median of the pairs' errors, +inf for a pair that gained nothing; "
          f"of medians = (median est - median meas) / median meas; target = fall of the time the diagnosis "
          f"pointed at, where compare names one; quiet = the rule did not fire on any fixed run; PASS: fired on "
          f"every slow run and the judged error (*) within +-{TOLERANCE:.0%}. bare = without the profiler: the median "
          f"of the steps each run timed after its window, and the estimate as the same share of the slow run's "
          f"unprofiled step; judged only for rows whose estimate is priced without the profiler (`judge: bare`); "
          f"noise = the standard error of the judged error, from the spread of the pairs' errors: where it nears "
          f"+-{TOLERANCE:.0%} the machine, not the estimate, decides the row; give the row more pairs)")


def pool_runs(files: list[Path]) -> list[dict[str, Any]]:
    """Each row judged over the pairs of several runs' ``--json`` files, in the order the rows first appear.

    One run of twelve pairs leaves a noisy row (OPT002, CPU004 on this machine) decided by how the machine moved;
    the same estimates over four runs' pairs are decided by the estimates. Prints each file's own result and
    its commit, and says where the files come from different commits (their estimates may differ)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    commits = set()
    for path in files:
        try:
            data = json.loads(path.read_text())
            results = data["results"]
            # judged again as this code judges: a file written before a change of judging reads the same as a new one
            passed = sum(summarise({**r, "pairs": 0}, r["pairs"])["result"] == "PASS" for r in results)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{path}: not the --json output of a calibration run ({exc})") from None
        commit = data.get("commit") or "commit not recorded"
        commits.add(commit)
        print(f"{path}: {passed} of {len(results)} rows pass on their own ({commit[:12] if data.get('commit') else commit}, "
              f"load average {data.get('load_before', '?')} before)")
        for r in results:
            row = rows.setdefault((r["example"], r["rule"]), {"example": r["example"], "rule": r["rule"],
                                                              "judge": r.get("judge", "recorded"), "pairs": []})
            if row["judge"] != r.get("judge", "recorded"):
                raise SystemExit(f"{path}: {r['example']} ({r['rule']}) is judged {r.get('judge', 'recorded')}, "
                                 f"and {row['judge']} in the files before it: pool runs of the same table")
            row["pairs"].extend(r["pairs"])
    if len(commits) > 1 or "commit not recorded" in commits:
        print("note: the files do not all name the same commit: pool runs whose estimates are the same")
    return [summarise({**row, "pairs": 0}, row["pairs"]) for row in rows.values()]


def trial_pairs(paths: list[Path]) -> list[dict[str, Any]]:
    """Every (estimate, measured) pair the trial stage left in these run directories, or the run directories
    under them: each diagnosis whose gain a trial measured on the user's own steps, with its rule's estimate."""
    runs = sorted({d.parent for p in paths for d in ([p / "diagnoses.json"] if (p / "diagnoses.json").exists()
                                                      else p.rglob("diagnoses.json"))})
    out = []
    for run in runs:
        for d in json.loads((run / "diagnoses.json").read_text()).get("diagnoses", []):
            row = d.get("measured")
            if d.get("gain_source") != "trial" or not isinstance(row, dict):
                continue
            out.append({"run": str(run), "rule": d["rule_id"], "knob": row.get("knob"),
                        "estimate_ms": d.get("estimate_ms"), "measured_ms": row.get("gain_ms"),
                        "spread_ms": row.get("spread_ms"), "pairs": row.get("pairs"),
                        "error": _error(d.get("estimate_ms"), row.get("gain_ms"))})
    return out


def print_trials(pairs: list[dict[str, Any]]) -> int:
    if not pairs:
        print("no diagnosis in these run directories had its gain measured by a trial")
        return 1
    print(f"{'rule':<8} {'knob':<22} {'est ms':>8} {'meas ms':>8} {'spread':>8} {'pairs':>5} {'error':>7}  run")
    for p in pairs:
        error = f"{p['error']:+7.0%}" if p["error"] is not None else "    n/a"
        print(f"{p['rule']:<8} {p['knob']:<22} {_ms(p['estimate_ms'])} {_ms(p['measured_ms'])} "
              f"{_ms(p['spread_ms'])} {p['pairs']:>5} {error}  {p['run']}")
    errors = [p["error"] for p in pairs if p["error"] is not None and math.isfinite(p["error"])]
    within = sum(abs(e) <= TOLERANCE for e in errors)
    print(f"(error = (estimate - measured) / measured; {within} of {len(errors)} estimates within "
          f"+-{TOLERANCE:.0%} of the measured gain)")
    return 0


def _commit() -> str | None:
    """The checkout's commit, with ``+changes`` where its files differ from it; None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="EXAMPLE", help="only this example (repeatable)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="slow/fixed pairs per example, the slow run first in odd pairs and the fixed twin in "
                             "even ones (median reported); a row's `pairs` raises it for that row")
    parser.add_argument("--noise", type=float, default=0.15, metavar="ERROR",
                        help="after --repeat pairs, add pairs to a row while the standard error of its judged error "
                             "is above this (default 0.15, i.e. 15 points; 10: never), or while the error lies "
                             "within one standard error of the tolerance")
    parser.add_argument("--max-pairs", type=int, default=12, help="no row runs more pairs than this (default 12)")
    parser.add_argument("--active", type=int, help="profiled steps per run (advisor diagnose --active)")
    parser.add_argument("--threads", type=int,
                        help="OMP_NUM_THREADS for every run (examples that set their own threads keep theirs): one "
                             "thread keeps a busy machine's scheduler out of the figures, as parallel operators "
                             "on a shared core wait for a descheduled thread at every barrier")
    parser.add_argument("--prefault-gib", type=float, default=0.0, metavar="GIB",
                        help="touch this much fresh memory before each diagnose run: on a VM that takes back idle "
                             "guest memory, a recording that grows otherwise slows down mid-window at random "
                             "(see bench/README.md); 0 (default): never")
    parser.add_argument("--table", type=Path, default=TABLE,
                        help="the calibration table (default examples/calibration.yaml)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--pool", type=Path, nargs="+", metavar="JSON",
                        help="run nothing: judge each row over the pairs of these earlier runs' --json files "
                             "together (runs of the same estimates: a row's noise falls with the pairs pooled)")
    parser.add_argument("--out", type=Path, help="folder for the runs (default bench/out/calibrate-<time>)")
    parser.add_argument("--trials", type=Path, nargs="+", metavar="RUN_DIR",
                        help="run nothing: list the (estimate, measured) pair of every diagnosis a trial measured in "
                             "these run directories (or folders of them), and the estimates' errors against it")
    args = parser.parse_args()
    if args.trials:
        sys.exit(print_trials(trial_pairs(args.trials)))
    if args.pool:
        pooled = pool_runs(args.pool)
        print_table(pooled)
        if args.json:
            args.json.write_text(json.dumps({"pooled": [str(f) for f in args.pool], "results": pooled}, indent=1))
        sys.exit(0 if all(r["result"] == "PASS" for r in pooled) else 1)
    threads = str(args.threads) if args.threads else os.environ.get("OMP_NUM_THREADS")
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = threads  # every run's environment is this one's
    rows = read_rows(args.table)
    if args.only:
        wanted = {name if name.endswith(".py") else name + ".py" for name in args.only}
        unknown = wanted - {r["example"] for r in rows}
        if unknown:
            raise SystemExit(f"{args.table}: no row for {', '.join(sorted(unknown))}")
        rows = [r for r in rows if r["example"] in wanted]
    out = args.out or HERE / "out" / f"calibrate-{time.strftime('%Y%m%d-%H%M%S')}"
    extra = ["--active", str(args.active)] if args.active else []
    before = load_average()
    print(f"load average before: {before} ({os.cpu_count()} CPUs); runs in {out}"
          + (f"; OMP_NUM_THREADS={threads}" if threads else "")
          + (f"; {args.prefault_gib:g} GiB touched before each run" if args.prefault_gib else ""))
    results = []
    for row in rows:
        env = " ".join(f"{k}={v}" for k, v in row["env"].items())
        print(f"\n{row['example']} ({row['rule']}; fixed: {' '.join(row['fixed_args']) or 'no arguments'}"
              + (f"; both runs with {env}" if env else "") + ")")
        pairs: list[dict[str, Any]] = []
        least = max(args.repeat, row["pairs"])
        while len(pairs) < least or needs_more(row, pairs, args.noise, args.max_pairs):
            n = len(pairs) + 1
            pairs.append(run_pair(row, out / Path(row["example"]).stem / f"pair{n}", extra, args.prefault_gib,
                                  fixed_first=n % 2 == 0))
            print_pair(n, pairs[-1])
        results.append(summarise(row, pairs))
    print_table(results)
    after = load_average()
    print(f"\nload average after: {after}")
    if args.json:
        args.json.write_text(json.dumps({"commit": _commit(), "load_before": before, "load_after": after,
                                         "cpus": os.cpu_count(),
                                         "repeat": args.repeat, "noise": args.noise, "max_pairs": args.max_pairs,
                                         "threads": threads, "prefault_gib": args.prefault_gib,
                                         "results": results}, indent=1))
    sys.exit(0 if all(r["result"] == "PASS" for r in results) else 1)


if __name__ == "__main__":
    main()
