"""The schedule fitted to long steps (advisor.collect.schedule_fit): what it keeps, what it shrinks, and why."""

from __future__ import annotations

import pytest

from advisor.collect.schedule_fit import Schedule, fit_schedule

DEFAULT = Schedule(wait=5, warmup=3, active=5, shape_steps=2)


@pytest.mark.parametrize("step_s", [0.01, 0.5, 1.0])
def test_steps_whose_recording_fits_in_the_window_keep_the_schedule(step_s: float) -> None:
    assert fit_schedule(DEFAULT, step_s, window_s=5.0, next_step=1, shapes=True) is DEFAULT


def test_a_step_of_a_few_seconds_records_what_the_window_holds_after_one_shape_step() -> None:
    plan = fit_schedule(DEFAULT, 2.4, window_s=5.0, next_step=1, shapes=True)
    # step 0 (the set-up) skipped, step 1 recorded for its shapes, step 2 warms the profiler up, 3 and 4 recorded
    assert (plan.wait, plan.shape_steps, plan.warmup, plan.active) == (2, 1, 1, 2)
    assert plan.fitted_to_s == 2.4


def test_a_step_longer_than_the_window_is_recorded_alone_without_warm_up_or_shapes() -> None:
    plan = fit_schedule(DEFAULT, 30.0, window_s=5.0, next_step=1, shapes=True)
    # step 1 is recorded: a script that runs two steps (time_sequence_prediction's --steps 2) still gets one
    assert (plan.wait, plan.shape_steps, plan.warmup, plan.active) == (1, 0, 0, 1)


def test_fitted_later_it_never_gives_a_step_already_run_a_new_role() -> None:
    plan = fit_schedule(DEFAULT, 3.0, window_s=5.0, next_step=3, shapes=True)
    assert plan.wait == 4 and plan.shape_steps == 1  # step 3 is the shape step: steps 0-2 already ran unprofiled


def test_it_only_shrinks() -> None:
    small = Schedule(wait=1, warmup=0, active=2, shape_steps=0)
    plan = fit_schedule(small, 4.0, window_s=5.0, next_step=1, shapes=True)
    assert (plan.wait, plan.warmup, plan.active, plan.shape_steps) == (1, 0, 1, 0)


def test_without_shape_steps_none_are_planned() -> None:
    plan = fit_schedule(DEFAULT, 2.0, window_s=5.0, next_step=1, shapes=False)
    assert plan.shape_steps == 0 and plan.wait == 1
