"""What the running program has shown of its training so far: the evidence step finding waits for.

A program may run forward passes under ``no_grad`` before its first training step (nanoGPT's loss estimate,
Lightning's validation sanity check, HF Trainer's ``eval_on_start``), and it may train without ``torch.optim``
(``p.data.add_(p.grad, alpha=-lr)`` by hand). Step finding must not settle on the evaluation, and must still
find the hand-written loop. Two signs, watched from outside for the whole run at one Python call each:

- an optimizer was *made* (``torch.optim.Optimizer.__init__``, which every optimizer's constructor calls):
  the program announces that it trains, so forward passes without autograd before its first ``step()`` are
  an evaluation first, not the loop to record;
- a ``backward()`` ran (``torch.autograd.backward``, which ``Tensor.backward`` calls): a training step, with
  or without an optimizer. The next outermost model call then begins a step (:class:`~.steps.StepDriver`'s
  ``backward`` steps).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["TrainingSigns"]


class TrainingSigns:
    """The optimizers made, whether the program trained yet, and the evaluation it ran before that."""

    def __init__(self, on_backward: Callable[[], None]) -> None:
        self.on_backward = on_backward
        self.optimizer_made = False
        #: an optimizer stepped or a backward ran
        self.trained = False
        #: a backward ended and no model call began since: the next one begins a ``backward`` step
        self.backward_pending = False
        #: a backward is running (a step under way: the time window waits for it)
        self.in_backward = False
        #: forward passes without autograd run while an optimizer waited for its first step, and when the first began
        self.evaluation_calls = 0
        self.evaluation_since: float | None = None
        self._undo: list[Callable[[], None]] = []

    def attach(self) -> Callable[[], None]:
        """Watch optimizer construction and backward passes; returns the undo."""
        self._undo = [_wrap(torch.optim.Optimizer, "__init__", self._made),
                      _wrap(torch.autograd, "backward", self._backward_began, after=self._backward,
                            on_error=self._backward_failed)]

        def undo() -> None:
            for step in reversed(self._undo):
                step()
            self._undo = []

        return undo

    def evaluation_call(self) -> None:
        """An outermost model call without autograd (or in eval mode), before the program trained."""
        self.evaluation_calls += 1
        if self.evaluation_since is None:
            self.evaluation_since = time.monotonic()

    def evaluating_first(self) -> bool:
        """Whether an optimizer is waiting for its first step while the model runs without autograd."""
        return self.optimizer_made and not self.trained and self.evaluation_since is not None

    def evaluation_s(self) -> float:
        return 0.0 if self.evaluation_since is None else time.monotonic() - self.evaluation_since

    def _made(self) -> None:
        self.optimizer_made = True

    def _backward_began(self) -> None:
        self.in_backward = True

    def _backward_failed(self) -> None:
        self.in_backward = False

    def _backward(self) -> None:
        self.in_backward = False
        self.trained = True
        self.backward_pending = True
        self.on_backward()


def _wrap(owner: Any, attr: str, before: Callable[[], None] | None,
          after: Callable[[], None] | None = None, on_error: Callable[[], None] | None = None) -> Callable[[], None]:
    """Call ``before``/``after`` around ``owner.attr``; returns the undo. The phase labels wrap
    ``torch.autograd.backward`` again inside the window and put this wrapper back when they leave."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before()
        try:
            result = original(*args, **kwargs)
        except BaseException:
            if on_error is not None:
                on_error()
            raise
        if after is not None:
            after()
        return result

    setattr(owner, attr, wrapper)

    def undo() -> None:
        setattr(owner, attr, original)

    return undo
