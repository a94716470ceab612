"""Whether the collector's labels move the step split: a real program diagnosed with and without them.

    python bench/label_cost.py [--programs tsp wlm-lstm wlm-transformer] [--repeats 1]

Inside the window every outermost torch call goes through the source marker (a ``TorchFunctionMode`` that opens a
profiler range named after the user's line), and every module call and backward through the phase labels. Their
time lands in the phases they label, so a phase with many small calls (a Python loop over 1,000 time steps of an
``LSTMCell``) could grow against the others. Each program of ``../shared/programs`` is diagnosed as a user would
(``OMP_NUM_THREADS=1``, ``--no-escalate``), once with the source labels (the default) and once with
``--no-source-lines`` (phase labels only: without them there is no split at all), and timed by hand with
``tests/programs/hand_timing_*.py`` (no profiler, no labels). It prints each phase's share under each, the recorded
and unprofiled step, and the source marker's events per step. Run from the repository root with advisor installed;
it copies each program to a temporary folder.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = REPO.parent / "shared" / "programs" / "pytorch_examples"
HAND = REPO / "tests" / "programs"

#: name: (folder, script arguments, hand timing script and arguments, extra environment, set-up script)
CASES = {
    "tsp": ("time_sequence_prediction", ["--steps", "2"], ["hand_timing_tsp.py"],
            {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}, "generate_sine_wave.py"),
    "wlm-lstm": ("word_language_model", ["--epochs", "1"], ["hand_timing_wlm.py", "--model", "LSTM"], {}, None),
    "wlm-transformer": ("word_language_model", ["--epochs", "1", "--model", "Transformer"],
                        ["hand_timing_wlm.py", "--model", "Transformer"], {}, None),
}
PHASES = ("forward", "backward", "optimizer", "other")


def _diagnose(folder: Path, args: list[str], env: dict[str, str], labels: bool) -> dict[str, float]:
    out = folder.parent / f"run-{'labels' if labels else 'phases'}"
    shutil.rmtree(out, ignore_errors=True)
    command = ["advisor", "diagnose", "train.py" if (folder / "train.py").exists() else "main.py", "--out", str(out),
               "-q", "--no-escalate", *([] if labels else ["--no-source-lines"]), "--", *args]
    subprocess.run(command, cwd=folder, env=env, check=True, stdout=subprocess.DEVNULL)
    facts = {f["name"]: f["value"] for f in json.loads((out / "findings.json").read_text())["facts"]}
    with gzip.open(out / "framework" / "rank0.pt.trace.json.gz", "rt") as fh:
        events = json.load(fh)["traceEvents"]
    marks = sum(1 for e in events if str(e.get("name", "")).startswith("advisor::src"))
    steps = facts.get("steps.count") or 1
    return {**{p: facts[f"phases.{p}.share"] for p in PHASES}, "step_ms": facts["steps.time_ms_median"],
            "unprofiled_ms": facts.get("steps.unprofiled_ms") or float("nan"), "marks": marks / steps}


def _hand(folder: Path, script: list[str], env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run([sys.executable, str(HAND / script[0]), *script[1:]], cwd=folder, env=env, check=True,
                          capture_output=True, text=True)
    truth = json.loads(done.stdout.strip().splitlines()[-1])
    update = truth.get("update", 0.0) + truth.get("rest", 0.0)
    return {"forward": truth["forward"], "backward": truth["backward"], "optimizer": update, "other": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'program':16} {'run':8} " + " ".join(f"{p:>9}" for p in PHASES)
          + f" {'step ms':>9} {'unprof ms':>9} {'src marks':>9}")
    for name in args.programs:
        folder_name, script_args, hand, extra, setup = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(shutil.copytree(PROGRAMS / folder_name, Path(tmp) / folder_name))
            run_env = {**env, **extra}
            if setup:
                subprocess.run([sys.executable, setup], cwd=folder, env=run_env, check=True)
            for _ in range(args.repeats):
                rows = {"labels": _diagnose(folder, script_args, run_env, True),
                        "phases": _diagnose(folder, script_args, run_env, False),
                        "hand": _hand(folder, hand, run_env)}
                for run, row in rows.items():
                    extra_cols = (f" {row['step_ms']:9.1f} {row['unprofiled_ms']:9.1f} {row['marks']:9.0f}"
                                  if "step_ms" in row else "")
                    print(f"{name:16} {run:8} " + " ".join(f"{row[p]:9.3f}" for p in PHASES) + extra_cols)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
