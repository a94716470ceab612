"""The trial's plan (advisor.collect.trial.plan_trial): what it tries, in blocks of how many steps, and what it
does not, with why."""

from __future__ import annotations

from advisor.collect.trial import plan_trial, steps_left, unprofiled_step_ms


def test_short_steps_make_blocks_of_a_fifth_of_a_second() -> None:
    plan = plan_trial([("intra_op_threads", "HOST001")], 10.0, budget_s=60, numerics=False, cuda=False)
    assert plan.knobs == ["intra_op_threads"] and plan.block_steps == 21 and plan.pairs == 4
    assert plan.asked_by == {"intra_op_threads": ["HOST001"]}


def test_settings_that_may_change_numerics_wait_for_the_users_word() -> None:
    asked = [("optimizer_fused", "OPT001"), ("tf32", "GPU005")]
    plan = plan_trial(asked, 10.0, budget_s=60, numerics=False, cuda=True)
    assert plan.knobs == [] and "--trial-numerics allows it" in plan.not_tried["optimizer_fused"]
    assert plan_trial(asked, 10.0, budget_s=60, numerics=True, cuda=True).knobs == ["optimizer_fused", "tf32"]


def test_gpu_settings_are_not_tried_without_a_gpu() -> None:
    plan = plan_trial([("cudnn_benchmark", "X")], 10.0, budget_s=60, numerics=True, cuda=False)
    assert plan.knobs == [] and "CUDA GPU" in plan.not_tried["cudnn_benchmark"]


def test_long_steps_shrink_the_blocks_then_give_up_with_the_figures() -> None:
    plan = plan_trial([("no_grad", "INF001")], 2000.0, budget_s=60, numerics=False, cuda=False)
    assert plan.knobs == ["no_grad"] and plan.block_steps == 3 and plan.pairs == 2  # 2 pairs of 3-step blocks: 24 s
    plan = plan_trial([("no_grad", "INF001")], 20_000.0, budget_s=60, numerics=False, cuda=False)
    assert plan.knobs == []
    assert plan.not_tried["no_grad"] == ("steps of 20.0 s: 2 pairs of blocks of 2 steps per setting would take "
                                         "320 s, over the budget of 60 s (--trial-budget)")


def test_the_step_is_the_one_timed_without_the_profiler() -> None:
    assert unprofiled_step_ms({"unprofiled_step_ms": [5.0, 7.0, 6.0]}, {"steps.time_ms": 9.0}) == 6.0
    assert unprofiled_step_ms({}, {"steps.time_ms": 9.0}) == 9.0
    assert unprofiled_step_ms({}, {}) is None


def test_a_script_that_ends_by_itself_gets_blocks_that_fit_its_steps() -> None:
    meta = {"outcome": "completed", "ranks": [{"steps_seen": 73}]}
    assert steps_left(meta, 18) == 55
    assert steps_left({**meta, "outcome": "captured"}, 18) is None  # stopped by the collector: it would run on
    plan = plan_trial([("intra_op_threads", "HOST001"), ("anomaly_detection_off", "HOST002")], 10.0, budget_s=60,
                      numerics=False, cuda=False, steps_left=55)
    # three comparisons (each knob, then both together), two pairs of two blocks each: blocks of 4 steps
    assert (plan.block_steps, plan.pairs, plan.max_pairs) == (4, 2, 2)
    plan = plan_trial([("no_grad", "INF001")], 10.0, budget_s=60, numerics=False, cuda=False, steps_left=7)
    assert plan.knobs == [] and "runs 7 steps after its wait steps: too few" in plan.not_tried["no_grad"]


def test_no_trial_without_steps_to_switch_at() -> None:
    plan = plan_trial([("no_grad", "INF001")], 10.0, budget_s=60, numerics=False, cuda=False, step_method="time")
    assert plan.knobs == [] and "recognised no steps" in plan.not_tried["no_grad"]
