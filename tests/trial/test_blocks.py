"""The trial's plan inside the script's process (advisor.collect.trial_blocks): the order of the blocks, what
is left out, the budget, trying knobs together, and every setting undone however the trial ends."""

from __future__ import annotations

import random
from typing import Any

import pytest

from advisor.collect import trial_blocks
from advisor.collect.trial_blocks import TrialBlocks
from advisor.trial_gain import BASE, measure


class FakeSetting:
    def __init__(self, name: str) -> None:
        self.name, self.on, self.original, self.tried = name, False, None, None

    def applies(self) -> str | None:
        return None

    def no_effect(self) -> str | None:
        return None

    def apply(self) -> None:
        self.on, self.original, self.tried = True, "off", "on"

    def undo(self) -> None:
        self.on = False


class Script:
    """Steps of 10 ms, less what each setting that is on saves; the clock advances one step per boundary."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, saves: dict[str, float], plan: dict[str, Any]) -> None:
        self.now, self.saves, self.settings = 0.0, saves, {n: FakeSetting(n) for n in saves}
        monkeypatch.setattr(trial_blocks, "make_setting", lambda name, optimizers: self.settings[name])
        self.trial = TrialBlocks({"knobs": list(saves), **plan}, lambda: [], clock=lambda: self.now)

    def step_ms(self) -> float:
        return 10.0 - sum(ms for n, ms in self.saves.items() if self.settings[n].on)

    def run(self, steps: int = 10_000) -> int:
        self.trial.begin()
        for i in range(steps):
            self.now += self.step_ms() / 1e3
            if self.trial.boundary():
                return i + 1
        return steps


def test_each_knob_alternates_with_the_original_in_pairs_whose_order_flips(monkeypatch) -> None:
    script = Script(monkeypatch, {"a": 2.0}, {"block_steps": 3, "pairs": 4, "budget_s": 100})
    steps = script.run()
    blocks = script.trial.blocks
    assert [b["arm"] for b in blocks] == [BASE, "a", "a", BASE, BASE, "a", "a", BASE]
    assert all(len(b["ms"]) == 3 for b in blocks) and steps == 24
    # every step of a block ran with its arm's settings: the first one too, since the switch comes at the boundary
    assert all(ms == pytest.approx(8.0 if b["arm"] == "a" else 10.0) for b in blocks for ms in b["ms"])
    gain = measure(blocks, "a")
    assert gain is not None and gain.gain_ms == pytest.approx(2.0) and gain.pairs == 4
    assert gain.steps == 16  # 8 blocks of 3, the first step of each left out
    assert script.trial.outcome == "complete" and not script.settings["a"].on


def test_knobs_that_each_gave_back_clearly_are_tried_together_once(monkeypatch) -> None:
    script = Script(monkeypatch, {"a": 2.0, "b": 1.0, "c": 0.0}, {"block_steps": 2, "pairs": 2, "budget_s": 100})
    script.run()
    tests = list(dict.fromkeys(b["test"] for b in script.trial.blocks))
    assert tests == ["a", "b", "c", "a+b"]  # c gave nothing back: not in the combination
    together = measure(script.trial.blocks, "a+b")
    assert together is not None and together.gain_ms == pytest.approx(3.0)
    assert not any(s.on for s in script.settings.values())
    record = script.trial.as_json()
    assert record["undone"] is True and record["knobs"]["a"]["tried"] == "on"


def test_the_budget_ends_a_knob_after_two_pairs(monkeypatch) -> None:
    # 10 ms steps, blocks of 5: a pair takes 0.1 s, and each of the two shares of the budget (one knob, one for
    # the knobs together) is 0.15 s: two pairs, not the six planned
    script = Script(monkeypatch, {"a": 2.0}, {"block_steps": 5, "pairs": 6, "budget_s": 0.3})
    script.run()
    assert {b["pair"] for b in script.trial.blocks} == {0, 1}
    assert "budget" in script.trial.cut["a"] and set(script.trial.knobs) == {"a"}


def test_a_noisy_comparison_gets_more_pairs_up_to_the_most_planned(monkeypatch) -> None:
    script = Script(monkeypatch, {"a": 2.0}, {"block_steps": 3, "pairs": 2, "max_pairs": 6, "budget_s": 100})
    rng = random.Random(0)  # steps that vary by up to 6 ms: the pairs' differences scatter

    def step_ms() -> float:
        return 10.0 - (2.0 if script.settings["a"].on else 0.0) + rng.uniform(0, 6)

    monkeypatch.setattr(script, "step_ms", step_ms)
    script.run()
    assert max(b["pair"] for b in script.trial.blocks) + 1 == 6


def test_a_script_that_ends_inside_a_block_leaves_every_setting_undone(monkeypatch) -> None:
    script = Script(monkeypatch, {"a": 2.0}, {"block_steps": 3, "pairs": 4, "budget_s": 100})
    script.run(steps=5)  # ends in the second block, with the setting on
    assert script.settings["a"].on
    script.trial.finish("the script ended")
    assert not script.settings["a"].on and script.trial.outcome == "the script ended"
    assert script.trial.as_json()["undone"] is True


def test_nothing_to_try_when_no_knob_applies(monkeypatch) -> None:
    script = Script(monkeypatch, {"a": 2.0}, {"block_steps": 3, "pairs": 4})
    monkeypatch.setattr(script.settings["a"], "applies", lambda: "already so")
    script.trial.begin()
    assert script.trial.done and script.trial.outcome == "nothing to try"
    assert script.trial.knobs["a"] == {"applies": False, "why_not": "already so"}


def test_a_knob_this_collector_does_not_know_is_said_not_tried() -> None:
    trial = TrialBlocks({"knobs": ["warp_drive"]}, lambda: [])
    trial.begin()
    assert trial.outcome == "nothing to try"
    assert trial.knobs["warp_drive"]["why_not"] == "this collector does not know the knob"


def test_the_combined_gain_of_settings_tried_together_is_the_measure() -> None:
    from advisor.engine.story import combined_gain

    # measured on steps of 50 ms as the script runs them; the recorded step, the estimates' basis, is 100 ms
    rows = [{"knob": "intra_op_threads", "gain_ms": 15.0, "base_ms": 50.0},
            {"knob": "anomaly_detection_off", "gain_ms": 10.0, "base_ms": 50.0},
            {"knob": "intra_op_threads+anomaly_detection_off", "gain_ms": 21.0, "base_ms": 50.0}]
    diagnoses = [{"rule_id": "HOST001", "knob": "intra_op_threads", "gain_source": "trial", "impact_ms": 15.0,
                  "measured": rows[0]},
                 {"rule_id": "HOST002", "knob": "anomaly_detection_off", "gain_source": "trial", "impact_ms": 10.0,
                  "measured": rows[1]},
                 {"rule_id": "CPU001", "impact_ms": 5.0}]
    facts = {"steps.time_ms": 100.0, "trial.results": rows}
    # 42% together (not 30% and 20% combined, 44%), then the estimate of the third on what is left
    assert combined_gain(diagnoses, facts) == pytest.approx(100 - 58 * 0.95)
    alone = [{**d, "knob": None} if d["rule_id"] == "HOST002" else d for d in diagnoses]
    assert combined_gain(alone[:1], facts) == pytest.approx(30.0)  # 15 of 50 ms is 30 of the recorded 100
