"""The trial, inside the user's process: settings alternated in blocks of steps, each step timed.

The trial stage runs the script again under the step driver (:mod:`advisor.collect.steps`, ``mode: trial``),
with no profiler, labels or source marker. After the wait steps the driver hands every step boundary to
:class:`TrialBlocks`, which

- tries each knob of the plan against the original settings, one at a time: ``pairs`` pairs of blocks of
  ``block_steps`` steps, the arms in the order A B, B A, A B, ... (a drift of the step time over the trial then
  falls on both arms alike), and more pairs, up to ``max_pairs``, while the spread of the pairs is large against
  the gain; the first third of each block (a step at least) ran just after the switch and is left out of the figures
  (:mod:`advisor.trial_gain`);
- tries the knobs that gave something back clearly (:meth:`advisor.trial_gain.Gain.clear`) all together once,
  where there are two or more;
- keeps to the budget: once a knob has taken its share of ``budget_s``, it stops after its second pair or
  the pair under way;
- with several ranks, follows the plan as counted in steps, so that every rank switches at the same step: no
  pairs added or cut by one rank's own figures, and the knobs that apply tried together;
- undoes every setting when it ends, whatever ends it (the plan done, the script ending, Ctrl-C), so the
  script's later steps (``--run-to-end``) run with its own values.

Its record (:meth:`TrialBlocks.as_json`) goes into the rank's status file and from there to
``trial/trial.json``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from advisor.collect.trial_knobs import Setting, make_setting
from advisor.trial_gain import BASE, MIN_PAIRS, measure

__all__ = ["TrialBlocks"]

#: after the planned pairs, more are added while the spread is over this share of the gain (and over 1% of the
#: step): a setting whose steps vary a lot (threads fighting for cores) needs more pairs than one that does not
NOISE = 0.10


class TrialBlocks:
    def __init__(self, plan: dict[str, Any], optimizers: Callable[[], Iterable[Any]],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.plan = plan
        self.block_steps = max(int(plan.get("block_steps", 4)), 2)
        self.pairs = max(int(plan.get("pairs", 4)), 1)
        self.max_pairs = max(int(plan.get("max_pairs", 12)), self.pairs)
        #: with several ranks every rank switches at the same step: the plan as counted, nothing decided from one
        #: rank's own clock or gains (no pairs added for noise, no budget cut; the knobs together always tried)
        self.lockstep = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
        self.budget_s = float(plan.get("budget_s", 60.0))
        self.clock = clock
        self.settings: dict[str, Setting] = {}
        self.knobs: dict[str, dict[str, Any]] = {}
        for name in plan.get("knobs", []):
            try:
                self.settings[name] = make_setting(name, optimizers)
            except KeyError:
                self.knobs[name] = {"applies": False, "why_not": "this collector does not know the knob"}
        self.blocks: list[dict[str, Any]] = []
        #: comparison -> why it ran fewer pairs than planned
        self.cut: dict[str, str] = {}
        self.outcome = "running"
        self._queue: list[str] = []
        self._arm: tuple[str, ...] = ()
        self._mark = 0.0
        self._started = 0.0
        self._test_started = 0.0
        self._combined = False

    # the driver's calls ----------------------------------------------------------------
    def begin(self) -> None:
        """The first trial step begins: which knobs apply to this program now, and the first block."""
        for name, setting in self.settings.items():
            why_not = setting.applies()
            self.knobs[name] = {"applies": why_not is None, "why_not": why_not}
        self._queue = [n for n, s in self.settings.items() if self.knobs[n]["applies"]]
        self._started = self.clock()
        if not self._next_test():
            self.outcome = "nothing to try"

    @property
    def done(self) -> bool:
        return self.outcome != "running"

    def boundary(self) -> bool:
        """A step ended: note its time and switch where a block ends. True when the trial is over (every
        setting undone)."""
        if self.done:
            return True
        now = self.clock()
        block = self.blocks[-1]
        block["ms"].append(round((now - self._mark) * 1e3, 4))
        if len(block["ms"]) >= self.block_steps:
            self._next_block()
        self._mark = self.clock()
        return self.done

    def finish(self, outcome: str) -> None:
        """End the trial here (the script ended, the driver restarted): every setting undone."""
        if not self.done:
            self.outcome = outcome
        self._switch(())

    def as_json(self) -> dict[str, Any]:
        for name, setting in self.settings.items():
            if setting.original is not None or setting.tried is not None:
                self.knobs[name].update(original=setting.original, tried=setting.tried)
            if (why := setting.no_effect()) is not None:
                self.knobs[name]["no_effect"] = why
        return {"plan": self.plan, "outcome": self.outcome, "knobs": self.knobs, "blocks": self.blocks, "cut": self.cut,
                "undone": not any(s.on for s in self.settings.values()),
                "seconds": round(self.clock() - self._started, 3) if self._started else 0.0}

    # the plan -------------------------------------------------------------------------
    def _test(self) -> str:
        return str(self.blocks[-1]["test"])

    def _next_block(self) -> None:
        block = self.blocks[-1]
        test, pair = self._test(), int(block["pair"])
        if block["second"]:  # a pair ended
            if self._enough(test, pair + 1):
                if not self._next_test():
                    self.outcome = "complete"
                    self._switch(())
                return
            self._open(test, pair + 1, second=False)
        else:
            self._open(test, pair, second=True)

    def _enough(self, test: str, pairs: int) -> bool:
        """Whether ``test``'s comparison has pairs enough: the planned ones, and more while its spread is large
        against its gain; never fewer than two, nor more than the budget's share or ``max_pairs``."""
        if pairs < MIN_PAIRS:
            return False
        if self.lockstep:
            return pairs >= self.pairs
        if self.clock() - self._test_started > self._share_s():
            if pairs < self.pairs:
                self.cut[test] = f"stopped after {pairs} pairs: its share of the budget was spent"
            return True
        if pairs < self.pairs:
            return False
        gain = measure(self.blocks, test)
        noisy = gain is not None and gain.spread_ms > max(NOISE * abs(gain.gain_ms), 0.01 * gain.base_ms)
        return not noisy or pairs >= self.max_pairs

    def _share_s(self) -> float:
        return self.budget_s / max(len(self.settings) + 1, 1)

    def _next_test(self) -> bool:
        """Open the next comparison's first block; False when none is left."""
        if self._queue:
            test = self._queue.pop(0)
        elif not self._combined and len(clear := self._clear_gains()) >= 2:
            self._combined = True
            test = "+".join(clear)
        else:
            return False
        self._test_started = self.clock()
        self._open(test, 0, second=False)
        return True

    def _clear_gains(self) -> list[str]:
        if self.lockstep:
            return [n for n in self.settings if self.knobs[n]["applies"]]
        out = []
        for name in self.settings:
            gain = measure(self.blocks, name)
            if gain is not None and gain.clear():
                out.append(name)
        return out

    def _open(self, test: str, pair: int, second: bool) -> None:
        """A block of ``test``'s comparison: pairs alternate which arm comes first (A B, B A, ...)."""
        tried_first = pair % 2 == 1
        arm = test if tried_first != second else BASE
        self.blocks.append({"test": test, "pair": pair, "arm": arm, "second": second, "ms": []})
        self._switch(tuple(test.split("+")) if arm != BASE else ())
        self._mark = self.clock()

    def _switch(self, knobs: tuple[str, ...]) -> None:
        if knobs == self._arm:
            return
        for name in self._arm:
            if name not in knobs:
                self.settings[name].undo()
        for name in knobs:
            self.settings[name].apply()
        self._arm = knobs
