"""Input shapes recorded apart from the window, given back to the window's operators.

The collector records the window without ``record_shapes`` (which keeps every
operator's inputs alive until the profiler stops, and so slows the recorded
steps) and records two steps before the warm-up for their shapes alone, into
:data:`~advisor.naming.SHAPES_DIR` beside the trace, under the same file name
(see :class:`~advisor.collect.backends.KinetoBackend`).

A training or inference step runs the same operators in the same order each
time, so an operator is known by its step, its thread, its name and which
occurrence of that name it is on that thread in the step: the k-th
``aten::mm`` on the main thread of every step is the same call of the model.
Each window operator gets the ``input_types``, ``input_dims`` and
``concrete_inputs`` (and ``input_strides``, where the recording has them) of
its counterpart in the shape steps, and only where the match is sure:

- the thread ran that operator as many times in the window step as in every
  shape step (a step that took another branch matches nothing of that name);
- or, where the counts differ, the shape steps ran that operator's calls as
  one unit repeated (a closure that ``optimizer.step`` evaluates a varying
  number of times: LBFGS's line search, or a loop of micro-batches), the same
  unit in every shape step and at least twice in each, and the window step ran
  a whole number of units: the k-th call is the (k mod unit)-th of the unit;
- the shape steps agree: where their dims differ (variable sequence
  lengths, a last smaller batch), only the dtypes are given, as the window's
  own shapes cannot be known; scalars (``concrete_inputs``) are given where
  they agree, apart from the dims (a sampler's random index differs every
  step, and says nothing of the shapes).

What was matched is counted in ``meta["advisor_shapes"]`` and said in the
findings (``trace.shapes``), never assumed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.naming import SHAPES_DIR, STEP_PREFIX

__all__ = ["META_KEY", "SHAPE_COLUMNS", "ShapeMatch", "give_shapes", "shapes_file"]

#: where ``KinetoTrace.meta`` records what :func:`give_shapes` matched
META_KEY = "advisor_shapes"
#: the columns a shape recording gives (see :data:`advisor.load.kineto_spec.ARGS`)
SHAPE_COLUMNS = ("input_types", "input_dims", "concrete_inputs")
#: given too where the shape recording has the column (one read with fewer columns than
#: :data:`advisor.load.kineto_spec.ARGS` may not)
OPTIONAL_COLUMNS = ("input_strides",)
_KEY = ["tid", "name", "k"]
#: the columns given only where the shape steps agreed (the dtypes must agree for anything to be given)
AGREED_COLUMNS = ("input_dims", "concrete_inputs", "input_strides")


@dataclass
class ShapeMatch:
    """What the window's operators got from the shape steps."""

    file: str
    #: shape steps read, and window operators inside the window's steps
    steps: int = 0
    ops: int = 0
    #: operators given their shapes; given only their dtypes (the shape steps disagreed on the dims)
    matched: int = 0
    dtypes_only: int = 0
    #: of those, operators placed by a repeated unit of calls, as their step ran it a different number of times
    repeated: int = 0

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        """What the window's operators lack, in words (a note of the findings: the times are whole either way)."""
        if not self.steps:
            return f"no input shapes: {self.file} holds no complete step"
        missing = self.ops - self.matched - self.dtypes_only
        said = [f"input shapes are known for {self.matched:,} of the window's {self.ops:,} operators"]
        if self.dtypes_only:
            said.append(f"{self.dtypes_only:,} have their dtypes only (their shapes differed between the "
                        f"{self.steps} steps recorded for shapes)")
        if missing:
            said.append(f"{missing:,} have none (their step ran them a different number of times than those steps)")
        return "; ".join(said)


def shapes_file(trace_path: Path) -> Path | None:
    """The shape recording beside a collected trace, or None."""
    candidate = trace_path.parent / SHAPES_DIR / trace_path.name
    return candidate if candidate.is_file() else None


def give_shapes(events: pd.DataFrame, shapes: pd.DataFrame, file: str) -> tuple[pd.DataFrame, ShapeMatch]:
    """``events`` with the shape columns filled from the shape steps' ``shapes`` events (see the module docstring).

    Both are events tables of :func:`~advisor.load.kineto.load_kineto`; ``events`` is returned unchanged, with
    a :class:`ShapeMatch` of nothing matched, when either lacks steps or the shape columns.
    """
    match = ShapeMatch(file=file)
    if any(c not in events or c not in shapes for c in SHAPE_COLUMNS):
        return events, match
    columns = (*SHAPE_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in shapes))
    window_ops = _ops_by_step(events, ())
    shape_ops = _ops_by_step(shapes, columns)
    match.ops = len(window_ops)
    match.steps = int(shape_ops["step"].nunique()) if len(shape_ops) else 0
    if not match.ops or not match.steps:
        return events, match
    reference = _agreed(shape_ops, match.steps, columns)
    window_ops["n"] = window_ops.groupby(["step", "tid", "name"], sort=False)["k"].transform("size")
    joined = window_ops.merge(reference, on=_KEY, how="inner") if len(reference) else window_ops.iloc[0:0]
    joined = joined[joined["n"] == joined["n_ref"]] if len(joined) else joined
    rest = window_ops[~window_ops["row"].isin(joined["row"])]
    repeated = _by_repeated_unit(rest, shape_ops, match.steps, columns)
    match.repeated = len(repeated)
    joined = pd.concat([joined, repeated], ignore_index=True) if len(joined) else repeated
    if joined.empty:
        return events, match
    match.matched = int(joined["same_input_dims"].astype(bool).sum())
    match.dtypes_only = int(len(joined) - match.matched)
    rows = joined["row"].to_numpy()
    out = events.copy(deep=False)
    for column in columns:
        values = out[column].astype(object).to_numpy(copy=True) if column in out else np.full(len(out), "", object)
        given = joined[column].to_numpy(dtype=object)
        if column in AGREED_COLUMNS:  # dims and scalars only where the shape steps agreed on them
            given = np.where(joined[f"same_{column}"].to_numpy(dtype=bool), given, "")
        values[rows] = given
        out[column] = pd.Categorical(values)
    return out, match


def _ops_by_step(events: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """The CPU operators inside a step: row, step index, tid, name, k (occurrence of the name on the thread in
    the step, in time order) and the shape ``columns`` as text."""
    names = _names(events["name"])
    is_step = np.fromiter((n.startswith(STEP_PREFIX) for n in names.categories), bool, len(names.categories))
    # the host's step ranges: on a GPU trace Kineto mirrors them on the streams (gpu_user_annotation), elsewhere in time
    steps = events[is_step[names.codes] & (names.codes >= 0) & (events["cat"] == "user_annotation").to_numpy()]
    ops = events["cat"].to_numpy() == "cpu_op"
    if steps.empty or not ops.any():
        return pd.DataFrame(columns=["row", "step", "tid", "name", "k", *columns])
    starts = steps["ts"].to_numpy()
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], steps["end"].to_numpy()[order]
    rows = np.flatnonzero(ops)
    ts = events["ts"].to_numpy()[rows]
    step = np.searchsorted(starts, ts, side="right") - 1
    inside = (step >= 0) & (ts < ends[np.maximum(step, 0)])
    rows, step = rows[inside], step[inside]
    frame = pd.DataFrame({"row": rows, "step": step, "tid": events["tid"].to_numpy()[rows],
                          # a missing name (code -1) reads the "" appended last
                          "name": np.append(np.asarray(names.categories, dtype=object), "")[names.codes[rows]]})
    for column in columns:
        frame[column] = events[column].astype(str).to_numpy()[rows]
    frame["k"] = frame.groupby(["step", "tid", "name"], sort=False).cumcount()
    return frame


def _names(column: pd.Series) -> pd.Categorical:
    """The event names as a Categorical (as the loader gives them), to test each distinct name once."""
    values = column.array
    return values if isinstance(values, pd.Categorical) else pd.Categorical(column.astype(str))


def _agreed(shape_ops: pd.DataFrame, steps: int, columns: tuple[str, ...]) -> pd.DataFrame:
    """One row per (tid, name, k) that every shape step ran as often and with the same dtypes: the first step's
    shape columns, ``n_ref`` (how often the thread ran the name in a step), and per column whether every step
    recorded the same (``same_input_dims``, ``same_concrete_inputs``): a sampler's random index in a scalar
    argument does not make the dims unknown."""
    counts = shape_ops.groupby(["step", "tid", "name"], sort=False).size().rename("n").reset_index()
    steady = counts.groupby(["tid", "name"], sort=False)["n"].agg(["min", "max", "size"])
    steady = steady[(steady["min"] == steady["max"]) & (steady["size"] == steps)]
    kept = shape_ops.merge(steady["min"].rename("n_ref").reset_index(), on=["tid", "name"], how="inner")
    if kept.empty:
        return kept
    distinct = kept.groupby(_KEY, sort=False)[list(columns)].nunique()
    first = kept[kept["step"] == kept["step"].min()].set_index(_KEY)
    out = first[[c for c in first.columns if c not in ("row", "step")]].join(distinct.add_suffix("_distinct"))
    out = out[out["input_types_distinct"] == 1]  # dtypes that vary too: nothing is sure
    agreed = [c for c in AGREED_COLUMNS if c in columns]
    for column in agreed:
        out[f"same_{column}"] = out[f"{column}_distinct"] == 1
    return out.reset_index()[[*_KEY, "n_ref", *(f"same_{c}" for c in agreed), *columns]]


def _by_repeated_unit(window_ops: pd.DataFrame, shape_ops: pd.DataFrame, steps: int,
                      columns: tuple[str, ...]) -> pd.DataFrame:
    """The window operators ``window_ops`` (not matched call for call) that a repeated unit of calls places:
    the rows :func:`give_shapes` joins, with the unit's shape columns and agreement flags."""
    if window_ops.empty:
        return window_ops
    wanted = set(zip(window_ops["tid"], window_ops["name"]))
    units = {}
    for (tid, name), calls in shape_ops.groupby(["tid", "name"], sort=False):
        if (tid, name) not in wanted:
            continue
        unit = _unit(calls, steps, columns)
        if unit is not None:
            units[(tid, name)] = unit
    if not units:
        return window_ops.iloc[0:0]
    found = []
    for (tid, name), calls in window_ops.groupby(["tid", "name"], sort=False):
        unit = units.get((tid, name))
        if unit is None:
            continue
        size = len(unit)
        for n, of_step in calls.groupby("n", sort=False):
            if n % size:  # not a whole number of units: another branch, not another repeat
                continue
            picked = unit.iloc[of_step["k"].to_numpy() % size]
            found.append(pd.DataFrame({"row": of_step["row"].to_numpy(),
                                       **{c: picked[c].to_numpy() for c in picked.columns}}))
    return pd.concat(found, ignore_index=True) if found else window_ops.iloc[0:0]


def _unit(calls: pd.DataFrame, steps: int, columns: tuple[str, ...]) -> pd.DataFrame | None:
    """The unit one thread's calls of one operator repeat in every shape step (dtypes and dims), each step
    running it at least twice, or None: its shape columns and whether every repeat in every step agreed on
    the dims and on the scalars."""
    per_step = [group.sort_values("k") for _, group in calls.groupby("step", sort=False)]
    if len(per_step) != steps:
        return None
    size = None
    for group in per_step:
        keys = list(zip(group["input_types"], group["input_dims"]))
        found = _period(keys)
        if found is None or (size is not None and found != size):
            return None
        size = found
    assert size is not None
    stacked = pd.concat(per_step, ignore_index=True)
    position = np.concatenate([np.arange(len(g)) % size for g in per_step])
    by_position = stacked.groupby(position, sort=True)
    distinct = by_position[list(columns)].nunique()
    if (distinct["input_types"] != 1).any():
        return None
    first = stacked.iloc[:size].reset_index(drop=True)
    unit = first[list(columns)].copy()
    for column in (c for c in AGREED_COLUMNS if c in columns):
        unit[f"same_{column}"] = (distinct[column] == 1).to_numpy()
    return unit


def _period(keys: list[tuple[str, str]]) -> int | None:
    """The shortest unit that ``keys`` repeats a whole number of times, at least twice; None if none."""
    n = len(keys)
    for size in range(1, n // 2 + 1):
        if n % size == 0 and keys == keys[:size] * (n // size):
            return size
    return None
