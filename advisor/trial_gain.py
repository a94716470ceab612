"""The gain of one A/B comparison of the trial stage, from its blocks of timed steps.

Shared by the collector, which decides from it whether to try knobs together, and by the trial analyzer, which
reports it. A comparison is a run of blocks that alternate the original settings (arm ``base``) and the
setting tried, in pairs; the first third of each block (one step at least) ran just after the switch and is
left out. The gain is
the median step of the original blocks less that of the setting's, over all pairs (a median: one step that
waited for the scheduler or the allocator does not move it; in one threads trial a single slow pair made the
mean of the pairs' differences 80 ms where the medians differed by 45). Each pair gives one difference of its
blocks' medians, so that a drift of the step time over the trial (memory that grows, a clock that throttles)
falls on both arms alike; the spread is the standard error of those differences.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BASE", "MIN_PAIRS", "Gain", "measure", "tests_of"]

#: the arm that runs with the script's own settings
BASE = "base"
#: the fewest pairs a gain is measured from: one pair has no spread
MIN_PAIRS = 2


@dataclass
class Gain:
    test: str
    #: median original step - median step with the setting, ms, over all pairs; positive is faster
    gain_ms: float
    #: standard error of that mean, ms (0 with one pair)
    spread_ms: float
    pairs: int
    base_ms: float
    tried_ms: float
    steps: int

    @property
    def share(self) -> float:
        return self.gain_ms / self.base_ms if self.base_ms > 0 else 0.0

    def clear(self) -> bool:
        """Faster beyond doubt: two pairs or more, and a gain over twice its spread."""
        return self.pairs >= MIN_PAIRS and self.gain_ms > 2 * self.spread_ms and self.gain_ms > 0

    def as_row(self) -> dict[str, Any]:
        return {"knob": self.test, "gain_ms": round(self.gain_ms, 3), "spread_ms": round(self.spread_ms, 3),
                "pairs": self.pairs, "base_ms": round(self.base_ms, 3), "tried_ms": round(self.tried_ms, 3),
                "share": round(self.share, 4), "steps": self.steps}


def _counted(block: Mapping[str, Any]) -> list[float]:
    """The block's steps after its first third (one step at least): a switch costs more than the step after it
    where memory must grow again (anomaly detection's records, gradients released and faulted in), and over
    the variants' blocks the third left out moved an optimizer's gain from 10.5 and 6.0 ms to 7.4 and 2.6 (5.4
    and 2.5 ms between fixed twins)."""
    ms = block.get("ms", [])
    return [float(x) for x in ms[max(1, len(ms) // 3):]]


def measure(blocks: Iterable[Mapping[str, Any]], test: str) -> Gain | None:
    """The gain of ``test`` from the blocks of its comparison (``block["test"] == test``), paired in order of
    ``block["pair"]``; None when no pair has both arms with a counted step."""
    by_pair: dict[int, dict[str, list[float]]] = {}
    for block in blocks:
        if block.get("test") != test:
            continue
        steps = _counted(block)
        if steps:
            by_pair.setdefault(int(block.get("pair", 0)), {}).setdefault(
                BASE if block.get("arm") == BASE else "tried", []).extend(steps)
    pairs = [p for p in by_pair.values() if p.get(BASE) and p.get("tried")]
    if not pairs:
        return None
    diffs = [statistics.median(p[BASE]) - statistics.median(p["tried"]) for p in pairs]
    spread = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) >= 2 else 0.0
    base = [ms for p in pairs for ms in p[BASE]]
    tried = [ms for p in pairs for ms in p["tried"]]
    base_ms, tried_ms = statistics.median(base), statistics.median(tried)
    return Gain(test, base_ms - tried_ms, spread, len(pairs), base_ms, tried_ms, len(base) + len(tried))


def tests_of(blocks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The comparisons the blocks hold, in the order they ran."""
    return list(dict.fromkeys(str(b["test"]) for b in blocks if b.get("test")))
