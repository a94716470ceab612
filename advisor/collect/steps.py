"""Step detection and the profiling schedule, driven from outside the script.

A *step* is recognised, in this order of preference:

1. ``optimizer``: the end of each ``optimizer.step()`` of the first optimizer
   that steps (global optimizer post-hook). With several optimizers (a GAN)
   only that lead optimizer advances the step.
2. ``dataloader``: the start of each DataLoader batch, when no optimizer has
   stepped (evaluation over a DataLoader, hand-written updates).
3. ``backward``: the model's first call after each ``backward()``, in a loop
   that updates its weights by hand (no ``torch.optim``, no DataLoader); the
   update, from the end of the backward to that call, is the optimizer phase.
4. ``module``: the start of each call of the model, when none of the
   above was seen first: inference and evaluation loops (``model(x)`` in a
   loop, ``generate()``-style decoding, where each call of the model is a
   step). The model is the first module called outermost (no other module
   running) in inference style, with autograd off (``torch.no_grad()``,
   ``inference_mode``) or in eval mode; or, in a program that made no
   optimizer, the first module called outermost a second time with no
   backward since (an inference loop that forgot ``no_grad`` and ``eval()``).
   A training forward never opens it (with ``--steps module``, any call of
   the first module called does).
5. ``time``: a window of ``window_s`` seconds. With ``--steps time`` it opens
   ``window_start_s`` seconds after the script starts; in ``auto`` mode,
   ``window_start_s`` after the first nn.Module call returns, if neither of the above
   was seen by then. (Not after the script's start: a long set-up before the
   first optimizer step would be recorded instead of training.) Nor while a
   step is under way: inside ``optimizer.step()`` or a ``backward()``, or in a
   training forward while an optimizer waits for its first step; that step's
   end is the boundary (an LBFGS step can take a minute). A script
   that calls no nn.Module needs ``--steps time``.

Where the first ``optimizer.step(closure)`` is longer than the time window
and evaluated its closure more than once (LBFGS: up to 25 times), each closure
evaluation, with the update that follows it, becomes the step (``closure``):
its evaluations repeat the same forward and backward, and a window of a few of
them is a recording of seconds, where whole steps would take minutes and
gigabytes.

A method found first gives way to one higher in the list when it appears
(an optimizer step after a few batches), as the step count runs on. The
training's steps are the ones recorded, not an evaluation run before them
(:mod:`advisor.collect.training_signs`): while an optimizer that was made waits
for its first step, model calls without autograd and the batches around them
are not counted (for ``window_start_s`` at most); and an inference loop found
before a ``backward()`` showed gives way to the training's steps, counting
from step 0 again and dropping what the schedule had begun to record
(``skipped``, said in the report). In a program that made no optimizer, an
inference loop that outlasted the whole schedule is watched a while longer
(as long again as it ran, ``window_start_s`` at most) before the script is
stopped: a backward then drops its recording for the training's.

The schedule is torch.profiler's: ``wait`` steps are skipped, ``warmup``
steps run with the profiler prepared and the labels on, ``active`` steps are
recorded. The wait steps are timed, and where the recorded steps would take
longer than the time window the schedule is fitted to them
(:mod:`advisor.collect.schedule_fit`), unless the user set it. The last
:data:`SHAPE_STEPS` of the ``wait`` steps (never the first step, which holds
the script's set-up) are recorded apart, CPU operators with
their input shapes only, into :data:`~advisor.naming.SHAPES_DIR` beside the
trace; the window then runs without ``record_shapes``, which would keep every
operator's inputs alive until the profiler stops (see
:class:`~advisor.collect.backends.KinetoBackend`). With fewer wait steps, or a
time window, the window records the shapes itself. When the last active step
ends the backend writes its output; as
many steps again then run without the profiler, the labels or the source
marker, timed (``unprofiled_step_ms``, at most as long again as the window
took): what the profiler added to the recorded steps is said, not guessed.
Then the driver calls ``on_done`` (which normally stops the script). When the
script ends inside the window, :meth:`StepDriver.stop_early` keeps what was
recorded and marks the unfinished step with :data:`advisor.naming.PARTIAL_STEP`.
The backends that record are in :mod:`advisor.collect.backends`.

Outside the window the driver costs a few Python calls per step (the
optimizer's step pre/post hooks and the DataLoader ``__next__`` wrapper),
about 5 us; nothing else is hooked (``bench/collector_overhead.py``). Until
the method is known, and for the whole run with ``module`` steps, a global
module pre-hook also runs on every module call (about a microsecond each).
"""

from __future__ import annotations

import _thread
import functools
import math
import os
import resource
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from advisor.collect.backends import Backend
from advisor.collect.config import CollectorConfig
from advisor.collect.environment import thread_settings
from advisor.collect.heap_headroom import Headroom, reserve as reserve_heap_headroom
from advisor.collect.host_costs import measure_host_costs
from advisor.collect.labels import PhaseLabels, patch_dataloader_next, patch_grad_scaler
from advisor.collect.schedule_fit import Schedule, fit_schedule
from advisor.collect.source_marker import SourceMarker
from advisor.collect.training_signs import TrainingSigns
from advisor.collect.trial_blocks import TrialBlocks
from advisor.collect.worker_handover import measure_worker_handover

__all__ = ["StepDriver"]

#: how many of the wait steps are recorded for their input shapes (two, so that shapes that vary from step to step
#: show as such: the loader keeps only what both recorded alike)
SHAPE_STEPS = 2
#: the shortest time the steps after the window are timed for, however short the window was (seconds)
_TAIL_MIN_S = 1.0


class StepDriver:
    """Counts steps, walks the schedule, and switches instrumentation on and off."""

    def __init__(
        self,
        cfg: CollectorConfig,
        backend: Backend,
        labels: PhaseLabels,
        marker: SourceMarker | None,
        on_done: Callable[[], None],
        started: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.labels = labels
        self.marker = marker
        self.on_done = on_done
        self.method: str | None = None if cfg.step_method == "auto" else cfg.step_method
        self.step = 0
        self.state = "wait"
        #: time.monotonic() when the process started; timings are relative to it
        self.started = time.monotonic() if started is None else started
        self.first_model_call: float | None = None
        self.window_end: float | None = None
        self.timings: dict[str, float] = {}
        #: torch threads and OMP_NUM_THREADS when the recording began (scripts often set them)
        self.capture_threads: dict[str, Any] | None = None
        #: per-op host costs of this process, measured as the warm-up begins (advisor.collect.host_costs)
        self.host_costs: dict[str, float] | None = None
        #: a worker's hand-over of a batch like the loop's, where it fetched in process (worker_handover)
        self.dataloader_handover: dict[str, Any] | None = None
        self._probing = False
        #: what the backend recorded: "none", "partial" (the script ended inside the window) or "complete"
        self.recorded = "none"
        self._lead_optimizer: int | None = None
        #: inside optimizer.step(): a closure's backward passes (LBFGS) are the optimizer's steps, not steps
        self._in_optimizer_step = 0
        self._batches = 0
        #: optimizers made, backward passes, an evaluation before the training (advisor.collect.training_signs)
        self.signs = TrainingSigns(self._backward_ended)
        #: the loop recognised first and left for the training's when it showed (an evaluation before the first
        #: optimizer step, forward passes before a hand-written update): which, how many of its steps or calls
        self.skipped: dict[str, Any] | None = None
        #: module steps: the model whose calls are steps, and the depth of module calls until it is known
        self._model: Any = None
        self._module_depth = 0
        self._module_hooks: list[Any] = []
        #: modules called outermost since the last backward (ids): a second call of one is a loop of forward passes
        self._outer_calls: set[int] = set()
        self._undo: list[Callable[[], None]] = []
        self._clock: _WindowClock | None = None
        #: wall time of each step after the window, run without the profiler, the labels or the source marker
        #: (the same number of steps as the window, at most as long again as it took)
        self.unprofiled_step_ms: list[float] = []
        #: minor page faults of each recorded step and of each step after the window, and the heap headroom
        #: given to the window (advisor.collect.heap_headroom): whether the recorded steps paid for fresh
        #: memory that the script's own steps do not
        self.heap: dict[str, Any] = {"window_faults": [], "unprofiled_faults": [], "headroom": None,
                                     "page_bytes": resource.getpagesize()}
        self._headroom: Headroom | None = None
        self._faults_mark = 0
        self._tail_start = self._tail_mark = 0.0
        self._tail_limit_s = math.inf
        #: when the watch for a training after an inference loop ends (time.monotonic()); 0 until it began
        self._watch_until = 0.0
        #: the schedule: how many wait steps before the warm-up are recorded for their shapes (0: the window
        #: records them), fitted to long steps as they are timed (advisor.collect.schedule_fit)
        self._shapes_apart = cfg.mode == "kineto" and cfg.record_shapes and hasattr(backend, "start_shapes")
        self.plan = self._plan0 = Schedule(cfg.wait, cfg.warmup, cfg.active,
                                           min(SHAPE_STEPS, max(cfg.wait - 1, 0)) if self._shapes_apart else 0)
        #: the wait steps' wall times (seconds), step 0's from the model's first call or its optimizer step
        self._wait_step_s: list[float] = []
        self._step_mark: float | None = None
        #: step 0's optimizer.step() call: when it began, and how many closure evaluations it ran
        self._step0_call: float | None = None
        self._closure_calls = 0
        #: where each step is a closure evaluation (a long closure optimizer step): the optimizer step's
        #: length and closure evaluations they were chosen from
        self.closure_unit: dict[str, float] | None = None
        #: the trial stage's run (``mode: trial``): settings alternated in blocks of steps after the wait steps
        #: (advisor.collect.trial_blocks), on the optimizers that stepped
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.trial = self._new_trial() if cfg.mode == "trial" else None

    def _new_trial(self) -> TrialBlocks:
        return TrialBlocks(self.cfg.trial or {}, lambda: list(self._optimizers))

    # lifecycle -------------------------------------------------------------------
    def attach(self) -> None:
        from torch.optim import optimizer as optim_module

        self._undo.append(optim_module.register_optimizer_step_pre_hook(self._optimizer_pre).remove)
        self._undo.append(optim_module.register_optimizer_step_post_hook(self._optimizer_post).remove)
        self._undo.append(patch_dataloader_next(self._dataloader_next, lambda: self.labels))
        self._undo.append(patch_grad_scaler(lambda: self.labels))
        self._undo.append(self.signs.attach())
        if self.method in (None, "module", "backward"):
            self._watch_modules()
        if self.method in (None, "time"):
            self._clock = _WindowClock(self, timer=self.method == "time")
            self._clock.start()
        if self.method != "time":
            self._enter(self._state_of(0))

    def detach(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        self._unwatch_modules()
        self._stop_clock()
        self._instrument(False)

    @property
    def shape_steps(self) -> int:
        return self.plan.shape_steps

    @property
    def recording(self) -> bool:
        return self.state == "active"

    @property
    def done(self) -> bool:
        return self.state == "done"

    def stop_early(self) -> bool:
        """The script ended or failed: keep what the active window has so far. True if saved."""
        self._stop_clock()
        if self.state == "active":
            with _signals_held(self.cfg.mode == "kineto"):
                self.backend.stop(complete=False)
            self.recorded = "partial"
            self.timings["capture_end"] = self._now()
            self.state = "done"
            self._instrument(False)
            self._release_headroom()
            return True
        if self.state == "shapes":  # the window never began: its shapes are no use
            self.backend.stop_shapes(save=False)  # type: ignore[attr-defined]
            self.state = "done"
        if self.state in ("tail", "watch"):  # the window is saved; the unprofiled steps timed so far are kept
            self.state = "done"
        if self.trial is not None:  # every setting undone; the blocks timed so far are kept
            self.trial.finish("the script ended")
            self.state = "done"
        self._instrument(False)
        self._release_headroom()
        return False

    # hooks -----------------------------------------------------------------------
    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        self._in_optimizer_step += 1
        self.labels.optimizer_begin()
        lead = self._lead_optimizer in (None, id(optimizer))
        if lead and self.step == 0 and self._step0_call is None and self.method in (None, "optimizer"):
            self._step0_call = time.monotonic()
        counted = lead and (self.method == "closure" or self.step == 0)
        if not (counted or self.labels.installed):
            return None  # the closure as given: nothing to mark or count
        return _with_closure_wrapped(args, kwargs, lambda closure: self._wrap_closure(closure, counted))

    def _wrap_closure(self, closure: Callable[..., Any], counted: bool) -> Callable[..., Any]:
        """The closure as the phase labels mark it, and, where ``counted``, each evaluation's start noted first
        (a step boundary where closure evaluations are the steps, before the labels open its ranges)."""
        if not counted:
            return self.labels.wrap_closure(closure)
        # The labels' wrapper reads their state as each evaluation begins, not as step() began: a boundary may
        # install them (the window begins) or take them off inside one step() call.
        labelled = self.labels.wrap_closure(closure)
        labels = self.labels

        @functools.wraps(closure)
        def evaluate(*args: Any, **kwargs: Any) -> Any:
            in_update = labels.current == "optimizer"
            if in_update:  # closed before the boundary, so that no range runs across two steps
                labels.optimizer_end()
            self._closure_began()
            if in_update or (labels.current is None and self._in_optimizer_step):
                labels.optimizer_begin()  # reopened; the labelled closure closes it and marks the evaluation
            return labelled(*args, **kwargs)

        return evaluate

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._in_optimizer_step = max(self._in_optimizer_step - 1, 0)
        self.labels.optimizer_end()
        self.signs.trained = True
        if self.trial is not None:
            self._optimizers.add(optimizer)
        if self._lead_optimizer is None:
            self._lead_optimizer = id(optimizer)
        if id(optimizer) != self._lead_optimizer or self.method == "closure":
            return
        if self.method != "optimizer":
            if not self._adopt("optimizer"):
                return
            self._stop_clock()
            self._unwatch_modules()
        self._boundary()

    def _dataloader_next(self) -> None:
        if self.method not in (None, "dataloader") or self._probing:
            return
        self._batches += 1
        if self._batches == 1:  # the first batch opens step 0; it is not a boundary
            if self.method is None:
                self.method = "dataloader"
                self._stop_clock()
                if self.signs.trained:  # else the model calls still tell an evaluation first from the training
                    self._unwatch_modules()
            self._note_first_step()
            return
        self._boundary()

    # module steps ------------------------------------------------------------------
    def _watch_modules(self) -> None:
        from torch.nn.modules import module as nn_module

        # Registered before the phase labels' hooks, so a step boundary comes before the forward range opens.
        self._module_hooks = [
            nn_module.register_module_forward_pre_hook(self._module_pre),
            nn_module.register_module_forward_hook(self._module_post, always_call=True),
        ]

    def _unwatch_modules(self, keep_pre: bool = False) -> None:
        hooks, self._module_hooks = self._module_hooks, []
        for i, handle in enumerate(hooks):
            if keep_pre and i == 0:
                self._module_hooks.append(handle)
            else:
                handle.remove()

    def _module_pre(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():
            return
        if self.signs.backward_pending and self._after_backward():
            return
        if self._model is not None:
            if module is self._model and self.method == "module":
                self._boundary()
            return
        if self.method == "backward":
            return
        if self._module_depth == 0:
            self._outermost_call(module)
            if self._model is not None:  # adopted: only its calls matter now
                return
        self._module_depth += 1

    def _module_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():
            return
        if self._model is None and self._module_depth > 0:
            self._module_depth -= 1

    def _outermost_call(self, module: torch.nn.Module) -> None:
        """A module called with no other running: the model (or a loss module). Where the steps are still to be
        found, it may begin one: the first call after a backward (hand-written updates), or, in inference, the
        model's calls; while an optimizer waits for its first step, a call without autograd is an evaluation
        before the training and begins nothing."""
        inference = not torch.is_grad_enabled() or not module.training
        if inference and not self.signs.trained:
            self.signs.evaluation_call()
            if self._evaluating_first():
                return
        if self.method == "module" or (self.method is None and (inference or self._called_again(module))):
            # The first step opens here; it is not a boundary. Depth no longer matters: only the model's calls do.
            self._model = module
            self.method = "module"
            self._stop_clock()
            self._unwatch_modules(keep_pre=True)
            self._note_first_step()

    def _called_again(self, module: torch.nn.Module) -> bool:
        """A module called outermost a second time with no backward since, in a program that made no optimizer:
        forward passes in a loop with autograd on and the model in training mode, an inference loop that forgot
        ``no_grad`` and ``eval()``. Its calls are the steps; a backward that shows later takes the loop back
        (``backward`` steps, counting from step 0 again)."""
        if self.signs.optimizer_made or self.signs.trained:
            return False
        seen = id(module) in self._outer_calls
        self._outer_calls.add(id(module))
        return seen

    def _after_backward(self) -> bool:
        """The first module call after a backward, the start of the next forward pass: where a loop without an
        optimizer (a hand-written update) begins a step. True when it did (the hooks' depth no longer matters)."""
        self.signs.backward_pending = False
        if self.method == "backward":
            self.labels.optimizer_end()  # the hand-written update ends where the next forward begins
            self._boundary()
            return True
        # With an optimizer made, its steps are the training's: backward passes come several to a step where
        # gradients accumulate over micro-batches, so they mark steps only in a loop with no optimizer.
        if self.method in (None, "module") and not self.signs.optimizer_made and self._adopt("backward"):
            self._model = None
            self._stop_clock()
            self._unwatch_modules(keep_pre=True)
            return True
        return False

    def _backward_ended(self) -> None:
        """A backward ran: the program trains. Steps found in its evaluation so far are not the training's."""
        self._outer_calls.clear()
        if self._in_optimizer_step:
            self.signs.backward_pending = False  # a closure's: the optimizer's step marks the training's steps
        if self.method == "dataloader" and self.skipped is None and self.signs.evaluation_calls:
            self._adopt("dataloader")
        if self.method in ("optimizer", "dataloader", "time"):
            self._unwatch_modules()

    def _evaluating_first(self) -> bool:
        """An optimizer waits for its first step while the model runs without autograd: an evaluation before
        the training (nanoGPT's loss estimate, a sanity check, ``eval_on_start``), whose steps are not counted;
        for as long as the time window would wait (``window_start_s``), then it is taken for the loop."""
        return (self.cfg.step_method == "auto" and self.signs.evaluating_first()
                and self.signs.evaluation_s() < self.cfg.window_start_s)

    def _adopt(self, method: str) -> bool:
        """Take ``method`` for the training's steps in place of the one found first; False where it is too late
        (the window was recorded) or the user chose how steps are recognised."""
        if self.method == method and self.skipped is not None:
            return True
        if self.method is not None and self.cfg.step_method != "auto":
            return False
        if self.state not in ("wait", "shapes", "warmup", "active", "watch", "trial") or (
                self.state != "wait" and self.cfg.mode not in ("kineto", "trial")):
            return False  # an outer tool's capture range cannot be taken back
        earlier = self.method
        self.method = method
        if earlier == "backward" and self.labels.hand_update:  # the update is the optimizer's from now on
            self.labels.optimizer_end()
            self.labels.hand_update = False
        # Only an evaluation (model calls without autograd before the training) or an inference loop taken for the
        # program's is skipped, counting from step 0 again. Batches or backward passes that give way to an
        # optimizer's steps are the same loop, and its count runs on.
        if earlier == "module" or self.signs.evaluation_calls:
            if self.skipped is None:
                self.skipped = {"method": earlier, "steps": self.step, "evaluation_calls": self.signs.evaluation_calls,
                                "seconds": round(self._skipped_s(), 3)}
            self._restart()
        return True

    def _skipped_s(self) -> float:
        """How long the loop being left ran: from its first step, or from the evaluation's first call."""
        first = self.timings.get("first_step")
        return self.signs.evaluation_s() if first is None else self._now() - first

    def _restart(self) -> None:
        """Back to step 0 and the wait state, dropping what the schedule had begun to record."""
        old, self.state, self.step = self.state, "wait", 0
        if old == "shapes":
            self.backend.stop_shapes(save=False)  # type: ignore[attr-defined]
        if old in ("warmup", "active"):
            self.backend.discard()  # type: ignore[attr-defined]
            self.recorded = "none"
        if old == "watch":  # the inference loop's recording was saved: it is not the training's
            self._stop_clock()
            self.backend.forget()  # type: ignore[attr-defined]
            self.recorded = "none"
            self.unprofiled_step_ms = []
            self.heap["unprofiled_faults"] = []
        if old == "trial" and self.trial is not None:  # the settings were tried on the loop left behind
            self.trial.finish("restarted")
            self.trial = self._new_trial()
        if old != "wait":
            self._instrument(False)
            self._release_headroom()
            self.heap["window_faults"] = []
            for key in ("shapes_start", "warmup_start", "capture_start", "capture_end"):
                self.timings.pop(key, None)
        self.timings["first_step"] = self._now()
        # the steps timed so far were the loop left behind: the training's are timed from here
        self.plan, self._wait_step_s, self._step_mark = self._plan0, [], time.monotonic()

    # the schedule ------------------------------------------------------------------
    def _state_of(self, step: int) -> str:
        c = self.plan
        if self.trial is not None:
            return "wait" if step < c.wait else ("done" if self.trial.done else "trial")
        if step < c.wait - self.shape_steps:
            return "wait"
        if step < c.wait:
            return "shapes"
        if step < c.wait + c.warmup:
            return "warmup"
        if step < c.wait + c.warmup + c.active:
            return "active"
        if step < c.wait + c.warmup + 2 * c.active and self._times_tail():
            return "tail"
        return "done"

    def _times_tail(self) -> bool:
        """Whether the steps after the window are timed without the profiler: Kineto windows of steps only (a
        time window has no steps to time, and under nsys or ncu the outer tool is still attached)."""
        return self.cfg.mode == "kineto" and self.method != "time"

    def _boundary(self) -> None:
        if self.method == "dataloader" and self._evaluating_first():
            return  # an evaluation's batches before the training: not its steps
        self.step += 1  # counted after the window too, for the run's metadata (--run-to-end)
        if self.state in ("done", "watch"):  # the watch ends in poll_time, which the clock's module hook calls
            return
        if self.step == 1:
            self._note_first_step()
        if self.state == "wait":
            self._time_wait_step()
            if self.method == "closure" or not self._to_closure_steps():
                self._fit()
        if self.state == "trial":
            if self.trial is not None and self.trial.boundary():
                self._enter("done")
            return
        new = self._state_of(self.step)
        if self.state in ("active", "tail"):
            faults = _minor_faults()
            self.heap["window_faults" if self.state == "active" else "unprofiled_faults"].append(
                faults - self._faults_mark)
            self._faults_mark = faults
        if self.state == "tail":
            now = time.perf_counter()
            self.unprofiled_step_ms.append(round((now - self._tail_mark) * 1e3, 3))
            self._tail_mark = now
            if now - self._tail_start >= self._tail_limit_s:
                new = "done"
        if new == self.state:
            if new in ("active", "shapes"):
                self.backend.next_step(self.step)
            return
        self._enter(new)

    def _time_wait_step(self) -> None:
        """Note the wall time of the wait step that just ended. Step 0 began before any boundary: it is timed from
        the model's first call, or from its optimizer step's call where that is longer (a closure optimizer)."""
        now = time.monotonic()
        if self._step_mark is not None:
            self._wait_step_s.append(now - self._step_mark)
        elif self.step == 1:
            since = [t for t in (self.first_model_call, self._step0_call) if t is not None]
            if since:
                self._wait_step_s.append(now - min(since))
        self._step_mark = now

    def _fit(self) -> None:
        """Fit the schedule to the shortest step timed so far after step 0 (which holds the script's set-up, a
        compilation; a closure evaluation has none), from the schedule as given: a long step that was a one-off
        (a recompilation, an evaluation) gives way to the short ones that follow while the driver still waits
        (advisor.collect.schedule_fit). Only where the user left the schedule to us."""
        timed = self._wait_step_s if self.method == "closure" else self._wait_step_s[1:]
        if not (self.cfg.fit_schedule and timed):
            return
        plan = fit_schedule(self._plan0, min(timed), self.cfg.window_s, self.step, self._shapes_apart)
        if plan == self.plan:
            return
        self.plan = plan
        if hasattr(self.backend, "window_shapes"):
            # a step longer than the window would keep every op's inputs alive for all of it
            self.backend.window_shapes = plan.fitted_to_s is None or plan.shape_steps > 0

    def _to_closure_steps(self) -> bool:
        """Where step 0 was one long ``optimizer.step(closure)`` (LBFGS evaluates its closure up to 25 times a
        step), take each closure evaluation, with the update that follows it, for a step: the window then records
        a few of them, not minutes of one step's repeats. True when it did (counting from step 0 again)."""
        step_s = self._wait_step_s[-1] if self._wait_step_s else 0.0
        if not (self.step == 1 and self.method == "optimizer" and self.cfg.step_method == "auto"
                and self.cfg.fit_schedule and self._closure_calls >= 2
                and step_s > self.cfg.window_s):
            return False
        self.closure_unit = {"optimizer_step_s": round(step_s, 3), "closure_calls": self._closure_calls}
        self.method = "closure"
        self.step = 0
        self._wait_step_s, self._step_mark = [], None
        return True

    def _closure_began(self) -> None:
        """A closure evaluation of the lead optimizer begins: a step boundary where closure evaluations are the
        steps (the first one opens step 0); counted while step 0 runs."""
        if self.method == "closure":
            if self._step_mark is None:
                self._step_mark = time.monotonic()  # the first closure evaluation opens step 0
            else:
                self._boundary()
        elif self.step == 0:
            self._closure_calls += 1

    def _enter(self, new: str) -> None:
        old, self.state = self.state, new
        if new == "trial" and self.trial is not None:
            self.timings["trial_start"] = self._now()
            self.trial.begin()
            if self.trial.done:  # no knob applies to this program
                self._enter("done")
            return
        if old == "trial" and self.trial is not None:
            self.trial.finish("complete")
            self.timings["trial_end"] = self._now()
        if old == "wait" and new in ("shapes", "warmup", "active"):
            # Before the warm-up, not at the capture: the probes take a few hundred ms, and ranks that finish
            # them at different times meet again at the warm-up's first collective, not in a recorded step.
            # Before our labels and source marker too: they price the script's ops as it runs without us
            # (under the marker, grad mode measured 3.4-3.9 us per op against 1.7-2.4 without it).
            self.host_costs = measure_host_costs()
            # The shape steps run instrumented as the window will, so that their operators are the window's.
            self._instrument(True)
        if new == "shapes":
            self.backend.start_shapes(self.step)  # type: ignore[attr-defined]
            self.timings["shapes_start"] = self._now()
        if old == "shapes":
            with _signals_held(self.cfg.mode == "kineto"):
                self.backend.stop_shapes()  # type: ignore[attr-defined]
        if old in ("wait", "shapes") and new in ("warmup", "active"):
            self.backend.prepare()
            self.timings["warmup_start"] = self._now()
        if new == "active":
            self.capture_threads = thread_settings()
            if self.cfg.mode == "kineto":
                self._headroom = reserve_heap_headroom(self.capture_threads["allocator"])
                self.heap["headroom"] = self._headroom.summary if self._headroom is not None else None
            self.backend.start(self.step)
            self._faults_mark = _minor_faults()
            self.timings["capture_start"] = self._now()
        if new in ("tail", "done") and old == "active":
            self._stop_clock()
            with _signals_held(self.cfg.mode == "kineto"):
                self.backend.stop()
            self.recorded = "complete"
            self.timings["capture_end"] = self._now()
            self._instrument(False)
        if new == "tail":
            # Timed from here, after the trace is written: the next steps run as they would without us. At most
            # as long again as the window took, so that a slow step is not repeated for minutes; but not with
            # several ranks: each would stop at its own clock, and a rank that stopped first would leave the
            # others waiting in the next step's collectives, where counted steps end every rank at the same one.
            self._tail_start = self._tail_mark = time.perf_counter()
            self._faults_mark = _minor_faults()
            window_s = self.timings["capture_end"] - self.timings["capture_start"]
            self._tail_limit_s = math.inf if _several_ranks() else max(_TAIL_MIN_S, window_s)
        if new == "done" and self._watches_for_training():
            return
        if new == "done":
            self._stop_clock()
            self._instrument(False)
            self._release_headroom()
            self._measure_handover()
            self.on_done()

    def _watches_for_training(self) -> bool:
        """Where the loop recorded was an inference loop in a program that made no optimizer and ran no backward,
        the training may still come after it (an evaluation before a hand-written update that outlasted the
        window): the script runs on, unprofiled, for as long again as the loop ran (``window_start_s`` at most),
        and a backward in that time takes the window back for the training's steps (``_adopt``). True when it
        watches (state ``watch``, ended by the next model call or the clock after the deadline). Not under an outer
        tool (nvtx mode), whose capture range cannot be taken back, nor with several ranks, which stop together."""
        if (self.method != "module" or self.cfg.step_method != "auto" or self.cfg.mode != "kineto"
                or self.signs.optimizer_made or self.signs.trained or self._watch_until or _several_ranks()):
            return False
        ran = self._now() - self.timings.get("first_step", self._now())
        self._watch_until = time.monotonic() + min(self.cfg.window_start_s, max(ran, _TAIL_MIN_S))
        self.state = "watch"
        self._stop_clock()
        self._instrument(False)
        self._release_headroom()
        self._clock = _WindowClock(self, timer=True)
        self._clock.start()
        return True

    def _measure_handover(self) -> None:
        """What a DataLoader worker's hand-over of a batch would cost, where the loop fetched in process
        (advisor.collect.worker_handover): after the steps timed without the profiler, which it would slow."""
        times = self.labels.fetch_times
        if self.cfg.mode == "kineto" and times.in_process and times.tensors:
            self._probing = True  # the probe's own batches are not the script's steps
            try:
                self.dataloader_handover = measure_worker_handover(times.tensors, times.nbytes)
            finally:
                self._probing = False

    def _release_headroom(self) -> None:
        """After the steps timed without the profiler, not before them: given back at the window's end, the
        headroom was trimmed and those steps faulted its pages in again (12-24 MB in the first of them)."""
        if self._headroom is not None:
            self._headroom.release()
            self._headroom = None

    def _instrument(self, on: bool) -> None:
        if on:
            self.labels.hand_update = self.method == "backward"
            self.labels.install()
            if self.marker is not None:
                self.marker.push_bottom()
                self.marker.enabled = True
        else:
            if self.marker is not None:
                self.marker.enabled = False
                self.marker.remove()
            self.labels.remove()

    # the time window ------------------------------------------------------------
    def window_due_at(self) -> float | None:
        """When the time window should next open or close (time.monotonic()), or None (read-only; any thread)."""
        if self.state == "watch":
            return self._watch_until
        if self.method not in (None, "time") or self.state == "done" or self._evaluating_first():
            return None
        if self.method is None and (self._in_optimizer_step or self.signs.in_backward):
            return None  # a step under way (a closure optimizer's can take a minute): its end is the boundary
        if self.window_end is not None:
            return self.window_end
        origin = self.started if self.method == "time" else self.first_model_call
        return None if origin is None else origin + self.cfg.window_start_s

    def window_due(self, now: float) -> bool:
        due = self.window_due_at()
        return due is not None and now >= due

    def poll_time(self, module: torch.nn.Module | None = None) -> None:
        """Open or close the time window when it is due (main thread only). ``module``: the one being called, from
        the module hook: the first training forward while an optimizer waits is part of a step whose end will come
        (the backward and the optimizer's step follow), so it opens no window; once a backward ran, a forward does
        again (a program that never steps its optimizer still gets a window)."""
        if (module is not None and self.method is None and self.signs.optimizer_made and not self.signs.trained
                and module.training and torch.is_grad_enabled()):
            return
        now = time.monotonic()
        if self.state == "watch":
            if now >= self._watch_until:
                self._enter("done")
            return
        if not self.window_due(now):
            return
        if self.window_end is None and self.trial is not None:
            # a time window has no steps to alternate settings between
            self.trial.finish("no steps: the script's training steps were not recognised in time")
            self._enter("done")
            return
        if self.window_end is None:
            self.method = "time"
            self.window_end = float("inf")  # opening: preparing the profiler can take a second
            self._note_first_step()
            if self.state in ("wait", "shapes"):
                self._enter("warmup")
            if self.state == "warmup":
                self._enter("active")
            self.window_end = time.monotonic() + self.cfg.window_s  # window_s of recording
        else:
            self._enter("done")

    def model_called(self) -> None:
        if self.first_model_call is None:
            self.first_model_call = time.monotonic()

    def _stop_clock(self) -> None:
        if self._clock is not None:
            self._clock.stop()
            self._clock = None

    def _note_first_step(self) -> None:
        # Only once: reading the clock is the dearest thing a step hook would do (microseconds on VMs).
        if "first_step" not in self.timings:
            self.timings["first_step"] = self._now()

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 6)


def _minor_faults() -> int:
    """The process's minor page faults so far: pages it touched for the first time (or got back from the system)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _several_ranks() -> bool:
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def _with_closure_wrapped(args: Any, kwargs: Any, wrap: Callable[[Any], Any]) -> tuple[Any, Any] | None:
    """``(args, kwargs)`` of ``optimizer.step`` with its closure wrapped, or None when it was given none.

    The hook's ``args`` start with the optimizer itself; the closure is the next one or ``closure=``.
    """
    if callable(kwargs.get("closure")):
        return args, {**kwargs, "closure": wrap(kwargs["closure"])}
    if len(args) > 1 and callable(args[1]):
        return (args[0], wrap(args[1]), *args[2:]), kwargs
    return None


@contextmanager
def _signals_held(hold: bool = True) -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the recording is written, so a stop cannot cut the file short.

    Not in nvtx mode (``hold=False``): there is no file of ours to protect, and
    Nsight Systems 2022.4 hangs at exit in a target that changes its signal mask.
    """
    if not hold or threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class _WindowClock:
    """Opens and closes the time window.

    A global nn.Module pre-hook notes the first model call and polls the
    clock on every module call; that is enough in ``auto`` mode, where the
    window is measured from the first model call. With ``--steps time``
    (``timer=True``) a daemon thread also sleeps until the window is due and
    then asks the main thread to act through
    ``_thread.interrupt_main(SIGALRM)``: that runs our handler at the main
    thread's next bytecode *without* sending a real signal, so no system
    call of the script is interrupted (torch.profiler must be started and
    stopped from the main thread). The thread sleeps in long, exact waits:
    Nsight Systems' OS-runtime tracing hangs at exit after a thread that
    polls (thousands of short timed waits).
    """

    RETRY_S = 0.5

    def __init__(self, driver: StepDriver, timer: bool) -> None:
        self.driver = driver
        self.timer = timer
        self._stopped = threading.Event()
        self._probe: Any = None
        self._returned: Any = None
        self._handler_installed = False

    def start(self) -> None:
        from torch.nn.modules import module as nn_module

        self._probe = nn_module.register_module_forward_pre_hook(self._on_model_call)
        # The window is timed from the first module call's *return*: a torch.compile'd model's first call
        # compiles for as long as it takes, and the window must not open on the compilation.
        self._returned = nn_module.register_module_forward_hook(self._on_model_return, always_call=True)
        if not self.timer or self.driver.cfg.mode != "kineto":
            # In nvtx mode no signal handler (see _signals_held): module calls drive the window.
            return
        if signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGALRM, self._on_alarm)
            self._handler_installed = True
        threading.Thread(target=self._run, name="advisor-window-clock", daemon=True).start()

    def stop(self) -> None:
        """Stop watching (main thread): remove the probe and our handler."""
        self._stopped.set()
        if self._probe is not None:
            self._probe.remove()
            self._probe = None
        if self._returned is not None:
            self._returned.remove()
            self._returned = None
        if self._handler_installed and signal.getsignal(signal.SIGALRM) == self._on_alarm:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
        self._handler_installed = False

    def _on_model_call(self, module: torch.nn.Module, args: Any) -> None:
        if not torch.compiler.is_compiling():
            self.driver.poll_time(module)

    def _on_model_return(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():
            return
        self.driver.model_called()
        if self._returned is not None:
            self._returned.remove()
            self._returned = None

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if not self._stopped.is_set():
            self.driver.poll_time()

    def _run(self) -> None:
        while not self._stopped.is_set():
            due = self.driver.window_due_at()
            if due is None:
                return
            wait = due - time.monotonic()
            if wait > 0:
                self._stopped.wait(wait)
                continue
            if signal.getsignal(signal.SIGALRM) == self._on_alarm:
                _thread.interrupt_main(signal.SIGALRM)
            # The main thread acts at its next bytecode; if it is inside a long C call, ask again later.
            self._stopped.wait(self.RETRY_S)
