"""Step finding records the training's loop: not an evaluation run before it, and not only loops with torch.optim.

Each test diagnoses a real script (``scripts/loops.py``) under the real collector, as a user would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "loops.py"


def _diagnose(tmp_path: Path, loop: str, *options: str, steps: int | None = None) -> tuple[dict, dict]:
    out = tmp_path / "run"
    tmp_path.mkdir(exist_ok=True)
    more = ("--steps", str(steps)) if steps is not None else ()
    cli = run_cli("diagnose", str(SCRIPT), "--out", str(out), "-q", "--no-escalate", "--no-trial", *options, "--", "--loop", loop,
                  *more, cwd=tmp_path, timeout=300)
    assert cli.code == 0, cli.output
    facts = {f["name"]: f["value"] for f in json.loads((out / "findings.json").read_text())["facts"]}
    return json.loads((out / "run.json").read_text()), facts


def _trains(facts: dict) -> None:
    """The recorded steps are training steps: each has a forward and a backward pass."""
    assert facts["steps.count"] == 5
    assert facts["workload.kind"] == "training"
    assert facts["phases.backward.ms"] > 0 and facts["phases.forward.ms"] > 0


@pytest.mark.parametrize("loop", ["eval-first", "eval-loader"])
def test_an_evaluation_before_the_first_optimizer_step_is_skipped(tmp_path: Path, loop: str) -> None:
    meta, facts = _diagnose(tmp_path, loop)
    assert meta["step_method"] == "optimizer"
    _trains(facts)
    assert facts["steps.skipped_calls"] >= 40
    report = (tmp_path / "run" / "report.md").read_text()
    assert "was an evaluation, and was skipped" in report


def test_a_hand_written_update_is_a_training_step(tmp_path: Path) -> None:
    meta, facts = _diagnose(tmp_path, "hand-sgd")
    assert meta["step_method"] == "backward"
    _trains(facts)
    # the update written by hand, from the end of the backward to the next forward, is the optimizer phase
    assert facts["phases.optimizer.ms"] > 0
    assert facts["steps.skipped_loop"] == ""


def test_an_evaluation_taken_for_inference_gives_way_to_the_training_after_it(tmp_path: Path) -> None:
    """No optimizer: the evaluation's model calls are taken for an inference loop until a backward shows."""
    meta, facts = _diagnose(tmp_path, "eval-then-hand")
    assert meta["step_method"] == "backward"
    _trains(facts)
    assert facts["steps.skipped_loop"] == "module" and facts["steps.skipped_steps"] >= 1


def test_micro_batches_accumulated_over_an_optimizer_step_are_one_step(tmp_path: Path) -> None:
    """Four backward passes before the optimizer's first step are not four steps, and none of the micro-batches'
    forward passes is taken for a hand-written update."""
    # a short schedule, so that the labels go on while the first backward passes are all that was seen
    meta, facts = _diagnose(tmp_path, "accumulate", "--wait", "1", "--warmup", "1")
    assert meta["step_method"] == "optimizer"
    _trains(facts)
    assert facts["phases.optimizer.share"] < 0.2 < facts["phases.forward.share"]
    assert facts["steps.skipped_loop"] == ""


def test_steps_module_counts_calls_of_a_model_that_trains(tmp_path: Path) -> None:
    meta, facts = _diagnose(tmp_path, "hand-sgd", "--steps", "module")
    assert meta["step_method"] == "module"
    _trains(facts)


def test_a_script_shorter_than_the_time_window_is_told_to_open_it_earlier(tmp_path: Path) -> None:
    """No step recognised: lowering --wait/--warmup cannot help, --window-start does."""
    out = tmp_path / "run"
    script = Path(__file__).parent / "scripts" / "model_only.py"
    cli = run_cli("diagnose", str(script), "--out", str(out), "--no-escalate", "--no-trial", "--", "--seconds", "1", "--train-mode",
                  "--one-call", cwd=tmp_path, timeout=300)
    text = " ".join(cli.output.replace("│", " ").split())
    assert "before any step was recognised" in text and "lower --window-start" in text, cli.output
    assert "--wait" not in text
    # and what --window-start 0 records: a time window of the same script
    again = run_cli("diagnose", str(script), "--out", str(tmp_path / "again"), "-q", "--no-escalate", "--no-trial", "--window-start",
                    "0", "--window", "0.5", "--", "--seconds", "3", "--train-mode", "--one-call", cwd=tmp_path,
                    timeout=300)
    assert again.code == 0, again.output
    assert json.loads((tmp_path / "again" / "run.json").read_text())["step_method"] == "time"


def test_a_long_closure_step_is_recorded_by_its_closure_evaluations(tmp_path: Path) -> None:
    """LBFGS evaluating its closure 10 times a step, each evaluation 0.1 s: a step (1 s) longer than the time
    window (0.5 s here, 5 s by default) is recorded a closure evaluation at a time, and the time window, due 0.3 s
    after the first model call, does not open inside the first step."""
    meta, facts = _diagnose(tmp_path, "lbfgs-long", "--window-start", "0.3", "--window", "0.5", steps=4)
    assert meta["step_method"] == "closure"
    assert meta["closure_unit"]["closure_calls"] >= 10 and meta["closure_unit"]["optimizer_step_s"] >= 1.0
    # as many closure evaluations as the window holds (0.5 s of 0.11 s ones), each a forward and a backward
    assert facts["steps.count"] == facts["steps.planned"] == 4
    assert facts["workload.kind"] == "training"
    assert facts["phases.backward.ms"] > 0 and facts["phases.forward.ms"] > 0
    assert facts["steps.closure_unit_calls"] >= 10
    # each evaluation sleeps 0.1 s between its forward and its backward: the step is ~0.1 s, not the whole 1 s
    assert 80 <= facts["steps.time_ms_median"] <= 400
    assert facts["phases.optimizer.share"] < 0.2
    assert "each step here is one closure evaluation" in " ".join((tmp_path / "run" / "report.md").read_text().split())


def test_long_steps_get_a_schedule_fitted_to_their_length(tmp_path: Path) -> None:
    """Steps of 0.6 s against a 0.5 s window: step 0 (the set-up) and step 1 (timed) skipped, one recorded, no
    warm-up and no shapes; the verdict stands on it, and a script of four steps is recorded at all."""
    meta, facts = _diagnose(tmp_path, "long-steps", "--window", "0.5", steps=4)
    assert meta["step_method"] == "optimizer"
    assert meta["schedule"]["active"] == 1 and meta["schedule"]["warmup"] == 0 and meta["schedule"]["wait"] == 2
    assert meta["schedule"]["shape_steps"] == 0 and not (tmp_path / "run" / "framework" / "shapes").exists()
    assert facts["steps.count"] == 1 and facts["steps.planned"] == 1 and facts["steps.fitted_to_ms"] >= 600
    diagnoses = json.loads((tmp_path / "run" / "diagnoses.json").read_text())
    assert "steady state" not in " ".join(diagnoses["verdict"]["missing"])
    # the user's own schedule stands as given
    again, _ = _diagnose(tmp_path / "mine", "long-steps", "--window", "0.5", "--active", "2", "--wait", "1",
                         "--warmup", "0", steps=5)
    assert again["schedule"]["active"] == 2 and again["schedule"]["fitted_to_s"] is None


def test_an_inference_loop_in_training_mode_with_autograd_is_stepped_by_its_model_calls(tmp_path: Path) -> None:
    """No no_grad, no eval(), no optimizer and no backward: the model's second call with no backward since shows a
    loop of forward passes, and its calls are the steps (before, nothing was recorded: the script ended before the
    time window opened)."""
    meta, facts = _diagnose(tmp_path, "infer-train", steps=200)
    assert meta["step_method"] == "module"
    assert facts["steps.count"] == 5 and facts["workload.kind"] == "inference"
    assert facts["phases.forward.ms"] > 0 and facts["phases.backward.ms"] == 0


def test_an_optimizer_that_never_steps_still_gets_a_time_window(tmp_path: Path) -> None:
    """The time window waits out a step under way (the first training forward, a backward), not the whole run."""
    meta, facts = _diagnose(tmp_path, "never-steps", "--window-start", "0.5", "--window", "0.5")
    assert meta["step_method"] == "time" and meta["profile"] == "complete"
    assert facts["phases.forward.ms"] > 0 and facts["phases.backward.ms"] > 0


def test_an_evaluation_longer_than_the_window_before_a_hand_written_update_gives_way(tmp_path: Path) -> None:
    """No optimizer: 60 calls under no_grad outlast the schedule and are recorded as an inference loop; the script
    runs on a while unprofiled, the backward shows, and the training's steps are recorded in their place."""
    meta, facts = _diagnose(tmp_path, "long-eval-hand")
    assert meta["step_method"] == "backward"
    _trains(facts)
    assert facts["steps.skipped_loop"] == "module" and facts["steps.skipped_steps"] >= 18
    assert "was an evaluation, and was skipped" in " ".join((tmp_path / "run" / "report.md").read_text().split())


def test_an_inference_loop_is_kept_after_watching_for_a_training(tmp_path: Path) -> None:
    """A program that only infers is stopped after the watch: about as long again as its loop ran."""
    script = Path(__file__).parent / "scripts" / "model_only.py"
    out = tmp_path / "run"
    cli = run_cli("diagnose", str(script), "--out", str(out), "-q", "--no-escalate", "--no-trial", "--", "--seconds", "60",
                  cwd=tmp_path, timeout=300)
    assert cli.code == 0, cli.output
    meta = json.loads((out / "run.json").read_text())
    assert meta["step_method"] == "module" and meta["profile"] == "complete" and meta["outcome"] == "captured"
    assert meta["wall_s"] < 30
