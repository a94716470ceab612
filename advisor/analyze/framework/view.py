"""The tables analyzers read: one trace's loaded tables plus the shared derived ones.

A :class:`TraceView` wraps a loaded :class:`~advisor.load.kineto.KinetoTrace`
and derives, once and lazily, what several analyzers need:

``steps``
    One row per analysed step: step, start, end, dur (int64 ns). The steps
    are the ``ProfilerStep#N`` ranges on the main thread, less those the
    collector marked as cut short (``advisor::partial_step``: the script
    raised, exited or was stopped inside them) and those left out for an
    evaluation pass run inside them (:mod:`advisor.analyze.evaluation_steps`); a trace
    without complete steps is analysed as one window over all its host events.
``host``
    Host events (cpu_op, user_annotation, python_function, cuda_runtime,
    cuda_driver) with their nesting (parent, depth), op self time
    (``self_ns``, cpu_op only), step index, phase, and where known the
    user's source line (``src_file``, ``src_line``, ``src_func``; ``src_exact``:
    the line is the call site, not the function's first line; ``src_direct``:
    the line made the call itself, not through library code below it;
    ``src_via``: "backward" for autograd's work charged to the forward op's
    line; ``src_callers``: the user's frames that called the line's function
    from the user's code, as the label names them, ``"m.py:30 in forward"``
    joined by ``" < "``, innermost first, "" for none) and the ``module`` path. Of the events' columns it carries only
    :data:`HOST_COLUMNS` (``cat`` and ``name`` stay Categoricals); ``event``
    is each row's index in ``events``, for any other column
    (:meth:`TraceView.host_column`). Texts (``src_file``, ``src_func``,
    ``src_via``, ``src_callers``, ``module``, ``phase``) are Categoricals; row numbers
    (``event``, ``parent``), ``depth`` and ``step`` are int32.
``phase_intervals``
    phase -> merged (starts, ends) on the main thread; see :mod:`.phases`.
``gpu``
    GPU ops, host syncs and cuda_sync events linked to their launch call,
    operator, source line and module, plus the GPU window; see :mod:`.gpu_links`.

Analyzers are pure functions of a view; they never change it.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from advisor.analyze import intervals
from advisor.analyze.evaluation_steps import EvaluationSteps, find_evaluation_steps
from advisor.analyze.framework import event_names as by_name, gpu_links, phases
from advisor.analyze.framework.source_labels import (is_user_frame, parse_module_name, parse_python_frame,
                                                     parse_source_label, python_frame_kind)
from advisor.load.kineto import KinetoTrace
from advisor.naming import (CALLER_MARK, PARTIAL_STEP, PHASE_NAMES, PHASE_ORDER, SOURCE_PREFIX, STEP_PREFIX,
                            is_direct_label)

__all__ = ["HOST_CATS", "HOST_COLUMNS", "TraceView"]

HOST_CATS = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")
#: the events' columns the host table carries (a filter of a wide frame copies every column)
HOST_COLUMNS = ("cat", "name", "ts", "dur", "end", "tid", "external_id", "correlation", "seq", "input_types")


def _is_step(name: str) -> bool:
    return name.startswith(STEP_PREFIX)


_STEP_NUMBER = re.compile(r"^(\d+)")


def _step_number(name: str) -> int:
    """N of ``ProfilerStep#N``; -1 when the name carries no number."""
    m = _STEP_NUMBER.match(name[len(STEP_PREFIX):])
    return int(m.group(1)) if m else -1


def _is_backward_function(name: str) -> bool:
    return name.startswith("autograd::engine::evaluate_function")


def _source_label(name: str) -> tuple[str, int, str] | None:
    return parse_source_label(name) if name.startswith(SOURCE_PREFIX) else None


def _user_frame(name: str) -> tuple[str, int, str] | None:
    """A Python frame in the user's code (not a library's), from a python_function name."""
    if name.startswith(SOURCE_PREFIX):
        return None
    frame = parse_python_frame(name)
    return frame if frame and is_user_frame(frame[0]) else None


#: how many of torch's Python API functions may wrap one another around a call (F.mse_loss -> broadcast_tensors)
_MAX_API_DEPTH = 4


def _direct_calls(row: np.ndarray, parent: np.ndarray, depth: np.ndarray, src_idx: np.ndarray, py_idx: np.ndarray,
                  is_user_py: np.ndarray, direct_label: np.ndarray, frame_kind: np.ndarray) -> np.ndarray:
    """Which rows a user's line called directly, not through library code below it.

    Under the collector's labels, a label says so itself (:data:`~advisor.naming.DIRECT_MARK`). From the
    profiler's Python frames, a row is direct when its nearest enclosing frame of Python code (C functions
    such as ``<built-in method exp>`` are the call itself), or the frame around that when it is one of
    torch's API functions (``torch/nn/functional.py(3479): cross_entropy``), is the user's: a loop in the
    user's function calls ``x.exp()`` directly, while a model's ops sit below
    ``torch/nn/modules/linear.py(125): forward`` and the library's frames.
    """
    direct = np.zeros(len(row), bool)
    labelled = src_idx >= 0
    direct[labelled] = direct_label[row[src_idx[labelled]]]
    if not (frame_kind > 0).any():
        return direct
    code_idx = intervals.enclosing(parent, depth, frame_kind > 0)
    for _ in range(_MAX_API_DEPTH):  # past the API functions' own frames (one may call another), to their caller
        api = (code_idx >= 0) & (frame_kind[np.maximum(code_idx, 0)] == 2)
        if not api.any():
            break
        code_idx[api] = code_idx[code_idx[api]]
    framed = ~labelled & (py_idx >= 0) & ~is_user_py
    direct[framed] = code_idx[framed] == py_idx[framed]
    return direct


def _take(column: pd.Series, rows: np.ndarray) -> Any:
    """The column's values at ``rows``: a numpy array, or a Categorical for a Categorical column."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.array.take(rows)
    return column.to_numpy()[rows]


def _coded(labels: list[str], codes: np.ndarray) -> pd.Categorical:
    """``labels[codes]`` as a Categorical whose categories are the labels used, sorted (as the loader makes them)."""
    used = np.flatnonzero(np.bincount(codes, minlength=len(labels))) if len(codes) else np.empty(0, "int64")
    categories = sorted({labels[i] for i in used})
    where = {label: i for i, label in enumerate(categories)}
    remap = np.array([where.get(label, -1) for label in labels], dtype="int32")
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index(categories, dtype="str" if categories else object))


class TraceView:
    """One trace, ready for analysis."""

    def __init__(self, trace: KinetoTrace, run_meta: dict[str, Any] | None = None) -> None:
        self.trace = trace
        self.run_meta = run_meta or {}

    # raw tables ------------------------------------------------------------------
    @property
    def events(self) -> pd.DataFrame:
        return self.trace.events

    @property
    def meta(self) -> dict[str, Any]:
        return self.trace.meta

    def has(self, table: str) -> bool:
        """Whether a named table is present and non-empty (for analyzers' ``needs``)."""
        if table in ("cpu_op", "user_annotation", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime",
                     "cuda_sync", "python_function", "gpu_user_annotation", "cuda_driver"):
            return bool((self.events["cat"] == table).any())
        if table == "gpu":
            return self.trace.has_gpu
        if table == "memory":
            return len(self.trace.memory) > 0
        if table == "steps":
            return bool(self.profiler_steps_present)
        if table == "source_lines":
            return bool(self.host["src_line"].ge(0).any())
        if table == "flows":
            return len(self.trace.flows) > 0
        raise KeyError(f"unknown table {table!r}")

    # steps -----------------------------------------------------------------------
    @cached_property
    def main_tid(self) -> int:
        """The thread that runs the training loop."""
        e = self.events
        rows = self._step_rows
        if len(rows) == 0:
            rows = np.flatnonzero((e["cat"] == "cpu_op").to_numpy())
            if len(rows):  # the thread with the most operator time (the lowest on a tie)
                tids, inverse = np.unique(e["tid"].to_numpy()[rows], return_inverse=True)
                return int(tids[np.argmax(np.bincount(inverse, weights=e["dur"].to_numpy()[rows]))])
            rows = np.flatnonzero(e["cat"].isin(HOST_CATS).to_numpy())
            if len(rows) == 0:
                return 0
        # the most frequent thread (the lowest on a tie)
        tids, counts = np.unique(e["tid"].to_numpy()[rows], return_counts=True)
        return int(tids[np.argmax(counts)])

    @cached_property
    def _step_rows(self) -> np.ndarray:
        """Rows of ``events`` that are ProfilerStep ranges."""
        e = self.events
        return np.flatnonzero((e["cat"] == "user_annotation").to_numpy() & by_name.where(e["name"], _is_step))

    def _step_events(self) -> pd.DataFrame:
        return self.events[["name", "ts", "end", "tid"]].iloc[self._step_rows]

    @cached_property
    def _complete_step_rows(self) -> np.ndarray:
        """Rows of the main thread's ProfilerStep ranges, less those holding a :data:`PARTIAL_STEP` mark."""
        e = self.events
        rows = self._step_rows
        rows = rows[e["tid"].to_numpy()[rows] == self.main_tid] if len(rows) else rows
        if len(rows) == 0:
            return rows
        marks = np.flatnonzero((e["cat"] == "user_annotation").to_numpy()
                               & by_name.where(e["name"], lambda name: name == PARTIAL_STEP))
        if len(marks) == 0:
            return rows
        at = e["ts"].to_numpy()[marks]
        starts, ends = e["ts"].to_numpy()[rows], e["end"].to_numpy()[rows]
        cut = ((starts[:, None] <= at[None, :]) & (at[None, :] <= ends[:, None])).any(axis=1)
        return rows[~cut]

    @cached_property
    def profiler_steps_present(self) -> bool:
        return len(self._complete_step_rows) > 0

    @cached_property
    def incomplete_steps(self) -> int:
        """Step ranges on the main thread left out because the script never finished them."""
        rows = self._step_rows
        on_main = int((self.events["tid"].to_numpy()[rows] == self.main_tid).sum()) if len(rows) else 0
        return on_main - len(self._complete_step_rows)

    @cached_property
    def evaluation_steps(self) -> tuple[pd.DataFrame, EvaluationSteps]:
        """The complete steps (step, start, end, in time order) and which of them ran an evaluation pass."""
        e = self.events
        rows = self._complete_step_rows
        steps = pd.DataFrame({"step": by_name.mapped(e["name"].iloc[rows], _step_number, "int64"),
                              "start": e["ts"].to_numpy()[rows], "end": e["end"].to_numpy()[rows]})
        steps = steps.sort_values("start", kind="stable").reset_index(drop=True)
        on_main = (e["cat"] == "user_annotation").to_numpy() & (e["tid"].to_numpy() == self.main_tid)
        ts, end = e["ts"].to_numpy(), e["end"].to_numpy()

        def ranges(phase: str) -> np.ndarray:
            return np.flatnonzero(on_main & by_name.where(e["name"], lambda name: name == PHASE_NAMES[phase]))

        fwd, bwd = ranges("forward"), ranges("backward")
        # Figures over steps with gaps between them hold only where each is taken step by step: not the GPU's
        # (one span of time) or the ranks' (matched step by step across ranks, over one span).
        alone = not self.trace.has_gpu and int(self.meta.get("world_size") or 1) <= 1
        found = find_evaluation_steps(steps["start"].to_numpy(), steps["end"].to_numpy(), (ts[fwd], end[fwd]),
                                      (ts[bwd], end[bwd]), ts[ranges("dataloader")], gaps_allowed=alone)
        return steps, found

    @cached_property
    def steps(self) -> pd.DataFrame:
        e = self.events
        rows = self._complete_step_rows
        if len(rows):
            complete, evaluation = self.evaluation_steps
            out = complete[evaluation.kept].reset_index(drop=True)
            out["dur"] = out["end"] - out["start"]
            return out
        host = e["cat"].isin(HOST_CATS).to_numpy()
        if not host.any():
            host = np.ones(len(e), bool)
        start = int(e["ts"].to_numpy()[host].min()) if host.any() else 0
        end = int(e["end"].to_numpy()[host].max()) if host.any() else 0
        return pd.DataFrame({"step": [-1], "start": [start], "end": [end], "dur": [end - start]})

    @property
    def window(self) -> tuple[int, int]:
        """The analysed window: first step start to last step end."""
        return int(self.steps["start"].min()), int(self.steps["end"].max())

    @property
    def step_count(self) -> int:
        return len(self.steps)

    def step_of(self, ts: np.ndarray) -> np.ndarray:
        """Index into ``steps`` of the step containing each timestamp, or -1."""
        return intervals.containing(self.steps["start"].to_numpy(), self.steps["end"].to_numpy(), ts)

    # host events -----------------------------------------------------------------
    @cached_property
    def host(self) -> pd.DataFrame:
        e = self.events
        rows = np.flatnonzero(e["cat"].isin(HOST_CATS).to_numpy())
        # Every column is made first and the frame built once: setting a column on a frame copies the array.
        host: dict[str, Any] = {c: _take(e[c], rows) for c in HOST_COLUMNS if c in e}
        host["event"] = rows.astype("int32")  # row numbers: int32 (a trace of 2**31 events would not fit anyway)
        # Name tests run once per distinct name, on the codes the loader's Categorical already has.
        self._host_name_codes = by_name.codes_and_uniques(pd.Series(host["name"], copy=False))
        n = len(rows)
        parent = np.full(n, -1, "int32")
        depth = np.zeros(n, "int32")
        self_ns = np.zeros(n, "int64")
        ts, end, dur = host["ts"], host["end"], host["dur"]
        tids = host["tid"]
        is_op = np.asarray(host["cat"] == "cpu_op")
        op_top = np.zeros(n, bool)
        for tid in np.unique(tids):
            rows = np.flatnonzero(tids == tid)
            p, d = intervals.nest(ts[rows], end[rows])
            parent[rows] = np.where(p >= 0, rows[np.maximum(p, 0)], -1)
            depth[rows] = d
            ops = rows[is_op[rows]]
            if len(ops):
                # Self time counts only ops: annotations around an op take nothing from it.
                op_parent, _ = intervals.nest(ts[ops], end[ops])
                self_ns[ops] = intervals.self_time(dur[ops], op_parent)
                op_top[ops] = op_parent < 0
        host["parent"] = parent
        host["depth"] = depth
        host["self_ns"] = self_ns
        host["op_top"] = op_top
        host["step"] = self.step_of(ts).astype("int32")
        self._attach_sources(host)
        self._attach_phases(host)
        return pd.DataFrame(host, copy=False)

    @cached_property
    def host_name_texts(self) -> np.ndarray:
        """:attr:`host`'s ``name`` as an object array of str (built once; the strings are the Categorical's own)."""
        return self.host_names(lambda name: name)

    def host_column(self, column: str) -> np.ndarray:
        """An ``events`` column the host table does not carry, aligned with :attr:`host`'s rows."""
        return self.events[column].to_numpy()[self.host["event"].to_numpy()]

    def host_names(self, func: Any, dtype: Any = object) -> np.ndarray:
        """``func(name)`` for every row of :attr:`host`, computed once per distinct name."""
        codes, uniques = self._host_codes()
        values = np.zeros(len(uniques) + 1, dtype=dtype)  # only the used entries are read
        for i in self._host_used:
            values[i] = func(uniques[i])
        values[len(uniques)] = func("")
        return values[np.where(codes >= 0, codes, len(uniques))]

    def _host_codes(self) -> tuple[np.ndarray, list[Any]]:
        if not hasattr(self, "_host_name_codes"):
            self._host_name_codes = by_name.codes_and_uniques(self.host["name"])
        return self._host_name_codes

    @cached_property
    def _host_used(self) -> np.ndarray:
        """The name codes some host row has (the loader's categories include GPU kernels' names)."""
        codes, uniques = self._host_codes()
        return by_name.used(codes, len(uniques))

    def _attach_sources(self, host: dict[str, Any]) -> None:
        """Source line (``src_*``) and ``module`` of every host row, from the labels and frames around it.

        Each distinct name is parsed once, into a *site* number (a file, line and function); rows then take
        their ancestor's site by index, and the text columns are Categoricals of the sites' texts.
        """
        is_python = np.asarray(host["cat"] == "python_function")
        parent = host["parent"]
        depth = host["depth"]
        n = len(parent)
        codes, uniques = self._host_codes()
        sites: dict[tuple[str, int, str], int] = {("", -1, ""): 0}  # site 0: none
        modules: dict[str, int] = {"": 0}
        chains: dict[str, int] = {"": 0}
        per_name = np.zeros((5, len(uniques) + 1), "int64")  # label site, frame site, module, is a module, callers
        is_label = np.zeros(len(uniques) + 1, bool)
        direct_label = np.zeros(len(uniques) + 1, bool)
        frame_kind = np.zeros(len(uniques) + 1, "int8")
        for i in self._host_used:
            name = uniques[i]
            label, frame, module = _source_label(name), _user_frame(name), parse_module_name(name)
            frame_kind[i] = python_frame_kind(name)
            if label is not None:
                is_label[i] = True
                direct_label[i] = is_direct_label(name)
                per_name[0, i] = sites.setdefault(label, len(sites))
                cut = name.find(CALLER_MARK)
                per_name[4, i] = chains.setdefault(name[cut + len(CALLER_MARK):] if cut >= 0 else "", len(chains))
            if frame is not None:
                per_name[1, i] = sites.setdefault(frame, len(sites))
            if module is not None:
                per_name[2, i], per_name[3, i] = modules.setdefault(module, len(modules)), 1
        row = np.where(codes >= 0, codes, len(uniques))
        is_src = is_label[row]
        is_user_py = (per_name[1][row] > 0) & is_python
        is_module = per_name[3][row] > 0
        site = np.where(is_src, per_name[0][row], np.where(is_user_py, per_name[1][row], 0))
        src_idx = intervals.enclosing(parent, depth, is_src)
        src_idx[is_src] = np.flatnonzero(is_src)
        py_idx = intervals.enclosing(parent, depth, is_user_py)
        mod_idx = intervals.enclosing(parent, depth, is_module)
        take = (src_idx >= 0) & ~is_src
        site[take] = site[src_idx[take]]
        callers = np.where(is_src, per_name[4][row], 0)
        callers[take] = callers[src_idx[take]]
        exact = src_idx >= 0
        fallback = (~exact) & (py_idx >= 0)
        site[fallback] = site[py_idx[fallback]]
        direct = _direct_calls(row, parent, depth, src_idx, py_idx, is_user_py, direct_label,
                               np.where(is_python, frame_kind[row], 0))
        module = np.where(is_module, per_name[2][row], 0)
        inherit = (mod_idx >= 0) & ~is_module
        module[inherit] = module[mod_idx[inherit]]
        site_list = list(sites)
        site_lines = np.array([s[1] for s in site_list], "int64")
        via = self._backward_to_forward(host, parent, depth, site, site_lines, exact, direct, callers)
        host["src_file"] = _coded([s[0] for s in site_list], site)
        host["src_line"] = site_lines[site]
        host["src_func"] = _coded([s[2] for s in site_list], site)
        host["src_exact"] = exact
        host["src_direct"] = direct
        host["src_via"] = _coded(["", "backward"], via.astype("int8"))
        host["src_callers"] = _coded(list(chains), callers)
        host["module"] = _coded(list(modules), module)

    def _backward_to_forward(self, host: dict[str, Any], parent: np.ndarray, depth: np.ndarray, site: np.ndarray,
                             site_lines: np.ndarray, exact: np.ndarray, direct: np.ndarray,
                             callers: np.ndarray) -> np.ndarray:
        """Give backward ops the source line of the forward op they differentiate; returns which rows got one.

        Autograd runs ``autograd::engine::evaluate_function: XBackward0`` with the
        sequence number of the forward op that recorded X; everything below it
        is that op's backward, so it is charged to the forward op's line rather
        than to the ``loss.backward()`` call. Autograd's work is never a direct call
        of the line it is charged to: rows that find no forward op (``AccumulateGrad``
        of a leaf) stay charged to ``loss.backward()``, but not as its direct calls.
        """
        seq = host["seq"]
        via = np.zeros(len(seq), bool)
        is_op = np.asarray(host["cat"] == "cpu_op")
        engine = self.host_names(_is_backward_function, bool)
        if not engine.any():
            return via
        direct[engine | (intervals.enclosing(parent, depth, engine) >= 0)] = False
        is_bwd = engine & (seq >= 0)
        if not is_bwd.any():
            return via
        under_bwd = intervals.enclosing(parent, depth, is_bwd)
        forward = is_op & ~is_bwd & (under_bwd < 0) & (seq >= 0) & (site_lines[site] >= 0)
        if not forward.any():
            return via
        fwd_rows = np.flatnonzero(forward)
        order = np.argsort(seq[fwd_rows], kind="stable")
        fwd_seq = seq[fwd_rows][order]
        fwd_rows = fwd_rows[order]
        owner = np.where(is_bwd, np.arange(len(seq)), under_bwd)
        has = owner >= 0
        k = np.searchsorted(fwd_seq, seq[np.maximum(owner, 0)])
        k = np.minimum(k, max(len(fwd_seq) - 1, 0))
        match = has & (fwd_seq[k] == seq[np.maximum(owner, 0)])
        src = fwd_rows[k[match]]
        rows = np.flatnonzero(match)
        site[rows], exact[rows], direct[rows], callers[rows] = site[src], exact[src], direct[src], callers[src]
        via[rows] = True
        return via

    def _attach_phases(self, host: dict[str, Any]) -> None:
        ts = host["ts"]
        phase = np.zeros(len(ts), "int8")  # codes into ("", *PHASE_ORDER)
        for code, name in reversed(list(enumerate(PHASE_ORDER, 1))):  # highest priority last, so it wins
            s, e = self.phase_intervals.get(name, (np.empty(0, "int64"), np.empty(0, "int64")))
            if len(s):
                k = np.searchsorted(s, ts, side="right") - 1
                inside = (k >= 0) & (ts < e[np.maximum(k, 0)])
                phase[inside] = code
        host["phase"] = _coded(["", *PHASE_ORDER], phase)

    @cached_property
    def phase_evidence(self) -> dict[str, tuple[str, pd.DataFrame]]:
        """phase -> (how it was found, the events that mark it); see :mod:`.phases`."""
        return phases.found_phases(self)

    @cached_property
    def phase_intervals(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return phases.phase_intervals(self)

    @cached_property
    def gpu(self) -> gpu_links.GpuLinks:
        return gpu_links.build_gpu_links(self)

    @cached_property
    def phase_sources(self) -> dict[str, str]:
        return phases.phase_sources(self)
