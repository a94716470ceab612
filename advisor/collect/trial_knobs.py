"""The trial knobs inside the user's process: how each setting is changed between two steps, and undone.

Runs in the process that runs the script (imported by :mod:`advisor.collect.trial_blocks` in the trial stage's
run only). Each :class:`Setting` reads the value in force when it is applied, so that undoing it puts back what
the script had set, not what it had at the start; a knob that does not apply to this program (threads already
at the cores, anomaly detection off, no optimizer) says why and is not tried. What the knobs are, for the user
and the report, is :mod:`advisor.knobs`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["Setting", "make_setting"]


class Setting:
    """One knob in this process. ``applies()`` is None when it can be tried, else why not."""

    name = ""

    def __init__(self, optimizers: Callable[[], Iterable[Any]]) -> None:
        self._optimizers = optimizers
        self.on = False
        #: the values as they were and as tried, for the trial's record
        self.original: Any = None
        self.tried: Any = None

    def applies(self) -> str | None:
        return None

    def no_effect(self) -> str | None:
        """After the trial: why the setting, though applied, changed nothing the script did (None when it did,
        or cannot tell): its measured gain is then no measure of the fix."""
        return None

    def apply(self) -> None:
        if not self.on:
            self._apply()
            self.on = True

    def undo(self) -> None:
        if self.on:
            self._undo()
            self.on = False

    def _apply(self) -> None:
        raise NotImplementedError

    def _undo(self) -> None:
        raise NotImplementedError


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class IntraOpThreads(Setting):
    name = "intra_op_threads"

    def _target(self) -> int:
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        return max(1, usable_cores() // max(ranks, 1))

    def applies(self) -> str | None:
        threads, target = torch.get_num_threads(), self._target()
        if threads <= target:
            return f"the process runs {threads} intra-op threads, no more than its share of the cores ({target})"
        return None

    def _apply(self) -> None:
        self.original, self.tried = torch.get_num_threads(), self._target()
        torch.set_num_threads(self.tried)

    def _undo(self) -> None:
        torch.set_num_threads(self.original)


class NoGrad(Setting):
    """Autograd off for the loop's steps: grad mode is per thread, and the step boundaries are the main
    thread's, where the loop runs."""

    name = "no_grad"

    def applies(self) -> str | None:
        return None if torch.is_grad_enabled() else "the loop already runs without autograd"

    def _apply(self) -> None:
        self.original, self.tried = torch.is_grad_enabled(), False
        torch.set_grad_enabled(False)

    def _undo(self) -> None:
        torch.set_grad_enabled(self.original)


class AnomalyDetectionOff(Setting):
    """Anomaly detection off, whichever way the script turns it on: ``set_detect_anomaly(True)`` once, or
    ``with torch.autograd.detect_anomaly():`` around every step (both call ``torch.set_anomaly_enabled``). While
    on, that call only notes what the script asked for, and ``torch.is_anomaly_enabled`` answers with it, so the
    script's own context managers restore what they found; undoing puts back the state the script last asked
    for. Always tried where asked: the rule saw anomaly detection on in the script's steps, even where it is
    off between them (a context manager around the step)."""

    name = "anomaly_detection_off"

    def _apply(self) -> None:
        self._asked = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
        self.original, self.tried = {"enabled": self._asked[0], "check_nan": self._asked[1]}, {"enabled": False}
        self._real = (torch.set_anomaly_enabled, torch.is_anomaly_enabled, torch.is_anomaly_check_nan_enabled)
        real_set = self._real[0]

        def set_anomaly_enabled(mode: bool, check_nan: bool = True) -> None:
            self._asked = (bool(mode), bool(check_nan))
            real_set(False)

        torch.set_anomaly_enabled = set_anomaly_enabled
        torch.is_anomaly_enabled = lambda: self._asked[0]
        torch.is_anomaly_check_nan_enabled = lambda: self._asked[1]
        real_set(False)

    def _undo(self) -> None:
        torch.set_anomaly_enabled, torch.is_anomaly_enabled, torch.is_anomaly_check_nan_enabled = self._real
        torch.set_anomaly_enabled(*self._asked)


class _GroupFlag(Setting):
    """A flag of every parameter group of the optimizers that stepped (torch.optim reads ``foreach`` and
    ``fused`` from ``param_groups`` at every step)."""

    flags: dict[str, Any] = {}

    def _groups(self) -> list[dict[str, Any]]:
        key = next(iter(self.flags))
        return [g for opt in self._optimizers() if key in getattr(opt, "defaults", {})
                for g in opt.param_groups if g.get(key) is not True and not g.get("differentiable")]

    def applies(self) -> str | None:
        if not list(self._optimizers()):
            return "no torch.optim optimizer stepped"
        if not self._groups():
            return f"every optimizer already uses {next(iter(self.flags))}=True, or has no such option"
        return None

    def _apply(self) -> None:
        self._saved = [(g, {k: g.get(k) for k in self.flags}) for g in self._groups()]
        self.original = [dict(before) for _, before in self._saved]
        self.tried = dict(self.flags)
        for group, _ in self._saved:
            group.update(self.flags)

    def _undo(self) -> None:
        for group, before in self._saved:
            group.update(before)


class OptimizerForeach(_GroupFlag):
    name = "optimizer_foreach"
    flags = {"foreach": True}


class OptimizerFused(_GroupFlag):
    name = "optimizer_fused"
    flags = {"fused": True, "foreach": False}


class ZeroGradSetToNone(Setting):
    """``zero_grad`` of every optimizer and module releases the gradients, whatever the call asks for. It counts
    the calls that asked to zero in place: a script that zeroes by hand (``p.grad.zero_()``) makes none, and the
    setting then changes nothing (the fix is in its code)."""

    name = "zero_grad_set_to_none"
    in_place_calls = 0

    def _apply(self) -> None:
        self._saved = [(cls, cls.__dict__["zero_grad"]) for cls in (torch.optim.Optimizer, torch.nn.Module)]
        self.original, self.tried = "as the script calls it", {"set_to_none": True}
        for cls, method in self._saved:
            setattr(cls, "zero_grad", self._releasing(method))

    def _undo(self) -> None:
        for cls, method in self._saved:
            setattr(cls, "zero_grad", method)

    def _releasing(self, method: Callable[..., Any]) -> Callable[..., Any]:
        setting = self

        def zero_grad(self: Any, set_to_none: bool = True) -> Any:
            if not set_to_none:
                setting.in_place_calls += 1
            return method(self, True)

        return zero_grad

    def no_effect(self) -> str | None:
        if self.original is None or self.in_place_calls:
            return None
        return ("the script made no zero_grad(set_to_none=False) call while it was on: it zeroes its gradients "
                "another way (p.grad.zero_() by hand), which a setting cannot change; the fix is in its code")


class TF32(Setting):
    name = "tf32"

    def applies(self) -> str | None:
        if not torch.cuda.is_initialized():
            return "the script did not use a CUDA GPU"
        if torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32:
            return "TF32 is already allowed"
        return None

    def _apply(self) -> None:
        self.original = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
        self.tried = {"matmul": True, "cudnn": True}
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True

    def _undo(self) -> None:
        torch.backends.cuda.matmul.allow_tf32 = self.original["matmul"]
        torch.backends.cudnn.allow_tf32 = self.original["cudnn"]


class CudnnBenchmark(Setting):
    name = "cudnn_benchmark"

    def applies(self) -> str | None:
        if not torch.cuda.is_initialized():
            return "the script did not use a CUDA GPU"
        return "cudnn.benchmark is already on" if torch.backends.cudnn.benchmark else None

    def _apply(self) -> None:
        self.original, self.tried = torch.backends.cudnn.benchmark, True
        torch.backends.cudnn.benchmark = True

    def _undo(self) -> None:
        torch.backends.cudnn.benchmark = self.original


_SETTINGS: dict[str, type[Setting]] = {cls.name: cls for cls in (
    IntraOpThreads, NoGrad, AnomalyDetectionOff, OptimizerForeach, OptimizerFused, ZeroGradSetToNone, TF32,
    CudnnBenchmark)}


def make_setting(name: str, optimizers: Callable[[], Iterable[Any]]) -> Setting:
    """The setting of the knob named so (:data:`advisor.knobs.KNOBS`); KeyError for a name this collector
    does not know."""
    return _SETTINGS[name](optimizers)
