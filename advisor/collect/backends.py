"""What records the profiled window: the Kineto profiler, or NVTX marks for an outer tool.

The :class:`~advisor.collect.steps.StepDriver` calls a backend at the
schedule's transitions: ``prepare`` when the warm-up begins, ``start`` when
the first active step begins, ``next_step`` at each further boundary, and
``stop`` when the window ends (``complete=False`` when the script ended
inside it: the unfinished step gets a :data:`~advisor.naming.PARTIAL_STEP`
mark, so analysis leaves it out).
"""

from __future__ import annotations

import contextlib

import os
import sys
from typing import Any, Protocol

import torch

from advisor.collect.config import CollectorConfig
from advisor.naming import CAPTURE_RANGE, PARTIAL_STEP, STEP_PREFIX

__all__ = ["Backend", "KinetoBackend", "NullBackend", "NvtxBackend"]


class Backend(Protocol):
    """What records the active steps: the Kineto profiler, or NVTX marks for nsys/ncu."""

    def prepare(self) -> None: ...
    def start(self, step: int) -> None: ...
    def next_step(self, step: int) -> None: ...
    def stop(self, complete: bool = True) -> None: ...


class KinetoBackend:
    """Records the active steps with torch.profiler and writes a gzipped Kineto trace.

    The profiler is built when the warm-up begins, not before the script runs:
    whether to trace CUDA is decided by whether the script has initialised
    CUDA by then, so the collector itself never initialises it.

    Input shapes are recorded apart, when the driver asks for it: with
    ``record_shapes`` the profiler keeps a reference to every operator's
    inputs until it stops (pytorch#133444), so each recorded step leaves its
    activations alive, the process (or the GPU's memory) grows step after
    step, and the later steps of the window pay for memory the script would
    have reused. ``start_shapes``/``stop_shapes`` record steps of their own
    before the warm-up, CPU operators only, with shapes, into ``shapes_path``
    (:data:`~advisor.naming.SHAPES_DIR` beside the trace); the window then
    runs without them, and the loader gives its operators the shapes
    (:mod:`advisor.load.kineto_shapes`).
    """

    def __init__(self, cfg: CollectorConfig, trace_path: str, shapes_path: str | None = None) -> None:
        self.cfg = cfg
        self.trace_path = trace_path
        self.shapes_path = shapes_path
        self.saved = False
        #: the shapes were recorded in steps of their own, so the window records none
        self.shapes_apart = False
        #: whether the window may record shapes itself where none were recorded apart (not for steps so long that
        #: keeping every op's inputs alive would hold gigabytes: advisor.collect.schedule_fit)
        self.window_shapes = True
        self.prof: Any = None
        self._shapes_prof: Any = None
        self._step_range: Any = None
        self._started = False

    def _build(self) -> Any:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        experimental = None
        if torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
            experimental = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
        return profile(
            activities=activities,
            record_shapes=self.cfg.record_shapes and not self.shapes_apart and self.window_shapes,
            profile_memory=self.cfg.profile_memory,
            with_stack=self.cfg.with_stack,
            experimental_config=experimental,
        )

    def prepare(self) -> None:
        if self.prof is not None and not self._started:  # kept from a window that was dropped (discard)
            return
        self.prof = self._build()
        _prepare_without_inductor(self.prof)

    def start(self, step: int) -> None:
        if self.prof is None:  # warmup 0 and a window that opens at once
            self.prepare()
        self.prof.start_trace()
        self._started = True
        self._open_step(step)

    def discard(self) -> None:
        """Drop the window begun so far, unsaved: its steps were not the training's (an evaluation before it).
        A profiler only prepared is kept for the next window (stopping it makes Kineto warn on the terminal)."""
        self._close_step()
        if self._started:
            self.prof.stop_trace()
            self.prof, self._started = None, False

    def forget(self) -> None:
        """Delete the window saved so far: its steps were not the training's (an inference loop that a training
        followed); the next window is recorded anew."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.trace_path)
        self.saved = False
        self.prof, self._started = None, False

    def next_step(self, step: int) -> None:
        self._close_step()
        self._open_step(step)

    def stop(self, complete: bool = True) -> None:
        if not complete and self._step_range is not None:
            # A zero-length mark inside the unfinished step, so analysis leaves it out.
            with torch.autograd.profiler.record_function(PARTIAL_STEP):
                pass
        self._close_step()
        self.prof.stop_trace()
        self.prof.export_chrome_trace(self.trace_path)
        self.saved = True

    def start_shapes(self, step: int) -> None:
        """Begin the steps recorded for their input shapes (before the warm-up; see the class docstring)."""
        from torch.profiler import ProfilerActivity, profile

        self._shapes_prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        _prepare_without_inductor(self._shapes_prof)
        self._shapes_prof.start_trace()
        self._open_step(step)

    def stop_shapes(self, save: bool = True) -> None:
        """End the shape steps; ``save``: write them (not when the script ended before the window)."""
        self._close_step()
        prof, self._shapes_prof = self._shapes_prof, None
        if prof is None:
            return
        prof.stop_trace()
        if save and self.shapes_path is not None:
            os.makedirs(os.path.dirname(self.shapes_path) or ".", exist_ok=True)
            prof.export_chrome_trace(self.shapes_path)
            self.shapes_apart = True

    def _open_step(self, step: int) -> None:
        # The same name torch.profiler.profile.step() uses, so every tool reads our steps.
        self._step_range = torch.autograd.profiler.record_function(f"{STEP_PREFIX}{step}")
        self._step_range.__enter__()

    def _close_step(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None


def _prepare_without_inductor(prof: Any) -> None:
    """``prof.prepare_trace()``, without importing torch._inductor when the script has not.

    torch.profiler asks ``hasattr(torch, "_inductor")`` to learn whether inductor's CUDA graphs are on, and on
    torch's lazily imported module that question imports inductor: 2-7 s of the user's wait (more on a busy
    machine), in a script that never compiles. Inductor that was never imported has no CUDA graphs on.
    """
    if "torch._inductor" in sys.modules:
        prof.prepare_trace()
        return
    lazy = torch.__dict__.get("__getattr__")

    def without_inductor(name: str) -> Any:
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name) if lazy is not None else object.__getattribute__(torch, name)

    torch.__getattr__ = without_inductor  # type: ignore[attr-defined]
    try:
        prof.prepare_trace()
    finally:
        if lazy is None:
            del torch.__getattr__  # type: ignore[attr-defined]
        else:
            torch.__getattr__ = lazy  # type: ignore[attr-defined]


class NullBackend:
    """Records nothing: the trial stage's run times its steps without a profiler."""

    def prepare(self) -> None:
        pass

    def start(self, step: int) -> None:
        pass

    def next_step(self, step: int) -> None:
        pass

    def stop(self, complete: bool = True) -> None:
        pass


class NvtxBackend:
    """Marks the active steps for an outer tool (nsys, ncu) instead of recording them.

    The whole active window is one NVTX range named :data:`CAPTURE_RANGE`, the
    capture range that nsys (``--capture-range=nvtx``) and ncu
    (``--nvtx-include``) are pointed at; each step inside it is a
    ``ProfilerStep#N`` range, as in the Kineto trace. On a GPU the window is
    also bracketed by ``cudaProfilerStart``/``Stop``, for tools that cannot
    see the NVTX range (``--capture-range=cudaProfilerApi``). The process must
    end through C ``exit()`` for the tool to flush the last ranges (see
    :mod:`advisor.collect.bootstrap`).
    """

    def __init__(self) -> None:
        from advisor.collect.labels import Range

        self._range_type = Range
        self._capture: Any = None
        self._step: Any = None

    def prepare(self) -> None:
        pass

    def start(self, step: int) -> None:
        # The other capture range nsys can use (--capture-range=cudaProfilerApi). Only when the
        # script has initialised CUDA itself: the collector never does (see advisor.collect.bootstrap).
        if torch.cuda.is_initialized():
            torch.cuda.profiler.start()
        self._capture = self._range_type(CAPTURE_RANGE)
        self._capture.open()
        self.next_step(step)

    def next_step(self, step: int) -> None:
        if self._step is not None:
            self._step.close()
        self._step = self._range_type(f"{STEP_PREFIX}{step}")
        self._step.open()

    def stop(self, complete: bool = True) -> None:
        if self._step is not None:
            if not complete:
                with self._range_type(PARTIAL_STEP):
                    pass
            self._step.close()
            self._step = None
        if self._capture is not None:
            self._capture.close()
            self._capture = None
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
