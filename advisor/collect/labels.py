"""Phase labels attached to an unmodified script from outside.

The forward pass, the backward pass, the optimizer step and data loading are
each marked twice with the same name: as a ``record_function`` range, so they
appear in the Kineto trace, and as an NVTX range, so Nsight Systems shows the
same phases. The names are :data:`PHASE_NAMES`; analyzers and the nsys loader
read them back by those names.

How each phase is found without touching the script:

- forward: global nn.Module forward pre/post hooks; a forward is the span of
  an outermost module call (depth 0 -> 1 -> 0) outside the other phases.
- backward: ``torch.autograd.backward`` and ``torch.autograd.grad`` are
  wrapped (``Tensor.backward`` calls the former).
- optimizer: global optimizer step pre/post hooks (owned by the step driver),
  and ``GradScaler.step``, whose unscaling belongs to the update. Where steps
  are found by their backward passes (an update written by hand, no
  ``torch.optim``), from the end of each backward to the next forward.
- dataloader: ``_BaseDataLoaderIter.__next__`` is wrapped. While the labels
  are on, each fetch's wall time and the process's CPU time in it are added
  up (:class:`FetchTimes`): a fetch in the training process that mostly
  waits (storage, a network file system, a lock) frees its core for worker
  processes, one that computes does not, and the trace cannot tell them apart.

Phases do not nest. A closure passed to ``optimizer.step(closure)`` (LBFGS,
PyTorch Lightning's automatic optimization, any ``step(closure)`` loop) runs
the forward and backward passes *inside* the step: the driver's pre-hook
wraps it so that the optimizer range closes while the closure runs (the
closure is marked with :data:`CLOSURE` instead) and opens again after, so
the forward and backward inside it are forward and backward, and the
optimizer phase is only the update. A module called while backward runs
(activation checkpointing recomputes the forward) stays backward time; it is
marked with a :data:`RECOMPUTE` range.

The labels are installed only for the warm-up and active steps, and removed
after, so the steps outside the profiled window pay nothing for them. The
step hooks (optimizer post-hook, DataLoader ``__next__``) stay for the whole
run; they cost one Python call per step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import dataloader as _dl

from advisor.naming import CLOSURE, PHASE_NAMES, RECOMPUTE, module_label

__all__ = ["FetchTimes", "PhaseLabels", "Range", "fast_range", "nvtx_available", "patch_dataloader_next",
           "patch_grad_scaler"]

try:  # nvtx is a dependency, but a broken native library must not stop the run
    import nvtx as _nvtx
except Exception:  # noqa: BLE001 - any import failure only disables NVTX
    _nvtx = None


def nvtx_available() -> bool:
    return _nvtx is not None


def fast_range(name: str) -> Any:
    """A cheap profiler range for labels that come by the thousand (source lines, modules).

    ``record_function`` records its own enter/exit ops and costs tens of
    microseconds under the profiler; ``_RecordFunctionFast`` costs about three.
    Its events come out as ``cpu_op``; the Kineto loader files every
    ``advisor::`` name as an annotation.
    """
    fast = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    return fast(name) if fast is not None else torch.autograd.profiler.record_function(name)


class Range:
    """One range, in the profiler and in NVTX, under the same name.

    Phase ranges use ``record_function`` (user scope), so they also appear on
    the GPU timeline as ``gpu_user_annotation``; ``fast`` ranges do not.
    """

    __slots__ = ("name", "_rf", "_nvtx", "_fast")

    def __init__(self, name: str, nvtx: bool = True, fast: bool = False) -> None:
        self.name = name
        self._rf: Any = None
        self._nvtx = nvtx and _nvtx is not None
        self._fast = fast

    def open(self) -> None:
        self._rf = fast_range(self.name) if self._fast else torch.autograd.profiler.record_function(self.name)
        self._rf.__enter__()
        if self._nvtx:
            _nvtx.push_range(message=self.name)

    def close(self) -> None:
        if self._rf is not None:
            self._rf.__exit__(None, None, None)
            self._rf = None
            if self._nvtx:
                _nvtx.pop_range()

    def __enter__(self) -> Range:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Ranges:
    """A phase range and, inside it, the call site's source label: opened and closed together."""

    __slots__ = ("ranges",)

    def __init__(self, *ranges: Range) -> None:
        self.ranges = ranges

    def open(self) -> None:
        for rng in self.ranges:
            rng.open()

    def close(self) -> None:
        for rng in reversed(self.ranges):
            rng.close()


@dataclass
class FetchTimes:
    """The DataLoader fetches made while the labels were on: how many, their wall time, and the process's CPU
    time during them (``time.process_time_ns``: the work, on every thread a collate or transform uses, not the
    time spent waiting). The training waits for the fetch, so little else runs then. Counted from the thread that
    iterates; DataLoaders iterated from several threads at once would share these counters."""

    fetches: int = 0
    wall_ns: int = 0
    cpu_ns: int = 0
    #: the first timed batch: whether it was fetched in the training process (num_workers=0), and its tensors
    #: and their bytes (what a worker would hand over for it: advisor.collect.worker_handover)
    in_process: bool | None = None
    tensors: int = 0
    nbytes: int = 0

    def note_batch(self, batch: Any, num_workers: Any) -> None:
        """Remember the first batch's loader and tensors (later ones are left alone: a few microseconds each)."""
        if self.in_process is not None:
            return
        self.in_process = num_workers == 0
        for tensor in _tensors_in(batch):
            self.tensors += 1
            self.nbytes += tensor.numel() * tensor.element_size()

    def as_json(self) -> dict[str, int | float | bool | None] | None:
        """For run.json (``dataloader_fetch``); None when no fetch was timed."""
        if not self.fetches:
            return None
        return {"fetches": self.fetches, "wall_ms": round(self.wall_ns / 1e6, 3),
                "cpu_ms": round(self.cpu_ns / 1e6, 3), "in_process": self.in_process, "tensors": self.tensors,
                "bytes": self.nbytes}


def _tensors_in(batch: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The tensors of a batch as default_collate builds them: in tuples, lists and mappings (a BatchEncoding
    too), a few levels deep."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif depth < 4 and isinstance(batch, (tuple, list)):
        for item in batch:
            yield from _tensors_in(item, depth + 1)
    elif depth < 4 and isinstance(batch, Mapping):
        for item in batch.values():
            yield from _tensors_in(item, depth + 1)


class PhaseLabels:
    """Installs and removes the phase ranges; tracks which phase is open.

    ``source`` (optional) returns the source label of the user's line that
    called into the hook; the optimizer and data-loading phases, which no
    torch function call wraps, get it as an inner range.
    """

    def __init__(self, nvtx: bool = True, modules: bool = True,
                 source: Callable[[], str | None] | None = None) -> None:
        self.nvtx = nvtx
        self.modules = modules
        self.source = source
        self.current: str | None = None
        self._depth = 0
        self._forward: Range | None = None
        self._optimizer: _Ranges | None = None
        self._recompute: Range | None = None
        self._recompute_depth = 0
        self._module_stack: list[Range] = []
        self._names: dict[int, str] = {}
        self._handles: list[Any] = []
        self._patched: list[tuple[Any, str, Any]] = []
        #: the fetches timed while the labels were on (the warm-up and recorded steps)
        self.fetch_times = FetchTimes()
        #: steps found by their backward passes (an update written by hand, no torch.optim): the time from the end
        #: of a backward to the next forward is the update, marked as the optimizer phase (optimizer_begin(labelled=False))
        self.hand_update = False

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    # install / remove --------------------------------------------------------
    def install(self) -> None:
        if self.installed:
            return
        from torch.nn.modules import module as nn_module

        self._handles = [
            nn_module.register_module_forward_pre_hook(self._forward_pre),
            nn_module.register_module_forward_hook(self._forward_post, always_call=True),
        ]
        self._patch(torch.autograd, "backward", self._wrap_backward)
        self._patch(torch.autograd, "grad", self._wrap_backward)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for owner, attr, original in reversed(self._patched):
            setattr(owner, attr, original)
        self._patched = []
        self.close_all()

    def close_all(self) -> None:
        """Close every open range (at the end of the window, or when the script fails)."""
        while self._module_stack:
            self._module_stack.pop().close()
        for rng in (self._recompute, self._forward, self._optimizer):
            if rng is not None:
                rng.close()
        self._forward = self._optimizer = self._recompute = None
        self._depth = self._recompute_depth = 0
        self.current = None

    def _patch(self, owner: Any, attr: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = getattr(owner, attr)
        self._patched.append((owner, attr, original))
        setattr(owner, attr, wrap(original))

    # data loading: called by the DataLoader patch in advisor.collect.steps ---
    def dataloader_range(self) -> _Ranges | None:
        if not self.installed or self.current is not None:
            return None
        return self._phase("dataloader")

    def _phase(self, phase: str) -> _Ranges:
        label = self.source() if self.source is not None else None
        outer = Range(PHASE_NAMES[phase], self.nvtx)
        return _Ranges(outer, Range(label, nvtx=False, fast=True)) if label else _Ranges(outer)

    # forward -------------------------------------------------------------------
    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():
            return  # dynamo traces global hooks: a range here would break the user's graph at every module
        if not self.installed:
            return  # removed by an earlier hook of the same call (torch runs the hooks it listed as the call began)
        if self._depth == 0:
            if self.current == "backward":
                self._recompute_pre()
                return
            if self.current is not None:
                return  # a module used inside another phase (a transform in the loader, a model in the update)
            self._learn_names(module)
            self._forward = Range(PHASE_NAMES["forward"], self.nvtx)
            self._forward.open()
            self.current = "forward"
        if self.current == "forward":
            self._depth += 1
            if self.modules:
                rng = Range(module_label(self._names.get(id(module), type(module).__name__)), nvtx=False, fast=True)
                rng.open()
                self._module_stack.append(rng)

    def _forward_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling() or not self.installed:
            return
        if self.current == "backward":
            self._recompute_post()
            return
        if self.current != "forward" or self._depth == 0:
            return
        if self._module_stack:
            self._module_stack.pop().close()
        self._depth -= 1
        if self._depth == 0 and self._forward is not None:
            self._forward.close()
            self._forward = None
            self.current = None

    def _recompute_pre(self) -> None:
        """A module called inside backward: checkpointing recomputes its forward; mark the outermost call."""
        if self._recompute_depth == 0:
            self._recompute = Range(RECOMPUTE, nvtx=False, fast=True)
            self._recompute.open()
        self._recompute_depth += 1

    def _recompute_post(self) -> None:
        if self._recompute_depth == 0:
            return
        self._recompute_depth -= 1
        if self._recompute_depth == 0 and self._recompute is not None:
            self._recompute.close()
            self._recompute = None

    def _learn_names(self, root: torch.nn.Module) -> None:
        """Map each submodule of an outermost module to its dotted attribute path."""
        if id(root) in self._names:
            return
        root_name = type(root).__name__
        for name, sub in root.named_modules():
            self._names.setdefault(id(sub), f"{root_name}.{name}" if name else root_name)

    # backward ------------------------------------------------------------------
    def _wrap_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        labels = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if labels.current not in (None, "forward") or not labels.installed:
                return original(*args, **kwargs)
            outer = labels.current
            if outer == "forward":  # backward inside a forward (gradient penalty): keep nesting simple
                return original(*args, **kwargs)
            rng = Range(PHASE_NAMES["backward"], labels.nvtx)
            rng.open()
            labels.current = "backward"
            try:
                return original(*args, **kwargs)
            finally:
                if labels._recompute is not None:  # a recomputed forward that raised: its post-hook never ran
                    labels._recompute.close()
                    labels._recompute, labels._recompute_depth = None, 0
                rng.close()
                labels.current = outer
                if labels.hand_update:
                    labels.optimizer_begin(labelled=False)

        return wrapper

    # optimizer: called by the step driver, which owns the global optimizer hooks
    # so that the optimizer range always closes before the step boundary.
    def optimizer_begin(self, labelled: bool = True) -> None:
        """Open the optimizer range; a no-op inside one (GradScaler.step calling optimizer.step). ``labelled=False``
        for an update written by hand (opened after a backward, closed by the step driver at the next forward):
        the range spans many lines, each labelled by its own calls, so it gets no call site of its own."""
        if self.installed and self.current is None:
            self._optimizer = self._phase("optimizer") if labelled else _Ranges(Range(PHASE_NAMES["optimizer"],
                                                                                      self.nvtx))
            self._optimizer.open()
            self.current = "optimizer"

    def optimizer_end(self) -> None:
        if self.current == "optimizer" and self._optimizer is not None:
            self._optimizer.close()
            self._optimizer = None
            self.current = None

    def wrap_closure(self, closure: Callable[..., Any]) -> Callable[..., Any]:
        """``closure`` run outside the optimizer range (which reopens after it), inside a :data:`CLOSURE` mark."""
        labels = self

        @functools.wraps(closure)
        def run_closure(*args: Any, **kwargs: Any) -> Any:
            if labels.current != "optimizer" or labels._optimizer is None:
                return closure(*args, **kwargs)
            labels.optimizer_end()
            mark = Range(CLOSURE, nvtx=labels.nvtx)
            mark.open()
            try:
                return closure(*args, **kwargs)
            finally:
                mark.close()
                labels.optimizer_begin()

        return run_closure


def patch_dataloader_next(on_next: Callable[[], None], labels_of: Callable[[], PhaseLabels | None]) -> Callable[[], None]:
    """Wrap ``_BaseDataLoaderIter.__next__``; returns a function that undoes it.

    ``on_next`` runs before each batch is fetched (it may advance the step),
    then the fetch runs inside the dataloader phase range when labels are on.
    """
    original = _dl._BaseDataLoaderIter.__next__

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        on_next()
        labels = labels_of()
        rng = labels.dataloader_range() if labels is not None else None
        if rng is None:
            return original(self)
        rng.open()
        labels.current = "dataloader"
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        times = labels.fetch_times
        try:
            batch = original(self)
        finally:
            times.cpu_ns += time.process_time_ns() - cpu
            times.wall_ns += time.perf_counter_ns() - wall
            times.fetches += 1
            rng.close()
            labels.current = None
        times.note_batch(batch, getattr(self, "_num_workers", None))
        return batch

    _dl._BaseDataLoaderIter.__next__ = __next__

    def undo() -> None:
        _dl._BaseDataLoaderIter.__next__ = original

    return undo


def patch_grad_scaler(labels_of: Callable[[], PhaseLabels | None]) -> Callable[[], None]:
    """Count ``GradScaler.step`` (unscaling, the inf check, then ``optimizer.step()``) as the optimizer phase.

    The inner ``optimizer.step()``'s post-hook closes the range before the step boundary; when the scaler
    skips the step (inf or NaN gradients), the range closes when ``GradScaler.step`` returns.
    Returns a function that undoes the patch; a torch without ``torch.amp.GradScaler`` is left alone.
    """
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is None:
        return lambda: None
    original = scaler.step

    @functools.wraps(original)
    def step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        labels = labels_of()
        if labels is None:
            return original(self, optimizer, *args, **kwargs)
        labels.optimizer_begin()
        try:
            return original(self, optimizer, *args, **kwargs)
        finally:
            labels.optimizer_end()

    scaler.step = step

    def undo() -> None:
        scaler.step = original

    return undo
