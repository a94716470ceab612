"""Step detection and the profiling schedule, driven from outside the script.

A *step* is recognised, in this order of preference:

1. ``optimizer``: the end of each ``optimizer.step()`` of the first optimizer
   that steps (global optimizer post-hook). With several optimizers (a GAN)
   only that lead optimizer advances the step.
2. ``dataloader``: the start of each DataLoader batch, when no optimizer has
   stepped (inference, hand-written updates).
3. ``time``: a window of ``window_s`` seconds that opens ``window_start_s``
   seconds after the first model call, when neither of the above is seen.

The schedule is torch.profiler's: ``wait`` steps are skipped, ``warmup``
steps run with the profiler prepared and the labels on, ``active`` steps are
recorded. When the last active step ends the backend writes its output and
the driver calls ``on_done`` (which normally stops the script).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from advisor.collect.config import CollectorConfig
from advisor.collect.labels import PhaseLabels, patch_dataloader_next
from advisor.collect.source_marker import SourceMarker
from advisor.naming import CAPTURE_RANGE, STEP_PREFIX

__all__ = ["Backend", "KinetoBackend", "NvtxBackend", "StepDriver"]


class Backend(Protocol):
    """What records the active steps: the Kineto profiler, or NVTX marks for nsys/ncu."""

    def prepare(self) -> None: ...
    def start(self, step: int) -> None: ...
    def next_step(self, step: int) -> None: ...
    def stop(self) -> None: ...


class StepDriver:
    """Counts steps, walks the schedule, and switches instrumentation on and off."""

    def __init__(
        self,
        cfg: CollectorConfig,
        backend: Backend,
        labels: PhaseLabels,
        marker: SourceMarker | None,
        on_done: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.labels = labels
        self.marker = marker
        self.on_done = on_done
        self.method: str | None = None if cfg.step_method == "auto" else cfg.step_method
        self.step = 0
        self.state = "wait"
        self.started = time.monotonic()
        self.first_model_call: float | None = None
        self.window_end: float | None = None
        self.timings: dict[str, float] = {}
        self._lead_optimizer: int | None = None
        self._batches = 0
        self._undo: list[Callable[[], None]] = []
        self._probe: Any = None

    # lifecycle -------------------------------------------------------------------
    def attach(self) -> None:
        from torch.optim import optimizer as optim_module

        self._undo.append(optim_module.register_optimizer_step_pre_hook(self._optimizer_pre).remove)
        self._undo.append(optim_module.register_optimizer_step_post_hook(self._optimizer_post).remove)
        self._undo.append(patch_dataloader_next(self._dataloader_next, lambda: self.labels))
        if self.method in (None, "time"):
            self._attach_time_probe()
        if self.method != "time":
            self._enter(self._state_of(0))

    def detach(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        self._detach_time_probe()
        self._instrument(False)

    @property
    def recording(self) -> bool:
        return self.state == "active"

    @property
    def done(self) -> bool:
        return self.state == "done"

    def stop_early(self) -> bool:
        """The script ended or failed: keep what the active window has so far. True if saved."""
        if self.state == "active":
            self.backend.stop()
            self.timings["capture_end"] = self._now()
            self.state = "done"
            self._instrument(False)
            return True
        self._instrument(False)
        return False

    # hooks -----------------------------------------------------------------------
    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.labels.optimizer_begin()

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.labels.optimizer_end()
        if self._lead_optimizer is None:
            self._lead_optimizer = id(optimizer)
        if id(optimizer) != self._lead_optimizer or self.method not in (None, "optimizer", "dataloader"):
            return
        if self.method != "optimizer":
            self.method = "optimizer"
            self._detach_time_probe()
        self._boundary()

    def _dataloader_next(self) -> None:
        if self.method not in (None, "dataloader"):
            return
        self._batches += 1
        if self._batches == 1:  # the first batch opens step 0; it is not a boundary
            if self.method is None:
                self.method = "dataloader"
                self._detach_time_probe()
            self.timings.setdefault("first_step", self._now())
            return
        self._boundary()

    # the schedule ------------------------------------------------------------------
    def _state_of(self, step: int) -> str:
        c = self.cfg
        if step < c.wait:
            return "wait"
        if step < c.wait + c.warmup:
            return "warmup"
        if step < c.wait + c.warmup + c.active:
            return "active"
        return "done"

    def _boundary(self) -> None:
        if self.state == "done":
            return
        self.timings.setdefault("first_step", self._now())
        self.step += 1
        new = self._state_of(self.step)
        if new == self.state:
            if new == "active":
                self.backend.next_step(self.step)
            return
        self._enter(new)

    def _enter(self, new: str) -> None:
        old, self.state = self.state, new
        if old == "wait" and new in ("warmup", "active"):
            self._instrument(True)
            self.backend.prepare()
            self.timings["warmup_start"] = self._now()
        if new == "active":
            self.backend.start(self.step)
            self.timings["capture_start"] = self._now()
        if new == "done":
            if old == "active":
                self.backend.stop()
                self.timings["capture_end"] = self._now()
            self._instrument(False)
            self.on_done()

    def _instrument(self, on: bool) -> None:
        if on:
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
    def _attach_time_probe(self) -> None:
        from torch.nn.modules import module as nn_module

        self._probe = nn_module.register_module_forward_pre_hook(self._time_probe)
        if self.method == "time" and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None):
            # Scripts that call no nn.Module still get a clock tick on the main thread.
            signal.signal(signal.SIGALRM, lambda *_: self._poll_time())
            signal.setitimer(signal.ITIMER_REAL, 0.25, 0.25)

    def _detach_time_probe(self) -> None:
        if self._probe is not None:
            self._probe.remove()
            self._probe = None
        if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)

    def _time_probe(self, module: torch.nn.Module, args: Any) -> None:
        if self.first_model_call is None:
            self.first_model_call = time.monotonic()
        self._poll_time()

    def _poll_time(self) -> None:
        if self.method not in (None, "time") or self.state == "done":
            return
        now = time.monotonic()
        origin = self.started if self.method == "time" else self.first_model_call
        if self.window_end is None:
            if origin is not None and now - origin >= self.cfg.window_start_s:
                self.method = "time"
                self.window_end = now + self.cfg.window_s
                if self.state == "wait":
                    self._enter("warmup")
                if self.state == "warmup":
                    self._enter("active")
        elif now >= self.window_end:
            self._detach_time_probe()
            self._enter("done")

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 6)


class KinetoBackend:
    """Records the active steps with torch.profiler and writes a gzipped Kineto trace."""

    def __init__(self, cfg: CollectorConfig, trace_path: str) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        experimental = None
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
            experimental = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
        self.trace_path = trace_path
        self.saved = False
        self._step_range: Any = None
        self.prof = profile(
            activities=activities,
            record_shapes=cfg.record_shapes,
            profile_memory=cfg.profile_memory,
            with_stack=cfg.with_stack,
            experimental_config=experimental,
        )

    def prepare(self) -> None:
        self.prof.prepare_trace()

    def start(self, step: int) -> None:
        self.prof.start_trace()
        self._open_step(step)

    def next_step(self, step: int) -> None:
        self._close_step()
        self._open_step(step)

    def stop(self) -> None:
        self._close_step()
        self.prof.stop_trace()
        self.prof.export_chrome_trace(self.trace_path)
        self.saved = True

    def _open_step(self, step: int) -> None:
        # The same name torch.profiler.profile.step() uses, so every tool reads our steps.
        self._step_range = torch.autograd.profiler.record_function(f"{STEP_PREFIX}{step}")
        self._step_range.__enter__()

    def _close_step(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None


class NvtxBackend:
    """Marks the active steps for an outer tool (nsys, ncu) instead of recording them.

    The whole active window is one NVTX range named :data:`CAPTURE_RANGE`, the
    capture range that nsys (``--capture-range=nvtx``) and ncu
    (``--nvtx-include``) are pointed at; each step inside it is a
    ``ProfilerStep#N`` range, as in the Kineto trace. On a GPU the window is
    also bracketed by ``cudaProfilerStart``/``Stop``, for tools that cannot
    see the NVTX range (``--capture-range=cudaProfilerApi``).
    """

    def __init__(self) -> None:
        from advisor.collect.labels import Range

        self._range_type = Range
        self._capture: Any = None
        self._step: Any = None

    def prepare(self) -> None:
        pass

    def start(self, step: int) -> None:
        if torch.cuda.is_available():  # the other capture range nsys can use (--capture-range=cudaProfilerApi)
            torch.cuda.profiler.start()
        self._capture = self._range_type(CAPTURE_RANGE)
        self._capture.open()
        self.next_step(step)

    def next_step(self, step: int) -> None:
        if self._step is not None:
            self._step.close()
        self._step = self._range_type(f"{STEP_PREFIX}{step}")
        self._step.open()

    def stop(self) -> None:
        if self._step is not None:
            self._step.close()
            self._step = None
        if self._capture is not None:
            self._capture.close()
            self._capture = None
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()

